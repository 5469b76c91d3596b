"""Request documents -> :class:`ParsedRequest`: the validation of chat and completions bodies.

:func:`parse_chat` / :func:`parse_completions` validate the JSON document (pure, fast) and
raise :class:`~router.errors.InvalidRequest` with ``param`` set on the first problem.
Integers are strict: ``true``, ``"100"`` and ``1.5`` are rejected for ``max_tokens``,
``max_completion_tokens`` and ``n`` (pydantic's lax mode would coerce them). Content parts
follow SGLang 0.5.23's ``protocol.py``: text parts are joined into the prompt, non-text parts
are refused by a text-only model (the default, HTTP 400 ``param: messages``) and bounded per
part for a model declared multimodal (``model.multimodal``), and ``thinking``/``reasoning``
parts count zero. A chat's ``input_ids`` replace the rendered conversation (the engine runs the
ids): they are validated as token ids and counted instead of ``messages``. The next step,
counting the prompt, is :mod:`router.request.features`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from router.errors import InvalidRequest
from router.request.capabilities import VALIDATED_FIELDS as CAPABILITY_FIELDS
from router.request.capabilities import validate as validate_capability_fields
from router.request.parsed import Kind, ParsedRequest
from router.request.sampling import VALIDATED_FIELDS as SAMPLING_FIELDS
from router.request.sampling import validate_sampling

__all__ = [
    "CHAT_IDS_FIELD",
    "DROPPED_PARTS",
    "MAX_TOP_LOGPROBS",
    "MEDIA_PARTS",
    "TEXT_PARTS",
    "ParsedRequest",
    "check_envelope",
    "check_top_logprobs",
    "parse_chat",
    "parse_completions",
    "prompt_kind",
    "token_ids",
]

_ROLES = frozenset({"system", "user", "assistant", "tool", "developer", "function"})
_CONTENT_REQUIRED = frozenset({"system", "user", "developer", "tool"})


def _strict_int(doc: dict[str, Any], key: str, *, minimum: int, maximum: int | None = None) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if type(value) is not int:  # rejects bool, float, str
        raise InvalidRequest(f"`{key}` must be an integer, got {type(value).__name__}", param=key)
    if value < minimum:
        raise InvalidRequest(f"`{key}` must be >= {minimum}, got {value}", param=key)
    if maximum is not None and value > maximum:
        raise InvalidRequest(f"`{key}` must be <= {maximum}", param=key)
    return value


def check_envelope(doc: Any) -> bool:
    """Validate what every generation request shares (a JSON object; ``model`` a string and
    ``stream`` a boolean when given); returns ``stream``.

    Raises:
        InvalidRequest: on the first invalid field.
    """
    if not isinstance(doc, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_json")
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("`model` must be a string", param="model")
    stream = doc.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("`stream` must be a boolean", param="stream")
    return bool(stream)


#: OpenAI's largest ``top_logprobs`` (chat completions and responses: "an integer between 0
#: and 20"); SGLang's own check differs by version, so the router holds OpenAI's.
MAX_TOP_LOGPROBS = 20


def check_top_logprobs(doc: dict[str, Any]) -> None:
    """``top_logprobs``, when not null, is an integer in ``[0, MAX_TOP_LOGPROBS]``.

    Raises:
        InvalidRequest: ``param: "top_logprobs"``.
    """
    _strict_int(doc, "top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)


def _common(doc: Any, kind: Kind, max_n: int) -> tuple[int | None, int, bool]:
    stream = check_envelope(doc)
    n, max_tokens, max_completion = doc.get("n"), doc.get("max_tokens"), doc.get("max_completion_tokens")
    # absent or valid (the usual case) decided inline; otherwise _strict_int raises the field's error
    if n is not None and not (type(n) is int and 1 <= n <= max_n):
        _strict_int(doc, "n", minimum=1, maximum=max_n)
    if max_tokens is not None and not (type(max_tokens) is int and max_tokens >= 1):
        _strict_int(doc, "max_tokens", minimum=1)
    if max_completion is not None and not (type(max_completion) is int and max_completion >= 1):
        _strict_int(doc, "max_completion_tokens", minimum=1)
    budget = max_completion if max_completion is not None else max_tokens
    return budget, n or 1, stream


#: Content part types that carry text (joined into the prompt, counted exactly).
TEXT_PARTS = frozenset({"text", "input_text"})
#: Non-text content part types SGLang 0.5.23 accepts (``protocol.py``,
#: ``parser/jinja_template_utils.py``), by modality: each is counted with the model's per-part
#: bound (``model.multimodal``) or refused.
MEDIA_PARTS = {"image_url": "image", "input_image": "image", "video_url": "video", "audio_url": "audio",
               "input_audio": "audio"}
#: Part types SGLang 0.5.23 accepts and leaves out of the rendered prompt in both template
#: content formats (``process_content_for_template_format``): zero tokens, exactly.
DROPPED_PARTS = frozenset({"thinking", "reasoning"})


def _check_parts(parts: list[Any], where: str, media: Mapping[str, int] | None) -> int:
    """Validate a content list; returns the upper bound of its non-text tokens.

    Args:
        media: tokens per part by modality (``image``, ``video``, ``audio``), the model's
            :class:`~router.config.tree.MultimodalConfig`; None for a text-only model.

    Raises:
        InvalidRequest: an empty list, a part without ``type``, a text part without string
            ``text``, a media part the model does not take, or a type outside
            :data:`TEXT_PARTS`, :data:`MEDIA_PARTS` and :data:`DROPPED_PARTS`.
    """
    if not parts:
        raise InvalidRequest(f"{where}.content must not be an empty list", param="messages")
    tokens = 0
    for part in parts:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(f"{where}.content parts must be objects with a `type`", param="messages")
        kind = part["type"]
        if kind in TEXT_PARTS:
            if not isinstance(part.get("text"), str):
                raise InvalidRequest(f"{where}.content text parts need a string `text`", param="messages")
        elif kind in MEDIA_PARTS:
            bound = (media or {}).get(MEDIA_PARTS[kind])
            if bound is None:
                what = "a text-only model" if media is None else f"a model without {MEDIA_PARTS[kind]} input"
                raise InvalidRequest(f"{where}.content part type `{kind}` is not supported: this is {what}",
                                     param="messages")
            tokens += bound
        elif kind not in DROPPED_PARTS:
            raise InvalidRequest(f"{where}.content part type `{kind[:40]}` is not supported (supported: "
                                 f"{sorted(TEXT_PARTS | DROPPED_PARTS | set(MEDIA_PARTS))})", param="messages")
    return tokens


def _check_tool_calls(calls: Any, where: str) -> list[str]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise InvalidRequest(f"{where}.tool_calls must be a list or null", param="messages")
    ids = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidRequest(f"{where}.tool_calls entries need function.name", param="messages")
        args = fn.get("arguments")
        if args is not None and not isinstance(args, (str, dict)):
            raise InvalidRequest(f"{where}.tool_calls function.arguments must be a string", param="messages")
        if isinstance(args, str) and args.strip():
            try:
                json.loads(args)
            except ValueError:
                raise InvalidRequest(f"{where}.tool_calls function.arguments is not valid JSON",
                                     param="messages") from None
        if isinstance(call.get("id"), str):
            ids.append(call["id"])
    return ids


def _check_messages(messages: Any, media: Mapping[str, int] | None = None) -> int:
    if not isinstance(messages, list):
        raise InvalidRequest("`messages` must be a non-empty array of message objects", param="messages")
    if not messages:
        raise InvalidRequest("`messages` must not be empty", param="messages")
    declared: set[str] = set()
    media_tokens = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise InvalidRequest(f"messages[{i}] must be an object", param="messages")
        role = msg.get("role")
        if role not in _ROLES:
            raise InvalidRequest(f"messages[{i}].role must be one of {sorted(_ROLES)}", param="messages")
        content = msg.get("content")
        if type(content) is str and role != "assistant" and role != "tool" and msg.get("tool_calls") is None:
            continue  # a plain text message (most of them): nothing more to check, no path built
        where = f"messages[{i}]"
        if content is None:
            if role in _CONTENT_REQUIRED:
                raise InvalidRequest(f"{where}.content is required for role `{role}`", param="messages")
        elif isinstance(content, list):
            media_tokens += _check_parts(content, where, media)
        elif not isinstance(content, str):
            raise InvalidRequest(f"{where}.content must be a string, an array of parts or null",
                                 param="messages")
        if role == "assistant":
            declared.update(_check_tool_calls(msg.get("tool_calls"), where))
        elif "tool_calls" in msg and msg["tool_calls"] is not None:
            raise InvalidRequest(f"{where}.tool_calls is only allowed on assistant messages", param="messages")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str):
                raise InvalidRequest(f"{where}.tool_call_id must be a string", param="messages")
            if call_id not in declared:
                raise InvalidRequest(f"{where}.tool_call_id `{call_id[:64]}` matches no earlier tool call",
                                     param="messages")
    return media_tokens


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise InvalidRequest("`tools` must be an array", param="tools")
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidRequest("each tool needs function.name", param="tools")


#: The chat field that carries the prompt as token ids (SGLang 0.5.23's
#: ``ChatCompletionRequest.input_ids``, sgl-project/sglang#23751): when it is given, the engine
#: runs exactly those ids and no chat template (``serving_chat``: ``messages`` then only give
#: stop tokens and tool constraints), so the router counts the ids, as for a completions
#: token-id prompt.
CHAT_IDS_FIELD = "input_ids"

#: Every top-level field :func:`router.request.capabilities.validate` and :func:`validate_sampling`
#: read; with ``top_logprobs``, ``tools`` and ``input_ids``, every field :func:`parse_chat`
#: checks besides ``messages`` and :func:`_common`'s.
_CHAT_CHECKED = CAPABILITY_FIELDS | SAMPLING_FIELDS | {"top_logprobs", "tools", CHAT_IDS_FIELD}


def token_ids(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of token ids (JSON integers >= 0; not ``true``,
    not ``1.0``). The vocabulary bound is the tokenizer's
    (:meth:`router.request.features.PromptCounter.render`)."""
    return isinstance(value, list) and bool(value) and all(type(t) is int and t >= 0 for t in value)


