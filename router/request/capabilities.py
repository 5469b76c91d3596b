"""What a request needs from the engine that serves it, and which pools may serve it.

Speculative decoding promises the target model's output, token for token, but the pinned
engine (SGLang 0.5.23) reaches that promise only for plain sampling. Some requests make the
speculative path do something else, or crash the engine. Each such *kind* is a capability kind
of the reason table (:data:`router.reasons.CAPABILITY_KINDS`: a pool's ``capabilities`` in the
YAML lists the kinds it serves; the decision reason of a request kept off a speculative pool is
the kind's name), and each kind has one *trigger* here: a small pure function of the
:class:`~router.request.parsed.ParsedRequest` that returns the request field that makes it need the
kind (the first one, named by the 400 ``unsupported_feature`` error), or None. Its docstring
says what triggers it and why, with the engine issues behind it; :data:`TRIGGERS` maps every
kind to its trigger, and a kind without one (or a trigger for a name that is not a capability
kind) fails the import of this module.

:func:`required_features` runs the triggers after one cheap test that skips most requests: a
request whose body has none of :data:`TRIGGER_FIELDS` (the body fields the triggers declare)
and whose :data:`TRIGGER_FLAGS` (the parsed request's attributes they declare: what the parser
found in ``messages``) are all false needs no kind. :func:`unmet` compares what a request needs
with what a pool serves: ``None`` capabilities serve everything (a plain pool); a speculative
pool serves only the kinds its config lists (default: none of them). :func:`validate` refuses
malformed constraint fields with HTTP 400 before any engine sees them (``param`` names the
field), since the router must read them to route. Everything here is pure: no I/O, no clock,
no configuration reads.

Not triggers: ``top_k``/``top_p``/``temperature`` (applied by the verify sampler). On CPU
engines the verify step is always greedy (``_verify_uses_greedy``), so ``temperature > 0``
decodes greedily there: a demo caveat, not a routing rule.

**Preferences** (:func:`preferred_features`, reason ``sampling_guarantee``): a non-null
``seed`` or a non-empty ``logit_bias`` (:data:`router.request.sampling.CAVEAT_FIELDS`). The speculative
path keeps their promise differently (a seeded request's reproducibility depends on the verify
step's batch, vllm-project/vllm#9441, #6038; ``logit_bias`` is not applied to every draft
position under EAGLE, sgl-project/sglang#10617), so such a request prefers a pool that honours
them exactly, a plain pool: a speculative pool is *bypassed*, not excluded (a soft rejection,
router/decision/checks.py). With no plain pool able to take it, the speculative pool serves it with
``x-specgate-degraded: sampling`` (router/request/sampling.py); the client's ``on`` hint keeps it on the
speculative pool likewise. A preference never refuses a request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from router.errors import InvalidRequest
from router.reasons import CAPABILITY_KINDS, Reason

if TYPE_CHECKING:
    from router.request.parsed import ParsedRequest

__all__ = [
    "CLIENT_OPT_OUT",
    "HINT_FIELD",
    "HINT_HEADER",
    "KINDS",
    "SAMPLING_GUARANTEE",
    "SPECULATION_MODES",
    "TRIGGERS",
    "TRIGGER_FIELDS",
    "TRIGGER_FLAGS",
    "VALIDATED_FIELDS",
    "Trigger",
    "preferred_features",
    "required_features",
    "speculation_gate",
    "speculation_hint",
    "trigger_param",
    "unmet",
    "validate",
]

SAMPLING_GUARANTEE = Reason.SAMPLING_GUARANTEE.value

#: Every kind, in the order :func:`unmet` reports the first one missing: the capability
#: kinds of the reason table (:data:`router.reasons.CAPABILITY_KINDS`).
KINDS: tuple[str, ...] = tuple(k.value for k in CAPABILITY_KINDS)

_RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema", "structural_tag")
_STRING_CONSTRAINTS = ("regex", "ebnf", "json_schema", "structural_tag")
#: Every top-level field :func:`validate` reads.
VALIDATED_FIELDS = frozenset({"response_format", *_STRING_CONSTRAINTS, "tool_choice"})


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
    if VALIDATED_FIELDS.isdisjoint(doc):  # none of them (most bodies): one pass over the keys
        return
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


#: A capability kind's trigger: the first request field that makes the request need the kind,
#: or None when nothing in it does. Pure and cheap (a few dict lookups).
Trigger = Callable[["ParsedRequest"], "str | None"]


@dataclass(frozen=True, slots=True)
class _Registered:
    trigger: Trigger
    fields: frozenset[str]
    flags: tuple[str, ...]


_REGISTERED: dict[Reason, _Registered] = {}


def _trigger(kind: Reason, *, fields: Iterable[str] = (),
             flags: Iterable[str] = ()) -> Callable[[Trigger], Trigger]:
    """Register the decorated function as the trigger of capability kind ``kind``.

    Args:
        kind: a member of the reason table with ``capability=True``.
        fields: the body fields whose presence can make the trigger fire (the fast path of
            :func:`required_features` skips a body without any trigger's fields).
        flags: attributes of :class:`~router.request.parsed.ParsedRequest` whose truth can make it
            fire without any of ``fields`` (what the parser found, e.g. in ``messages``);
            tested beside the fields, so no trigger scans ``messages`` for every request.

    Raises:
        ValueError: ``kind`` is not a capability kind, already has a trigger, or the trigger
            declares neither fields nor flags (the fast path would never run it).
    """
    def register(fn: Trigger) -> Trigger:
        name = getattr(fn, "__name__", repr(fn))
        if not kind.capability:
            raise ValueError(f"trigger {name} is for {kind.value!r}, which is not a capability kind "
                             f"(capability=True in router/reasons.py)")
        entry = _Registered(fn, frozenset(fields), tuple(flags))
        if not entry.fields and not entry.flags:
            raise ValueError(f"trigger {name} of {kind.value!r} declares no fields and no flags")
        if kind in _REGISTERED:
            raise ValueError(f"capability kind {kind.value!r} has two triggers: "
                             f"{getattr(_REGISTERED[kind].trigger, '__name__', '?')} and {name}")
        _REGISTERED[kind] = entry
        return fn
    return register


_GRAMMAR_FORMATS = ("json_object", "json_schema", "structural_tag")


@_trigger(Reason.CONSTRAINED_DECODING, fields=("response_format", *_STRING_CONSTRAINTS, "tools"))
def _constrained_decoding(request: ParsedRequest) -> str | None:
    """``response_format`` of type ``json_object``, ``json_schema`` or ``structural_tag``;
    SGLang's ``regex``, ``ebnf``, ``structural_tag`` and the ``json_schema`` extension (a
    non-empty string); ``tool_choice`` ``"required"`` or a named function (SGLang turns both
    into a grammar); any tool with ``"strict": true``.

    With EAGLE the grammar is applied over the draft tree
    (``speculative/spec_utils.py: generate_token_bitmask``), which crashed or truncated
    engines: sgl-project/sglang#24283, #15050, #14480, #9187, #21723.
    """
    doc = request.doc
    fmt = doc.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in _GRAMMAR_FORMATS:
        return "response_format"
    for key in _STRING_CONSTRAINTS:
        if isinstance(doc.get(key), str) and doc[key]:  # SGLang ignores an empty constraint string
            return key
    tools = doc.get("tools")
    if isinstance(tools, list) and tools:
        choice = doc.get("tool_choice")
        if choice == "required" or _named_choice(choice):
            return "tool_choice"
        if any(isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("strict") is True
               for t in tools):
            return "tools"
    return None


@_trigger(Reason.TOOL_CALLS, fields=("tools",))
def _tool_calls(request: ParsedRequest) -> str | None:
    """Non-empty ``tools`` with ``tool_choice`` other than ``"none"`` (SGLang's default with
    tools is ``"auto"``).

    Tool-call parsers see multi-token steps under speculation; malformed calls were reported
    with MTP/n-gram speculation (vllm-project/vllm#35800, #56077, #41493).
    """
    tools = request.doc.get("tools")
    if isinstance(tools, list) and tools and request.doc.get("tool_choice") != "none":
        return "tools"
    return None


@_trigger(Reason.REASONING, fields=("chat_template_kwargs", "reasoning_effort", "reasoning", "separate_reasoning"))
def _reasoning(request: ParsedRequest) -> str | None:
    """Thinking turned on: ``chat_template_kwargs.enable_thinking`` or ``.thinking`` true,
    ``reasoning_effort`` other than ``"none"``, ``reasoning.enabled``/``reasoning.effort``
    (SGLang's ``normalize_reasoning_inputs`` turns these into the template kwargs), or an
    explicit ``separate_reasoning: true`` (a client asking for the reasoning to be split out
    expects reasoning output).

    Reasoning counters exceeded completion tokens by up to the draft length under speculation
    (sgl-project/sglang#39826, #37450).
    """
    doc = request.doc
    kwargs = doc.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and (kwargs.get("enable_thinking") is True or kwargs.get("thinking") is True):
        return "chat_template_kwargs"
    effort = doc.get("reasoning_effort")
    if effort is not None and effort != "none":
        return "reasoning_effort"
    reasoning = doc.get("reasoning")
    if isinstance(reasoning, dict) and (reasoning.get("enabled") is True or reasoning.get("enable") is True
                                        or reasoning.get("effort") not in (None, "none")):
        return "reasoning"
    if doc.get("separate_reasoning") is True:
        return "separate_reasoning"
    return None


@_trigger(Reason.LOGPROBS, fields=("logprobs", "top_logprobs"))
def _logprobs(request: ParsedRequest) -> str | None:
    """Chat ``logprobs: true`` or ``top_logprobs`` > 0; completions ``logprobs`` set.

    Under EAGLE the values come from the batched verify pass
    (``eagle_worker_common.py: compute_spec_logprobs``), not from one decode step, so they are
    not the plain pool's.
    """
    logprobs = request.doc.get("logprobs")
    if logprobs is True or (type(logprobs) is int and logprobs >= 0):  # chat: bool; completions: int
        return "logprobs"
    if _positive(request.doc.get("top_logprobs")):
        return "top_logprobs"
    return None


@_trigger(Reason.SAMPLING_CONTROLS, fields=("presence_penalty", "frequency_penalty", "repetition_penalty",
                                            "min_tokens", "min_p", "custom_logit_processor"))
def _sampling_controls(request: ParsedRequest) -> str | None:
    """``presence_penalty``/``frequency_penalty`` non-zero, ``repetition_penalty`` other than
    1, ``min_tokens`` > 0, ``min_p`` > 0, ``custom_logit_processor`` set.

    EAGLE verification applies them differently from plain decoding in SGLang 0.5.23
    (``speculative/eagle_utils.py: eagle_sample``): penalties are accumulated once per verify
    step ("a relaxed version of penalties for speculative decoding"), the verify sampler
    renormalises top-k and top-p only (not min-p), and a custom logit processor is not applied
    on the EAGLE verify path.
    """
    doc = request.doc
    for key in ("presence_penalty", "frequency_penalty"):
        if _nonzero(doc.get(key)):
            return key
    rep = doc.get("repetition_penalty")
    if isinstance(rep, (int, float)) and not isinstance(rep, bool) and rep != 1:
        return "repetition_penalty"
    for key in ("min_tokens", "min_p"):
        if _positive(doc.get(key)):
            return key
    if doc.get("custom_logit_processor") is not None:
        return "custom_logit_processor"
    return None


def _check_registry(registered: Mapping[Reason, object], kinds: Iterable[Reason]) -> None:
    """Every capability kind has a trigger and every trigger is a capability kind's.

    Raises:
        RuntimeError: naming the kinds without a trigger, or the triggers of other names.
    """
    kinds = tuple(kinds)
    missing = [k.value for k in kinds if k not in registered]
    extra = [k.value for k in registered if k not in kinds]
    if missing:
        raise RuntimeError(f"capability kind(s) without a trigger in router/request/capabilities.py: "
                           f"{', '.join(missing)} (add a function decorated with @_trigger(Reason.<KIND>, ...))")
    if extra:
        raise RuntimeError(f"trigger(s) in router/request/capabilities.py for name(s) that are not capability kinds: "
                           f"{', '.join(extra)}")


_check_registry(_REGISTERED, CAPABILITY_KINDS)

#: Every capability kind's trigger, in :data:`KINDS` order.
TRIGGERS: Mapping[str, Trigger] = MappingProxyType({k.value: _REGISTERED[k].trigger for k in CAPABILITY_KINDS})

#: Every body field the triggers declare: a body with none of them (and no
#: :data:`TRIGGER_FLAGS` set) needs no kind. ``tool_choice`` is not one: it triggers only
#: with ``tools``.
TRIGGER_FIELDS: frozenset[str] = frozenset().union(*(r.fields for r in _REGISTERED.values()))

#: Every :class:`~router.request.parsed.ParsedRequest` attribute the triggers declare (what the
#: parser found beyond the body's top-level fields); one that is true runs the triggers.
TRIGGER_FLAGS: tuple[str, ...] = tuple(dict.fromkeys(f for r in _REGISTERED.values() for f in r.flags))

_NO_KINDS: frozenset[str] = frozenset()


def _triggers(request: ParsedRequest) -> dict[str, str]:
    """``{kind: the first field that needs it}``, every trigger run (no fast path)."""
    return {kind: field for kind, trigger in TRIGGERS.items() if (field := trigger(request)) is not None}


def required_features(request: ParsedRequest) -> frozenset[str]:
    """The kinds (:data:`KINDS`) a parsed request needs from the pool that serves it.

    ``request.doc`` is a chat or completions request body, or the chat form of a responses
    body (already validated by :func:`validate`; fields of the wrong type are simply not
    triggers). Pure and cheap: a few dict lookups, none past one set test and the
    :data:`TRIGGER_FLAGS` for a body without any of :data:`TRIGGER_FIELDS` (most bodies).

    Returns:
        The kinds' names (a subset of :data:`KINDS`; empty for most requests).
    """
    if TRIGGER_FIELDS.isdisjoint(request.doc):
        for flag in TRIGGER_FLAGS:  # a loop, not any(): no generator on the common path
            if getattr(request, flag):
                break
        else:
            return _NO_KINDS
    return frozenset(_triggers(request))


def preferred_features(doc: Mapping[str, Any]) -> frozenset[str]:
    """The preferences of a request document (module docstring): ``{"sampling_guarantee"}``
    when it sets a non-null ``seed`` or a non-empty ``logit_bias``, else empty."""
    if doc.get("seed") is not None or doc.get("logit_bias"):
        return _PREFERS_EXACT
    return frozenset()


_PREFERS_EXACT = frozenset({SAMPLING_GUARANTEE})


def trigger_param(request: ParsedRequest, kind: str) -> str | None:
    """The first request field that makes ``request`` need ``kind`` (its trigger's answer, for
    error messages), or None (also for a name that is not a capability kind)."""
    trigger = TRIGGERS.get(kind)
    return None if trigger is None else trigger(request)


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
