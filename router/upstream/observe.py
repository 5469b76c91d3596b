"""Read a chat or completions response's usage and ending as it is relayed, without changing a byte.

The proxy hands every relayed chunk (streamed) or the whole body (not streamed) to a
:class:`ResponseObserver`; the bytes the client gets are the engine's, unchanged (tool-call
deltas keep their ``index``, ``id`` and order; nothing is merged or re-encoded). When the
response ends, :meth:`ResponseObserver.finish` counts per pool:

- ``specgate_completion_tokens_total{pool}``: ``usage.completion_tokens`` (the accounting
  unit);
- ``specgate_reasoning_tokens_total{pool}``: ``usage.reasoning_tokens`` (SGLang's field; else
  ``usage.completion_tokens_details.reasoning_tokens``, OpenAI's), clamped to
  ``[0, completion_tokens]``: with speculative decoding SGLang has reported reasoning tokens
  above the completion tokens by up to the draft length (sgl-project/sglang#39826,
  sgl-project/sglang#37450), so the router never trusts it beyond ``completion_tokens``;
- ``specgate_usage_inconsistent_total{pool}``: usage blocks whose reasoning tokens exceed the
  completion tokens (or are negative). An inconsistent or unparsable usage block is only
  counted: it never raises and never ends the stream;
- ``specgate_suspect_truncations_total{pool}``: responses to a request with ``tools`` (and
  ``tool_choice`` not ``"none"``) that ended ``finish_reason: "stop"`` with non-empty
  ``reasoning_content`` and neither content nor a tool call: the signature of an EOS accepted
  at a draft position between reasoning and the tool call (vllm-project/vllm#41493), so
  operators can compare its share per pool.

The stream is read by the SSE and JSON grammars (:mod:`router.upstream.relay`: events end with a
blank line of LF, CRLF or CR line ends; ``data:`` with or without its space, over one or more
lines; comments and other fields carry nothing), so any valid spelling of an event counts:
JSON spacing, key order, escapes. Usage is the last ``usage`` object seen, so cumulative
per-chunk usage (``stream_options.continuous_usage_stats``, sgl-project/sglang#12241) counts
once, not summed, and a stream cut short counts what was generated until then.

Cost: per streamed chunk two or three byte searches
(:func:`router.upstream.relay.may_carry_usage`: a non-null ``usage`` may follow its key); only events
that pass are parsed (``orjson``), and every event only for a request with ``tools`` (its
endings and output kinds feed the suspect-truncation count). A partial event at a
chunk's end is kept (at most :data:`MAX_PENDING_BYTES`) until its end arrives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from router.upstream.relay import complete_events, event_json, may_carry_usage, next_event

if TYPE_CHECKING:
    from router.ops.metrics import RouterMetrics

__all__ = ["MAX_PENDING_BYTES", "ResponseObserver", "wants_tools"]

#: Longest partial SSE event kept between two chunks (bytes); a longer one is dropped unread.
MAX_PENDING_BYTES = 1 << 20



def wants_tools(doc: dict[str, Any]) -> bool:
    """Whether a chat request offers tools the model may call (non-empty ``tools`` and
    ``tool_choice`` other than ``"none"``)."""
    return bool(doc.get("tools")) and doc.get("tool_choice") != "none"


class ResponseObserver:
    """Watches one chat response (see the module docstring).

    Args:
        metrics: the router's :class:`router.ops.metrics.RouterMetrics`.
        tools: the request offered tools (:func:`wants_tools`).
    """

    __slots__ = (
        "_pending",
        "content",
        "error",
        "finish_reasons",
        "metrics",
        "reasoning",
        "tool_calls",
        "tools",
        "usage",
    )

    def __init__(self, metrics: RouterMetrics, *, tools: bool) -> None:
        self.metrics = metrics
        self.tools = tools
        self.content = self.reasoning = self.tool_calls = False
        self.finish_reasons: list[str] = []
        self.usage: Any = None
        #: The last error object an event carried (``{"error": ...}`` without choices), or None.
        self.error: Any = None
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        """One relayed chunk of an SSE stream (any split)."""
        if not self._pending and chunk.endswith(b"\n\n"):  # whole events (the relay's usual chunk):
            data, end = chunk, len(chunk)  # nothing to hold back (no search, no slice)
        else:
            data = self._pending + chunk if self._pending else chunk
            end = complete_events(data)
            rest = data[end:]
            self._pending = rest if len(rest) <= MAX_PENDING_BYTES else b""
            if not end:
                return
        if not self.tools and not may_carry_usage(data, end):  # endings matter only with tools
            return
        pos = 0
        while (found := next_event(data, pos)) is not None and found[1] <= end:
            doc = event_json(data[pos:found[0]])
            pos = found[1]
            if doc is not None:
                self._event(doc)

    def _event(self, doc: dict[str, Any]) -> None:
        """One event's JSON object: its choices' endings (and, with tools, output kinds), its
        usage (the last one counts) and an error."""
        self._choices(doc.get("choices"), "delta")
        usage = doc.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if doc.get("error") is not None and not isinstance(doc.get("choices"), list):
            self.error = doc["error"]

    def _choices(self, choices: Any, key: str) -> None:
        if not isinstance(choices, list):
            return
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.finish_reasons.append(reason)
            part = choice.get(key)
            if self.tools and isinstance(part, dict):  # a delta or a whole message
                self.content = self.content or bool(part.get("content"))
                self.reasoning = self.reasoning or bool(part.get("reasoning_content"))
                self.tool_calls = self.tool_calls or bool(part.get("tool_calls"))

    def body(self, body: bytes) -> None:
        """A whole (not streamed) chat completion body."""
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if isinstance(doc, dict):
            self._choices(doc.get("choices"), "message")
            if isinstance(doc.get("usage"), dict):
                self.usage = doc["usage"]

    def finish(self, pool: str) -> None:
        """Count the response's usage and a suspect truncation for ``pool``; never raises."""
        m = self.metrics
        usage = self.usage
        if isinstance(usage, dict):
            completion = usage.get("completion_tokens")
            if type(completion) is int and completion >= 0:
                m.completion_tokens.inc((pool,), completion)
                reasoning = usage.get("reasoning_tokens")
                details = usage.get("completion_tokens_details")
                if reasoning is None and isinstance(details, dict):
                    reasoning = details.get("reasoning_tokens")
                if type(reasoning) is int:
                    if not 0 <= reasoning <= completion:
                        m.usage_inconsistent.inc((pool,))
                    m.reasoning_tokens.inc((pool,), min(max(reasoning, 0), completion))
            elif completion is not None:
                m.usage_inconsistent.inc((pool,))
        if (self.tools and self.reasoning and not self.content and not self.tool_calls
                and "stop" in self.finish_reasons):
            m.suspect_truncations.inc((pool,))
