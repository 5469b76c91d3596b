"""What the request side needs of the app's state: :class:`FrontState`, a typing protocol.

The routes and the pipeline (:mod:`router.front`) read the process's state through
``request.app.state.specgate``, which :func:`router.app.asgi.create_app` sets to its
:class:`router.app.appstate.AppState`. Naming that class here would point an import up, from the
request side to the composition above it; this protocol names only the members the request side
uses, so ``router.front`` imports nothing above it, not even for an annotation, and
``AppState`` satisfies it structurally (mypy checks it where ``create_app`` stores it).
"""

from __future__ import annotations

from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from router.access.limits import KeyLimiter
    from router.config.tree import Config
    from router.front.planwindow import PlanWindow
    from router.ops.metrics import RouterMetrics
    from router.shared.state import MemoryState, RedisState
    from router.state.fleet import Fleet
    from router.state.runtime import Runtime
    from router.upstream.transport import Transport

__all__ = ["AdapterRefresh", "FrontState"]


class AdapterRefresh(Protocol):
    """Re-reads the engines' model lists before an unknown adapter is answered 404
    (:class:`router.loops.engine_reads.ModelRefresh`)."""

    async def refresh(self, runtime: Runtime) -> bool:
        """Re-read ``runtime``'s generation endpoints' lists (waiting for the rate limit's
        window when the last read was too recent); False when it did not read."""
        ...


class FrontState(Protocol):
    """The app state as the routes and the pipeline use it (module docstring).

    Attributes:
        fleet: the models and their runtimes (swapped whole on a reload).
        start_config: the config the process started with.
        metrics: the router's Prometheus series.
        clock: monotonic clock (s).
        limiter: the per-key limits.
        shared: the state shared with other replicas (in memory or Redis).
        transport: every engine call goes through it.
        executor: the tokenizer threads.
        tracing: a :class:`router.ops.tracing.Tracing`, or None when tracing is off.
        plan_window: the recent finished requests the pool planner reads.
        model_refresh: the adapter refresh.
        scrape_rounds, reloads_ok, reloads_failed: counters the probes and admin routes show.
    """

    fleet: Fleet
    start_config: Config
    metrics: RouterMetrics
    clock: Callable[[], float]
    limiter: KeyLimiter
    shared: MemoryState | RedisState
    transport: Transport
    executor: ThreadPoolExecutor
    tracing: Any
    plan_window: PlanWindow
    scrape_rounds: int
    reloads_ok: int
    reloads_failed: int

    @property
    def runtime(self) -> Runtime:
        """The first model's runtime (global sections)."""
        ...

    @property
    def model_refresh(self) -> AdapterRefresh:
        """The adapter refresh."""
        ...

    @property
    def reloads(self) -> int:
        """Config changes the reloader acted on."""
        ...

    def next_request_id(self) -> str:
        """A request id unique across router processes."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background."""
        ...

    def refresh_gauges(self, runtime: Runtime | None = None) -> None:
        """Copy pool state into the gauges."""
        ...
