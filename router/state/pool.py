"""One pool of endpoints: its config-derived fields, its endpoints, its bypass hysteresis
state and its speed model (fixed or live); the :class:`~router.state.runtime.Runtime` holds them.

Shapes and units: loads in requests, ages and times in monotonic seconds, accept lengths in
tokens per verify step (tau).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from router.config.tree import PoolConfig
from router.decision.bypass import BypassState
from router.decision.learn import DEFAULT_PRIOR, ObservationBudget, SpeedFit
from router.decision.predict import SpeedModel
from router.decision.prediction_check import PredictionCheck
from router.state.endpoint import Endpoint

__all__ = ["Pool"]


class Pool:
    """A pool's endpoints plus its bypass hysteresis state."""

    def __init__(self, config: PoolConfig, limit: int, endpoints: Iterable[Endpoint]) -> None:
        self.config = config
        self.name = config.name
        self.limit = limit  # followed down to its engines' context (router/state/engine_limits.py)
        self.configured_limit = limit  # the config's validated cap (tokens)
        self.reserved = config.reserved_tokens if config.speculative else 0
        self.endpoints: dict[str, Endpoint] = {}
        self.replace_endpoints(endpoints)
        self.bypass = BypassState()
        self.canary_mismatch = False  # set by router.loops.canary under canary.on_mismatch: eject
        self.canary_revoked: frozenset[str] = frozenset()  # kinds the canary found broken
        speed = config.speed
        gamma, c = (config.gamma, config.drafter_cost_ratio) if config.speculative else (0, 0.0)
        self.speed = None if speed is None else SpeedModel(
            decode_s_per_token=speed.decode_s_per_token, batch_knee=speed.batch_knee,
            attention_s_per_token=speed.attention_s_per_token, prefill_s_per_token=speed.prefill_s_per_token,
            kv_read_s_per_token=speed.kv_read_s_per_token,
            prefill_stall_s_per_token=(speed.prefill_s_per_token if speed.prefill_stall_s_per_token is None
                                       else speed.prefill_stall_s_per_token),
            max_running_requests=speed.max_running_requests, gamma=gamma, c=c)
        #: the live speed model (routing.learning), set by the Runtime; None: not learning
        self.fit: SpeedFit | None = None
        #: which finished requests the fit takes (routing.learning.max_observations_per_s)
        self.budget: ObservationBudget | None = None
        #: the calibrated tau per temperature class (the speed block's; None: not set), the
        #: last resort of :func:`router.state.snapshots.accept_lengths`
        self.prior_accept_lengths: dict[str, float | None] = {
            "greedy": None if speed is None else speed.accept_length_greedy,
            "sampled": None if speed is None else speed.accept_length_sampled}
        #: what the fit starts from: the speed block, else the default prior
        self.prior = self.speed or replace(DEFAULT_PRIOR, gamma=gamma, c=c)
        #: every prediction for this pool checked against what happened, and the fallback
        #: state (routing.learning.check), set by the Runtime; None: not learning
        self.check: PredictionCheck | None = None

    @property
    def prediction_fallback(self) -> bool:
        """The pool's predictions are off: decisions among its candidates join the shorter queue."""
        return self.check is not None and self.check.fallback

    @property
    def saturated(self) -> bool:
        """The saturation bypass is on."""
        return self.bypass.flags["saturated"]

    @property
    def low_acceptance(self) -> bool:
        """The acceptance bypass is on for some temperature class."""
        return bool(self.bypass.low_classes())

    @property
    def capabilities(self) -> frozenset[str] | None:
        """The kinds the pool serves now: its config's less those the canary revoked
        (:mod:`router.request.capabilities`; None: every kind)."""
        served = self.config.served_capabilities
        return None if served is None else served - self.canary_revoked

    @property
    def speculative(self) -> bool:
        """The pool runs a drafter (``config.speculative``)."""
        return self.config.speculative

    def replace_endpoints(self, endpoints: Iterable[Endpoint]) -> None:
        """Swap in a new endpoint map (never mutated in place: snapshots stay consistent)."""
        self.endpoints = {e.url: e for e in endpoints}
        siblings = list(self.endpoints.values())
        for e in siblings:
            e._siblings = siblings

    def load(self, now: float, stale_after_s: float, floor: int = 0) -> int:
        """The load a new request would meet: that of the least-loaded healthy endpoint
        (an endpoint holding back-pressure counts at least ``floor``, :meth:`Endpoint.backpressure_load`).

        With one endpoint this is ``max(running + queued, in-flight)`` of the engine; with
        several, saturation is judged per engine batch (speculation turns compute-bound per
        engine, not per pool). With no healthy endpoint, the sum over endpoints.
        """
        loads = [e.backpressure_load(now, stale_after_s, floor) for e in self.endpoints.values() if e.healthy]
        if not loads:
            return sum(e.backpressure_load(now, stale_after_s, floor) for e in self.endpoints.values())
        return min(loads)

    def inflight(self) -> int:
        """Router in-flight requests over all endpoints."""
        return sum(e.inflight for e in self.endpoints.values())

    def shared_inflight(self, now: float, stale_after_s: float) -> int:
        """In-flight requests of all replicas over all endpoints (the local count when not shared)."""
        return sum(e.inflight_view(now, stale_after_s) for e in self.endpoints.values())

    def accept_length(self, now: float, stale_after_s: float) -> float | None:
        """Mean fresh positive scraped gauge over healthy endpoints, or None (the raw figure)."""
        vals = [a for e in self.endpoints.values() if e.healthy
                for a in [e.accept_length(now, stale_after_s)] if a]
        return sum(vals) / len(vals) if vals else None

    def estimated_accept_length(self, temperature: str, now: float, max_age_s: float) -> float | None:
        """Mean live estimate of tau for a temperature class over healthy endpoints, or None."""
        vals = [a for e in self.endpoints.values() if e.healthy
                for a in [e.acceptance.accept_length(temperature, now, max_age_s)] if a]
        return sum(vals) / len(vals) if vals else None

    def scrape_age_s(self, now: float) -> float | None:
        """Seconds since the newest successful scrape of any endpoint (None: never)."""
        ages = [now - e.scraped_at for e in self.endpoints.values() if e.scraped_at is not None]
        return min(ages) if ages else None

    def signal_age_s(self, temperature: str, now: float) -> float | None:
        """Seconds since a healthy endpoint last measured this class's acceptance (None: never)."""
        ages = [a for e in self.endpoints.values() if e.healthy
                for a in [e.acceptance.age_s(temperature, now)] if a is not None]
        return min(ages) if ages else None
