"""Sampling controls: values checked as OpenAI and SGLang state them, and the caveat header of
a response whose sampling guarantee differs on the speculative pool that served it.

**Validation** (:func:`validate_sampling`, :func:`check_min_tokens`): HTTP 400
``invalid_request_error`` with ``param`` naming the field and no engine call, instead of the
engine's own 400 (whose ``param`` and ``code`` are null). ``null`` is the field's default.

``logit_bias``
    an object whose keys are token ids written as decimal strings (``"50256"``) and whose
    values are numbers in [-100, 100] (the OpenAI API reference: "values from -100 to 100").
    The engine checks the ids against its vocabulary (SGLang ``SamplingParams.verify``).
``min_p``
    a number in [0, 1] (SGLang ``SamplingParams.verify``).
``min_tokens``
    an integer >= 0 and, once the output budget is known, not above it (SGLang refuses
    ``min_new_tokens > max_new_tokens``); code ``min_tokens_exceeds_budget`` for the latter.
``seed``
    an integer within a signed 64-bit range.

**Speculative caveats** (:func:`speculative_caveats`): fields whose promise the speculative
path keeps differently from plain decoding and which the capability table does not route off
the speculative pool: ``seed`` (a seeded request's reproducibility depends on the verify
step's batch, vllm-project/vllm#9441, #6038) and ``logit_bias`` (not applied to every draft
position under EAGLE, sgl-project/sglang#10617). A response served by a speculative pool to
such a request carries ``x-specgate-degraded: sampling`` and ``x-specgate-sampling-fields:
<the fields>`` (e.g. when the plain pool was down), so a client never gets the weaker
guarantee silently. Pure: no I/O, no configuration reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.errors import InvalidRequest

__all__ = ["CAVEAT_FIELDS", "DEGRADED_HEADER", "FIELDS_HEADER", "VALIDATED_FIELDS", "check_min_tokens",
           "speculative_caveats", "validate_sampling"]

#: Fields whose guarantee differs on a speculative pool (see the module docstring), in the
#: order the caveat header lists them.
CAVEAT_FIELDS = ("seed", "logit_bias")
#: Response headers of a request served on a speculative pool with a caveat field.
DEGRADED_HEADER = "x-specgate-degraded"
FIELDS_HEADER = "x-specgate-sampling-fields"

_LOGIT_BIAS_LIMIT = 100.0
_SEED_MIN, _SEED_MAX = -(2**63), 2**63 - 1


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return type(value) is int


def _check_logit_bias(bias: Any) -> None:
    param = "logit_bias"
    if not isinstance(bias, dict):
        raise InvalidRequest("`logit_bias` must be an object mapping token ids to biases", param=param,
                             code="invalid_logit_bias")
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()):
            raise InvalidRequest(f"`logit_bias` keys must be token ids (decimal strings), got `{key[:40]}`",
                                 param=param, code="invalid_logit_bias")
        if not _number(value) or not -_LOGIT_BIAS_LIMIT <= value <= _LOGIT_BIAS_LIMIT:
            raise InvalidRequest(f"`logit_bias[{key}]` must be a number in [-100, 100]", param=param,
                                 code="invalid_logit_bias")


#: Every top-level field :func:`validate_sampling` reads.
VALIDATED_FIELDS = frozenset({"logit_bias", "min_p", "min_tokens", "seed"})


def validate_sampling(doc: Mapping[str, Any]) -> None:
    """Refuse malformed ``logit_bias``, ``min_p``, ``min_tokens`` and ``seed`` (module docstring).

    Raises:
        InvalidRequest: on the first malformed field (``param`` names it).
    """
    if VALIDATED_FIELDS.isdisjoint(doc):  # none of them (most bodies): one pass over the keys
        return
    bias = doc.get("logit_bias")
    if bias is not None:
        _check_logit_bias(bias)
    min_p = doc.get("min_p")
    if min_p is not None and (not _number(min_p) or not 0.0 <= min_p <= 1.0):
        raise InvalidRequest("`min_p` must be a number in [0, 1]", param="min_p")
    min_tokens = doc.get("min_tokens")
    if min_tokens is not None and (not _integer(min_tokens) or min_tokens < 0):
        raise InvalidRequest("`min_tokens` must be an integer >= 0", param="min_tokens")
    seed = doc.get("seed")
    if seed is not None and (not _integer(seed) or not _SEED_MIN <= seed <= _SEED_MAX):
        raise InvalidRequest("`seed` must be a 64-bit integer", param="seed")


def check_min_tokens(doc: Mapping[str, Any], budget: int) -> None:
    """Refuse ``min_tokens`` above the output budget the engine will be given (tokens).

    Raises:
        InvalidRequest: ``param: "min_tokens"``, ``code: "min_tokens_exceeds_budget"``.
    """
    min_tokens = doc.get("min_tokens")
    if type(min_tokens) is int and min_tokens > budget:
        raise InvalidRequest(f"`min_tokens` ({min_tokens}) must not exceed the output budget ({budget} tokens, "
                             "`max_completion_tokens` or `max_tokens`)", param="min_tokens",
                             code="min_tokens_exceeds_budget")


def speculative_caveats(doc: Mapping[str, Any]) -> tuple[str, ...]:
    """The :data:`CAVEAT_FIELDS` a request sets (a non-null ``seed``, a non-empty ``logit_bias``)."""
    out = []
    if doc.get("seed") is not None:
        out.append("seed")
    if doc.get("logit_bias"):
        out.append("logit_bias")
    return tuple(out)
