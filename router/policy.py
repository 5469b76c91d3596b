"""The routing decision: a pure function of (request features, pool snapshots, thresholds).

No I/O, no clock, no metrics, no mutation: the same inputs always give the same
:class:`Decision`, so the whole policy is table-tested (``tests/unit/test_policy.py``).

Algorithm, evaluated in this order (DOMAIN.md section 4; article 001's production advice;
article 003's "route by length"):

1. **Context cap.** ``P + max_new_tokens > S`` (``limits.max_context_tokens``, the validated
   safe context) -> HTTP 400, reason ``context_cap``. (Also when the request fits no pool's
   own limit at all.) The router refuses before any engine sees it: an engine pushed past
   its validated context can crash (a ~300k-token prompt killed one advertising 1M).
2. **Speculative eligibility**, per speculative pool in config order:
   ``P + n * max_new_tokens + K <= pool limit`` (K: reserved draft tokens, SGLang's
   ``max(topk * num_steps, num_draft_tokens)``; the ``n`` weighting keeps large-``n``
   requests off the drafter pool, HANDED C20) and ``P <= routing.long_prompt_tokens``;
   otherwise ``long_context``. Then: no healthy endpoint -> ``spec_unhealthy``; saturation
   bypass on -> ``saturated``; acceptance bypass on -> ``low_acceptance``; else the pool is
   chosen with reason ``speculative``.
3. **Plain pools** in config order: the first with a healthy endpoint whose limit holds
   ``P + max_new_tokens`` (each of the ``n`` sequences is checked alone by the engine).
   The reason is the first speculative pool's rejection reason, or ``plain_only`` when the
   config has no speculative pool.
4. **Fallback**: no plain pool can take it, but a speculative pool fits and is healthy
   (only bypassed) -> that pool, reason ``plain_unhealthy``.
5. Otherwise HTTP 503, reason ``no_healthy_upstream``.

Inside a pool: the healthy endpoint with the least load (``max(scraped running + queued,
router in-flight)``); ties broken by ``(seed + tie_break) mod ties`` over endpoints sorted by
URL, so a seeded sequence of requests spreads round-robin over equally loaded endpoints.

Hysteresis helpers (:func:`next_saturated`, :func:`next_low_acceptance`) are pure too: the
runtime feeds them the previous state and the latest load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from router.features import RequestFeatures

__all__ = [
    "Decision",
    "EndpointSnapshot",
    "PoolSnapshot",
    "Reason",
    "decide",
    "expected_speedup",
    "next_low_acceptance",
    "next_saturated",
]


class Reason(StrEnum):
    """Machine-readable decision reasons (response header, metric label, log field)."""

    SPECULATIVE = "speculative"
    LONG_CONTEXT = "long_context"
    SATURATED = "saturated"
    LOW_ACCEPTANCE = "low_acceptance"
    SPEC_UNHEALTHY = "spec_unhealthy"
    PLAIN_ONLY = "plain_only"
    PLAIN_UNHEALTHY = "plain_unhealthy"
    CONTEXT_CAP = "context_cap"
    NO_HEALTHY_UPSTREAM = "no_healthy_upstream"


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """One endpoint as the policy sees it.

    Attributes:
        url: base URL.
        healthy: passes health checks (and not excluded by a failed attempt).
        load: ``max(scraped num_running_reqs + num_queue_reqs, router in-flight)``
            (requests); the in-flight count alone when the scrape is stale.
    """

    url: str
    healthy: bool
    load: int


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
        low_acceptance: the acceptance bypass is on (hysteresis state).
    """

    name: str
    speculative: bool
    limit: int
    reserved: int
    endpoints: tuple[EndpointSnapshot, ...]
    saturated: bool = False
    low_acceptance: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes, and why.

    Attributes:
        pool: the chosen pool's name, or None when refused.
        endpoint: the chosen endpoint's URL, or None when refused.
        reason: why (:class:`Reason`).
        status: 200 when routed, 400 for ``context_cap``, 503 for ``no_healthy_upstream``.
    """

    pool: str | None
    endpoint: str | None
    reason: Reason
    status: int = 200


def _pick(endpoints: Sequence[EndpointSnapshot], exclude: frozenset[str], tie: int) -> str | None:
    healthy = [e for e in endpoints if e.healthy and e.url not in exclude]
    if not healthy:
        return None
    low = min(e.load for e in healthy)
    ties = sorted(e.url for e in healthy if e.load == low)
    return ties[tie % len(ties)]


def decide(features: RequestFeatures, pools: Sequence[PoolSnapshot], *, max_context_tokens: int,
           long_prompt_tokens: int, exclude: frozenset[str] = frozenset(), seed: int = 0,
           tie_break: int = 0) -> Decision:
    """Choose the pool and endpoint for one request (see the module docstring).

    Args:
        features: the request's prompt tokens, budget and ``n``.
        pools: snapshots of every pool, in config order.
        max_context_tokens: S, the validated safe context (tokens).
        long_prompt_tokens: prompts above this (tokens) skip speculation.
        exclude: endpoint URLs not to use (those that already failed this request).
        seed: ``routing.seed``.
        tie_break: a per-request integer (e.g. a request counter).

    Returns:
        The :class:`Decision`; never raises.
    """
    seq = features.sequence_tokens
    if seq > max_context_tokens or not any(seq <= p.limit for p in pools):
        return Decision(None, None, Reason.CONTEXT_CAP, 400)
    tie = seed + tie_break
    spec_reason: Reason | None = None
    fallback: tuple[str, str] | None = None
    for pool in pools:
        if not pool.speculative:
            continue
        if features.weight + pool.reserved > pool.limit or features.prompt_tokens > long_prompt_tokens:
            reason = Reason.LONG_CONTEXT
        else:
            endpoint = _pick(pool.endpoints, exclude, tie)
            if endpoint is None:
                reason = Reason.SPEC_UNHEALTHY
            elif pool.saturated or pool.low_acceptance:
                reason = Reason.SATURATED if pool.saturated else Reason.LOW_ACCEPTANCE
                fallback = fallback or (pool.name, endpoint)
            else:
                return Decision(pool.name, endpoint, Reason.SPECULATIVE)
        spec_reason = spec_reason or reason
    for pool in pools:
        if pool.speculative or seq > pool.limit:
            continue
        endpoint = _pick(pool.endpoints, exclude, tie)
        if endpoint is not None:
            return Decision(pool.name, endpoint, spec_reason or Reason.PLAIN_ONLY)
    if fallback is not None:
        return Decision(fallback[0], fallback[1], Reason.PLAIN_UNHEALTHY)
    return Decision(None, None, Reason.NO_HEALTHY_UPSTREAM, 503)


def next_saturated(previous: bool, load: int, *, enter: int, exit: int) -> bool:
    """Saturation hysteresis: on at ``load >= enter``, off at ``load < exit``, else unchanged.

    Args:
        previous: the current bypass state.
        load: the pool's load (requests running + queued, or in flight).
        enter: ``routing.saturation.enter``; exit: ``routing.saturation.exit`` (< enter).
    """
    if load >= enter:
        return True
    if load < exit:
        return False
    return previous


def expected_speedup(accept_length: float, *, gamma: int, c: float) -> float:
    """Expected speedup S = tau / (c * gamma + 1) from a measured mean accept length tau.

    tau is SGLang's ``spec_accept_length`` (tokens emitted per verify step, bonus included);
    gamma the draft length (tokens); c the drafter's relative cost (Leviathan et al. 2023,
    arXiv:2211.17192, section 3.2).
    """
    return accept_length / (c * gamma + 1.0)


def next_low_acceptance(previous: bool, accept_length: float | None, *, gamma: int, c: float,
                        enter_below: float, exit_above: float) -> bool:
    """Acceptance hysteresis on the expected speedup.

    A missing, stale or zero accept length is *unknown* (the SGLang gauge refreshes every 40
    decode steps, and a bypassed pool decodes nothing): unknown turns the bypass off so the
    pool is measured again, never on.
    """
    if accept_length is None or accept_length <= 0:
        return False
    speedup = expected_speedup(accept_length, gamma=gamma, c=c)
    if speedup < enter_below:
        return True
    if speedup >= exit_above:
        return False
    return previous
