"""The live window of recent finished requests that ``specgate plan`` sizes the pools from.

:class:`PlanWindow` is a bounded ring (``planner.window_requests`` entries, none older than
``planner.window_s`` seconds from arrival) of the generation requests answered in full (HTTP 200, the stream complete), appended when
their responses end (:func:`router.front.record.record`, one call) as they came: arrival, the
request's features, the three numbers of the response's ``usage`` the window reads, pool,
model, duration. Appending is O(1) (a
``collections.deque`` with a ``maxlen``; entries past their age leave from the left as new
ones come), so the request path's cost stays flat; nothing is computed until the window is
read, as :class:`WindowEntry` rows (:meth:`PlanWindow.entries`).

:func:`window_view` is what ``GET /admin/plan/window`` (:mod:`router.front.admin`, admin key) serves
for one model: the window's entries, arrival times relative to its oldest entry, and per pool
of that model its learned speed model (:attr:`router.state.pool.Pool.fit`, else the config's
``speed`` block), the fit's status (:meth:`router.decision.learn.SpeedFit.status`), the prediction
error's status when the pool has a checker (``pool.check.status(now)``: at least
``median_relative_error``, ``checked`` and ``fallback``), the live accept length per
temperature class and the engines' KV capacity (``sglang:max_total_num_tokens``). The shape is
documented on :func:`window_view`; the planner (:mod:`loadtests.plan`) is its reader.

No I/O; the ring lives on the app's state (:class:`router.app.appstate.AppState`), one per process.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, NamedTuple

from router.decision.acceptance import CLASSES
from router.decision.learn import observed_prompt_tokens

if TYPE_CHECKING:
    from router.config.tree import PlannerConfig
    from router.request.features import RequestFeatures
    from router.state.pool import Pool
    from router.state.runtime import Runtime
    from router.upstream.proxy_job import ProxyJob

__all__ = ["PlanWindow", "WindowEntry", "pool_view", "window_view"]

class WindowEntry(NamedTuple):
    """One finished request (seconds on the window's clock, tokens), built when the window is
    read (:meth:`PlanWindow.entries`).

    Attributes:
        arrival: when the router received it (``time.perf_counter()``, s).
        prompt_tokens: P of one prompt (the engine's count when the router's was a bound).
        cached_tokens: tokens of each prompt served from the engine's prefix cache
            (``usage.prompt_tokens_details.cached_tokens`` over the prompts; 0 when not said).
        output_tokens: tokens generated per sequence (``usage.completion_tokens / n``,
            rounded); None when the response carried no usage (a stream without
            ``stream_options.include_usage``).
        max_tokens: the output budget per sequence the router decided with.
        temperature_class: ``greedy`` or ``sampled``.
        n: sequences the request ran (its ``n`` times its prompts).
        pool: the pool that answered it.
        model: the served model's name.
        duration_s: arrival to the response's end (s).
        speculation: the client's speculation hint (``off``, ``auto``, ``on``: header
            ``x-specgate-speculation``, body field ``specgate_speculation`` or the API key's default).
    """

    arrival: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int | None
    max_tokens: int
    temperature_class: str
    n: int
    pool: str
    model: str
    duration_s: float
    speculation: str


#: What :meth:`PlanWindow.record` keeps as the completion tokens of a response without usage.
_NO_USAGE = object()


def _entry(arrival: float, f: RequestFeatures, prompt_tokens: object, cached_tokens: object,
           completion_tokens: object, pool: str, model: str, duration_s: float) -> WindowEntry:
    """The :class:`WindowEntry` of a request as :meth:`PlanWindow.record` kept it (the
    response's ``usage.prompt_tokens``, ``usage.prompt_tokens_details.cached_tokens`` and
    ``usage.completion_tokens`` as the engine wrote them, ``_NO_USAGE``: no usage object): P the
    engine's count when the router's was a bound (:func:`router.learn.observed_prompt_tokens`),
    the cached tokens per prompt and the output tokens per sequence."""
    sequences = f.n * f.num_prompts
    prompt, cached, output = f.prompt_tokens, 0, None
    if completion_tokens is not _NO_USAGE:
        prompt = observed_prompt_tokens(prompt, f.prompt_exact, f.num_prompts, prompt_tokens)
        got = cached_tokens
        cached = got // f.num_prompts if type(got) is int and got > 0 else 0
        done = completion_tokens
        output = round(done / sequences) if type(done) is int and done >= 0 else None
    return WindowEntry(arrival, prompt, min(cached, prompt), output, f.max_new_tokens, f.temperature_class,
                       sequences, pool, model, duration_s, f.speculation)


class PlanWindow:
    """The ring of recent finished requests (module docstring).

    Args:
        config: the ``planner`` section (its sizes; a later one is passed to :meth:`record`).
        clock: the window's clock (s; ``time.perf_counter``, the clock of
            ``ProxyJob.received_at``).
    """

    __slots__ = ("_clock", "_entries", "_max_age_s", "recorded")

    def __init__(self, config: PlannerConfig, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        #: ``(arrival, features, usage prompt, usage cached, usage completion, pool, model,
        #: duration)`` per request, the arguments of :func:`_entry`
        self._entries: deque[tuple[Any, ...]] = deque(maxlen=config.window_requests)
        self._max_age_s = config.window_s
        self.recorded = 0  # entries appended since the start (the ring holds the newest)

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, job: ProxyJob, model: str, config: PlannerConfig) -> None:
        """Append the request of ``job`` when it was answered in full by a pool (else nothing);
        ``config``: the live ``planner`` section (a reload that changed the sizes resizes the
        ring here, keeping the newest entries). Kept as it came (its arrival, features, usage,
        pool, model and duration): the :class:`WindowEntry` is built when the window is read."""
        pool = job.decision.pool
        if job.status != 200 or job.outcome != "ok" or pool is None:
            return
        entries = self._entries
        if config.window_requests != entries.maxlen:
            entries = self._entries = deque(entries, maxlen=config.window_requests)
        self._max_age_s = config.window_s
        now, arrival = self._clock(), job.received_at
        usage = job.observer.usage if job.observer is not None else None
        if type(usage) is dict:  # its numbers as the engine wrote them (checked when read)
            details = usage.get("prompt_tokens_details")
            entries.append((arrival, job.features, usage.get("prompt_tokens"),
                            details.get("cached_tokens") if type(details) is dict else None,
                            usage.get("completion_tokens"), pool, model, now - arrival))
        else:
            entries.append((arrival, job.features, None, None, _NO_USAGE, pool, model, now - arrival))
        self.recorded += 1
        cut = now - self._max_age_s
        while entries and entries[0][0] < cut:
            entries.popleft()

    def _expire(self, now: float) -> None:
        cut = now - self._max_age_s
        entries = self._entries
        while entries and entries[0][0] < cut:
            entries.popleft()

    def entries(self, model: str | None = None) -> list[WindowEntry]:
        """The entries within the window now (oldest first), of ``model`` when given."""
        self._expire(self._clock())
        return [_entry(*e) for e in self._entries if model is None or e[6] == model]

    def view(self, model: str | None = None) -> dict[str, Any]:
        """``{"requests": [...], "window": {...}}`` of :func:`window_view` (no pools)."""
        now = self._clock()
        rows = self.entries(model)
        base = rows[0].arrival if rows else now
        return {
            "window": {"requests": len(rows), "seconds": round(now - base, 6) if rows else 0.0,
                       "window_requests": self._entries.maxlen, "window_s": self._max_age_s,
                       "recorded": self.recorded},
            "requests": [{"arrival_s": round(e.arrival - base, 6), "prompt_tokens": e.prompt_tokens,
                          "cached_tokens": e.cached_tokens, "output_tokens": e.output_tokens,
                          "max_tokens": e.max_tokens, "temperature_class": e.temperature_class, "n": e.n,
                          "pool": e.pool, "duration_s": round(e.duration_s, 6), "speculation": e.speculation}
                         for e in rows],
        }


def _kv_tokens(pool: Pool) -> int | None:
    caps = [e.engine.max_total_num_tokens for e in pool.endpoints.values()
            if e.engine is not None and e.engine.max_total_num_tokens]
    return min(caps) if caps else None


def pool_view(pool: Pool, now: float, max_age_s: float) -> dict[str, Any]:
    """One pool's part of :func:`window_view` (``now``: the runtime's monotonic clock, s;
    ``max_age_s``: ``routing.acceptance.max_age_s``)."""
    fit = pool.fit
    model = fit.model if fit is not None else pool.speed
    check = getattr(pool, "check", None)  # the prediction error's checker, where the router has one
    status = getattr(check, "status", None)
    taus: dict[str, float | None] = {}
    if pool.speculative:
        for cls in CLASSES:
            live = pool.estimated_accept_length(cls, now, max_age_s)
            taus[cls] = live if live is not None else fit.accept_length(cls) if fit is not None else None
    return {
        "name": pool.name, "speculative": pool.speculative,
        "endpoints": len(pool.endpoints), "healthy": sum(e.healthy for e in pool.endpoints.values()),
        "kv_tokens": _kv_tokens(pool), "limit_tokens": pool.limit,
        "speed": None if model is None else asdict(model),
        "speed_source": "learned" if fit is not None else "config" if model is not None else None,
        "fit": None if fit is None else fit.status(now),
        "check": status(now) if callable(status) else None,
        "accept_length": taus,
    }


def window_view(window: PlanWindow, runtime: Runtime, now: float) -> dict[str, Any]:
    """The document of ``GET /admin/plan/window`` for ``runtime``'s model.

    Shape: ``{"model": str, "window": {"requests": r, "seconds": s (oldest arrival to now),
    "window_requests", "window_s", "recorded"}, "requests": [{"arrival_s" (from the oldest),
    "prompt_tokens", "cached_tokens", "output_tokens" (per sequence, null: not reported),
    "max_tokens", "temperature_class", "n", "pool", "duration_s", "speculation" (the client's hint:
    ``off``, ``auto``, ``on``)}, ...], "pools": [{"name",
    "speculative", "endpoints", "healthy", "kv_tokens" (null: not exported), "limit_tokens" (the
    context the pool admits, tokens), "speed" (the
    :class:`router.decision.predict.SpeedModel` fields, null: none), "speed_source" ("learned",
    "config", null), "fit" (:meth:`router.decision.learn.SpeedFit.status`, null), "check" (the
    prediction error's status, null: no checker), "accept_length" ({class: tau or null},
    speculative pools)}, ...]}``. ``now``: the runtime's monotonic clock (s).
    """
    max_age = runtime.routing.acceptance.max_age_s
    return {"model": runtime.model_name, **window.view(runtime.model_name),
            "pools": [pool_view(p, now, max_age) for p in runtime.pools]}
