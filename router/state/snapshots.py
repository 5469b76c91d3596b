"""The one door from engine signals to the policy's inputs: an endpoint's scraped values, the
router's own in-flight accounting and the learned models become the
:class:`~router.decision.snapshot.EndpointSnapshot` / :class:`~router.decision.snapshot.PoolSnapshot` that
:func:`router.decision.policy.decide` reads.

Pure (no I/O, no clock, no state). Two callers build snapshots, both through here:
:meth:`router.state.runtime.Runtime.snapshots` (through :class:`router.state.snapshot_cache.SnapshotCache`,
which calls :func:`pool_snapshot` on a miss) and the day simulator's
``loadtests.dayrouter.PolicyRouter.snapshots``; nothing else constructs a snapshot of a live
pool.

A new engine signal (an SGLang gauge) is: its extractor in
:func:`router.state.engine_metrics.parse_sglang_metrics` (a field of
:class:`~router.state.engine_metrics.EngineLoad`), one field here in :class:`EndpointValues` and
:class:`~router.decision.snapshot.EndpointSnapshot` (same name, same place: ``tests/unit/test_snapshots.py``
pins the two field lists), its read in :func:`endpoint_values`, and its use in the policy or
the prediction (``docs/architecture.md``, "Where a change goes").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from router.decision.learn import SpeedFit
from router.decision.predict import SpeedModel
from router.decision.snapshot import EndpointSnapshot, PoolSnapshot
from router.state.engine_metrics import EngineLoad

__all__ = ["EndpointValues", "accept_lengths", "endpoint_snapshot", "endpoint_values", "pool_snapshot"]

_NONE: frozenset[str] = frozenset()
_new = tuple.__new__


class EndpointValues(NamedTuple):
    """An :class:`~router.decision.snapshot.EndpointSnapshot`'s fields as a plain tuple (same names, same
    order, same units: tokens, requests), so :class:`router.state.snapshot_cache.SnapshotCache` keys on
    it with C-level hashing and builds the snapshot only on a miss."""

    url: str
    healthy: bool
    load: int
    cached_tokens: int = 0
    queued: int = 0
    kv_free_tokens: int | None = None
    kv_used_tokens: int = 0
    inflight: int = 0
    prefill_backlog_tokens: int = 0


def endpoint_values(url: str, healthy: bool, load: int, cached_tokens: int, engine: EngineLoad | None,
                    inflight: int = 0, prefill_backlog_tokens: int = 0) -> EndpointValues:
    """One endpoint's snapshot values.

    Args:
        url: its base URL.
        healthy: routable (health checks, not draining).
        load: the router's load of it (requests): ``max(scraped running + queued, in-flight)``
            with back-pressure's floor (:meth:`router.state.endpoint.Endpoint.backpressure_load`).
        cached_tokens: estimated prompt tokens of the request cached there (tokens).
        engine: its last scrape while fresh (``scrape.stale_after_s``), else None: then the
            engine's own signals read as unknown (queue 0, KV free None, KV used 0).
        inflight: the router's requests there not finished (all replicas' when shared).
        prefill_backlog_tokens: prompt tokens sent there and not yet prefilled (tokens,
            :meth:`router.state.prefill_meter.PrefillMeter.value`).

    From a fresh scrape: the queue (``sglang:num_queue_reqs``), the KV used
    (:attr:`~router.state.engine_metrics.EngineLoad.kv_used`) and the KV free, the capacity
    (``sglang:max_total_num_tokens``) less the used (None when the capacity is not exported).
    """
    # positional, in the field order of the class above: a NamedTuple's keyword __new__ costs
    # about twice tuple.__new__ (Python-level), and this runs for every endpoint of every decision
    if engine is None:
        return _new(EndpointValues, (url, healthy, load, cached_tokens, 0, None, 0, inflight,
                                     prefill_backlog_tokens))
    cap = engine.max_total_num_tokens
    used = engine.kv_used
    return _new(EndpointValues, (url, healthy, load, cached_tokens, engine.num_queue_reqs,
                                 None if cap is None else max(0, cap - used), used, inflight,
                                 prefill_backlog_tokens))


def accept_lengths(live: Mapping[str, float | None], fit: SpeedFit | None, prior: Mapping[str, float | None]
                   ) -> tuple[float | None, float | None]:
    """``(greedy, sampled)`` tau of a speculative pool (tokens per verify step), each in the one
    order: the fresh live estimate (``live``, :mod:`router.decision.acceptance`), else what the fit last
    measured (:meth:`router.decision.learn.SpeedFit.accept_length`), else the calibrated prior
    (``prior``: the pool's ``speed`` block); None when none is known. A zero reads as unknown
    at every step. ``live`` and ``prior`` are keyed by temperature class."""
    return _accept_length("greedy", live, fit, prior), _accept_length("sampled", live, fit, prior)


def _accept_length(temperature: str, live: Mapping[str, float | None], fit: SpeedFit | None,
                   prior: Mapping[str, float | None]) -> float | None:
    return (live.get(temperature) or (fit.accept_length(temperature) if fit is not None else None)
            or prior.get(temperature))


def endpoint_snapshot(values: EndpointValues) -> EndpointSnapshot:
    """The :class:`~router.decision.snapshot.EndpointSnapshot` of these values (the fields pair by name:
    ``tests/unit/test_snapshots.py`` pins the two lists equal)."""
    return EndpointSnapshot(*values)


def pool_snapshot(*, name: str, speculative: bool, limit: int, reserved: int, endpoints: Sequence[EndpointValues],
                  speed: SpeedModel | None, fit: SpeedFit | None, saturated: bool = False,
                  low_acceptance: frozenset[str] = _NONE, accept_length_greedy: float | None = None,
                  accept_length_sampled: float | None = None, capabilities: frozenset[str] | None = None,
                  canary_mismatch: bool = False, adapters: frozenset[str] = _NONE,
                  prediction_fallback: bool = False,
                  measured: frozenset[tuple[str, int]] | None = None,
                  correction: tuple[tuple[tuple[str, int], float], ...] = (),
                  measured_factor: tuple[tuple[tuple[str, int], float], ...] = ()) -> PoolSnapshot:
    """A pool's :class:`~router.decision.snapshot.PoolSnapshot` (every argument is the field of the same
    name there). ``speed`` is the configured model (None: no prediction) and ``fit`` the
    learned one (:class:`router.decision.learn.SpeedFit`; None: not learning): a fit's model wins, and
    a speculative pool's fit also gives the measured tau table. Taus come from
    :func:`accept_lengths`."""
    return PoolSnapshot(
        name=name, speculative=speculative, limit=limit, reserved=reserved,
        endpoints=tuple([EndpointSnapshot(*e) for e in endpoints]), saturated=saturated,  # endpoint_snapshot, inlined
        low_acceptance=low_acceptance, speed=speed if fit is None else fit.model,
        accept_length_greedy=accept_length_greedy, accept_length_sampled=accept_length_sampled,
        capabilities=capabilities, canary_mismatch=canary_mismatch, adapters=adapters,
        prediction_fallback=prediction_fallback, measured=measured, correction=correction,
        measured_factor=measured_factor if prediction_fallback else (),
        accept_table=fit.accept_table() if fit is not None and speculative else None)
