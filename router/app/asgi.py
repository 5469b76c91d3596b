"""The FastAPI application: ``create_app`` builds everything in the lifespan.

Nothing lives at module level: the :class:`AppState` (config path, current
:class:`~router.state.runtime.Runtime`, the shared aiohttp session, the tokenizer thread pool, the
Prometheus registry, the shared state, background tasks) is created when the app starts and
torn down when it stops, so two apps can run in one process (the tests do).

With ``state.backend: redis`` the start makes one bounded attempt to reach Redis and goes on
degraded when it fails (:mod:`router.shared.state`); it never waits for Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from router.access.auth import load_engine_key
from router.access.limits import KeyLimiter
from router.app.appstate import AppState
from router.app.reload import Reloader
from router.app.runtime_inputs import RuntimeInputs, build_runtime, load_runtime_inputs
from router.app.tracing_reload import shutdown_all
from router.config.tree import Config, load_config
from router.front.api import GENERATE_ROUTES, install_routes, serve_generate
from router.front.appstate import FrontState
from router.front.drain import CUT_KEY, Drainer
from router.loops.canary import Canary
from router.loops.discovery import Discovery, DiscoverySettings
from router.loops.scraper import Scraper
from router.loops.warmup import Warmer
from router.ops.metrics import RouterMetrics
from router.shared.state import RedisState, build_shared_state
from router.state.fleet import build_fleet
from router.upstream.relay import ReuseMarkingConnector
from router.upstream.transport import Transport
from router.upstream.transport_aiohttp import AiohttpTransport
from router.upstream.transport_h1 import H1Transport

__all__ = ["AppState", "RouterApp", "RuntimeInputs", "build_runtime", "create_app", "load_runtime_inputs",
           "tokenizer_executor", "tune_interpreter"]

log = logging.getLogger("specgate")


def tune_interpreter() -> None:
    """Process-wide interpreter settings for a router process (``specgate router``; docs/performance.md).

    - ``gc.set_threshold(50_000, 50, 100)``: fewer, later generation-0 collections; Python's
      collector made the proxy's p99 tail (p99 30 ms -> 6 ms at c=16, with ``gc.freeze`` of
      the startup objects in the lifespan).
    - ``TOKENIZERS_PARALLELISM=false`` unless set: exact counts run in the calling
      (low-priority) tokeniser thread, not in the tokenizer's rayon pool.
    - ``sys.setswitchinterval(0.0005)``: while a tokeniser thread renders or counts a huge
      prompt, the event loop waits at most ~0.5 ms for the GIL instead of the default 5 ms
      per hand-over (``benchmarks/huge_prompt.py``, one A/B on a loaded 2-core machine:
      longest loop callback while a 234k-token prompt was counted 11.8 ms at the default
      interval, 1.5 ms at 0.5 ms). Without a second busy thread it changes nothing.
    """
    gc.set_threshold(50_000, 50, 100)
    sys.setswitchinterval(0.0005)
    # Counting runs in the low-priority tokeniser threads (see _background_priority); keep
    # the Rust tokenizer's own work there rather than in its rayon pool at normal priority.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _background_priority() -> None:
    """Run the calling thread at the lowest CPU priority (Linux: nice 19 for this thread only).

    Tokeniser threads render and count huge prompts; on the router's core they would take
    time slices from the event-loop thread and stretch every other request's latency (small
    requests' p99 while a 234k-token prompt is counted: ``benchmarks/huge_prompt.py``,
    docs/performance.md). At nice 19 the scheduler
    runs the loop thread as soon as it has work. Best effort: ignored where unsupported.
    """
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def tokenizer_executor(threads: int | None = None) -> ThreadPoolExecutor:
    """The router's tokeniser threads: ``threads`` workers (None: :func:`tokenizer_threads`),
    each at the lowest CPU priority (:func:`_background_priority`); the caller shuts it down."""
    return ThreadPoolExecutor(max_workers=threads or tokenizer_threads(), thread_name_prefix="specgate-tokenize",
                              initializer=_background_priority)


def tokenizer_threads(cgroup_cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The default tokeniser thread count: the CPUs this process may use minus one for the
    event loop, clamped to 2-8.

    The CPUs are the scheduler affinity (``os.sched_getaffinity``), capped by a cgroup v2 CPU
    quota when one is set (``cpu.max``: ``"<quota> <period>"`` in us, or ``"max <period>"``;
    a Kubernetes CPU limit of 2 on a 64-core node reads ``200000 100000``: 2 CPUs, not 64).
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    try:
        quota, period = Path(cgroup_cpu_max).read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 file, or an unreadable one: the affinity alone
    return max(2, min(8, cpus - 1))


class RouterApp(FastAPI):
    """The router's FastAPI app, with a direct path for the generation routes.

    ``POST`` to a path of :data:`router.front.api.GENERATE_ROUTES` (``/v1/chat/completions``,
    ``/v1/completions``, ``/v1/responses``) goes straight to
    :func:`router.front.api.serve_generate`; everything else (probes, ``/metrics``, admin, lifespan,
    404/405) goes through FastAPI as usual. The routes stay registered on the FastAPI router
    too, so the app behaves the same when mounted elsewhere.
    """

    #: The process's drain state (:mod:`router.front.drain`), set by :func:`create_app`.
    drain: Drainer

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:  # type: ignore[override]
        if scope["type"] == "http":
            if scope["method"] == "POST":
                kind = GENERATE_ROUTES.get(scope["path"])
                if kind is not None:
                    scope["app"] = self
                    # Tracked for the drain (router.front.drain), inline: this is the hot path, and a
                    # wrapper coroutine per request cost ~3 us more.
                    drain = self.drain
                    if drain.active:
                        send = drain.closing(send)
                    task = asyncio.current_task()
                    drain.inflight[task] = scope  # type: ignore[index]
                    try:
                        await serve_generate(scope, receive, send, kind)
                    except asyncio.CancelledError:
                        if not scope.get(CUT_KEY):
                            raise
                        task.uncancel()  # type: ignore[union-attr]
                        await drain.send_cut(scope, send)
                    else:
                        if drain.active:
                            drain.drained += 1
                    finally:
                        drain.inflight.pop(task, None)  # type: ignore[arg-type]
                    return
            if self.drain.active:
                send = self.drain.closing(send)
        await super().__call__(scope, receive, send)


def create_app(config: str | Path | Config, *, session_factory: Callable[[Config], aiohttp.ClientSession] | None = None,
               clock: Callable[[], float] = time.monotonic, scrape: bool = True, watch: bool = True,
               discovery: DiscoverySettings | None = None, span_exporter: Any = None) -> RouterApp:
    """Build the router app.

    Args:
        config: path of the operator YAML (watched for changes) or a :class:`Config` value.
        session_factory: builds the upstream client (tests may inject one); by default an
            aiohttp session with ``upstream.max_connections`` connections and no per-host cap.
        clock: monotonic clock (s).
        scrape: run the background scrape loop.
        watch: reload the config file when it changes (paths only).
        discovery: Kubernetes API access for pools with a ``discovery`` block (tests point
            ``api_url`` at a fake API server); watchers run only when such a pool exists.
        span_exporter: with ``tracing.enabled``, export spans to this OpenTelemetry
            ``SpanExporter`` synchronously instead of OTLP (tests: ``InMemorySpanExporter``).

    Raises:
        ConfigError: at startup, when the config is invalid.
    """
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        path = None if isinstance(config, Config) else Path(config)
        cfg = config if isinstance(config, Config) else load_config(path)  # type: ignore[arg-type]
        state = await _build_state(cfg, path, session_factory, clock, scrape=scrape, span_exporter=span_exporter)
        front: FrontState = state  # what the routes read it as (mypy checks AppState satisfies it)
        app.state.specgate = front
        tasks = _BackgroundTasks(state, scrape=scrape, watch=path is not None and watch,
                                 discovery=discovery or DiscoverySettings())
        await tasks.start()
        _configure_drain(app.drain, state)  # type: ignore[attr-defined]
        gc.collect()
        gc.freeze()  # startup objects (tokenizer, config, app) never need scanning again
        log.info("specgate router started: models=%s pools=%s; /ready answers 503 until every model has a "
                 "healthy endpoint (logged as 'endpoint ... is healthy')", list(state.fleet.runtimes),
                 [p.name for p in state.fleet.config.pools])
        try:
            yield
        finally:
            await tasks.stop()
            await _close(state)

    app = RouterApp(title="specgate", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.drain = Drainer(clock)
    install_routes(app)
    return app


async def _build_state(cfg: Config, path: Path | None,
                       session_factory: Callable[[Config], aiohttp.ClientSession] | None,
                       clock: Callable[[], float], *, scrape: bool, span_exporter: Any) -> AppState:
    """The app's :class:`AppState` for ``cfg``: the metrics, the shared state (not started), the
    first runtime (its I/O in a worker thread), the upstream clients, the tokeniser threads and,
    with ``tracing.enabled``, the tracer (:mod:`router.ops.tracing`, imported only then)."""
    loop = asyncio.get_running_loop()
    metrics = RouterMetrics(CollectorRegistry(auto_describe=True))
    shared = build_shared_state(cfg.state, metrics=metrics, clock=clock)
    inputs = await loop.run_in_executor(None, load_runtime_inputs, cfg)
    fleet = build_fleet(cfg, inputs.counters, ledger=shared.ledger, auth=inputs.auth, warmup_gate=scrape)
    session = (session_factory or _default_session)(cfg)
    fresh_session = _fresh_session(cfg) if session_factory is None else None
    executor = tokenizer_executor(cfg.server.tokenizer_threads)
    metrics.config_reloads.labels("success").inc(0)
    metrics.config_reloads.labels("failure").inc(0)
    metrics.shared_state_degraded_entries.inc(0)
    metrics.config_info.set(time.time())
    limiter = KeyLimiter(cfg.state, shared if isinstance(shared, RedisState) else None, metrics, clock=clock)
    transport: Transport = AiohttpTransport(session, fresh_session)
    if cfg.upstream.client == "httptools":
        transport = H1Transport(transport, max_connections=cfg.upstream.max_connections,
                                keepalive_timeout_s=cfg.upstream.keepalive_timeout_s, headers=_engine_headers(cfg))
    state = AppState(fleet, config_path=path, session=session, executor=executor, metrics=metrics, shared=shared,
                     clock=clock, fresh_session=fresh_session, limiter=limiter, transport=transport)
    state.span_exporter = span_exporter  # for tracers built on reload (router.app.tracing_reload)
    if cfg.tracing.enabled:
        from router.ops.tracing import Tracing

        state.tracing = Tracing(cfg.tracing, span_exporter)
    return state


class _BackgroundTasks:
    """The app's background tasks (docs/architecture.md, "Background tasks"): the shared state's
    writer, discovery, and with ``scrape`` the scraper (one round before the app is ready), the
    warm-up prober and the canary; with ``watch`` the reloader. Stopped in that order."""

    def __init__(self, state: AppState, *, scrape: bool, watch: bool, discovery: DiscoverySettings) -> None:
        self._state = state
        self._scrape = scrape
        self._watch = watch
        self._settings = discovery
        self._started: list[Scraper | Warmer | Canary | Reloader | Discovery] = []

    async def start(self) -> None:
        state, metrics, transport, clock = self._state, self._state.metrics, self._state.transport, self._state.clock
        await state.shared.start(lambda: state.fleet)
        state.limiter.start()
        scraper = Scraper(transport, lambda: state.fleet, state.on_scrape_round, clock,
                          on_failure=lambda ep: metrics.scrape_failures.labels(ep.pool, ep.url).inc(),
                          on_recheck=lambda ep, why: metrics.engine_rechecks.labels(ep.pool, why).inc())
        reloader = Reloader(state) if self._watch else None
        state.discovery = discovery = Discovery(lambda: state.fleet, metrics, self._settings)
        discovery.start()
        canary = Canary(transport, lambda: state.fleet, metrics, clock)
        warmer = Warmer(transport, lambda: state.fleet, metrics, clock)
        if self._scrape:
            await scraper.run_once()
            scraper.start()
            warmer.start()
            canary.start()
        if reloader is not None:
            reloader.start()
        # the stop order: scraper, warmer, canary, reloader, discovery (stopping one never started is a no-op)
        self._started = [scraper, warmer, canary, *([reloader] if reloader is not None else []), discovery]

    async def stop(self) -> None:
        """Stop the tasks, cancel and await the spawned ones (abort calls), stop the per-key limiter
        and the shared state."""
        state = self._state
        for task in self._started:
            await task.stop()
        for spawned in list(state.tasks):
            spawned.cancel()
        await asyncio.gather(*state.tasks, return_exceptions=True)
        await state.limiter.stop()
        await state.shared.stop()


def _configure_drain(drainer: Drainer, state: AppState) -> None:
    """Give the drain its settings (read from the current runtime at each drain) and a way to
    wait for the cut requests' ``/abort_request`` calls."""
    def drain_settings() -> tuple[float, float, float]:
        c = state.runtime.config
        return c.server.drain_listen_s, c.server.drain_timeout_s, c.upstream.abort_timeout_s

    async def wait_aborts(abort_s: float) -> None:
        if state.tasks:
            await asyncio.wait(list(state.tasks), timeout=2 * abort_s + 0.5)

    drainer.configure(drain_settings, wait_aborts)


