"""The one table of decision reasons: every name the router gives a routing outcome.

Each :class:`Reason` member carries its one-line meaning and whether it is a *capability
kind*: a kind of request that a speculative pool serves only when its ``capabilities`` list it
(:mod:`router.request.capabilities` says what in a request needs each kind). Everything else that
names a reason derives from this table: the capability kinds (:data:`CAPABILITY_KINDS`,
``router.request.capabilities.KINDS``), the config check of ``pools[].capabilities``, the
``x-specgate-reason`` header, the access log, the ``reason`` label of
``specgate_requests_total``; a test pins the Helm schema's enum and the reason tables of
``README.md`` and ``docs/operator-guide.md`` to it. Adding a kind is one member here, its
trigger function in :mod:`router.request.capabilities` (a kind without one fails that module's
import), and the two copies that test pins: the schema's enum and the operator guide's row.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

__all__ = ["CAPABILITY_KINDS", "Reason", "capability_kind"]


class Reason(StrEnum):
    """Machine-readable decision reasons (response header, metric label, log field).

    Attributes:
        summary: what the reason means, one line.
        capability: the reason is a capability kind (a ``pools[].capabilities`` entry).
    """

    summary: str
    capability: bool

    def __new__(cls, value: str, summary: str = "", capability: bool = False) -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.summary = summary
        member.capability = capability
        return member

    SPECULATIVE = ("speculative", "the speculative pool serves it")
    LONG_CONTEXT = ("long_context", "too long for the speculative pool (its limit, routing.long_prompt_tokens)")
    SATURATED = ("saturated", "the speculative pool's load reached routing.saturation.enter")
    LOW_ACCEPTANCE = ("low_acceptance", "expected speedup below routing.acceptance.min_expected_speedup")
    SPEC_UNHEALTHY = ("spec_unhealthy", "no healthy speculative endpoint")
    PLAIN_FASTER = ("plain_faster", "the plain pool is predicted to finish the request first")
    PLAIN_BUSIER = ("plain_busier", "a bypass would have moved it to a more loaded pool: kept on speculation")
    EXPLORE = ("explore", "the runner-up pool takes it so that its speed stays measured")
    SHORTEST_QUEUE = ("shortest_queue",
                      "a pool's predictions are off (routing.learning.check): the shorter queue takes it")
    PLAIN_ONLY = ("plain_only", "no speculative pool is configured")
    PLAIN_UNHEALTHY = ("plain_unhealthy", "no plain pool can take it; a bypassed speculative pool does")
    CONTEXT_CAP = ("context_cap", "prompt + output budget above limits.max_context_tokens: HTTP 400")
    NO_HEALTHY_UPSTREAM = ("no_healthy_upstream", "nothing healthy can take it: HTTP 503")
    CONSTRAINED_DECODING = ("constrained_decoding", "grammar-constrained output (response_format, regex, ...)", True)
    TOOL_CALLS = ("tool_calls", "tools the model may call", True)
    REASONING = ("reasoning", "thinking turned on", True)
    LOGPROBS = ("logprobs", "log probabilities asked for", True)
    SAMPLING_CONTROLS = ("sampling_controls", "penalties, min_p, min_tokens, a custom logit processor", True)
    CLIENT_OPT_OUT = ("client_opt_out", "the client asked for no speculation")
    CANARY_MISMATCH = ("canary_mismatch", "the lossless canary took the speculative pool out of service")
    PREFIX_AFFINITY = ("prefix_affinity", "the conversation stays on the endpoint that caches its prefix")
    LORA_ADAPTER = ("lora_adapter", "the request's LoRA adapter is not on the speculative pool's engines")
    SAMPLING_GUARANTEE = ("sampling_guarantee",
                          "seed or logit_bias: a pool that honours them exactly is preferred (speculative: fallback)")


#: The capability kinds, in the order a pool's first missing kind is reported.
CAPABILITY_KINDS: tuple[Reason, ...] = tuple(r for r in Reason if r.capability)


def capability_kind(name: str) -> Reason:
    """The capability kind named ``name``.

    Raises:
        ValueError: ``name`` is not a capability kind (the message lists the valid ones).
    """
    try:
        reason = Reason(name)
    except ValueError:
        reason = None
    if reason is None or not reason.capability:
        raise ValueError(f"`capabilities`: unknown kind {name!r}; valid: {', '.join(CAPABILITY_KINDS)}")
    return reason
