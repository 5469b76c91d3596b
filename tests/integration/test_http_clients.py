"""HTTP/1.x as clients and proxies send it, on the router's real listener on 127.0.0.1 with raw
sockets (router.front.http_limits, router.front.http_cycles): upgrade offers (``Upgrade: h2c``) served as
HTTP/1.1 with their body, HTTP/1.0 clients (close-delimited streams, no chunked framing),
``Expect`` on both versions, idle connections closed, and early answers read by a client that
is still sending. Gaps between a head and its body are the tests' input (how the bytes reach
the server), not waits for a condition."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.raw_http import RawConn, RawResponse
from tests.support.sse import sse_events
from tests.support.stack import Stack
from tests.support.wait import wait_until

IDLE_S = 0.5  # server.keepalive_timeout_s of these stacks
LINGER_S = 1.0  # server.linger_s
CHAT = b"/v1/chat/completions"
UPGRADE = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
#: What the router may send an engine: its own headers (router/upstream/proxy.py) and what the HTTP
#: client adds; hop-by-hop fields of the client's request never pass.
ENGINE_HEADERS = {"host", "content-type", "content-length", "x-request-id", "accept-encoding", "user-agent",
                  "accept"}


def chat(stream: bool = False, **kw: object) -> bytes:
    return json.dumps({"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       "stream": stream, **kw}).encode()


def request(body: bytes = b"", *, version: bytes = b"1.1", path: bytes = CHAT, extra: bytes = b"",
            length: int | None = None, chunked: bool = False) -> bytes:
    """A POST head (its framing: ``chunked``, else ``Content-Length`` of ``length`` or the body)."""
    framing = (b"transfer-encoding: chunked\r\n" if chunked
               else b"content-length: %d\r\n" % (len(body) if length is None else length))
    return (b"POST " + path + b" HTTP/" + version + b"\r\nhost: x\r\ncontent-type: application/json\r\n" + extra
            + framing + b"\r\n")


def chunks(body: bytes) -> bytes:
    half = len(body) // 2
    return b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:])


def assert_completion(r: RawResponse) -> None:
    assert r.status_line == b"HTTP/1.1 200 OK", r.status_line
    assert "upgrade" not in r.headers and r.framing == "length"
    assert json.loads(r.body)["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3"


def assert_error(r: RawResponse, status_line: bytes, code: str) -> dict[str, object]:
    assert r.status_line == status_line, (r.status_line, r.body[:200])
    assert r.headers["content-type"] == "application/json" and r.framing == "length"
    error = json.loads(r.body)["error"]
    assert (set(error), error["type"], error["param"], error["code"]) == (
        {"message", "type", "param", "code"}, "invalid_request_error", None, code)
    return error


@pytest.fixture(scope="module")
def hs(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Iterator[Stack]:
    """One stack for the module (engine calls are read as deltas): short idle and linger times."""
    s = Stack(tmp_path_factory.mktemp("http"), tokenizer_dir,
              **{"server.keepalive_timeout_s": IDLE_S, "server.linger_s": LINGER_S})
    try:
        yield s
    finally:
        s.close()


def engine_calls(s: Stack) -> list[dict[str, object]]:
    return s.backend_requests(s.spec, None) + s.backend_requests(s.plain, None)


def new_calls(s: Stack, before: int, expected: int) -> list[dict[str, object]]:
    """The engine requests since ``before`` once there are ``expected`` of them, each with
    only the router's own headers."""
    calls = wait_until(lambda: (c := engine_calls(s)[before:]) and len(c) >= expected and c, 5,
                       f"{expected} engine calls") if expected else engine_calls(s)[before:]
    assert len(calls) == expected
    for call in calls:
        assert set(call["headers"]) <= ENGINE_HEADERS, call["headers"]
    return calls


# -- upgrade offers -------------------------------------------------------------------------------

@pytest.mark.parametrize("segments", ["one", "two"])
@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
def test_an_h2c_offer_on_a_post_is_served_as_http1_with_its_body(hs: Stack, segments: str, chunked: bool) -> None:
    body = chat()
    head, payload = request(body, extra=UPGRADE, chunked=chunked), chunks(body) if chunked else body
    before = len(engine_calls(hs))
    with RawConn(hs.router.port) as c:
        if segments == "one":
            c.send(head + payload)
        else:
            c.send(head)
            time.sleep(0.05)  # the body in a later segment
            c.send(payload)
        assert_completion(c.response())
        assert c.closed_within(IDLE_S + 3) > IDLE_S * 0.8  # one response, then idle: kept alive
    (call,) = new_calls(hs, before, 1)
    assert call["body"]["messages"] == [{"role": "user", "content": "hi"}]