async def _close(state: AppState) -> None:
    """Close the upstream clients and the tokeniser threads; flush the last spans (bounded by
    the export timeout)."""
    state.transport.close()
    await state.session.close()
    if state.fresh_session is not None:
        await state.fresh_session.close()
    state.executor.shutdown(wait=False, cancel_futures=True)
    await shutdown_all(state)  # every tracer, the retiring ones too


def _default_session(config: Config) -> aiohttp.ClientSession:
    """The upstream client: an idle connection is kept ``upstream.keepalive_timeout_s`` seconds
    (below every engine's keep-alive, checked at config load; aiohttp's own default is 15 s
    against uvicorn's 5 s, sgl-project/sglang#20851), and the connector tells the proxy whether a
    request went out on a reused connection (:class:`router.upstream.relay.ReuseMarkingConnector`;
    no aiohttp ``TraceConfig``, whose hooks would run at every request step)."""
    connector = ReuseMarkingConnector(limit=config.upstream.max_connections, limit_per_host=0,
                                      enable_cleanup_closed=False, ttl_dns_cache=300,
                                      keepalive_timeout=config.upstream.keepalive_timeout_s)
    # No cookie jar: engines set no cookies, and a real jar filters cookies on every request.
    # The engines' key (auth.engine_api_key*, SGLang --api-key) goes on every engine request:
    # generation, /abort_request and the scrapes (SGLang exempts /health and /metrics).
    return aiohttp.ClientSession(connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                 timeout=aiohttp.ClientTimeout(total=None), headers=_engine_headers(config))


def _engine_headers(config: Config) -> dict[str, str] | None:
    """The headers every engine request carries: ``Authorization: Bearer <key>`` with the
    engines' key (``auth.engine_api_key*``, SGLang ``--api-key``), else None."""
    key = load_engine_key(config.auth)
    return {"authorization": f"Bearer {key}"} if key else None


def _fresh_session(config: Config) -> aiohttp.ClientSession:
    """A client that opens a new connection per request and closes it after (``force_close``):
    the one resend after a stale keep-alive connection must not meet another stale one."""
    connector = aiohttp.TCPConnector(limit=config.upstream.max_connections, limit_per_host=0,
                                     enable_cleanup_closed=False, ttl_dns_cache=300, force_close=True)
    return aiohttp.ClientSession(connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                 timeout=aiohttp.ClientTimeout(total=None), headers=_engine_headers(config))
