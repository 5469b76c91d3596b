"""``POST /v1/responses``: counted and routed like chat, relayed to the engine's own endpoint.

Opt-in: served when the generation pools list ``responses`` in ``serves``, else 404
``unsupported_endpoint`` (:func:`check_served`). SGLang 0.5.23 disables its endpoint when the
``openai_harmony`` package is missing ("OpenAI Responses API (/v1/responses) disabled" in its
log) and then answers every call with a bare 500; measured on the CPU server of the tiny
model, which with the package installed served it, its ``usage.input_tokens`` equal to this
module's count for string, message-list and function-tool inputs.

SGLang 0.5.23 serves the Responses API itself (``http_server.py: v1_responses_request``,
``openai/serving_responses.py``), so the router does not convert the request: it forwards the
client's body (with at most ``model``, ``max_output_tokens`` and ``request_id`` added) to the
chosen endpoint's ``/v1/responses`` and relays the bytes. To decide, it needs the prompt's
token count and the output budget, which :func:`parse_responses` derives by turning the
request into the chat conversation SGLang renders (``_construct_input_messages``):

- ``instructions`` -> a leading ``system`` message; ``input`` a string -> one ``user``
  message; ``input`` a list of items -> per item: a message (``role`` + ``content`` as a
  string or parts; ``input_text``/``output_text``/``text`` parts are joined with ``" "``,
  ``developer`` becomes ``system``), ``function_call`` -> an assistant ``tool_calls`` entry
  (``call_id`` is its id), ``function_call_output`` -> a ``tool`` message; ``reasoning``
  items are left out of the count. System messages are coalesced into one leading message
  (joined with a blank line) and consecutive assistant messages merged, as SGLang does.
- ``tools`` of ``type: "function"`` (the Responses API's flat ``{name, description,
  parameters, strict}``) -> chat tools built as SGLang builds them (``Function(name=,
  description=, parameters=, strict=)``, ``strict`` false when absent); built-in tools (web search, ...) add nothing to the count.
  ``tool_choice`` keeps its meaning (``"none"`` leaves the tools out of the template).
- ``max_output_tokens`` is the output budget, treated like chat's ``max_tokens`` for the
  context check and the pool choice; when absent the router's default budget is forwarded as
  ``max_output_tokens``.

The count is SGLang's for text conversations; ``previous_response_id`` (history stored in the
engine) is not visible to the router, so such a request's count covers only its own input,
and the engine's own length check still applies. A stream ends with ``event:
response.completed`` (or ``response.incomplete`` / ``response.failed``), not ``data: [DONE]``:
:data:`RESPONSES_END_EVENTS` tells the proxy which events end a complete stream.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from router.errors import InvalidRequest, UnsupportedEndpoint
from router.request.features import RequestFeatures
from router.request.parsing import ParsedRequest, _strict_int, check_envelope, check_top_logprobs
from router.request.sampling import validate_sampling

if TYPE_CHECKING:
    from router.state.runtime import Runtime

__all__ = ["RESPONSES_END_EVENTS", "check_served", "parse_responses", "responses_fields", "to_chat"]

#: SSE events that end a complete ``/v1/responses`` stream (SGLang 0.5.23 serving_responses).
RESPONSES_END_EVENTS = (b"event: response.completed", b"event: response.incomplete",
                        b"event: response.failed",  # and without the optional space (SSE grammar)
                        b"event:response.completed", b"event:response.incomplete", b"event:response.failed")

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise InvalidRequest(f"{where}.content parts must be objects with a `type`", param="input")
            if part["type"] in _TEXT_PARTS:
                if not isinstance(part.get("text"), str):
                    raise InvalidRequest(f"{where}.content text parts need a string `text`", param="input")
                out.append(part["text"])
        return " ".join(out)
    if content is None:
        return ""
    raise InvalidRequest(f"{where}.content must be a string or an array of parts", param="input")


def _item(item: Any, i: int) -> dict[str, Any] | None:
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise InvalidRequest(f"{where} must be an object", param="input")
    kind = item.get("type")
    if kind == "function_call":
        name, args = item.get("name"), item.get("arguments")
        if not isinstance(name, str):
            raise InvalidRequest(f"{where}.name must be a string", param="input")
        if isinstance(args, dict):
            args = json.dumps(args)
        if not isinstance(args, str):
            args = "{}"
        try:
            if not isinstance(json.loads(args or "null"), dict):
                args = "{}"
        except ValueError:
            args = "{}"  # SGLang coerces unparsable arguments to an empty object
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": str(item.get("call_id") or item.get("id") or f"call_{i}"), "type": "function",
             "function": {"name": name, "arguments": args}}]}
    if kind == "function_call_output":
        output = item.get("output", "")
        return {"role": "tool", "tool_call_id": str(item.get("call_id")),
                "content": output if isinstance(output, str) else json.dumps(output)}
    if kind == "reasoning":
        return None
    if kind not in (None, "message"):
        raise InvalidRequest(f"{where}: unsupported input item type `{str(kind)[:40]}`", param="input")
    role = item.get("role")
    if role not in _MESSAGE_ROLES:
        raise InvalidRequest(f"{where}.role must be one of {sorted(_MESSAGE_ROLES)}", param="input")
    return {"role": "system" if role == "developer" else role,
            "content": _text(item.get("content"), where)}


def _coalesce(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    for m in messages:
        prev = merged[-1] if merged else None
        if prev is not None and prev["role"] == "assistant" and m["role"] == "assistant":
            content = "\n\n".join(c for c in (prev.get("content"), m.get("content")) if c)
            calls = (prev.get("tool_calls") or []) + (m.get("tool_calls") or [])
            merged[-1] = {"role": "assistant", "content": content or None,
                          **({"tool_calls": calls} if calls else {})}
        else:
            merged.append(m)
    system = [m["content"] for m in merged if m["role"] == "system" and m["content"]]
    rest = [m for m in merged if m["role"] != "system"]
    return ([{"role": "system", "content": "\n\n".join(system)}] if system else []) + rest


def to_chat(doc: dict[str, Any]) -> dict[str, Any]:
    """The chat document whose template rendering SGLang tokenises for ``doc`` (see the module
    docstring): ``messages``, ``tools``, ``tool_choice``, ``chat_template_kwargs``.

    Raises:
        InvalidRequest: ``param`` ``input``, ``instructions`` or ``tools``.
    """
    messages: list[dict[str, Any]] = []
    instructions = doc.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("`instructions` must be a string", param="instructions")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    value = doc.get("input")
    if isinstance(value, str) and value:
        messages.append({"role": "user", "content": value})
    elif isinstance(value, list) and value:
        messages.extend(m for i, item in enumerate(value) if (m := _item(item, i)) is not None)
    else:
        raise InvalidRequest("`input` must be a non-empty string or a non-empty array of input items",
                             param="input")
    chat: dict[str, Any] = {"messages": _coalesce(messages)}
    tools = doc.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise InvalidRequest("`tools` must be an array of objects", param="tools")
        functions = []
        for t in tools:
            if t.get("type") != "function":
                continue
            if not isinstance(t.get("name"), str):
                raise InvalidRequest("each function tool needs a `name`", param="tools")
            # as SGLang builds it: Function(name=, description=, parameters=, strict=), with
            # ResponseTool's defaults (description None, strict False)
            functions.append({"type": "function", "function": {
                "name": t["name"], "description": t.get("description"), "parameters": t.get("parameters"),
                "strict": bool(t.get("strict") or False)}})
        if functions:
            chat["tools"] = functions
    choice = doc.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif isinstance(choice, str):
        chat["tool_choice"] = choice
    if isinstance(doc.get("chat_template_kwargs"), dict):
        chat["chat_template_kwargs"] = doc["chat_template_kwargs"]
    return chat


def parse_responses(doc: Any, *, max_n: int) -> ParsedRequest:
    """Validate a ``/v1/responses`` document into a chat-kind :class:`ParsedRequest`.

    Its ``doc`` is the chat form (:func:`to_chat`, for counting only; the client's body is what
    is forwarded), ``max_new_tokens`` is ``max_output_tokens``, ``n`` is 1 and ``param`` is
    ``input`` (over-length errors name it). ``max_n`` is accepted for the parsers' common
    signature.

    Raises:
        InvalidRequest: on the first invalid field (``param`` names it).
    """
    del max_n
    stream = check_envelope(doc)
    budget = _strict_int(doc, "max_output_tokens", minimum=1)
    check_top_logprobs(doc)
    validate_sampling(doc)  # min_p (SGLang's extension here), seed
    return ParsedRequest("chat", to_chat(doc), budget, 1, stream, "input")


def check_served(runtime: Runtime) -> None:
    """Raise :class:`UnsupportedEndpoint` (404) unless the pools of ``runtime`` (a
    :class:`router.state.runtime.Runtime`) list ``responses`` in ``serves``."""
    if not any("responses" in p.config.serves for p in runtime.pools):
        raise UnsupportedEndpoint("/v1/responses is not served by this router: no pool lists "
                                  "`responses` in `serves`")


def responses_fields(doc: dict[str, Any], features: RequestFeatures, request_id: str,
                     fields: dict[str, Any]) -> tuple[str, ...]:
    """Add the forwarded fields of a ``/v1/responses`` request; returns its abort ids.

    The router's default budget goes in as ``max_output_tokens`` (not ``max_tokens``, which
    the Responses API does not have). SGLang names the engine request by ``request_id``
    (default ``resp_<uuid>``), so without one the router adds ``resp_specgate-<request id>``
    and ``/abort_request`` can name it.
    """
    if fields.pop("max_tokens", None) is not None:
        fields["max_output_tokens"] = features.max_new_tokens
    rid = doc.get("request_id")
    if rid is None:
        rid = fields["request_id"] = f"resp_specgate-{request_id}"
    return (rid,) if isinstance(rid, str) else ()
