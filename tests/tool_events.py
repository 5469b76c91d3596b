"""Scripted SSE streams of tool calls and reasoning, as SGLang 0.5.23 shapes its chat chunks
(``serving_chat.py``): for the fake's ``sse_events`` and for pure tests of the observer."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["INCONSISTENT", "parallel_tool_call_events", "reasoning_only_events"]


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish, "matched_stop": None}]
    doc = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "tiny-llama",
           "choices": choices, "usage": None, **extra}
    return "data: " + orjson.dumps(doc).decode() + "\n\n"


def _call(index: int, *, id_: str | None = None, name: str | None = None, args: str = "") -> dict[str, Any]:
    call: dict[str, Any] = {"index": index}
    if id_ is not None:
        call.update(id=id_, type="function")
    call["function"] = {"name": name, "arguments": args} if name else {"arguments": args}
    return {"tool_calls": [call]}


def parallel_tool_call_events(usage: dict[str, Any]) -> list[str]:
    """Two parallel calls whose deltas interleave by index (0, 1, 0, 1), ``id`` only on each
    call's first delta, then a ``tool_calls`` finish, a usage chunk and ``[DONE]``."""
    return [
        _chunk({"role": "assistant", "content": None, "reasoning_content": "Two tools."}),
        _chunk(_call(0, id_="call_0a", name="get_weather")),
        _chunk(_call(1, id_="call_1b", name="get_time")),
        _chunk(_call(0, args='{"city": ')),
        _chunk(_call(1, args='{"tz": ')),
        _chunk(_call(0, args='"Paris"}')),
        _chunk(_call(1, args='"Asia/Tokyo"}')),
        _chunk({}, "tool_calls"),
        _chunk(None, usage=usage),
        "data: [DONE]\n\n",
    ]


def reasoning_only_events() -> list[str]:
    return [
        _chunk({"role": "assistant", "content": "", "reasoning_content": "I should call get_weather"}),
        _chunk({"reasoning_content": " and get_time."}),
        _chunk({}, "stop"),
        _chunk(None, usage={"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49,
                            "reasoning_tokens": 9}),
        "data: [DONE]\n\n",
    ]


INCONSISTENT = {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52, "reasoning_tokens": 15}
