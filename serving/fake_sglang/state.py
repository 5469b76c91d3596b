"""``FakeState``: all mutable state of one fake server, and its in-flight bookkeeping.

A ``Job`` is one HTTP generation request, a ``Sample`` one of its choices (what
``num_running_reqs`` counts). ``FakeState`` owns the access log, the script queue, the running
set and the FIFO admission queue (``max_running_requests``), the metric counters and the
overrides posted to the control API. One instance per app (``app.state.fake``), used from the
server's event loop only; there is no module-level mutable state.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
import weakref
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.requests import Request

from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.prefix_cache import PrefixCache
from serving.fake_sglang.stepping import StepHint, Stepper
from serving.fake_sglang.tokens import TokenCounter

__all__ = ["FakeState", "Job", "Sample"]


@dataclass
class Sample:
    """One generated sequence (a choice): what ``num_running_reqs`` counts."""

    rid: str
    index: int
    prompt_tokens: int
    limit: int
    generated: int = 0
    text: str = ""
    finish: dict[str, Any] | None = None
    abort_requested: bool = False
    dp_rank: int = 0
    spec_tokens: int = 0  # step engine: tokens of its verify steps (sglext.spec_tokens_details)
    verify_ct: int = 0


@dataclass
class Job:
    """One HTTP generation request and its samples."""

    seq: int
    path: str
    stream: bool
    samples: list[Sample]
    n: int
    model: str
    stop: list[str]
    include_usage: bool
    entry: dict[str, Any]
    behaviour: Behaviour | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    client_gone: bool = False
    fault_fired: bool = False  # a reset/close we made ourselves is not a client disconnect
    ignore_disconnect: bool = False
    admitted: bool = False
    prompt_error: str | None = None  # scheduler-level abort message (check 4)
    ignore_eos: bool = False
    single: bool = True  # one prompt and n == 1 (/generate answers an object, not a list)
    cache_units: list[list[Any]] | None = None  # per prompt, when the prefix cache is on
    cached: list[int] = field(default_factory=list)  # cached tokens per prompt (prefix cache)
    spec_details: bool = False  # return_spec_tokens_details on a speculative engine (sglext)
    accept_length: float | None = None  # the ``fake_accept_length`` body field: this request's own tau
    step_hint: StepHint | None = None  # the ``fake_step`` body field (step engine only)


class FakeState:
    """All state of one fake server; built by ``create_fake_app`` as ``app.state.fake``.

    Must be used from the server's event loop (``FakeServer.call`` marshals to it).
    ``launch_config`` is the config the app was built with, which the handlers read (a
    server's launch flags); ``config`` starts as the same object and a test may swap it: only
    ``perturb_output`` and ``perturb_only_field`` are read from it, per token.
    """

    def __init__(self, config: FakeConfig) -> None:
        self.launch_config = config
        self.config = config
        self.counter = TokenCounter(config.tokenizer_path)
        self.started = time.time()
        self._seq = 0
        self._dp_next = 0
        self.script_queue: list[Behaviour] = []
        self.log: deque[dict[str, Any]] = deque(maxlen=config.max_log_entries)
        self.aborts: deque[dict[str, Any]] = deque(maxlen=config.max_log_entries)
        self.disconnects: deque[dict[str, Any]] = deque(maxlen=config.max_log_entries)
        self.running: dict[str, Sample] = {}
        self.queued: deque[tuple[Job, asyncio.Future[None]]] = deque()
        self.jobs: dict[int, Job] = {}
        self.health: dict[str, Any] = {}
        self.metrics_override: dict[str, Any] = {}
        self.avg_spec_accept_length: float | None = None
        # tokenizer counters, keyed by SGLang's ``is_streaming`` label value
        self.prompt_tokens_total = {"false": 0, "true": 0}
        self.generation_tokens_total = {"false": 0, "true": 0}
        self.num_requests_total = {"false": 0, "true": 0}
        self.num_aborted_requests_total = 0
        self.flushes = 0
        self.closing = asyncio.Event()
        #: requests served so far per connection (keyed by the uvicorn transport)
        self.connections: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.prefix_cache = (
            PrefixCache(config.prefix_cache_tokens) if config.prefix_cache_tokens else None
        )
        #: the step model driving generation (``create_fake_app(step_engine=...)``), else None
        self.stepper: Stepper | None = None

    # -- control ---------------------------------------------------------------------------

    def script(self, behaviours: list[Behaviour]) -> int:
        """Queue behaviours (FIFO); returns the queue length."""
        self.script_queue.extend(behaviours)
        return len(self.script_queue)

    def reset(self) -> None:
        """Forget the log, aborts, disconnects, script queue, overrides and counters."""
        self.script_queue.clear()
        self.log.clear()
        self.aborts.clear()
        self.disconnects.clear()
        self.health.clear()
        self.metrics_override.clear()
        self.avg_spec_accept_length = None
        self.prompt_tokens_total = {"false": 0, "true": 0}
        self.generation_tokens_total = {"false": 0, "true": 0}
        self.num_requests_total = {"false": 0, "true": 0}
        self.num_aborted_requests_total = 0
        self.flushes = 0

    #: FakeConfig fields read only when the app is built (a relaunch cannot change them)
    BUILT_FROM = frozenset(("tokenizer_path", "max_log_entries", "prefix_cache_tokens"))

    def relaunch(self, changes: dict[str, Any], *, restart: bool, keep: Any = None) -> FakeConfig:
        """Change the server's launch flags (``FakeConfig`` fields) and return the new config.

        ``restart=False`` changes them in place, like an engine told at run time (e.g. an
        adapter loaded through ``/load_lora_adapter``: ``lora_paths``). ``restart=True`` is a
        new process on the same address, as seen from outside: every open connection but
        ``keep`` (a uvicorn transport) is reset, the counters, log, script queue and overrides
        start empty (:meth:`reset`) and ``/server_info``'s ``startup_time`` is new.

        Raises:
            ValueError: an unknown field, one in :attr:`BUILT_FROM`, or an invalid value.
        """
        fixed = set(changes) & self.BUILT_FROM
        if fixed:
            raise ValueError(f"fields fixed when the app is built: {sorted(fixed)}")
        try:
            new = replace(self.launch_config, **changes)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        self.launch_config = self.config = new
        if restart:
            for transport in list(self.connections):
                if transport is not keep:
                    sock = transport.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    transport.abort()
            self.reset()
            self.started = time.time()
        return new

    def requests(self, path: str | None = None) -> dict[str, Any]:
        """The access log: ``{"requests": [...], "aborts": [...], "disconnects": [...]}``."""
        reqs = [dict(e) for e in self.log if path is None or e["path"] == path]
        return {
            "requests": reqs,
            "aborts": list(self.aborts),
            "disconnects": list(self.disconnects),
        }

    def take_behaviour(self, path: str, reused: bool = True) -> Behaviour | None:
        """Consume one use of the first queued behaviour matching ``path`` (None: none)."""
        for i, b in enumerate(self.script_queue):
            if (b.path is None or b.path == path) and (reused or not b.reused_only):
                b.count -= 1
                if b.count <= 0:
                    del self.script_queue[i]
                return replace(b, count=1)
        return None

    def log_request(self, request: Request, body: Any) -> dict[str, Any]:
        """Append an access-log entry for ``request`` and return it (filled in later)."""
        self._seq += 1
        entry: dict[str, Any] = {
            "seq": self._seq,
            "time": time.time(),
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": {k: v for k, v in request.headers.items()},
            "body": body,
            "rids": [],
            "stream": None,
            "status": None,
            "outcome": None,
            "client_disconnected": False,
            "fault": None,
        }
        self.log.append(entry)
        return entry

    # -- load ------------------------------------------------------------------------------

    def abort(self, rid: str) -> bool:
        """Abort the running or queued sample with exactly this rid; True if one matched."""
        s = self.running.get(rid)
        if s is None:
            for job, _ in self.queued:
                for qs in job.samples:
                    if qs.rid == rid:
                        s = qs
        matched = s is not None and s.finish is None
        if matched and s is not None:
            s.abort_requested = True
            for job in self.jobs.values():
                if s in job.samples:
                    self.wake(job)
        self.aborts.append({"time": time.time(), "rid": rid, "matched": matched})
        return matched

    def _admit_now(self, job: Job) -> bool:
        limit = self.config.max_running_requests
        return limit is None or not self.running or len(self.running) + len(job.samples) <= limit

    async def admit(self, job: Job) -> None:
        """Wait for a running slot (FIFO) then mark the job's samples running."""
        if not self.queued and self._admit_now(job):
            self._start(job)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queued.append((job, fut))
        try:
            await fut
        finally:
            with contextlib.suppress(ValueError):
                self.queued.remove((job, fut))

    def wake(self, job: Job) -> None:
        """Interrupt the job's waits (prefill, decode step, queue) so it sees an abort."""
        job.wake.set()
        if not all(s.abort_requested for s in job.samples):
            return
        for queued_job, fut in list(self.queued):
            if queued_job is job and not fut.done():
                self.queued.remove((queued_job, fut))
                fut.set_result(None)

    def _start(self, job: Job) -> None:
        job.admitted = True
        for s in job.samples:
            self.running[s.rid] = s

    def release(self, job: Job) -> None:
        """Take the job's samples off the running set and admit waiting jobs."""
        for s in job.samples:
            self.release_sample(s, admit=False)
        self._admit_waiting()

    def release_sample(self, s: Sample, admit: bool = True) -> None:
        """Take one finished sample off the running set."""
        if self.running.get(s.rid) is s:
            del self.running[s.rid]
            if admit:
                self._admit_waiting()

    def _admit_waiting(self) -> None:
        while self.queued:
            nxt, fut = self.queued[0]
            if fut.done():
                self.queued.popleft()
                continue
            if not self._admit_now(nxt):
                break
            self.queued.popleft()
            self._start(nxt)
            fut.set_result(None)

    def next_dp_rank(self) -> int:
        """The dp rank of the next job (round robin)."""
        r = self._dp_next % self.config.dp_size
        self._dp_next += 1
        return r

    def gauges(self) -> list[dict[str, float]]:
        """Live gauge values per dp rank, after overrides."""
        cfg = self.config
        out = []
        for rank in range(cfg.dp_size):
            running = [s for s in self.running.values() if s.dp_rank == rank]
            queued = sum(1 for job, _ in self.queued for s in job.samples if s.dp_rank == rank)
            used = sum(s.prompt_tokens + s.generated for s in running)
            g = {
                "num_running_reqs": float(len(running)),
                "num_queue_reqs": float(queued),
                "token_usage": used / cfg.max_total_num_tokens,
                "spec_accept_length": cfg.spec_accept_length if cfg.speculative_algorithm else 0.0,
                "spec_accept_rate": cfg.spec_accept_rate if cfg.speculative_algorithm else 0.0,
                "gen_throughput": 0.0,
                "cache_hit_rate": 0.0,
            }
            if self.stepper is not None:  # the step model's own view (dp_size 1)
                sg = self.stepper.engine.gauges()
                g.update(num_running_reqs=float(sg.running), num_queue_reqs=float(sg.queued),
                         token_usage=sg.kv_used_tokens / sg.capacity_tokens,
                         spec_accept_length=(sg.accept_length or 0.0) if self.stepper.engine.speculative else 0.0)
            g.update({k: float(v) for k, v in (self.metrics_override.get("gauges") or {}).items()})
            per = (self.metrics_override.get("dp_gauges") or {}).get(str(rank)) or {}
            g.update({k: float(v) for k, v in per.items()})
            out.append(g)
        return out