WEBSOCKET = (b"Connection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             b"Sec-WebSocket-Version: 13\r\n")


@pytest.mark.parametrize("offer", [UPGRADE, WEBSOCKET], ids=["h2c", "websocket"])
def test_an_offer_then_an_ordinary_post_are_two_responses_in_order(hs: Stack, offer: bytes) -> None:
    before = len(engine_calls(hs))
    with RawConn(hs.router.port) as c:
        c.send(request(chat(), extra=offer))
        time.sleep(0.05)  # the body in a later segment
        c.send(chat())
        first = c.response()
        c.send(request(chat(max_tokens=2)) + chat(max_tokens=2))
        second = c.response()
        assert_completion(first)
        assert second.status_line == b"HTTP/1.1 200 OK"
        assert json.loads(second.body)["choices"][0]["message"]["content"] == "tok0 tok1"
        assert c.closed_within(IDLE_S + 3) > IDLE_S * 0.8  # nothing more: no third response
    assert [call["body"]["max_tokens"] for call in new_calls(hs, before, 2)] == [4, 2]


def test_pipelined_offers_without_a_body_are_each_answered(hs: Stack) -> None:
    get = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n" + UPGRADE + b"\r\n"
    with RawConn(hs.router.port) as c:
        c.send(get * 3 + request(chat(), extra=UPGRADE + b"Connection: close\r\n") + chat())
        for _ in range(3):
            r = c.response()
            assert r.status_line == b"HTTP/1.1 200 OK" and "upgrade" not in r.headers
            assert [m["id"] for m in json.loads(r.body)["data"]] == ["tiny-llama"]
        last = c.response()
        assert_completion(last)
        assert last.headers["connection"] == "close"
        assert c.closed_within(3) < 1


def test_a_prior_knowledge_h2_preface_is_400_and_closed(hs: Stack) -> None:
    with RawConn(hs.router.port) as c:
        c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00")
        t0 = time.monotonic()
        r = c.response()
        assert_error(r, b"HTTP/1.1 400 Bad Request", "invalid_http_request")
        assert r.headers["connection"] == "close"
        assert c.closed_within(3) + (time.monotonic() - t0) < 2
    assert hs.client.post(CHAT.decode(), content=chat(), headers={"content-type": "application/json"}).status_code == 200


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_http2_on_a_cleartext_url_gets_http1(hs: Stack) -> None:
    out = subprocess.run(["curl", "-sS", "--http2", "-i", "--max-time", "10", "-H", "content-type: application/json",
                          "--data-binary", chat().decode(), f"{hs.router.base_url}/v1/chat/completions"],
                         capture_output=True, check=True, timeout=20).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"upgrade" not in head.lower()
    assert json.loads(body)["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3"


# -- HTTP/1.0 -------------------------------------------------------------------------------------

def test_an_http10_stream_is_close_delimited_without_chunks(hs: Stack) -> None:
    with RawConn(hs.router.port) as c:
        c.send(request(chat(stream=True), version=b"1.0") + chat(stream=True))
        r = c.response()
    assert r.status_line == b"HTTP/1.1 200 OK"
    assert "transfer-encoding" not in r.headers and "content-length" not in r.headers
    assert (r.framing, r.headers["connection"], r.headers["content-type"]) == (
        "close", "close", "text/event-stream; charset=utf-8")
    events, done = sse_events(r.body)  # exactly the event stream: no chunk-size line anywhere
    assert done and "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == "tok0 tok1 tok2 tok3"


@pytest.mark.parametrize("extra", [b"", b"Connection: keep-alive\r\n"], ids=["plain", "keep-alive"])
def test_an_http10_answer_has_a_length_and_closes(hs: Stack, extra: bytes) -> None:
    with RawConn(hs.router.port) as c:
        c.send(request(chat(), version=b"1.0", extra=extra) + chat())
        r = c.response()
        assert_completion(r)
        assert r.headers["connection"] == "close" and "transfer-encoding" not in r.headers
        assert c.closed_within(3) < 1


def test_an_http10_invalid_body_is_a_400_with_a_length(hs: Stack) -> None:
    before = len(engine_calls(hs))
    with RawConn(hs.router.port) as c:
        c.send(request(b"{nope", version=b"1.0") + b"{nope")
        r = c.response()
        assert_error(r, b"HTTP/1.1 400 Bad Request", "invalid_json")
        assert r.headers["connection"] == "close"
        assert c.closed_within(3) < 1
    new_calls(hs, before, 0)


def test_an_http11_stream_keeps_chunked_framing_and_the_connection(hs: Stack) -> None:
    with RawConn(hs.router.port) as c:
        for _ in range(2):
            c.send(request(chat(stream=True)) + chat(stream=True))
            r = c.response()
            assert (r.status, r.framing, "connection" in r.headers) == (200, "chunked", False)
            assert sse_events(r.body)[1]


# -- Expect ---------------------------------------------------------------------------------------

EXPECT = b"Expect: 100-continue\r\n"


def test_expect_100_continue_gets_the_interim_response_at_once_then_200(hs: Stack) -> None:
    before = len(engine_calls(hs))
    with RawConn(hs.router.port) as c:
        for _ in range(2):  # the connection stays usable
            c.send(request(chat(), extra=EXPECT))
            t0 = time.monotonic()
            assert c.head() == (b"HTTP/1.1 100 Continue", {})
            assert time.monotonic() - t0 < 0.5  # well under curl's 1 s wait
            c.send(chat())
            r = c.response()
            assert_completion(r)
            assert "connection" not in r.headers
    new_calls(hs, before, 2)  # no Expect header reaches an engine


def test_expect_with_the_body_already_sent_gets_no_interim_response(hs: Stack) -> None:
    with RawConn(hs.router.port) as c:
        c.send(request(chat(), extra=EXPECT) + chat())
        assert_completion(c.response())


@pytest.mark.parametrize(("version", "extra"), [(b"1.0", EXPECT), (b"1.0", b"Expect: 100-Continue\r\n")])
def test_http10_expect_is_ignored(hs: Stack, version: bytes, extra: bytes) -> None:
    with RawConn(hs.router.port) as c:
        c.send(request(chat(), version=version, extra=extra) + chat())
        assert_completion(c.response())  # the first bytes are the final status, no 100
        assert c.closed_within(3) < 1


@pytest.mark.parametrize(("path", "length", "status_line", "code"), [
    (CHAT, 41943040, b"HTTP/1.1 413 Request Entity Too Large", "request_too_large"),
    (b"/v1/nope", None, b"HTTP/1.1 404 Not Found", "not_found"),
])
def test_expect_gets_the_final_error_first_and_the_connection_closes(
        hs: Stack, path: bytes, length: int | None, status_line: bytes, code: str) -> None:
    before = len(engine_calls(hs))
    with RawConn(hs.router.port) as c:
        c.send(request(chat(), path=path, length=length, extra=EXPECT))  # the body is never sent
        r = c.response()
        assert_error(r, status_line, code)
        assert r.headers["connection"] == "close"
        assert c.closed_within(LINGER_S + 3) < LINGER_S  # the client need not send it
    new_calls(hs, before, 0)


def test_expect_without_an_api_key_gets_401_first(tmp_path: Path, tokenizer_dir: Path) -> None:
    s = Stack(tmp_path, tokenizer_dir, auth={"api_keys": ["sk-one"]})
    try:
        with RawConn(s.router.port) as c:
            c.send(request(chat(), extra=EXPECT))
            r = c.response()
            assert r.status_line == b"HTTP/1.1 401 Unauthorized" and r.headers["connection"] == "close"
            assert json.loads(r.body)["error"]["code"] == "invalid_api_key"
            assert c.closed_within(6) < 6
        assert engine_calls(s) == []
    finally:
        s.close()


@pytest.mark.parametrize(("version", "expect"), [
    (b"1.1", b"Expect: bytes-later\r\n"), (b"1.1", b"Expect: 100-continue, foo\r\n"), (b"1.0", b"Expect: foo=bar\r\n")])
def test_an_expectation_the_router_cannot_meet_is_417(hs: Stack, version: bytes, expect: bytes) -> None:
    before = len(engine_calls(hs))
    counted = hs.router.metric("specgate_request_framing_rejections_total", reason="expectation")
    with RawConn(hs.router.port) as c:
        c.send(request(chat(), version=version, extra=expect))
        r = c.response()
        error = assert_error(r, b"HTTP/1.1 417 Expectation Failed", "expectation_failed")
        assert error["message"] == "the router meets no expectation but 100-continue (Expect header)"
        assert r.headers["connection"] == "close"
        assert c.closed_within(LINGER_S + 3) < LINGER_S + 1
    new_calls(hs, before, 0)
    assert wait_until(lambda: hs.router.metric("specgate_request_framing_rejections_total",
                                               reason="expectation") == counted + 1, 5, "the 417 counted")


# -- idle connections -----------------------------------------------------------------------------

def test_a_connection_that_never_sends_a_byte_is_closed_on_the_idle_timeout(hs: Stack) -> None:
    with RawConn(hs.router.port) as a, RawConn(hs.router.port) as b:
        assert hs.inflight() == 0
        assert IDLE_S * 0.8 < a.closed_within(IDLE_S + 3) < IDLE_S + 2
        assert b.closed_within(2) < 1  # both were opened together
    assert hs.settled_inflight() == 0


def test_an_idle_keep_alive_connection_is_closed_after_its_response(hs: Stack) -> None:
    with RawConn(hs.router.port) as c:
        c.send(request(chat()) + chat())
        assert_completion(c.response())
        assert IDLE_S * 0.8 < c.closed_within(IDLE_S + 3) < IDLE_S + 2


def test_a_stream_longer_than_the_idle_timeout_is_not_cut(hs: Stack) -> None:
    hs.script(hs.spec, {"chunk_delay_s": 0.3})  # 6 events: about 2 s, four idle timeouts
    with RawConn(hs.router.port) as c:
        c.send(request(chat(stream=True)) + chat(stream=True))
        r = c.response()
    assert r.status == 200 and r.headers["x-specgate-pool"] == "spec"
    events, done = sse_events(r.body)
    assert done and len(events) == 6


# -- early answers read by a client still sending -------------------------------------------------

def test_a_413_is_read_by_a_client_that_uploads_its_whole_body(hs: Stack) -> None:
    """A 40 MiB body over ``limits.max_request_bytes``, sent whole before reading (as most
    clients do): the answer is read, not a reset."""
    with RawConn(hs.router.port) as c:
        c.send(request(length=40 << 20) + b"x" * (40 << 20))
        r = c.response()
        assert_error(r, b"HTTP/1.1 413 Request Entity Too Large", "request_too_large")
        assert r.headers["connection"] == "close"
        assert c.closed_within(LINGER_S + 3) < 1  # the FIN follows the answer


def test_a_client_that_keeps_the_connection_after_an_early_answer_is_closed_after_linger(hs: Stack) -> None:
    with RawConn(hs.router.port) as c:
        c.send(request(length=40 << 20) + b"x" * 1000)  # stops sending, keeps the connection
        r = c.response()
        assert r.status == 413
        c.send(b"x" * 1000)  # still read and discarded: no reset yet
        t0 = time.monotonic()
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            while time.monotonic() - t0 < LINGER_S + 5:
                c.send(b"x" * 1000)
                time.sleep(0.05)  # a slow uploader's pace
        assert LINGER_S * 0.5 < time.monotonic() - t0 < LINGER_S + 2  # read on until linger_s, then closed


# -- methods --------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [b"/health", b"/v1/models", b"/v1/models/tiny-llama", b"/metrics"])
def test_head_is_answered_wherever_get_is_with_the_head_alone(hs: Stack, path: bytes) -> None:
    """RFC 9110 9.3.2: the GET answer's head, no body; the connection carries the next request."""
    with RawConn(hs.router.port) as c:
        c.send(b"HEAD " + path + b" HTTP/1.1\r\nhost: x\r\n\r\nGET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        status_line, headers = c.head()
        assert status_line == b"HTTP/1.1 200 OK" and int(headers["content-length"]) > 0
        after = c.response()  # read right after the head: a body sent for HEAD would be read here
        assert (after.status_line, json.loads(after.body)) == (b"HTTP/1.1 200 OK", {"status": "ok"})


@pytest.mark.parametrize(("method", "path", "allow"), [
    (b"GET", CHAT, "POST"), (b"PUT", b"/v1/completions", "POST"), (b"POST", b"/health", "GET, HEAD"),
    (b"DELETE", b"/v1/models", "GET, HEAD")])
def test_a_405_names_the_allowed_methods(hs: Stack, method: bytes, path: bytes, allow: str) -> None:
    """RFC 9110 15.5.6: a 405 carries ``Allow``; the body is the OpenAI error envelope."""
    with RawConn(hs.router.port) as c:
        c.send(method + b" " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        r = c.response()
    assert_error(r, b"HTTP/1.1 405 Method Not Allowed", "method_not_allowed")
    assert r.headers["allow"] == allow


@pytest.mark.parametrize("version", [b"2.0", b"0.9"])  # llhttp parses these; it refuses HTTP/3.0 itself (400)
def test_a_request_line_of_another_major_version_is_505_and_closed(hs: Stack, version: bytes) -> None:
    with RawConn(hs.router.port) as c:
        c.send(b"GET /v1/models HTTP/" + version + b"\r\nhost: x\r\n\r\n")
        r = c.response()
        error = assert_error(r, b"HTTP/1.1 505 HTTP Version Not Supported", "http_version_not_supported")
        assert error["message"] == f"HTTP/{version.decode()} is not supported: send HTTP/1.1 or HTTP/1.0 (no HTTP/2 on this port)"
        assert r.headers["connection"] == "close"
        assert c.closed_within(3) < 1


def test_another_major_version_pipelined_after_a_request_closes_after_its_answer(hs: Stack) -> None:
    with RawConn(hs.router.port) as c:
        c.send(request(chat()) + chat() + b"GET /v1/models HTTP/2.0\r\nhost: x\r\n\r\n")
        assert_completion(c.response())
        assert c.closed_within(3) < 1  # nothing written into or after the first answer