def _check_chat_ids(doc: dict[str, Any]) -> bool:
    """True when the chat carries ``input_ids`` (not null): a non-empty list of token ids.

    Raises:
        InvalidRequest: ``param: "input_ids"`` for an empty list, a non-list, or an entry that
            is not an integer >= 0.
    """
    ids = doc.get(CHAT_IDS_FIELD)
    if ids is None:
        return False
    if not token_ids(ids):
        raise InvalidRequest("`input_ids` must be a non-empty array of token ids (integers >= 0)",
                             param=CHAT_IDS_FIELD)
    return True


def parse_chat(doc: Any, *, max_n: int, media: Mapping[str, int] | None = None) -> ParsedRequest:
    """Validate a ``/v1/chat/completions`` document. With ``input_ids`` (:data:`CHAT_IDS_FIELD`)
    the prompt is those token ids: ``param`` is ``input_ids`` and no media part counts (SGLang
    passes no image data with them); ``messages`` are still validated (the engine reads them).

    Args:
        media: tokens per non-text part by modality (``model.multimodal``); None: the model
            is text-only and refuses every non-text part.

    Raises:
        InvalidRequest: on the first invalid field (``param`` names it).
    """
    budget, n, stream = _common(doc, "chat", max_n)
    if _CHAT_CHECKED.isdisjoint(doc):  # none of the fields below (most bodies): one pass over the keys
        return ParsedRequest("chat", doc, budget, n, stream, "messages", _check_messages(doc.get("messages"), media))
    check_top_logprobs(doc)
    media_tokens = _check_messages(doc.get("messages"), media)
    _check_tools(doc.get("tools"))
    validate_capability_fields(doc)
    validate_sampling(doc)
    if _check_chat_ids(doc):  # the engine runs the ids, not the rendered messages (nor their media)
        return ParsedRequest("chat", doc, budget, n, stream, CHAT_IDS_FIELD, 0)
    return ParsedRequest("chat", doc, budget, n, stream, "messages", media_tokens)


def prompt_kind(prompt: Any) -> str:
    """``text``, ``texts``, ``ids`` or ``id_lists``: the shape of a completions ``prompt``; ``""``
    when it is none of them."""
    if isinstance(prompt, str):
        return "text"
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return "texts"
        if all(type(t) is int and t >= 0 for t in prompt):
            return "ids"
        if all(token_ids(p) for p in prompt):
            return "id_lists"
    return ""


def parse_completions(doc: Any, *, max_n: int) -> ParsedRequest:
    """Validate a ``/v1/completions`` document (prompt: string, strings, ids or id lists).

    Raises:
        InvalidRequest: on the first invalid field (``param`` names it).
    """
    budget, n, stream = _common(doc, "completions", max_n)
    if not prompt_kind(doc.get("prompt")):
        raise InvalidRequest(
            "`prompt` must be a string, an array of strings, an array of token ids, "
            "or an array of token-id arrays", param="prompt")
    validate_capability_fields(doc)  # each returns at once when the body has none of its fields
    validate_sampling(doc)
    return ParsedRequest("completions", doc, budget, n, stream, "prompt")
