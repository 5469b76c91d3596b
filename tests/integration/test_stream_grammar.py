"""The engine's stream read by the SSE and JSON grammars over real HTTP on 127.0.0.1: comments
and non-data fields before a refusal do not commit the 200, any spelling of an event relays and
counts, and per-chunk usage (``stream_options.continuous_usage_stats``) counts its last value."""

from __future__ import annotations

import json

import pytest

from tests.support.sse import sse_events
from tests.support.stack import Stack
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"
KEEPALIVE = ": keep-alive\n\n"
QUEUE_FULL = ('data: {"error": {"object": "error", "message": "The request queue is full.", '
              '"type": "SERVICE_UNAVAILABLE", "param": null, "code": 503}}\n\n')
ABORT = 'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}\n\n'
DONE = "data: [DONE]\n\n"


def chat(**kw: object) -> dict:
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
            "stream": True, **kw}


def content(i: int, *, usage: bool = False, spaced: bool = False, finish: str | None = None) -> str:
    doc: dict = {"id": "x", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": finish}],
                 "usage": {"prompt_tokens": 9, "completion_tokens": i, "total_tokens": 9 + i} if usage else None}
    return "data: " + (json.dumps(doc) if spaced else json.dumps(doc, separators=(",", ":"))) + "\n\n"


def final_usage(n: int, *, spaced: bool = False) -> str:
    doc = {"id": "x", "object": "chat.completion.chunk", "choices": [],
           "usage": {"prompt_tokens": 9, "completion_tokens": n, "total_tokens": 9 + n}}
    return "data: " + (json.dumps(doc) if spaced else json.dumps(doc, separators=(",", ":"))) + "\n\n"


@pytest.mark.parametrize("before", [KEEPALIVE, ": ping - 2024-02-23 06:52:12\n\n", "event: ping\n\n",
                                    "id: 1\nretry: 500\n\n", ":\r\n\r\n"])
@pytest.mark.parametrize("refusal", [QUEUE_FULL, ABORT])
def test_a_comment_before_a_refusal_does_not_commit_the_200(stack: Stack, before: str, refusal: str) -> None:
    stack.script(stack.spec, {"sse_events": [before, refusal, DONE]})
    r = stack.client.post(CHAT, json=chat())
    assert r.status_code == 200, r.text
    assert r.headers["x-specgate-pool"] == "plain"  # failed over: the plain pool's clean stream
    chunks, done = sse_events(r.content)
    assert done and chunks and all("error" not in c for c in chunks)
    assert b"queue is full" not in r.content and b"abort" not in r.content
    reason = "stream_error" if refusal == QUEUE_FULL else "stream_abort"
    assert wait_until(lambda: stack.router.metric(
        "specgate_engine_rejections_total", pool="spec", reason=reason) == 1, 5, "the refusal counted")


def test_a_comment_before_a_refusal_with_every_pool_full_is_503(stack: Stack) -> None:
    stack.script(stack.spec, {"sse_events": [KEEPALIVE, QUEUE_FULL, DONE]})
    stack.script(stack.plain, {"sse_events": [KEEPALIVE, KEEPALIVE, QUEUE_FULL, DONE]})
    r = stack.client.post(CHAT, json=chat())
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "engine_overloaded"
    assert int(r.headers["retry-after"]) >= 1


def test_comments_between_every_event_relay_every_chunk(stack: Stack) -> None:
    events = [x for i in range(8) for x in (KEEPALIVE, content(i, finish="length" if i == 7 else None))]
    stack.script(stack.spec, {"sse_events": [*events, KEEPALIVE, DONE]})
    with stack.client.stream("POST", CHAT, json=chat()) as r:
        assert r.status_code == 200 and r.headers["x-specgate-pool"] == "spec"
        raw = r.read()
    assert raw == "".join([*events, KEEPALIVE, DONE]).encode()  # relayed as sent, [DONE] last, no error event


@pytest.mark.parametrize("after", [
    ": the stream is finished, the connection closes next\n\n",  # a comment longer than 32 bytes
    "id: 99999999999999999999999999999999\n\n",
    "event: end\ndata: {\"note\": \"an event after the end, longer than 32 bytes\"}\n\n",
])
@pytest.mark.parametrize("done", [DONE, "data:[DONE]\r\n\r\n", "event: done\ndata: [DONE]\nid: 12345678901234567890123\n\n"])
def test_bytes_after_the_done_event_do_not_make_a_complete_stream_fail(stack: Stack, done: str, after: str) -> None:
    events = [content(i, finish="length" if i == 3 else None) for i in range(4)]
    stack.script(stack.spec, {"sse_events": [*events, done, after]})
    r = stack.client.post(CHAT, json=chat())
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "spec")
    assert r.content == "".join([*events, done, after]).encode()  # relayed as sent, no error event appended
    assert stack.router.settled_metric("specgate_requests_total", 1, pool="spec", reason="speculative",
                                       status="200") == 1
    assert stack.router.metric("specgate_upstream_failures_total", pool="spec", kind="upstream_truncated") == 0


@pytest.mark.parametrize(("options", "spaced", "final"), [
    ({"include_usage": True, "continuous_usage_stats": True}, False, True),
    ({"continuous_usage_stats": True}, False, False),
    ({"include_usage": True, "continuous_usage_stats": True}, True, True),
])
def test_per_chunk_usage_counts_the_last_value(stack: Stack, options: dict, spaced: bool, final: bool) -> None:
    events = [content(i, usage=True, spaced=spaced, finish="length" if i == 10 else None) for i in range(1, 11)]
    events += [final_usage(10, spaced=spaced)] if final else []
    stack.script(stack.spec, {"sse_events": [*events, DONE]})
    before = stack.router.metric("specgate_completion_tokens_total", pool="spec")
    r = stack.client.post(CHAT, json=chat(stream_options=options))
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "spec"
    assert r.content == "".join([*events, DONE]).encode()  # every chunk's usage relayed unchanged
    assert wait_until(lambda: stack.router.metric("specgate_completion_tokens_total", pool="spec") - before == 10,
                      5, "10 tokens counted")
    stack.wait_scrapes(2)
    assert stack.router.metric("specgate_completion_tokens_total", pool="spec") - before == 10  # not 55


def test_a_stream_the_client_leaves_counts_the_last_usage_seen(stack: Stack) -> None:
    events = [content(i, usage=True, spaced=True) for i in range(1, 11)]
    stack.script(stack.spec, {"sse_events": [*events, DONE], "chunk_delay_s": 0.2})
    with stack.client.stream("POST", CHAT, json=chat(stream_options={"continuous_usage_stats": True})) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        seen = 0
        for line in lines:
            seen += line.startswith("data: ")
            if seen == 3:
                break
    assert wait_until(lambda: stack.settled_inflight() == 0, 10, "the lease released")
    counted = wait_until(lambda: stack.router.metric("specgate_completion_tokens_total", pool="spec"), 5,
                         "the usage counted")
    assert 1 <= counted <= 9
