"""The one reader of a relayed stream (router.upstream.relay, router.upstream.observe): usage, finish reasons
and errors in any valid SSE and JSON spelling; comments and non-data fields carry nothing."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from router.ops.metrics import RouterMetrics
from router.upstream.observe import ResponseObserver
from router.upstream.relay import classify_event, event_json, may_carry_usage


def chunk(i: int, usage: bool = True, finish: str | None = None) -> dict:
    doc = {"id": "c", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": finish}]}
    doc["usage"] = {"prompt_tokens": 5, "completion_tokens": i, "total_tokens": 5 + i} if usage else None
    return doc


def compact(doc: dict) -> str:
    return "data: " + json.dumps(doc, separators=(",", ":")) + "\n\n"


def spaced(doc: dict) -> str:  # Python's json.dumps defaults: ", " and ": "
    return "data: " + json.dumps(doc) + "\n\n"


def reordered(doc: dict) -> str:  # usage first, no space after "data:", CRLF line ends, a comment before
    return ": keep-alive\r\n\r\ndata:" + json.dumps(dict(reversed(doc.items()))) + "\r\n\r\n"


def multiline(doc: dict) -> str:  # indented JSON, one data line per line (joined with newlines), other fields
    lines = "".join(f"data: {line}\n" for line in json.dumps(doc, indent=1).splitlines())
    return f"event: message\nid: 7\n{lines}\n"


def escaped(doc: dict) -> str:  # a key written with a \\u escape
    return "data: " + json.dumps(doc).replace('"usage"', '"us\\u0061ge"') + "\n\n"


def observe(text: str, step: int) -> tuple[ResponseObserver, float]:
    m = RouterMetrics(CollectorRegistry())
    obs = ResponseObserver(m, tools=False)
    data = text.encode()
    for i in range(0, len(data), step):
        obs.feed(data[i:i + step])
    obs.finish("spec")
    return obs, m.completion_tokens.values.get(("spec",), 0.0)


@pytest.mark.parametrize("spell", [compact, spaced, reordered, multiline, escaped])
@pytest.mark.parametrize("step", [1, 13, 1 << 20])
def test_cumulative_per_chunk_usage_counts_the_last_value_in_any_spelling(spell, step):
    events = [spell(chunk(i, finish="stop" if i == 10 else None)) for i in range(1, 11)]
    obs, counted = observe("".join(events) + "data: [DONE]\n\n", step)
    assert counted == 10  # never 55 (summed), never 0 (unread)
    assert obs.finish_reasons == ["stop"]
    assert obs.usage["completion_tokens"] == 10


def test_a_stream_cut_short_counts_what_it_saw():
    _, counted = observe("".join(spaced(chunk(i)) for i in range(1, 4)), 1 << 20)
    assert counted == 3


def test_an_error_event_is_read():
    obs = ResponseObserver(RouterMetrics(CollectorRegistry()), tools=True)
    obs.feed(b': x\r\n\r\ndata:{"error" : {"message": "boom", "code": 500}}\r\n\r\n')
    assert obs.error == {"message": "boom", "code": 500}


def test_chunks_without_usage_are_not_parsed():
    sglang = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}],"usage":null}\n\n'
    assert not may_carry_usage(sglang, len(sglang))
    assert not may_carry_usage(sglang * 3, len(sglang) * 3)
    for text in (compact(chunk(1)), spaced(chunk(1)), reordered(chunk(1)), escaped(chunk(1)),
                 compact(chunk(1, usage=False)) + compact(chunk(2))):
        data = text.encode()
        assert may_carry_usage(data, len(data)), text


def test_endings_are_read_for_a_tools_request_in_any_spelling():
    m = RouterMetrics(CollectorRegistry())
    obs = ResponseObserver(m, tools=True)
    reasoning = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}, "finish_reason": None}]}
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    obs.feed((spaced(reasoning) + reordered(end)).encode())
    obs.finish("spec")
    assert (obs.reasoning, obs.content, obs.finish_reasons) == (True, False, ["stop"])
    assert m.suspect_truncations.values[("spec",)] == 1


@pytest.mark.parametrize(("event", "kind"), [
    (b": keep-alive", "skip"),
    (b":", "skip"),
    (b"event: ping", "skip"),
    (b"id: 3\r\nretry: 1000", "skip"),
    (b"data:[DONE]", "content"),
    (b'data:{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}', "content"),
    (b': hi\ndata: {"error": {"code": 503, "message": "The request queue is full."}}', "error"),
    (b'data: {"choices": [{"delta": {}, "finish_reason": "abort"}]}', "abort"),
])
def test_the_first_event_peek_follows_the_sse_grammar(event, kind):
    assert classify_event(event) == kind


def test_event_json_reads_data_only():
    assert event_json(b": comment") is None
    assert event_json(b"data: [DONE]") is None
    assert event_json(b'data:\t{"a": 1}') == {"a": 1}  # JSON's own leading whitespace
    assert event_json(b'data:{"a": 1}') == {"a": 1}
