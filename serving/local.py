"""Start and stop a local SGLang server process (tests, the demo, benchmarks on one machine).

    from serving.local import cpu_launch_args, free_port, start_sglang

    port = free_port()
    with start_sglang(cpu_launch_args("models/tiny-llama", port=port), port=port) as server:
        httpx.post(f"{server.base_url}/generate", json=...)

:func:`start_sglang` runs ``python -m sglang.launch_server ARGV`` in a new session (its own
process group, so the scheduler and detokenizer subprocesses go with it), writes its output to
a log file, and returns once ``GET /health`` answers 200, raising :class:`SGLangStartError`
with the log tail if the process exits or is not ready in time. The returned
:class:`SGLangProcess` is a context manager; leaving it (or :meth:`SGLangProcess.stop`) sends
SIGTERM to the process group, waits, and SIGKILLs the group after a grace period.

:func:`cpu_launch_args` builds the argv that runs the real SGLang 0.5.23 on a CPU with the
``sgl_kernel`` stand-in of ``serving/cpu`` (flags of :mod:`serving.launch`), and
:func:`cpu_env` the environment (``SGLANG_USE_CPU_ENGINE=1``). ``serving/cpu/install.sh``
must have been run on the interpreter's venv.

No module-level state: every process is owned by the object that started it.
Units: seconds for times, bytes for memory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from serving.ports import free_port

__all__ = [
    "CPU_FLAGS",
    "SGLangProcess",
    "SGLangStartError",
    "cpu_env",
    "cpu_launch_args",
    "free_port",
    "start_sglang",
    "stop_sglang",
]

#: Flags that run SGLang 0.5.23 on a CPU with the pure-PyTorch ``sgl_kernel`` stand-in:
#: ``intel_amx`` is SGLang's CPU attention backend (the only one that verifies drafts),
#: the pytorch sampler needs no GPU kernel, and the overlap scheduler needs CUDA streams.
#: ``--sleep-on-idle`` makes an idle scheduler wait on its sockets (zmq poll) instead of
#: spinning: an idle CPU pool used 92% of a core without it, 2% with it (measured for
#: ``specgate loadtest-local``), which matters when pools share a few cores.
CPU_FLAGS: tuple[str, ...] = (
    "--device",
    "cpu",
    "--attention-backend",
    "intel_amx",
    "--sampling-backend",
    "pytorch",
    "--disable-overlap-schedule",
    "--sleep-on-idle",
)


class SGLangStartError(RuntimeError):
    """The server process exited, or did not answer ``/health`` with 200 in time.

    ``log_tail`` holds the last lines of its output; ``returncode`` is None on a timeout.
    """

    def __init__(self, message: str, *, log_tail: str, returncode: int | None) -> None:
        super().__init__(f"{message}\n--- SGLang log tail ---\n{log_tail}")
        self.log_tail = log_tail
        self.returncode = returncode


def cpu_env(
    base: Mapping[str, str] | None = None, *, omp_threads: int | None = 1, **extra: str
) -> dict[str, str]:
    """The environment for a CPU server.

    ``base`` (default: ``os.environ``) plus ``SGLANG_USE_CPU_ENGINE=1``, plus
    ``SGLANG_CPU_OMP_THREADS_BIND`` = CPUs ``0..omp_threads-1`` (SGLang's own knob; with the
    ``sgl_kernel`` stand-in it sets torch's thread count and pins nothing), plus ``extra``
    (e.g. ``SPECGATE_CPU_SAMPLED_VERIFY="0"``). ``omp_threads=None`` keeps SGLang's default
    (every core of a NUMA node). The default, one thread, suits the tiny test models on a
    shared machine: on 2 busy cores, two OpenMP threads made NGRAM decoding ~13x slower
    (64 tokens: 7.5 s instead of 0.58 s), their spin-waits losing the cores to other work.
    Raises ValueError for ``omp_threads < 1``.
    """
    env = dict(os.environ if base is None else base)
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    if omp_threads is not None:
        if omp_threads < 1:
            raise ValueError(f"omp_threads must be >= 1, got {omp_threads}")
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "0" if omp_threads == 1 else f"0-{omp_threads - 1}"
    env.update(extra)
    return env


def cpu_launch_args(
    model_path: str | os.PathLike[str],
    *,
    port: int,
    host: str = "127.0.0.1",
    dtype: str = "float32",
    served_model_name: str | None = None,
    context_length: int | None = None,
    max_total_tokens: int = 4096,
    mem_fraction_static: float = 0.5,
    random_seed: int | None = 0,
    enable_metrics: bool = True,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``sglang.launch_server`` arguments (no interpreter) for a CPU server.

    Args:
        model_path: Hugging Face model directory.
        port, host: where the server listens (default loopback only).
        dtype: weights/activations dtype; float32 (default) makes greedy output equal to
            ``transformers`` token for token (bfloat16 drifts after ~57 tokens).
        served_model_name: the model name clients see (SGLang's default: the path).
        context_length: ``--context-length`` in tokens (default: the model config's).
        max_total_tokens: KV-pool size in tokens (small: the pool is host memory).
        mem_fraction_static: fraction of host memory SGLang may count as static. On CPU
            SGLang measures it from the host's free memory, which other processes move; 0.5
            leaves room (a speculative server's n-gram cache or draft counts against it).
        random_seed: ``--random-seed`` for SGLang's sampler (None: SGLang's default, random).
        enable_metrics: ``--enable-metrics`` (Prometheus ``/metrics``).
        extra_args: appended as is, e.g. ``["--speculative-algorithm", "NGRAM", ...]``.
    """
    argv = [
        "--model-path",
        str(model_path),
        *CPU_FLAGS,
        "--dtype",
        dtype,
        "--mem-fraction-static",
        repr(mem_fraction_static),
        "--max-total-tokens",
        str(max_total_tokens),
        "--host",
        host,
        "--port",
        str(port),
    ]
    if served_model_name is not None:
        argv += ["--served-model-name", served_model_name]
    if context_length is not None:
        argv += ["--context-length", str(context_length)]
    if random_seed is not None:
        argv += ["--random-seed", str(random_seed)]
    if enable_metrics:
        argv += ["--enable-metrics", "--log-level-http", "warning"]  # as serving.launch.engine_argv
    argv += list(extra_args)
    return argv


def _tail(path: Path, max_lines: int = 60) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(log unreadable: {exc})"
    return "\n".join(lines[-max_lines:])


def _bind_failed(path: Path, since: int, window_bytes: int = 16384) -> bool:
    """Whether the log at ``path``, past byte offset ``since`` (where this launch began
    writing; the log is appended to), holds uvicorn's bind failure (``[Errno 98] ... address
    already in use``) in its last ``window_bytes``."""
    try:
        with path.open("rb") as f:
            f.seek(max(since, f.seek(0, os.SEEK_END) - window_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return False
    return "address already in use" in text.lower()


class SGLangProcess:
    """One ``python -m sglang.launch_server`` process group.

    Args:
        argv: the server's arguments (see :func:`cpu_launch_args`); must make it listen on
            ``host:port``.
        port, host: where ``/health`` is polled.
        env: the full environment of the process (see :func:`cpu_env`); default: a copy of
            ``os.environ``.
        log_path: file that receives stdout and stderr (appended); default: a new temporary
            file, left in place for post-mortems.
        python: interpreter (default: ``sys.executable``).
        module: the module run with ``python -m`` (default ``sglang.launch_server``; tests run
            ``serving.fake_sglang``, which answers ``/health`` like SGLang).
        stop_timeout_s: seconds to wait after SIGTERM before SIGKILL.

    Use :meth:`start` (or :func:`start_sglang`), then :meth:`stop`, or the object as a context
    manager, which starts it if needed and always stops it.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        python: str | None = None,
        module: str = "sglang.launch_server",
        stop_timeout_s: float = 20.0,
    ) -> None:
        self.argv = [python or sys.executable, "-m", module, *argv]
        self.host = host
        self.port = port
        self.env = dict(os.environ if env is None else env)
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"sglang-{port}-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.stop_timeout_s = stop_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_after_s: float | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the server's main process (None before :meth:`start`)."""
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        """True while the main process runs."""
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, max_lines: int = 60) -> str:
        """The last ``max_lines`` lines of the server log."""
        return _tail(self.log_path, max_lines)

    def _health(self, timeout_s: float) -> int | None:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=timeout_s) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, OSError):
            return None

    def start(self, ready_timeout_s: float = 300.0, poll_interval_s: float = 0.5) -> Self:
        """Launch the process and wait until ``/health`` answers 200 and the process is alive.

        Returns self. Sets ``ready_after_s`` (seconds from launch to ready). Raises
        RuntimeError when already started; SGLangStartError (after stopping whatever is left
        of the process group) when the process exits first, logs that its port was already
        in use (the scheduler would live on without an HTTP server), or ``ready_timeout_s``
        passes.
        """
        if self.proc is not None:
            raise RuntimeError("this SGLangProcess was already started")
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            log_start = log.tell()
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = t0 + ready_timeout_s
        while True:
            code = self.proc.poll()
            failure: str | None = None
            if code is not None:
                failure = f"exited with status {code} before it was ready"
            elif self._health(timeout_s=5.0) == 200 and self.alive():
                self.ready_after_s = time.monotonic() - t0
                return self
            elif _bind_failed(self.log_path, since=log_start):
                # SGLang's HTTP server gave up on its port but its scheduler lives on: waiting
                # for /health would only run out the clock
                failure = f"could not bind {self.host}:{self.port}: address already in use"
            elif time.monotonic() > deadline:
                failure = f"was not ready within {ready_timeout_s:.0f} s"
            if failure is not None:
                self.stop()
                raise SGLangStartError(f"{self.argv[2]} {failure} (log: {self.log_path})",
                                       log_tail=self.log_tail(), returncode=code)
            time.sleep(poll_interval_s)

    def _group_pids(self) -> list[int]:
        """Live (not zombie) processes whose process group is the server's (Linux /proc)."""
        if self.proc is None:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == self.proc.pid:
                pids.append(int(entry.name))
        return pids

    def rss_bytes(self) -> int:
        """Resident memory of every live process of the server's process group, summed (bytes)."""
        total = 0
        for pid in self._group_pids():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(f"/proc/{pid}/statm").read_text().split()
                total += int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
        return total

    def stop(self) -> int | None:
        """SIGTERM the process group, wait ``stop_timeout_s``, then SIGKILL what is left.

        Idempotent. Returns the main process's exit status (None if never started).
        """
        if self.proc is None:
            return None
        pgid = self.proc.pid
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                self.proc.wait(timeout=self.stop_timeout_s)
        # children that outlived the main process (same group) go too
        deadline = time.monotonic() + self.stop_timeout_s
        while self._group_pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self._group_pids():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        return self.proc.returncode

    def __enter__(self) -> Self:
        if self.proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_sglang(
    argv: Sequence[str] | None = None,
    *,
    port: int,
    model_path: str | os.PathLike[str] | None = None,
    served_model_name: str | None = None,
    context_length: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: str | os.PathLike[str] | None = None,
    ready_timeout_s: float = 300.0,
    host: str = "127.0.0.1",
) -> SGLangProcess:
    """Start a server and wait until it is ready; returns the running :class:`SGLangProcess`.

    Either pass ``argv`` (the server's arguments, used as is), or ``model_path`` (and
    optionally ``served_model_name``, ``context_length``, ``extra_args``) to get
    :func:`cpu_launch_args`. ``env`` is the full environment; default: :func:`cpu_env`.
    The result is a context manager (``with start_sglang(...) as server:``); otherwise call
    :func:`stop_sglang` / ``server.stop()``.

    Raises:
        ValueError: neither or both of ``argv`` and ``model_path``.
        SGLangStartError: the server died or was not ready within ``ready_timeout_s`` s.
    """
    if (argv is None) == (model_path is None):
        raise ValueError("pass exactly one of argv and model_path")
    if argv is None:
        assert model_path is not None
        argv = cpu_launch_args(
            model_path,
            port=port,
            host=host,
            served_model_name=served_model_name,
            context_length=context_length,
            extra_args=extra_args,
        )
    server = SGLangProcess(
        argv, port=port, host=host, env=cpu_env() if env is None else env, log_path=log_path
    )
    return server.start(ready_timeout_s=ready_timeout_s)


def stop_sglang(server: SGLangProcess) -> int | None:
    """Stop a server started by :func:`start_sglang`; returns its exit status."""
    return server.stop()
