"""Tool calls and reasoning through the router: deltas relayed byte for byte, usage never
trusted beyond ``completion_tokens``, suspect truncations counted per pool."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from router.upstream.proxy import UPSTREAM_FAILED_EVENT
from tests.support.stack import Stack
from tests.tool_events import INCONSISTENT, parallel_tool_call_events, reasoning_only_events

CHAT = "/v1/chat/completions"


@pytest.fixture()
def stack(tmp_path, tokenizer_dir):
    # the relay is what is tested: a spec pool validated for tools and reasoning
    s = Stack(tmp_path, tokenizer_dir, **{"pools.0.capabilities": ["tool_calls", "reasoning"]})
    yield s
    s.close()


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
]


def request(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny-llama", "temperature": 0, "max_tokens": 512, "parallel_tool_calls": True,
            "chat_template_kwargs": {"enable_thinking": True}, "tools": TOOLS, "tool_choice": "auto",
            "messages": [{"role": "user", "content": "What is the weather in Paris and the time in Tokyo?"}],
            **extra}


def _stream(stack: Stack, body: dict[str, Any]) -> bytes:
    with stack.client.stream("POST", CHAT, json=body) as resp:
        assert resp.status_code == 200 and resp.headers["x-specgate-pool"] == "spec"
        return b"".join(resp.iter_raw())


def test_interleaved_tool_call_deltas_arrive_byte_for_byte_streamed(stack: Stack) -> None:
    events = parallel_tool_call_events(INCONSISTENT)
    stack.script(stack.spec, {"sse_events": events})
    relayed = _stream(stack, request(stream=True, stream_options={"include_usage": True}))
    assert relayed == "".join(events).encode()  # index/id unchanged, nothing merged or appended
    assert UPSTREAM_FAILED_EVENT not in relayed
    assert stack.settled_inflight() == 0
    m = stack.router.metric
    # reasoning_tokens = completion_tokens + 3: counted as completion_tokens, flagged, stream kept
    assert m("specgate_completion_tokens_total", pool="spec") == 12
    assert m("specgate_reasoning_tokens_total", pool="spec") == 12
    assert m("specgate_usage_inconsistent_total", pool="spec") == 1
    assert m("specgate_suspect_truncations_total", pool="spec") == 0
    assert stack.settled_inflight() == 0


def test_interleaved_tool_calls_arrive_byte_for_byte_not_streamed(stack: Stack) -> None:
    body = orjson.dumps({
        "id": "c2", "object": "chat.completion", "created": 1, "model": "tiny-llama",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "matched_stop": None, "logprobs": None,
                     "message": {"role": "assistant", "content": None, "reasoning_content": "Two tools.",
                                 "tool_calls": [
                                     {"id": "call_0a", "index": 0, "type": "function",
                                      "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                                     {"id": "call_1b", "index": 1, "type": "function",
                                      "function": {"name": "get_time", "arguments": '{"tz": "Asia/Tokyo"}'}}]}}],
        "usage": {**INCONSISTENT, "completion_tokens_details": None}}).decode()
    stack.script(stack.spec, {"status": 200, "body_text": body, "content_type": "application/json"})
    resp = stack.client.post(CHAT, json=request())
    assert (resp.status_code, resp.headers["x-specgate-pool"]) == (200, "spec")
    assert resp.content == body.encode()
    assert stack.settled_inflight() == 0
    assert stack.router.metric("specgate_usage_inconsistent_total", pool="spec") == 1
    assert stack.router.metric("specgate_reasoning_tokens_total", pool="spec") == 12


def test_stop_with_only_reasoning_on_a_tools_request_is_a_suspect_truncation(stack: Stack) -> None:
    events = reasoning_only_events()
    stack.script(stack.spec, {"sse_events": events})
    assert _stream(stack, request(stream=True)) == "".join(events).encode()
    body = orjson.dumps({"id": "c3", "object": "chat.completion", "created": 1, "model": "tiny-llama",
                         "choices": [{"index": 0, "finish_reason": "stop", "matched_stop": 2,
                                      "message": {"role": "assistant", "content": None,
                                                  "reasoning_content": "I should call get_weather",
                                                  "tool_calls": None}}],
                         "usage": {"prompt_tokens": 40, "completion_tokens": 6, "total_tokens": 46}}).decode()
    stack.script(stack.spec, {"status": 200, "body_text": body, "content_type": "application/json"})
    assert stack.client.post(CHAT, json=request()).content == body.encode()
    assert stack.settled_inflight() == 0
    m = stack.router.metric
    assert m("specgate_suspect_truncations_total", pool="spec") == 2
    assert m("specgate_usage_inconsistent_total", pool="spec") == 0
    assert m("specgate_completion_tokens_total", pool="spec") == 15


@pytest.mark.parametrize("extra", [{"tools": None, "tool_choice": None}, {"tool_choice": "none"}])
def test_reasoning_only_without_tools_is_not_suspect(stack: Stack, extra: dict[str, Any]) -> None:
    stack.script(stack.spec, {"sse_events": reasoning_only_events()})
    body = {k: v for k, v in request(stream=True, **extra).items() if v is not None}
    _stream(stack, body)
    assert stack.settled_inflight() == 0
    assert stack.router.metric("specgate_suspect_truncations_total", pool="spec") == 0
    assert stack.router.metric("specgate_completion_tokens_total", pool="spec") == 9
