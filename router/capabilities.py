"""What a request needs from the engine that serves it, and which pools may serve it.

Speculative decoding promises the target model's output, token for token, but the pinned
engine (SGLang 0.5.23) reaches that promise only for plain sampling. Some request fields make
the speculative path do something else, or crash the engine. :func:`required_features` names
them in five *kinds* (a pool's ``capabilities`` in the YAML lists the kinds it serves; the
decision reason of a request kept off a speculative pool is the kind's name):

``constrained_decoding``
    ``response_format`` of type ``json_object``, ``json_schema`` or ``structural_tag``;
    SGLang's ``regex``, ``ebnf``, ``structural_tag`` and the ``json_schema`` extension
    (a non-empty string); ``tool_choice`` ``"required"`` or a named function (SGLang turns
    both into a grammar); any tool with ``"strict": true``. With EAGLE the grammar is applied
    over the draft tree (``speculative/spec_utils.py: generate_token_bitmask``), which crashed
    or truncated engines: sgl-project/sglang#24283, #15050, #14480, #9187, #21723.
``tool_calls``
    non-empty ``tools`` with ``tool_choice`` other than ``"none"`` (SGLang's default with tools
    is ``"auto"``). Tool-call parsers see multi-token steps under speculation; malformed calls
    were reported with MTP/n-gram speculation (vllm-project/vllm#35800, #56077, #41493).
``reasoning``
    thinking turned on: ``chat_template_kwargs.enable_thinking`` or ``.thinking`` true,
    ``reasoning_effort`` other than ``"none"``, ``reasoning.enabled``/``reasoning.effort``
    (SGLang's ``normalize_reasoning_inputs`` turns these into the template kwargs), or an
    explicit ``separate_reasoning: true`` (a client asking for the reasoning to be split out
    expects reasoning output). Reasoning counters exceeded completion tokens by up to the
    draft length under speculation (sgl-project/sglang#39826, #37450).
``logprobs``
    chat ``logprobs: true`` or ``top_logprobs`` > 0; completions ``logprobs`` set. Under EAGLE
    the values come from the batched verify pass (``eagle_worker_common.py:
    compute_spec_logprobs``), not from one decode step, so they are not the plain pool's.
``sampling_controls``
    controls that EAGLE verification applies differently from plain decoding in SGLang 0.5.23
    (``speculative/eagle_utils.py: eagle_sample``): ``presence_penalty``/``frequency_penalty``
    non-zero, ``repetition_penalty`` other than 1 and ``min_tokens`` > 0 (penalties are
    accumulated once per verify step, "a relaxed version of penalties for speculative
    decoding"); ``min_p`` > 0 (the verify sampler renormalises top-k and top-p only);
    ``custom_logit_processor`` (not applied on the EAGLE verify path).
    Not a trigger: ``top_k``/``top_p``/``temperature`` (applied by the verify sampler). On CPU engines the verify step is always greedy (``_verify_uses_greedy``), so
    ``temperature > 0`` decodes greedily there: a demo caveat, not a routing rule.

:func:`unmet` compares what a request needs with what a pool serves: ``None`` capabilities
serve everything (a plain pool); a speculative pool serves only the kinds its config lists
(default: none of them). :func:`validate` refuses malformed constraint fields with HTTP 400
before any engine sees them (``param`` names the field), since the router must read them to
route. Everything here is pure: no I/O, no clock, no configuration reads.

**Preferences** (:func:`preferred_features`, reason ``sampling_guarantee``): a non-null
``seed`` or a non-empty ``logit_bias`` (:data:`router.sampling.CAVEAT_FIELDS`). The speculative
path keeps their promise differently (a seeded request's reproducibility depends on the verify
step's batch, vllm-project/vllm#9441, #6038; ``logit_bias`` is not applied to every draft
position under EAGLE, sgl-project/sglang#10617), so such a request prefers a pool that honours
them exactly, a plain pool: a speculative pool is *bypassed*, not excluded (a soft rejection,
router/checks.py). With no plain pool able to take it, the speculative pool serves it with
``x-specgate-degraded: sampling`` (router/sampling.py); the client's ``on`` hint keeps it on the
speculative pool likewise. A preference never refuses a request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.errors import InvalidRequest
from router.reasons import CAPABILITY_KINDS, Reason

__all__ = [
    "CLIENT_OPT_OUT",
    "CONSTRAINED_DECODING",
    "HINT_FIELD",
    "HINT_HEADER",
    "KINDS",
    "LOGPROBS",
    "REASONING",
    "SAMPLING_CONTROLS",
    "SAMPLING_GUARANTEE",
    "SPECULATION_MODES",
    "TOOL_CALLS",
    "preferred_features",
    "required_features",
    "speculation_gate",
    "speculation_hint",
    "trigger_param",
    "unmet",
    "validate",
]

CONSTRAINED_DECODING = Reason.CONSTRAINED_DECODING.value
TOOL_CALLS = Reason.TOOL_CALLS.value
REASONING = Reason.REASONING.value
LOGPROBS = Reason.LOGPROBS.value
SAMPLING_CONTROLS = Reason.SAMPLING_CONTROLS.value
SAMPLING_GUARANTEE = Reason.SAMPLING_GUARANTEE.value

#: Every kind, in the order :func:`unmet` reports the first one missing: the capability
#: kinds of the reason table (:data:`router.reasons.CAPABILITY_KINDS`).
KINDS: tuple[str, ...] = tuple(k.value for k in CAPABILITY_KINDS)

_RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema", "structural_tag")
_STRING_CONSTRAINTS = ("regex", "ebnf", "json_schema", "structural_tag")


def validate(doc: Mapping[str, Any]) -> None:
    """Refuse malformed constraint fields (the router reads them to route).

    Checks: ``response_format`` is an object whose ``type`` is one of ``text``,
    ``json_object``, ``json_schema``, ``structural_tag``; a ``json_schema`` format carries
    ``json_schema`` (an object with a string ``name`` and an object ``schema``) or, as SGLang
    also accepts, a top-level object ``schema``; ``regex``, ``ebnf``, ``json_schema`` and
    ``structural_tag`` are strings or null; ``tool_choice`` is ``"none"``, ``"auto"``,
    ``"required"`` or ``{"type": "function", "function": {"name": <str>}}``.

    Raises:
        InvalidRequest: on the first malformed field (``param`` names it).
    """
    fmt = doc.get("response_format")
    if fmt is not None:
        _validate_response_format(fmt)
    for key in _STRING_CONSTRAINTS:
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"`{key}` must be a string, got {type(value).__name__}", param=key)
    choice = doc.get("tool_choice")
    if choice is not None and choice not in ("none", "auto", "required") and not _named_choice(choice):
        raise InvalidRequest('`tool_choice` must be "none", "auto", "required" or '
                             '{"type": "function", "function": {"name": ...}}', param="tool_choice")


def _validate_response_format(fmt: Any) -> None:
    param = "response_format"
    if not isinstance(fmt, dict):
        raise InvalidRequest("`response_format` must be an object", param=param)
    kind = fmt.get("type")
    if kind not in _RESPONSE_FORMAT_TYPES:
        raise InvalidRequest(f"`response_format.type` must be one of {list(_RESPONSE_FORMAT_TYPES)}",
                             param=param)
    if kind != "json_schema":
        return
    spec = fmt.get("json_schema")
    if spec is None:
        if isinstance(fmt.get("schema"), dict):  # SGLang's shorthand (protocol.py: set_json_schema)
            return
        raise InvalidRequest("`response_format.json_schema` is required when type is json_schema",
                             param=param)
    if not isinstance(spec, dict):
        raise InvalidRequest("`response_format.json_schema` must be an object", param=param)
    if not isinstance(spec.get("name"), str):
        raise InvalidRequest("`response_format.json_schema.name` must be a string", param=param)
    if not isinstance(spec.get("schema"), dict):
        raise InvalidRequest("`response_format.json_schema.schema` must be an object", param=param)
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise InvalidRequest("`response_format.json_schema.strict` must be a boolean", param=param)


def _named_choice(choice: Any) -> bool:
    if not isinstance(choice, dict) or choice.get("type", "function") != "function":
        return False
    fn = choice.get("function")
    return isinstance(fn, dict) and isinstance(fn.get("name"), str)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _nonzero(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0


def _triggers(doc: Mapping[str, Any]) -> dict[str, str]:
    """``{kind: the first field that needs it}`` (see the module docstring)."""
    out: dict[str, str] = {}

    def need(kind: str, field: str) -> None:
        out.setdefault(kind, field)

    fmt = doc.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema", "structural_tag"):
        need(CONSTRAINED_DECODING, "response_format")
    for key in _STRING_CONSTRAINTS:
        if isinstance(doc.get(key), str) and doc[key]:  # SGLang ignores an empty constraint string
            need(CONSTRAINED_DECODING, key)
    tools = doc.get("tools")
    choice = doc.get("tool_choice")
    if isinstance(tools, list) and tools:
        if choice == "required" or _named_choice(choice):
            need(CONSTRAINED_DECODING, "tool_choice")
        if any(isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("strict") is True
               for t in tools):
            need(CONSTRAINED_DECODING, "tools")
        if choice != "none":
            need(TOOL_CALLS, "tools")
    kwargs = doc.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and (kwargs.get("enable_thinking") is True or kwargs.get("thinking") is True):
        need(REASONING, "chat_template_kwargs")
    effort = doc.get("reasoning_effort")
    if effort is not None and effort != "none":
        need(REASONING, "reasoning_effort")
    reasoning = doc.get("reasoning")
    if isinstance(reasoning, dict) and (reasoning.get("enabled") is True or reasoning.get("enable") is True
                                        or reasoning.get("effort") not in (None, "none")):
        need(REASONING, "reasoning")
    if doc.get("separate_reasoning") is True:
        need(REASONING, "separate_reasoning")
    logprobs = doc.get("logprobs")
    if logprobs is True or (type(logprobs) is int and logprobs >= 0):  # chat: bool; completions: int
        need(LOGPROBS, "logprobs")
    if _positive(doc.get("top_logprobs")):
        need(LOGPROBS, "top_logprobs")
    for key in ("presence_penalty", "frequency_penalty"):
        if _nonzero(doc.get(key)):
            need(SAMPLING_CONTROLS, key)
    rep = doc.get("repetition_penalty")
    if isinstance(rep, (int, float)) and not isinstance(rep, bool) and rep != 1:
        need(SAMPLING_CONTROLS, "repetition_penalty")
    for key in ("min_tokens", "min_p"):
        if _positive(doc.get(key)):
            need(SAMPLING_CONTROLS, key)
    if doc.get("custom_logit_processor") is not None:
        need(SAMPLING_CONTROLS, "custom_logit_processor")
    return out


#: Every field :func:`_triggers` reads whose presence can make a request need a kind
#: (``tool_choice`` needs ``tools`` too): a body with none of them needs none.
TRIGGER_FIELDS = frozenset({
    "response_format", *_STRING_CONSTRAINTS, "tools", "chat_template_kwargs", "reasoning_effort", "reasoning",
    "separate_reasoning", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "min_tokens", "min_p", "custom_logit_processor"})

_NO_KINDS: frozenset[str] = frozenset()


def required_features(doc: Mapping[str, Any]) -> frozenset[str]:
    """The kinds (:data:`KINDS`) a request document needs from the pool that serves it.

    ``doc`` is a chat or completions request body (already validated by :func:`validate`;
    fields of the wrong type are simply not triggers). Pure and cheap: a few dict lookups,
    none past one set test for a body without any of :data:`TRIGGER_FIELDS` (most bodies).
    """
    if TRIGGER_FIELDS.isdisjoint(doc):
        return _NO_KINDS
    return frozenset(_triggers(doc))


def preferred_features(doc: Mapping[str, Any]) -> frozenset[str]:
    """The preferences of a request document (module docstring): ``{"sampling_guarantee"}``
    when it sets a non-null ``seed`` or a non-empty ``logit_bias``, else empty."""
    if doc.get("seed") is not None or doc.get("logit_bias"):
        return _PREFERS_EXACT
    return frozenset()


_PREFERS_EXACT = frozenset({SAMPLING_GUARANTEE})


def trigger_param(doc: Mapping[str, Any], kind: str) -> str | None:
    """The first request field that makes ``doc`` need ``kind`` (for error messages), or None."""
    return _triggers(doc).get(kind)


def unmet(required: frozenset[str], capabilities: frozenset[str] | None) -> str | None:
    """The first kind (in :data:`KINDS` order) of ``required`` that a pool does not serve.

    Args:
        required: :func:`required_features` of the request.
        capabilities: the kinds the pool serves; None serves every kind (a plain pool).

    Returns:
        None when the pool can serve the request, else the kind's name (a decision reason).
    """
    if capabilities is None or required <= capabilities:
        return None
    return next(k for k in KINDS if k in required and k not in capabilities)


#: Values of the client's speculation hint (header ``x-specgate-speculation``, body field
#: ``specgate_speculation``, or the API key's default): ``off`` keeps the request off every
#: speculative pool (reason ``client_opt_out``); ``auto`` lets the policy choose; ``on`` asks
#: for speculation even past the soft thresholds (``routing.long_prompt_tokens`` and the
#: acceptance bypass), still subject to the context cap, the pool's limit, its capabilities,
#: its health and the saturation bypass (which protects every other request on the pool).
SPECULATION_MODES = ("off", "auto", "on")

CLIENT_OPT_OUT = Reason.CLIENT_OPT_OUT.value


def speculation_gate(needs: frozenset[str], hint: str, capabilities: frozenset[str] | None) -> str | None:
    """Why a speculative pool may not serve a request at all, or None when it may.

    Args:
        needs: the request's :func:`required_features`.
        hint: the request's speculation hint (:data:`SPECULATION_MODES`).
        capabilities: the pool's capabilities (None: every kind).

    Returns:
        ``client_opt_out`` for ``hint == "off"``, else :func:`unmet`'s kind, else None.
    """
    if hint == "off":
        return CLIENT_OPT_OUT
    return unmet(needs, capabilities)


#: The request-body field carrying the hint; the router removes it before forwarding
#: (SGLang's request models would refuse or ignore an unknown field).
HINT_FIELD = "specgate_speculation"
#: The request header carrying the hint.
HINT_HEADER = "x-specgate-speculation"


def speculation_hint(doc: Mapping[str, Any], header: str | None, key_default: str | None) -> str:
    """The request's speculation hint: the body field :data:`HINT_FIELD`, else the header
    :data:`HINT_HEADER`, else the API key's default, else ``auto``.

    Raises:
        InvalidRequest: the body field or the header is not one of :data:`SPECULATION_MODES`
            (``param`` is the field; the header's error has ``code: invalid_header``).
    """
    value = doc.get(HINT_FIELD)
    if value is not None:
        if value not in SPECULATION_MODES:
            raise InvalidRequest(f"`{HINT_FIELD}` must be one of {list(SPECULATION_MODES)}", param=HINT_FIELD)
        return str(value)
    if header is not None:
        mode = header.strip().lower()
        if mode not in SPECULATION_MODES:
            raise InvalidRequest(f"header {HINT_HEADER} must be one of {list(SPECULATION_MODES)}",
                                 code="invalid_header")
        return mode
    return key_default or "auto"
