"""Limits on a request's head over real HTTP on 127.0.0.1 (router.front.http_limits): one huge
header, thousands of fields, and heads that never end are cut at the limit with 431."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tests.support import wait_until
from tests.support.stack import Stack

BODY = json.dumps({"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()


def head(extra: bytes = b"") -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(BODY)).encode() + b"\r\n" + extra)


def exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` (tolerating the server closing meanwhile) and read until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out and b"connection: close" not in out.split(b"\r\n\r\n")[0]:
                    break  # a kept-alive answer: do not wait for a close
        except (ConnectionResetError, TimeoutError):
            pass
        return out


LIMIT_TEXT = {"bytes": "65536 bytes", "fields": "100 fields", "field_bytes": "8192 bytes per field"}


def _answer_408(c: socket.socket, t0: float) -> tuple[bytes, float]:
    """Everything the router sends until it closes, which must be a 408, and the seconds since
    ``t0`` (monotonic) that took."""
    raw = b""
    while chunk := c.recv(65536):
        raw += chunk
    waited = time.monotonic() - t0
    assert raw.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), raw[:200]
    return raw, waited


def assert_431_or_closed(raw: bytes, limits: tuple[str, ...]) -> str | None:
    """The 431 for one of ``limits`` (or nothing: the server may reset before the client reads);
    returns the limit its message names (None when nothing arrived)."""
    if not raw:
        return None
    status, _, rest = raw.partition(b"\r\n")
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large", raw[:200]
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    named = [limit for limit in limits if error["message"] == f"request header fields too large (limit: {LIMIT_TEXT[limit]})"]
    assert len(named) == 1, error
    assert {k: v for k, v in error.items() if k != "message"} == {
        "type": "invalid_request_error", "param": None, "code": "request_header_fields_too_large"}
    return named[0]


@pytest.mark.parametrize(("extra", "limits"), [
    (b"x-big: " + b"a" * (8 << 20) + b"\r\n\r\n", ("bytes",)),                  # one 8 MiB header
    # 20,000 fields (~200 KB) pass both the bytes and the fields limit: which one the router
    # meets first depends on how the bytes arrive (the first read may hold 101 fields or 64 KiB).
    (b"".join(b"x-h%d: v\r\n" % i for i in range(20_000)) + b"\r\n", ("bytes", "fields")),
    (b"".join(b"x-h%d: v\r\n" % i for i in range(150)) + b"\r\n", ("fields",)),    # 150 fields, 1.5 KB
    (b"x-one: " + b"a" * 9000 + b"\r\n\r\n", ("field_bytes",)),                  # one 9 KB field
])
def test_a_head_over_a_limit_is_431_and_closed(stack: Stack, extra: bytes, limits: tuple[str, ...]) -> None:
    raw = exchange(stack.router.port, head(extra) + BODY)
    named = assert_431_or_closed(raw, limits)

    def counted() -> dict[str, float]:
        return {limit: stack.router.metric("specgate_header_limit_rejections_total", limit=limit)
                for limit in LIMIT_TEXT}

    wait_until(lambda: sum(counted().values()) == 1, 5, f"one rejection ({'/'.join(limits)}) counted")
    got = [limit for limit, n in counted().items() if n == 1]
    assert got[0] in limits and (named is None or got == [named])
    assert stack.backend_requests(stack.spec, None) == [] and stack.backend_requests(stack.plain, None) == []
    # the rest of the request is read and discarded after the answer (a lingering close), so
    # a client that writes its whole request before reading gets the 431, never a reset
    assert named is not None and raw.startswith(b"HTTP/1.1 431 ")


def test_heads_within_the_limits_are_served_on_a_kept_alive_connection(stack: Stack) -> None:
    extra = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 500) for i in range(90)) + b"\r\n"  # 90 fields, ~46 KB
    one = head(extra) + BODY
    with socket.create_connection(("127.0.0.1", stack.router.port), timeout=10) as s:
        for _ in range(3):  # the count restarts with each request
            s.sendall(one)
            got = b""
            while b"\r\n\r\n" not in got:
                got += s.recv(65536)
            assert got.startswith(b"HTTP/1.1 200 "), got[:200]
            length = int(next(line.split(b":")[1] for line in got.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(got.partition(b"\r\n\r\n")[2]) < length:
                got += s.recv(65536)
    assert stack.router.metric("specgate_header_limit_rejections_total", limit="bytes") == 0


def test_endless_heads_are_cut_without_stalling_other_clients(tmp_path, tokenizer_dir) -> None:
    """Two connections stream header bytes in 64 KiB writes and never stop: each gets its 431
    and is closed ``server.linger_s`` (1 s here) later, while it is still sending; small
    requests every 50 ms keep their latency."""
    s = Stack(tmp_path, tokenizer_dir, **{"server.linger_s": 1.0})
    block = b"a" * 65536
    cut_after: list[float] = []

    def flood() -> None:
        with socket.create_connection(("127.0.0.1", s.router.port), timeout=10) as c:
            t0 = time.monotonic()
            try:
                c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-flood: ")
                while time.monotonic() - t0 < 30:
                    c.sendall(block)
            except (BrokenPipeError, ConnectionResetError):
                cut_after.append(time.monotonic() - t0)

    try:
        floods = [threading.Thread(target=flood) for _ in range(2)]
        for t in floods:
            t.start()
        latencies = []
        t0 = time.monotonic()
        while any(t.is_alive() for t in floods) or time.monotonic() - t0 < 1.0:
            start = time.monotonic()
            r = s.client.post("/v1/chat/completions", content=BODY, headers={"content-type": "application/json"})
            latencies.append(time.monotonic() - start)
            assert r.status_code == 200
            time.sleep(0.05)  # the pace of the other client's requests
            assert time.monotonic() - t0 < 40
        for t in floods:
            t.join()
        assert len(cut_after) == 2 and all(0.9 < t < 5 for t in cut_after), cut_after  # linger_s, not 30 s
        assert max(latencies) < 1.5, latencies
        assert s.router.metric("specgate_header_limit_rejections_total", limit="bytes") == 2
    finally:
        s.close()


def test_a_request_target_over_the_field_limit_is_431(stack: Stack) -> None:
    raw = exchange(stack.router.port, b"POST /v1/chat/completions?x=" + b"a" * 9000 + b" HTTP/1.1\r\nhost: x\r\n"
                   b"content-type: application/json\r\ncontent-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
    assert assert_431_or_closed(raw, ("field_bytes",)) == "field_bytes"
    assert raw.startswith(b"HTTP/1.1 431 ")
    assert stack.router.metric("specgate_header_limit_rejections_total", limit="field_bytes") == 1


def test_a_head_dripped_slower_than_the_head_timeout_is_408(tmp_path, tokenizer_dir) -> None:
    s = Stack(tmp_path, tokenizer_dir, **{"server.headers": {"head_timeout_s": 0.5}})
    try:
        with socket.create_connection(("127.0.0.1", s.router.port), timeout=10) as c:
            c.sendall(head())  # the head, without its blank line
            t0 = time.monotonic()
            for _ in range(3):  # a byte now and then: uvicorn's keep-alive timer alone would restart
                time.sleep(0.1)
                c.sendall(b"x")
            raw, waited = _answer_408(c, t0)
        assert json.loads(raw.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
        assert 0.4 < waited < 5
        assert s.router.metric("specgate_header_limit_rejections_total", limit="head_timeout") == 1
        r = s.client.post("/v1/chat/completions", content=BODY, headers={"content-type": "application/json"})
        assert r.status_code == 200  # whole heads are not timed
    finally:
        s.close()


@pytest.mark.parametrize(("second", "limit"), [
    (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n", "head_timeout"),  # never ends
    (b"POST /v1/chat/completions HTTP/1.1\r\nx-big: " + b"a" * 100_000, "bytes"),  # over 64 KiB
])
def test_a_pipelined_head_cut_while_a_stream_is_sent_leaves_that_stream_whole(tmp_path, tokenizer_dir,
                                                                              second: bytes, limit: str) -> None:
    from tests.support.raw_http import RawConn
    from tests.support.sse import sse_events

    s = Stack(tmp_path, tokenizer_dir, **{"server.headers": {"head_timeout_s": 0.3}})
    try:
        events = [f'data: {{"choices":[{{"index":0,"delta":{{"content":"t{i}"}}}}]}}\n\n' for i in range(6)]
        s.script(s.spec, {"sse_events": [*events, "data: [DONE]\n\n"], "chunk_delay_s": 0.25})  # 1.75 s
        stream = json.dumps({"model": "tiny-llama", "stream": True, "max_tokens": 8,
                             "messages": [{"role": "user", "content": "hi"}]}).encode()
        with RawConn(s.router.port) as c:
            c.send(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                   b"content-length: %d\r\n\r\n" % len(stream) + stream)
            status_line, headers = c.head()  # the stream has started: the next head follows it
            c.send(second)
            r = c.response_after(status_line, headers)
            assert (r.status, r.framing) == (200, "chunked")
            chunks, done = sse_events(r.body)  # no 408 or 431 written into the stream
            assert done and [ch["choices"][0]["delta"]["content"] for ch in chunks] == [f"t{i}" for i in range(6)]
            cut = c.response()  # then the cut head's answer, and the close
            assert cut.status == (408 if limit == "head_timeout" else 431)
            assert json.loads(cut.body)["error"]["code"] == (
                "request_timeout" if limit == "head_timeout" else "request_header_fields_too_large")
            assert cut.headers["connection"] == "close"
            assert c.closed_within(3) < 1
        assert wait_until(lambda: s.router.metric("specgate_header_limit_rejections_total", limit=limit) == 1, 5,
                          "the rejection counted")
    finally:
        s.close()


@pytest.mark.parametrize("after_response", [False, True])
def test_the_head_timeout_counts_from_the_idle_start_not_the_first_byte(tmp_path, tokenizer_dir,
                                                                        after_response: bool) -> None:
    """A connection idle first (from its start, or from the end of its previous response), then
    dripping a head: the 408 comes ``head_timeout_s`` after the idle start."""
    s = Stack(tmp_path, tokenizer_dir, **{"server.headers": {"head_timeout_s": 1.0}})
    try:
        with socket.create_connection(("127.0.0.1", s.router.port), timeout=10) as c:
            if after_response:
                c.sendall(head(b"\r\n") + BODY)
                answer = b""
                while not answer.endswith(b"}"):
                    answer += c.recv(65536)
                assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            t0 = time.monotonic()
            time.sleep(0.8)  # idle (the input): below the keep-alive timeout
            c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
            c.sendall(b"host: x\r\n")
            _, waited = _answer_408(c, t0)
        assert 0.9 < waited < 1.5  # not 0.8 + 1.0
    finally:
        s.close()


def test_a_request_then_an_8_mib_header_in_one_write_get_the_answer_then_the_431(stack: Stack) -> None:
    from tests.support.raw_http import RawConn

    with RawConn(stack.router.port) as c:
        c.send(head(b"\r\n") + BODY + b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (8 << 20)
               + b"\r\n\r\n")  # as a pipelining client writes them: whole, before reading
        first, cut = c.response(), c.response()
        assert first.status == 200 and json.loads(first.body)["object"] == "chat.completion"
        assert (cut.status, cut.headers["connection"]) == (431, "close")
        assert json.loads(cut.body)["error"] == {
            "message": "request header fields too large (limit: 65536 bytes)", "type": "invalid_request_error",
            "param": None, "code": "request_header_fields_too_large"}
        assert c.closed_within(7) < 6  # the FIN after the 431 (a lingering close, not a reset)


@pytest.mark.parametrize(("first", "rest_after_answer"), [
    (head(b"\r\n") + BODY, False),  # a Content-Length request, then the cut head, in one write
    (head(b"\r\n") + BODY, True),  # the same, and the head's last bytes after the answer
    (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"  # a chunked one
     b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY), False),
    (b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n", False),  # one without a body
])
def test_a_head_in_the_same_read_as_the_request_before_it_counts_against_max_bytes(
        tmp_path, tokenizer_dir, first: bytes, rest_after_answer: bool) -> None:
    """The bytes of a head that arrive in one read with a whole request before it are counted:
    past ``max_bytes`` (4096 here) it gets its 431 after that request's answer, not the 408 of
    the head timer (20 s here, past the client's 10 s wait)."""
    from tests.support.raw_http import RawConn

    s = Stack(tmp_path, tokenizer_dir, **{"server.headers": {"max_bytes": 4096, "head_timeout_s": 20.0}})
    try:
        cut = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 6000
        with RawConn(s.router.port) as c:
            c.send(first + (cut[:3000] if rest_after_answer else cut))  # under 4096 in a read of its own
            assert c.response().status == 200
            if rest_after_answer:
                c.send(cut[3000:])
            answer = c.response()
            assert (answer.status, answer.headers["connection"]) == (431, "close")
            assert json.loads(answer.body)["error"] == {
                "message": "request header fields too large (limit: 4096 bytes)", "type": "invalid_request_error",
                "param": None, "code": "request_header_fields_too_large"}
            assert c.closed_within(7) < 6
        assert s.router.metric("specgate_header_limit_rejections_total", limit="bytes") == 1
        assert s.router.metric("specgate_header_limit_rejections_total", limit="head_timeout") == 0
        assert s.settled_inflight() == 0
    finally:
        s.close()
