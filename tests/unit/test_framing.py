"""The engine's stream and body read by the SSE and JSON grammars (router.upstream.relay), not by
one serializer's bytes."""

from __future__ import annotations

import pytest

from router.upstream.relay import body_abort, classify_event, find_abort, sse_data, stream_done

ABORTS = [
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}',
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]}',
    b'data:{"choices":[{"index":0,"delta":{},"finish_reason" :\t"abort"}]}',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"\\u0061bort"}]}',
    b'data: {"choices":[{"index":0,"delta":{},\r\ndata: "finish_reason":"abort"}]}',  # two data lines
    b'event: message\r\ndata: {"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}\r',
]


@pytest.mark.parametrize("event", ABORTS)
def test_an_abort_before_content_is_found_in_any_spacing(event):
    assert classify_event(event) == "abort"
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n' + event + b"\n\ndata: [DONE]\n\n"
    assert find_abort(chunk) == chunk.index(event)


@pytest.mark.parametrize("event", [
    b'data: {"choices":[{"index":0,"delta":{"content":"abort"},"finish_reason":null}]}',
    b'data: {"choices":[{"index":0,"delta":{"content":"\\"finish_reason\\": \\"abort\\""}}]}',
    b'data: {"choices":[{"index":0,"text":"\\u0061bort","finish_reason":"stop"}]}',
    b": abort keep-alive", b"data: [DONE]", b"data: not json abort",
])
def test_the_word_abort_in_content_is_not_an_abort(event):
    assert find_abort(event + b"\n\n") is None
    # a comment carries no data: nothing has started (the SSE grammar), so it commits nothing
    assert classify_event(event) == ("skip" if event.startswith(b":") else "content")


def test_classify_reads_errors_and_skips_with_any_framing():
    assert classify_event(b'data:{ "error" : {"code": 503}}') == "error"
    assert classify_event(b'data: {"error": {"message": "The request queue is full.", "code": 503}}') == "error"
    assert classify_event(b'data:{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}') == "skip"
    assert classify_event(b'data: {"choices": [], "usage": {"prompt_tokens": 3}}') == "skip"
    assert classify_event(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}') == "content"


def test_sse_data_follows_the_event_stream_grammar():
    assert sse_data(b"data: x") == b"x"
    assert sse_data(b"data:x") == b"x"
    assert sse_data(b"data:  x") == b" x"  # only one space is removed
    assert sse_data(b"data: a\r\ndata:b\ndata") == b"a\nb\n"
    assert sse_data(b": comment") is None and sse_data(b"event: ping") is None


def test_find_abort_needs_a_whole_event():
    part = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}'
    assert find_abort(part) is None  # no blank line yet: held until it ends
    assert find_abort(b"data: [DONE]\n\n" + part + b"\n\n") == 14


@pytest.mark.parametrize(("body", "verdict"), [
    (b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "tok0"}, "finish_reason": "abort"}]}',
     "after_content"),
    (b'{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason" : "abort"}]}',
     "before_content"),
    (b'{"choices":[{"index":0,"text":"","finish_reason":"\\u0061bort"}]}', "before_content"),
    (b'{"choices":[{"index":0,"text":"abort","finish_reason":"length"}]}', None),
    (b'{"choices":[{"index":0,"message":{"content":"ok"},"finish_reason":"stop"}]}', None),
    (b"not json", None),
])
def test_body_abort(body, verdict):
    assert body_abort(body) == verdict


def test_stream_done_with_or_without_the_space():
    assert stream_done(b"...\n\ndata: [DONE]\n\n") and stream_done(b"data:[DONE]\n\n")
    assert not stream_done(b'data: {"x":"[DONE]"}\n\n')
    assert not stream_done(b'data: {"x":"\\ndata: [DONE]\\n"}\n\n')  # an escaped line end in a JSON string


def test_stream_done_whatever_follows_the_done_event():
    assert stream_done(b"data: [DONE]\n\n: a trailing comment of any length, after the end\n\n")
    assert stream_done(b"event: done\r\ndata:[DONE]\r\nid: 7\r\n\r\n")
    assert stream_done(b"data: [DONE]")  # the stream's last bytes, its blank line missing
    assert not stream_done(b"data: [DONE] and more\n\n")


@pytest.mark.parametrize(("data", "done"), [
    (b'data: {"x":"[DONE]"}\n\ndata: [DONE]\n\n', True),  # the second one ends the stream
    (b"data: [DONE]", True), (b"data:[DONE]", True), (b"\rdata: [DONE]\r", True),
    (b"[DONE]\n\n", False), (b" [DONE]\n", False), (b":[DONE]\n", False),  # no data field
    (b"xdata: [DONE]\n\n", False), (b"data:  [DONE]\n\n", False), (b"data: [DONE]x", False),
    (b"event: a\ndata: [DONE][DONE]\n", False), (b"data: x\n\nid: [DONE]\n\n", False),
])
def test_stream_done_reads_the_done_line_by_its_neighbours(data, done):
    assert stream_done(data) is done


def test_cr_and_crlf_line_ends_are_read_by_the_grammar():
    from router.upstream.relay import complete_events, next_event

    crlf = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    assert next_event(crlf) == (crlf.index(b"\r\n\r\n"), crlf.index(b"\r\n\r\n") + 4)
    assert complete_events(crlf) == len(crlf) and complete_events(crlf[:-1]) == crlf.index(b"data: [DONE]")
    assert complete_events(b"data: x") == 0 and complete_events(b"data: x\n\ndata: y") == 9
    assert complete_events(b"data: x\r\rdata: y") == 9 and next_event(b"data: x\r\ry") == (7, 9)
    abort = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]}'
    for sep in (b"\r\n\r\n", b"\r\r", b"\n\r\n"):
        chunk = b"data: a" + sep + abort + sep
        assert find_abort(chunk) == len(b"data: a" + sep)
    assert sse_data(b"data: a\rdata:b") == b"a\nb"
    assert classify_event(abort.replace(b"data: ", b"data:")) == "abort"


def test_stream_done_agrees_with_the_grammar_on_random_chunks():
    """The SSE grammar as a regular expression (a ``data`` line of ``[DONE]``, one optional
    space) is the reference; 5,000 seeded chunks of the pieces that matter."""
    import random
    import re

    line = re.compile(rb"(?:^|[\r\n])data: ?\[DONE\](?:[\r\n]|$)")
    pieces = [b"data:", b"data: ", b" ", b"[DONE]", b"\n", b"\r", b"x", b":", b"[DONE", b"DONE]"]
    rng = random.Random(7)
    for _ in range(5000):
        chunk = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert stream_done(chunk) is (line.search(chunk) is not None), chunk
