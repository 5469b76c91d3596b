"""The speculative pool's checks: one small pure function per rule, run in one ordered tuple.

Each check reads the request's features, one speculative pool's snapshot and the rules, and
returns None (the rule lets the request through) or a :class:`Rejection`: the reason and how
strong it is (:class:`Strength`). :func:`router.decision.policy.decide` runs every check of
:data:`SPECULATIVE_CHECKS` on each speculative pool; the first rejection names the reason,
and the strongest says what becomes of the pool:

``hard``
    the pool never takes the request (the canary ejected it, it lacks a capability the
    request needs, it cannot hold ``P + n * M + K``, it has no healthy endpoint);
``bypass``
    the request should go elsewhere, but the pool stays the fallback when nothing else can
    take it (the client's ``off`` hint, saturation);
``soft``
    a bypass that the client's ``on`` hint overrides (the long-prompt threshold, low
    acceptance).

A rejection marked ``predicted`` is a proxy for speed (long prompts, saturation, low
acceptance): when the pools carry speed models, the prediction weighs the same facts itself,
so the decision drops such a rejection and compares predicted completion times instead.

Adding a rule is one function here, its place in :data:`SPECULATIVE_CHECKS`, its reason in
:mod:`router.reasons`, and its test (``tests/unit/test_checks.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from router.reasons import Reason
from router.request.capabilities import unmet

if TYPE_CHECKING:
    from router.decision.snapshot import PoolSnapshot, Rules
    from router.request.features import RequestFeatures

__all__ = [
    "SPECULATIVE_CHECKS",
    "Check",
    "Rejection",
    "Strength",
    "acceptance",
    "canary",
    "capability",
    "fit",
    "health",
    "long_prompt",
    "lora_adapter",
    "opt_out",
    "sampling_guarantee",
    "saturation",
]


class Strength(IntEnum):
    """How strongly a rejection keeps a request off a pool (ordered: higher is stronger)."""

    SOFT = 0    # a bypass the client's ``on`` hint overrides
    BYPASS = 1  # the pool stays the fallback when nothing else can take the request
    HARD = 2    # the pool never takes the request


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a check keeps a request off a speculative pool.

    Attributes:
        reason: the decision reason (:class:`router.reasons.Reason`).
        strength: what becomes of the pool (:class:`Strength`).
        predicted: a proxy for speed that a speed-model prediction replaces.
    """

    reason: Reason
    strength: Strength
    predicted: bool = False


Check = Callable[["RequestFeatures", "PoolSnapshot", "Rules"], "Rejection | None"]

_CANARY = Rejection(Reason.CANARY_MISMATCH, Strength.HARD)
_TOO_LONG = Rejection(Reason.LONG_CONTEXT, Strength.HARD)
_LONG = Rejection(Reason.LONG_CONTEXT, Strength.SOFT, predicted=True)
_UNHEALTHY = Rejection(Reason.SPEC_UNHEALTHY, Strength.HARD)
_OPT_OUT = Rejection(Reason.CLIENT_OPT_OUT, Strength.BYPASS)
_SATURATED = Rejection(Reason.SATURATED, Strength.BYPASS, predicted=True)
_LOW = Rejection(Reason.LOW_ACCEPTANCE, Strength.SOFT, predicted=True)
_LORA = Rejection(Reason.LORA_ADAPTER, Strength.HARD)
_CAPABILITY = {kind: Rejection(Reason(kind), Strength.HARD) for kind in Reason if kind.capability}
_EXACT = Rejection(Reason.SAMPLING_GUARANTEE, Strength.SOFT)


def canary(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """The lossless canary ejected the pool (:mod:`router.loops.canary`): ``canary_mismatch``, hard."""
    return _CANARY if pool.canary_mismatch else None


def capability(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """The request needs a kind the pool does not serve (:func:`router.request.capabilities.unmet`):
    that kind, hard."""
    if not features.needs:
        return None
    kind = unmet(features.needs, pool.capabilities)
    return None if kind is None else _CAPABILITY[Reason(kind)]


def lora_adapter(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """The request asks for a LoRA adapter (``<model>:<adapter>``, ``lora_path``) that no
    endpoint of the pool has (:mod:`router.state.identity`): ``lora_adapter``, hard (the engine would
    answer 400; and the drafter runs without the adapter, sgl-project/sglang#28395)."""
    return _LORA if features.adapters and not features.adapters <= pool.adapters else None


def sampling_guarantee(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """The request sets ``seed`` or ``logit_bias``, whose promise a speculative pool keeps
    differently (:func:`router.request.capabilities.preferred_features`): ``sampling_guarantee``,
    soft and not predicted (a prediction of speed cannot weigh a guarantee), so the pool
    stays the fallback and the client's ``on`` hint keeps the request on it."""
    return _EXACT if features.prefers else None


def fit(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """``P + n * M + K > limit``: the pool cannot hold the request (every sample drafts, so
    ``n`` weighs the budget; sgl-project/sglang#3574 for the drafter's positional limit):
    ``long_context``, hard."""
    return _TOO_LONG if features.weight + pool.reserved > pool.limit else None


def long_prompt(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """``P > routing.long_prompt_tokens``: ``long_context``, soft and predicted (acceptance
    falls and the drafter's KV share grows with context)."""
    return _LONG if features.prompt_tokens > rules.long_prompt_tokens else None


def health(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """No healthy endpoint (endpoints that failed this request count as unhealthy):
    ``spec_unhealthy``, hard."""
    return None if any(e.healthy for e in pool.endpoints) else _UNHEALTHY


def opt_out(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """The client's ``off`` hint: ``client_opt_out``, a bypass (a fallback all the same)."""
    return _OPT_OUT if features.speculation == "off" else None


def saturation(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """The saturation bypass is on (hysteresis, :func:`router.decision.policy.next_saturated`):
    ``saturated``, a bypass, predicted."""
    return _SATURATED if pool.saturated else None


def acceptance(features: RequestFeatures, pool: PoolSnapshot, rules: Rules) -> Rejection | None:
    """The acceptance bypass is on for the request's temperature class
    (:func:`router.decision.policy.next_low_acceptance`): ``low_acceptance``, soft, predicted."""
    return _LOW if features.temperature_class in pool.low_acceptance else None


#: The checks in the order their reasons take precedence.
SPECULATIVE_CHECKS: tuple[Check, ...] = (
    canary, capability, lora_adapter, fit, long_prompt, health, opt_out, saturation, acceptance,
    sampling_guarantee)
