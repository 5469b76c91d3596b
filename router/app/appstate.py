"""The process's state: :class:`AppState`, built by :func:`router.app.asgi.create_app` in the
app's lifespan, one per app (two apps can run in one process).

It holds the current :class:`~router.state.fleet.Fleet` (swapped whole by a reload,
:mod:`router.app.reload`), the upstream clients and the transport seam, the tokeniser
threads, the metrics, the shared state and the per-key limits, the background tasks, the
tracer (:mod:`router.app.tracing_reload`), and advances the bypass hysteresis once per scrape
round into the gauges. The request side reads it through
:class:`router.front.appstate.FrontState` (what the routes and the pipeline use of it). A module
of its own, below the app and the reload, so that both name it without importing each other.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from router.access.limits import KeyLimiter
from router.decision.acceptance import CLASSES
from router.decision.learn import SpeedFit, bucket_label
from router.front.planwindow import PlanWindow
from router.loops.engine_reads import ModelRefresh
from router.ops.metrics import LearningSeries, RouterMetrics, set_or_clear
from router.shared.state import MemoryState, RedisState
from router.state.runtime import Runtime
from router.upstream.transport import Transport
from router.upstream.transport_aiohttp import AiohttpTransport

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    import aiohttp

    from router.config.server import TracingConfig
    from router.config.tree import Config
    from router.loops.discovery import Discovery
    from router.state.fleet import Fleet
    from router.state.pool import Pool

__all__ = ["AppState"]


class AppState:
    """Per-app state, built in the lifespan.

    Attributes:
        config_path: the operator YAML (None when built from a Config value).
        fleet: the current :class:`router.state.fleet.Fleet` (one :class:`Runtime` per model);
            replaced whole on reload.
        runtime: the fleet's first model's runtime (``fleet.default``): where the global
            sections are read; a request runs on its own model's runtime.
        session: the one upstream HTTP client.
        fresh_session: a client that never reuses a connection (``force_close``), for the one
            resend after a reused keep-alive connection broke (:mod:`router.upstream.proxy`); None when
            the session was injected (the resend then goes through ``session``).
        transport: the proxy's upstream seam (:class:`router.upstream.transport.Transport`): with
            ``upstream.client: httptools`` a :class:`router.upstream.transport_h1.H1Transport` (aborts and
            ``https://`` engines through the sessions), else a
            :class:`router.upstream.transport_aiohttp.AiohttpTransport` over both sessions (the default
            when none is given).
        executor: threads for tokenisation (off the event loop).
        metrics: the router's Prometheus series.
        shared: the shared state (:mod:`router.shared.state`).
        limiter: the per-key limits (:mod:`router.access.limits`), in the shared state's Redis when
            it has one.
        clock: monotonic clock (s).
        discovery: the Kubernetes endpoint watchers (:mod:`router.loops.discovery`; idle when no
            pool has a ``discovery`` block).
        scrape_rounds: scrape rounds finished (each advanced the bypass hysteresis once).
        model_refresh: re-reads the engines' ``/v1/models`` before a request naming an unknown
            LoRA adapter is answered 404 (:class:`router.loops.engine_reads.ModelRefresh`).
        start_config: the whole config the process started with (its sockets, clients and
            shared state were built from it; :data:`router.app.reload.START_ONLY`).
        reloads_ok, reloads_failed: config reloads applied / rejected (``reloads`` is their
            sum: every change the reloader acted on). Tests wait on these counters.
        plan_window: the recent finished requests the pool planner reads
            (:mod:`router.front.planwindow`, ``GET /admin/plan/window``).
    """

    def __init__(self, fleet: Fleet, *, config_path: Path | None, session: aiohttp.ClientSession,
                 executor: ThreadPoolExecutor, metrics: RouterMetrics,
                 shared: MemoryState | RedisState | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 fresh_session: aiohttp.ClientSession | None = None, limiter: KeyLimiter | None = None,
                 transport: Transport | None = None) -> None:
        self.fleet = fleet
        #: The config the process started with: what its sockets, clients and shared state were
        #: built from (a reload cannot change those, router.app.reload.START_ONLY).
        self.start_config: Config = fleet.config
        runtime = fleet.default
        #: The per-key limits (router/access/limits.py); local buckets unless one sharing Redis is given.
        self.limiter = limiter or KeyLimiter(runtime.config.state, None, metrics, clock=clock)
        self.fresh_session = fresh_session
        self.shared = shared if shared is not None else MemoryState()
        self.config_path = config_path
        self.session = session
        self.transport: Transport = transport or AiohttpTransport(session, fresh_session)
        self.executor = executor
        self.metrics = metrics
        self.clock = clock
        self.tasks: set[asyncio.Task[Any]] = set()
        self.discovery: Discovery | None = None
        self.tracing: Any = None  # a router.ops.tracing.Tracing when tracing.enabled
        self.tracing_config: TracingConfig = runtime.config.tracing  # the section state.tracing was built from
        self.span_exporter: Any = None  # create_app's span_exporter (tests), for tracers built on reload
        self.retiring: dict[Any, asyncio.Task[None]] = {}  # tracers a reload replaced -> their retirement
        self.plan_window = PlanWindow(fleet.config.planner)
        self.scrape_rounds = 0
        #: re-reads the engines' model lists before an unknown adapter is answered 404
        self.model_refresh = ModelRefresh(self.transport, clock)
        self.reloads_ok = 0
        self.reloads_failed = 0
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(4).hex()

    def next_request_id(self) -> str:
        """A request id unique across router processes (random prefix + counter)."""
        return f"{self._id_prefix}-{next(self._ids)}"

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    @property
    def runtime(self) -> Runtime:
        """The first model's runtime (the only one of a one-model config): global sections."""
        return self.fleet.default

    @property
    def reloads(self) -> int:
        """Config changes the reloader acted on, applied or rejected."""
        return self.reloads_ok + self.reloads_failed

    def on_scrape_round(self, runtimes: Runtime | Iterable[Runtime]) -> None:
        """After each scrape round, for every model's runtime: advance the bypass hysteresis
        (the one place it moves), forget unhealthy endpoints in the prefix indexes, then copy
        pool state into the gauges. One round counts once, whatever the number of models."""
        for runtime in [runtimes] if isinstance(runtimes, Runtime) else runtimes:
            for change in runtime.follow_engine_limits():  # router/state/engine_limits.py
                self.metrics.context_limit_changes.labels(
                    change.pool, "down" if change.after < change.before else "up").inc()
            now = self.clock()
            runtime.advance_bypass(now)
            for pool, on in runtime.advance_checks(now):
                if on:
                    self.metrics.learning.fallbacks.labels(pool).inc()
            runtime.prune_prefix()
            self.refresh_gauges(runtime)
        self.scrape_rounds += 1

    def refresh_gauges(self, runtime: Runtime | None = None) -> None:
        """Copy pool state into the gauges (after each scrape round and on ``/metrics``): of
        ``runtime``, or of every model's runtime when None.

        Read-only on the pools: the bypass gauges show the flags as the last scrape round left them (reading ``/metrics`` never advances the hysteresis).
        """
        if runtime is None:
            for rt in self.fleet:
                self.refresh_gauges(rt)
            return
        now = self.clock()
        m = self.metrics
        stale = runtime.config.scrape.stale_after_s
        for pool in runtime.pools:
            m.inflight.labels(pool.name).set(pool.inflight())
            m.shared_inflight.labels(pool.name).set(pool.shared_inflight(now, stale))
            m.pool_load.labels(pool.name).set(pool.load(now, stale))
            m.healthy_endpoints.labels(pool.name).set(sum(e.healthy for e in pool.endpoints.values()))
            m.context_limit.labels(pool.name).set(pool.limit)
            if pool.name in runtime.prefix:
                m.prefix_index_blocks.labels(pool.name).set(runtime.prefix[pool.name].entries())
            if pool.config.speculative:
                m.bypass.labels(pool.name, "saturated").set(int(pool.saturated))
                m.bypass.labels(pool.name, "low_acceptance").set(int(pool.low_acceptance))
                m.accept_length.labels(pool.name).set(pool.accept_length(now, stale) or 0.0)
                max_age = runtime.routing.acceptance.max_age_s
                for cls in CLASSES:
                    set_or_clear(m.accept_length_estimate, (pool.name, cls),
                                 pool.estimated_accept_length(cls, now, max_age))
                    age = pool.signal_age_s(cls, now)
                    m.signal_age.labels(pool.name, f"acceptance_{cls}").set(-1.0 if age is None else age)
            scrape_age = pool.scrape_age_s(now)
            m.signal_age.labels(pool.name, "scrape").set(-1.0 if scrape_age is None else scrape_age)
            if pool.fit is not None:
                _learning_gauges(m.learning, pool.name, pool.fit, now)
                _check_gauges(m.learning, pool, now, runtime.routing.acceptance.max_age_s)
        m.shared_state_degraded.set(int(self.shared.degraded))
        if self.discovery is not None:
            self.discovery.refresh_gauges(runtime)
        if runtime is not self.fleet.default:
            return  # the threshold gauges show the first model's values (one override set for all)
        routing, active = runtime.routing, runtime.overrides.flat()
        for key, value, path in (
                ("long_prompt_tokens", routing.long_prompt_tokens, "routing.long_prompt_tokens"),
                ("saturation_enter", routing.saturation.enter, "routing.saturation.enter"),
                ("saturation_exit", routing.saturation.exit, "routing.saturation.exit")):
            m.routing_threshold.labels(key).set(value)
            m.routing_override_active.labels(key).set(int(path in active and runtime.override_error is None))


def _learning_gauges(series: LearningSeries, pool: str, fit: SpeedFit, now: float) -> None:
    """Set one pool's :class:`router.ops.metrics.LearningSeries` from its fit."""
    model = fit.model
    for param, value in (("decode_s_per_token", model.decode_s_per_token), ("batch_knee", model.batch_knee),
                         ("attention_s_per_token", model.attention_s_per_token),
                         ("kv_read_s_per_token", model.kv_read_s_per_token),
                         ("prefill_s_per_token", model.prefill_s_per_token),
                         ("prefill_stall_s_per_token", model.prefill_stall_s_per_token)):
        series.param.labels(pool, param).set(value)
    series.observations.labels(pool).set(fit.count)
    series.error.labels(pool).set(-1.0 if fit.error is None else fit.error)
    series.age.labels(pool).set(-1.0 if fit.updated_at is None else now - fit.updated_at)
    for (cls, bucket), tau in fit.accept_table().items():
        series.accept_length.labels(pool, cls, bucket_label(bucket)).set(tau)


def _check_gauges(series: LearningSeries, pool: Pool, now: float, max_age: float) -> None:
    """Set one pool's prediction-check series (:mod:`router.decision.prediction_check`) from its checks."""
    check = pool.check
    if check is None:
        return
    series.fallback.labels(pool.name).set(int(check.fallback))
    if pool.speculative and pool.fit is not None:
        for cls in CLASSES:  # the learned accept length against the live gauge (/ready's accept_length_check)
            learned, gauge = pool.fit.accept_length(cls), pool.estimated_accept_length(cls, now, max_age)
            set_or_clear(series.accept_length_error, (pool.name, cls),
                         None if learned is None or not gauge else (learned - gauge) / gauge)
    for (kind, cls, bucket), (error, bias, n) in check.cells(now).items():
        labels = (pool.name, kind, cls, bucket_label(bucket))
        series.prediction_error.labels(*labels).set(-1.0 if error is None else error)
        series.prediction_bias.labels(*labels).set(0.0 if bias is None else bias)
        series.prediction_checks.labels(*labels).set(n)
