"""Config reload: watch the file -> validate -> build a new runtime -> swap one reference.

The file is polled every ``server.reload_interval_s`` (stat: mtime, size, inode; Kubernetes
ConfigMap volumes swap a symlink, which inotify-style watchers miss). A change is acted on once
the file has stayed unchanged for :data:`SETTLE_S` seconds (seen by the polls): a file
rewritten in place (truncated, then written in pieces, as ``cat > config.yaml``, a
config-management tool or a copy does) is read when the writer is done, not half-way, where
a cut at a section boundary would still parse and apply defaults for the sections not yet
written (measured by the ``config`` drill, docs/reliability.md). A writer that pauses longer
than that between two pieces can still be read half-way: write atomically (a rename) where
that matters. On a change a worker
thread does the I/O (:func:`router.app.runtime_inputs.load_runtime_inputs`: the YAML validated whole, each
model's tokenizer, the API key files), touching no live object; back on the event loop the new
:class:`~router.state.fleet.Fleet` is built by :func:`router.state.fleet.build_fleet`, one
:class:`~router.state.runtime.Runtime` per model (a model still there keeps its endpoints of unchanged
URLs, with their health and in-flight counts, and they take the new health thresholds; an added
model starts; a removed model's running requests finish on the runtime they hold), and
``state.fleet`` replaced in the same loop step, so nothing the live runtimes route with is
written from another thread. Any failure
(an invalid file, a missing key file, a corrupt ``tokenizer.json``, a bug) keeps the last good
config, is logged and counted in ``specgate_config_reloads_total{result="failure"}`` (and
``state.reloads_failed``), and the watcher goes on: the next valid change is applied.
The settings the router reads only at start (:data:`START_ONLY`: the listening address, the
``state`` block, the upstream client's kind, connection cap and keep-alive, the engines' key
source) are not applied: a reload that changes one logs their names and sets
``specgate_config_restart_pending`` to 1 until a reload brings them back to the values the
process started with;
API key files and variables (``auth``) are re-read; routing overrides carry over; a changed
``tracing`` section gets a new tracer, the old one retiring once its requests are done
(:mod:`router.app.tracing_reload`).

Kubernetes mounts a ConfigMap as a directory whose ``config.yaml`` is a symlink to
``..data/config.yaml`` and ``..data`` a symlink to a timestamped directory (``..2026_...``); the
kubelet writes a new timestamped directory and renames a new ``..data`` link over the old one
(atomic). ``os.stat`` follows the links, so the new file's inode shows the swap even when size
and mtime match; the file is read once per change, through the links, so a half-written file is
never seen. Mount the directory, never ``subPath`` (a subPath mount never sees the swap).
Discovered endpoints (:mod:`router.loops.discovery`) are re-applied to the new runtime in the same
event-loop step as the swap.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.app.runtime_inputs import load_runtime_inputs
from router.app.tracing_reload import apply_tracing
from router.config.tree import Config, ConfigError
from router.state.fleet import build_fleet

if TYPE_CHECKING:
    from router.app.appstate import AppState

__all__ = ["SETTLE_S", "START_ONLY", "Reloader", "start_only_changes"]

log = logging.getLogger("specgate.reload")

#: Seconds a changed file must stay unchanged (same mtime, size and inode) before it is read.
SETTLE_S = 0.5

#: Config settings (dotted paths) the router reads only at start: the server's socket, the
#: shared state's client, the upstream clients and the headers they were built with.
START_ONLY: tuple[str, ...] = (
    "server.host", "server.port", "state", "upstream.client", "upstream.max_connections",
    "upstream.keepalive_timeout_s", "auth.engine_api_key", "auth.engine_api_key_file",
    "auth.engine_api_key_env")


def start_only_changes(started: Config, loaded: Config) -> list[str]:
    """The :data:`START_ONLY` settings whose value in ``loaded`` differs from ``started`` (the
    config the process started with), in :data:`START_ONLY`'s order; names only, never values
    (a key is a secret)."""
    changed = []
    for path in START_ONLY:
        a: Any = started
        b: Any = loaded
        for part in path.split("."):
            a, b = getattr(a, part), getattr(b, part)
        if a != b:
            changed.append(path)
    return changed


def _stamp(path: os.PathLike[str]) -> tuple[float, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime, st.st_size, st.st_ino)


def _digest(path: os.PathLike[str]) -> bytes | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).digest()
    except OSError:
        return None


class Reloader:
    """Polls the config file of ``state`` and swaps ``state.fleet`` on a valid change.

    A change is a new (mtime, size, inode) whose bytes differ from the last applied file's:
    a file rewritten with the same bytes (an editor's save, a non-atomic write seen twice)
    is not reloaded again.

    Raises:
        ValueError: when ``state`` was built from a :class:`~router.config.tree.Config` value
            (``state.config_path`` is None: no file to watch).
    """

    def __init__(self, state: AppState) -> None:
        if state.config_path is None:
            raise ValueError("a Reloader needs an AppState built from a config file")
        self._state = state
        self._path: Path = state.config_path
        self._stamp = _stamp(self._path)
        self._applied = _digest(self._path)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start polling."""
        self._task = asyncio.create_task(self._loop(), name="specgate-reload")

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        pending: tuple[float, int, int] | None = None  # a changed stamp, and since when (monotonic s)
        since = 0.0
        while True:
            await asyncio.sleep(self._state.runtime.config.server.reload_interval_s)
            stamp = _stamp(self._path)
            if stamp is None or stamp == self._stamp:
                pending = None
                continue
            now = time.monotonic()
            if stamp != pending:  # still being written, or a new change: wait until it settles
                pending, since = stamp, now
            if now - since < SETTLE_S:
                continue
            pending = None
            self._stamp = stamp
            digest = _digest(self._path)
            if digest is not None and digest == self._applied:
                continue  # touched or rewritten with the same bytes (an editor, a non-atomic write)
            if await self.reload():
                self._applied = digest

    def _failed(self, exc: Exception) -> bool:
        state = self._state
        state.metrics.config_reloads.labels("failure").inc()
        state.reloads_failed += 1
        if isinstance(exc, (ConfigError, OSError)):
            log.error("config reload rejected, keeping the last good config: %s", exc)
        else:
            log.error("config reload failed, keeping the last good config: %s: %s",
                      type(exc).__name__, exc, exc_info=exc)
        return False

    async def reload(self) -> bool:
        """Load the file's runtime inputs in a thread, build and swap the fleet on the loop.

        Returns True on success; any exception is counted, logged and returns False (the last
        good runtime stays).
        """
        state = self._state
        loop = asyncio.get_running_loop()
        try:
            counters = [rt.counter for rt in state.fleet]
            inputs = await loop.run_in_executor(None, load_runtime_inputs, self._path, None, counters)
            config = inputs.config
            # on the loop, no await until the swap: the new runtimes adopt live endpoints
            fleet = build_fleet(config, inputs.counters, state.fleet, auth=inputs.auth)
        except Exception as exc:  # noqa: BLE001  (a corrupt tokenizer raises what its library raises)
            return self._failed(exc)
        pending = start_only_changes(state.start_config, config)
        if pending:
            log.warning("config reload: %s differ from the config the router started with and apply "
                        "only at start; restart the router to apply them", ", ".join(pending))
        state.metrics.config_restart_pending.set(1 if pending else 0)
        state.fleet = fleet
        try:
            apply_tracing(state, config.tracing)
        except Exception as exc:  # noqa: BLE001  (the runtime swap stands; the old tracer is kept)
            return self._failed(exc)
        if state.discovery is not None:
            try:
                state.discovery.sync(fleet)
            except Exception as exc:  # noqa: BLE001  (the swap stands; the failure is counted)
                return self._failed(exc)
        state.reloads_ok += 1
        state.metrics.config_reloads.labels("success").inc()
        state.metrics.config_info.set(time.time())
        log.info("config reloaded: models=%s pools=%s", list(fleet.runtimes), [p.name for p in config.pools])
        return True
