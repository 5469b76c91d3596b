"""SSE keep-alive comments toward the client while the engine is silent mid-stream, over real
HTTP on 127.0.0.1: the only addition to the stream, never before the status line, and the
router's idle timeout still counts the engine's silence."""

from __future__ import annotations

import json
import time
from itertools import pairwise

import pytest

from router.upstream.proxy import UPSTREAM_TIMEOUT_EVENT
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
KEEPALIVE = b": keep-alive\n\n"
DONE = "data: [DONE]\n\n"


def content(i: int) -> str:
    doc = {"id": "x", "object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": "length" if i == 5 else None}]}
    return "data: " + json.dumps(doc, separators=(",", ":")) + "\n\n"


def timed(stack: Stack) -> tuple[int, bytes, list[float]]:
    """The status, the body and the gaps (s) between the byte reads the client made."""
    body = {"model": "tiny-llama", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with stack.client.stream("POST", CHAT, json=body) as r:
        parts, times = [], [time.monotonic()]
        for part in r.iter_raw():
            parts.append(part)
            times.append(time.monotonic())
    return r.status_code, b"".join(parts), [b - a for a, b in pairwise(times[1:])]


def _beating_stack(tmp_path, tokenizer_dir, first_byte_timeout_s: float):
    """A stack whose router sends a comment every 0.25 s of engine silence."""
    s = Stack(tmp_path, tokenizer_dir, upstream={"first_byte_timeout_s": first_byte_timeout_s, "idle_timeout_s": 5.0,
                                                 "nonstream_timeout_s": 10.0, "stream_keepalive_s": 0.25})
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def beating(tmp_path, tokenizer_dir):
    yield from _beating_stack(tmp_path, tokenizer_dir, 5.0)


def test_comments_fill_the_engine_silence_and_are_the_only_addition(beating):
    events = [content(i) for i in range(6)]
    beating.script(beating.spec, {"sse_events": [*events, DONE], "chunk_delay_s": 1.0})  # 1 s between events
    status, raw, gaps = timed(beating)
    assert status == 200
    assert not raw.startswith(b":")  # the status and the first content came first
    assert raw.replace(KEEPALIVE, b"") == "".join([*events, DONE]).encode()  # in order, nothing else added
    assert raw.count(KEEPALIVE) >= 6  # about 3 per silent second
    assert max(gaps) < 0.9  # never a second without a byte (the engine's own gaps are 1 s)


def test_no_comment_before_the_status_line(beating):
    beating.script(beating.spec, {"sse_events": [content(0), DONE], "delay_s": 1.0})  # a long prefill
    status, raw, _ = timed(beating)
    assert status == 200
    assert raw == (content(0) + DONE).encode()


def test_the_idle_timeout_still_counts_engine_silence(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, upstream={"first_byte_timeout_s": 5.0, "idle_timeout_s": 1.0,
                                                 "nonstream_timeout_s": 10.0, "stream_keepalive_s": 0.2})
    try:
        s.script(s.spec, {"sse_events": [content(0), content(1), DONE], "chunk_delay_s": 3.0})
        started = time.monotonic()
        status, raw, _ = timed(s)
        took = time.monotonic() - started
        assert status == 200
        assert raw.startswith(content(0).encode()) and raw.endswith(UPSTREAM_TIMEOUT_EVENT)
        assert raw.count(KEEPALIVE) >= 3
        assert took < 2.9  # cut at the 1 s idle timeout after the first content, not the engine's 3 s
    finally:
        s.close()


def test_off_when_zero(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, upstream={"first_byte_timeout_s": 5.0, "idle_timeout_s": 5.0,
                                                 "nonstream_timeout_s": 10.0, "stream_keepalive_s": 0})
    try:
        s.script(s.spec, {"sse_events": [content(0), content(1), DONE], "chunk_delay_s": 0.6})
        status, raw, _ = timed(s)
        assert (status, raw) == (200, (content(0) + content(1) + DONE).encode())
    finally:
        s.close()


ROLE = ('data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant",'
        '"content":""},"finish_reason":null}]}\n\n')
ABORT = 'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}\n\n'


@pytest.fixture
def slow_first(tmp_path, tokenizer_dir):
    """Comments every 0.25 s, and a first-byte timeout (1 s) shorter than the engine's silence
    between its role chunk and its first content."""
    yield from _beating_stack(tmp_path, tokenizer_dir, 1.0)


def test_silence_after_the_role_chunk_commits_and_beats_instead_of_timing_out(slow_first):
    """Hidden reasoning (``stream_reasoning: false``) or a buffered tool call: SGLang sends the
    role chunk at the first token, then nothing until the first visible delta."""
    events = [ROLE, *(content(i) for i in range(3)), DONE]
    slow_first.script(slow_first.spec, {"sse_events": events, "chunk_delay_s": 1.2})  # content at 1.2 s
    status, raw, gaps = timed(slow_first)
    assert status == 200
    assert raw.startswith(ROLE.encode())  # the role chunk first: the status went out with it
    assert raw.replace(KEEPALIVE, b"") == "".join(events).encode()  # nothing else added, no error event
    assert raw.index(KEEPALIVE) < raw.index(content(0).encode())  # comments fill the silence before content
    assert max(gaps) < 0.6
    assert len(slow_first.backend_requests(slow_first.spec)) == 1  # no first-byte timeout, no failover
    assert slow_first.backend_requests(slow_first.plain) == []


def test_a_refusal_right_after_the_role_chunk_still_fails_over(slow_first):
    slow_first.script(slow_first.spec, {"sse_events": [ROLE, ABORT, DONE], "chunk_delay_s": 0.1})
    r = slow_first.client.post(CHAT, json={"model": "tiny-llama", "stream": True, "max_tokens": 8,
                                           "messages": [{"role": "user", "content": "hi"}]})
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain")
    assert b"abort" not in r.content and not r.content.startswith(b":")
