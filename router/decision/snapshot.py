"""The decision's inputs that are not the request: the rules and the pools as the policy sees
them (:func:`router.decision.policy.decide`).

:class:`Rules` holds the thresholds (from ``limits`` and ``routing``, overrides merged);
:class:`PoolSnapshot` and :class:`EndpointSnapshot` are one pool and one endpoint at one
instant, frozen, built by :func:`router.state.snapshots.pool_snapshot` from the scraped engine
signals, the router's in-flight accounting and the learned models; :class:`PoolShape` is the
static part the length rules read. A module of its own so that the policy's helpers
(:mod:`router.decision.checks`, :mod:`router.decision.predicted`, :mod:`router.decision.affinity`)
read these types without importing the policy that imports them. The policy re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from router.decision.learn import context_bucket

if TYPE_CHECKING:
    from router.decision.predict import SpeedModel

__all__ = ["EndpointSnapshot", "PoolShape", "PoolSnapshot", "Rules"]


@dataclass(frozen=True, slots=True)
class Rules:
    """The thresholds the decision applies (from ``limits`` and ``routing``, overrides merged).

    Attributes:
        max_context_tokens: S, the validated safe context (tokens).
        default_max_tokens: D, the budget given when the client sets none (tokens); None: the
            engine's default, counted as its worst case ``S - P``.
        long_prompt_tokens: prompts above this skip speculation (tokens).
        seed: ``routing.seed``, offset of the endpoint tie-break.
        explore_every: every this many decisions by prediction (``tie_break`` modulo it; a
            request with an anchor: its conversation, by the anchor's hash), the runner-up pool
            takes the request when predicted at most ``explore_ratio`` times slower (reason
            ``explore``); 0: never (``routing.learning``).
        explore_ratio: the runner-up's largest accepted slowdown.
        marginal_cost: a decision by prediction ranks the candidates by the request's predicted
            completion plus what it costs the requests already on the endpoint
            (:func:`router.decision.predict.externality_s`) instead of its completion alone
            (``routing.learning.marginal_cost``).
    """

    max_context_tokens: int
    default_max_tokens: int | None
    long_prompt_tokens: int
    seed: int = 0
    explore_every: int = 0
    explore_ratio: float = 1.5
    marginal_cost: bool = False


class PoolShape(Protocol):
    """The static part of a pool that the length rules read (tokens)."""

    @property
    def speculative(self) -> bool: ...

    @property
    def limit(self) -> int: ...

    @property
    def reserved(self) -> int: ...


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """One endpoint as the policy sees it.

    Attributes:
        url: base URL.
        healthy: passes health checks (and not excluded by a failed attempt).
        load: ``max(scraped num_running_reqs + num_queue_reqs, router in-flight)``
            (requests); the in-flight count alone when the scrape is stale.
        cached_tokens: estimated prompt tokens of this request already cached there
            (tokens, :meth:`router.decision.prefix.PrefixIndex.match`; 0 without prefix routing).
        queued: requests waiting in the engine (``sglang:num_queue_reqs``, fresh scrape; else 0).
        kv_free_tokens: free KV tokens of the engine (``sglang:max_total_num_tokens`` less
            the used ones, fresh scrape), None when unknown.
        kv_used_tokens: used KV tokens of the engine (0 when unknown).
        inflight: the router's requests there not finished yet (all replicas' when they share
            state; requests), exact at the decision: what the shorter queue reads
            (:func:`router.decision.predicted.shortest_queue`).
        prefill_backlog_tokens: prompt tokens this router sent there and the engine has not
            prefilled yet (tokens, a fluid estimate; the ``B`` of :mod:`router.decision.predict`).
    """

    url: str
    healthy: bool
    load: int
    cached_tokens: int = 0
    queued: int = 0
    kv_free_tokens: int | None = None
    kv_used_tokens: int = 0
    inflight: int = 0
    prefill_backlog_tokens: int = 0


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    """One pool as the policy sees it.

    Attributes:
        name: pool name.
        speculative: runs a drafter.
        limit: the pool's context limit (tokens).
        reserved: reserved draft tokens K (tokens; 0 for plain pools).
        endpoints: endpoint snapshots.
        saturated: the saturation bypass is on (hysteresis state).
        low_acceptance: the temperature classes whose acceptance bypass is on.
        speed: the pool's speed model (None: no prediction for this pool).
        accept_length_greedy: tau for greedy requests (the live estimate, else the fit's, else
            the calibrated prior, else None: :func:`router.state.snapshots.accept_lengths`), tokens
            per verify step.
        accept_length_sampled: the same for sampled requests.
        capabilities: the kinds of :data:`router.request.capabilities.KINDS` the pool serves; None
            serves every kind (a plain pool).
        canary_mismatch: the lossless canary took the pool out of rotation.
        accept_table: measured tau per ``(temperature class, context bucket)``
            (:meth:`router.decision.learn.SpeedFit.accept_table`, :func:`router.decision.learn.context_bucket`);
            a request's cell wins over the class's tau.
        adapters: the LoRA adapters some endpoint of the pool has; a request asking for
            another one never goes to the pool (:func:`router.decision.checks.lora_adapter`).
        prediction_fallback: the pool's predictions are off (:func:`next_prediction_fallback`):
            a decision among candidates that include it joins the shorter queue.
        measured: the ``(temperature class, context bucket)`` cells whose predictions for the
            pool have been checked enough (:meth:`router.decision.prediction_check.PredictionCheck.measured_cells`);
            None: not tracked (every cell counts as measured).
        correction: ``((temperature class, context bucket), factor)`` per measured cell whose
            predictions for the pool run consistently off: the pool's predictions of a request
            in that cell are multiplied by the factor
            (:meth:`router.decision.prediction_check.PredictionCheck.corrections`); empty: none.
        measured_factor: the same with each measured cell's whole bias taken off (no band),
            carried while the pool's predictions are distrusted (``prediction_fallback``; else
            empty): what the shorter queue's tie-break reads
            (:func:`router.decision.predicted.shortest_queue`).
    """

    name: str
    speculative: bool
    limit: int
    reserved: int
    endpoints: tuple[EndpointSnapshot, ...]
    saturated: bool = False
    low_acceptance: frozenset[str] = frozenset()
    speed: SpeedModel | None = None
    accept_length_greedy: float | None = None
    accept_length_sampled: float | None = None
    capabilities: frozenset[str] | None = None
    canary_mismatch: bool = False
    accept_table: Mapping[tuple[str, int], float] | None = None
    adapters: frozenset[str] = frozenset()
    prediction_fallback: bool = False
    measured: frozenset[tuple[str, int]] | None = None
    correction: tuple[tuple[tuple[str, int], float], ...] = ()
    measured_factor: tuple[tuple[tuple[str, int], float], ...] = ()

    def accept_length(self, temperature: str, prompt_tokens: int | None = None) -> float | None:
        """tau for a request of this temperature class (and prompt length: its measured cell)."""
        if self.accept_table and prompt_tokens is not None:
            tau = self.accept_table.get((temperature, context_bucket(prompt_tokens)))
            if tau is not None:
                return tau
        return self.accept_length_greedy if temperature == "greedy" else self.accept_length_sampled
