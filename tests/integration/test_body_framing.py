"""Slow and malformed request bodies over real HTTP on 127.0.0.1 (router.front.http_limits): a body
dripped a byte at a time or stalled mid-way is cut at ``server.body_timeout_s`` with 408; bad
chunked framing, a body shorter than its Content-Length and garbage after a request get a JSON
400 or a closed connection; pipelined requests are answered in order. Never a 500, never an
engine call, never an in-flight count left behind."""

from __future__ import annotations

import json
import logging
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support import wait_until
from tests.support.stack import Stack

BODY = json.dumps({"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
TIMEOUT_S = 0.5


def head(length: int | None = len(BODY), path: bytes = b"/v1/chat/completions", extra: bytes = b"") -> bytes:
    framing = b"transfer-encoding: chunked\r\n" if length is None else b"content-length: %d\r\n" % length
    return (b"POST " + path + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" + framing + extra
            + b"\r\n")


def read_all(s: socket.socket) -> bytes:
    """Read until the server closes (or resets) the connection."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return out


def responses(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP/1.1 responses in ``raw`` (Content-Length framed): status, headers, body."""
    out = []
    while raw:
        head_bytes, _, rest = raw.partition(b"\r\n\r\n")
        status_line, *lines = head_bytes.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        n = int(headers["content-length"])
        out.append((int(status_line.split()[1]), headers, rest[:n]))
        raw = rest[n:]
    return out


def error_of(body: bytes) -> dict[str, object]:
    return json.loads(body)["error"]


@pytest.fixture(scope="module")
def fs(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Iterator[Stack]:
    """One stack for the module (its counters are read as deltas): a 0.5 s body timeout, and
    the plain pool also serving ``score`` (a pass-through route)."""
    s = Stack(tmp_path_factory.mktemp("framing"), tokenizer_dir,
              **{"server.body_timeout_s": TIMEOUT_S, "pools.1.serves": ["generate", "score"]})
    try:
        yield s
    finally:
        s.close()


class Watch:
    """The counters a test must leave as expected: framing rejections by reason, 5xx answers,
    engine calls; and errors logged by the router."""

    def __init__(self, stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
        self.stack, self.caplog = stack, caplog
        self.before = {r: self.framing(r) for r in ("body_timeout", "malformed", "transfer_coding")}
        self.engine_calls = self.calls()

    def framing(self, reason: str) -> float:
        return self.stack.router.metric("specgate_request_framing_rejections_total", reason=reason)

    def calls(self) -> int:
        return len(self.stack.backend_requests(self.stack.spec, None)) + len(
            self.stack.backend_requests(self.stack.plain, None))

    def counted(self, reason: str) -> int:
        return int(self.framing(reason) - self.before[reason])

    def check(self, *, body_timeout: int = 0, malformed: int = 0, transfer_coding: int = 0,
              engine_calls: int = 0) -> None:
        want = {"body_timeout": body_timeout, "malformed": malformed, "transfer_coding": transfer_coding}
        wait_until(lambda: {r: self.counted(r) for r in want} == want, 5,
                   lambda: f"rejections {({r: self.counted(r) for r in want})}")
        assert self.calls() - self.engine_calls == engine_calls
        assert self.stack.settled_inflight() == 0
        registry = self.stack.router.state.metrics.registry
        fives = [s for m in registry.collect() if m.name == "specgate_requests"
                 for s in m.samples if s.labels.get("status", "").startswith("5")]
        assert fives == []
        assert [r.getMessage() for r in self.caplog.records if r.levelno >= logging.ERROR] == []
        assert self.stack.client.post("/v1/chat/completions", content=BODY,
                                      headers={"content-type": "application/json"}).status_code == 200


@pytest.fixture
def watch(fs: Stack, caplog: pytest.LogCaptureFixture) -> Watch:
    caplog.set_level(logging.WARNING)
    return Watch(fs, caplog)


def drip(s: socket.socket, data: bytes, every_s: float) -> None:
    """Send ``data`` a byte at a time, ``every_s`` apart, until all is sent or the server
    answers (stopping then, so no reset destroys the answer before it is read)."""
    for i in range(len(data)):
        if select.select([s], [], [], every_s)[0]:
            return
        try:
            s.sendall(data[i:i + 1])
        except (BrokenPipeError, ConnectionResetError):
            return


@pytest.mark.parametrize("path", [b"/v1/chat/completions", b"/v1/score"])
def test_a_body_dripped_a_byte_at_a_time_is_408_and_closed(fs: Stack, watch: Watch, path: bytes) -> None:
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(head(path=path))
        t0 = time.monotonic()
        drip(s, BODY, 0.05)  # 90 bytes: 4.5 s if let
        raw = read_all(s)
        waited = time.monotonic() - t0
    ((status, headers, body),) = responses(raw)
    assert (status, headers["connection"]) == (408, "close")
    assert error_of(body) == {"message": "the request body did not arrive within 0.5 s (and 1 s more per 500 bytes received)",
                              "type": "invalid_request_error", "param": None, "code": "request_timeout"}
    assert TIMEOUT_S * 0.8 < waited < 4
    watch.check(body_timeout=1)


def test_a_body_that_stalls_midway_is_408(fs: Stack, watch: Watch) -> None:
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(head() + BODY[:40])  # then nothing
        raw = read_all(s)
    ((status, _, body),) = responses(raw)
    assert status == 408 and error_of(body)["code"] == "request_timeout"
    watch.check(body_timeout=1)


def test_a_body_that_keeps_arriving_above_the_min_rate_is_not_cut(fs: Stack, watch: Watch) -> None:
    body = json.dumps({"model": "tiny-llama", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "a " * 1500}]}).encode()
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(head(length=len(body), extra=b"connection: close\r\n"))
        t0 = time.monotonic()
        for at in range(0, len(body), 100):  # 2,000 bytes/s, 4x body_min_rate_bytes_s: 1.5 s in all
            time.sleep(0.05)
            s.sendall(body[at:at + 100])
        assert time.monotonic() - t0 > 2 * TIMEOUT_S  # well past body_timeout_s alone
        ((status, _, answer),) = responses(read_all(s))
    assert status == 200, answer
    watch.check(engine_calls=1)


def test_a_body_in_several_quick_reads_is_served_and_the_timer_restarts(fs: Stack, watch: Watch) -> None:
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        for _ in range(2):  # two requests on one kept-alive connection, each body in three reads
            s.sendall(head())
            for part in (BODY[:30], BODY[30:60], BODY[60:]):
                time.sleep(0.1)  # 0.3 s in all: within the 0.5 s
                s.sendall(part)
            got = b""
            while not got.endswith(b"}") or b"\r\n\r\n" not in got:
                got += s.recv(65536)
            ((status, headers, _),) = responses(got)
            assert status == 200 and headers.get("connection") != "close"
    watch.check(engine_calls=2)


def test_a_chunked_body_is_served(fs: Stack, watch: Watch) -> None:
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(BODY[i:i + 20]), BODY[i:i + 20]) for i in range(0, len(BODY), 20))
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(head(None, extra=b"connection: close\r\n") + chunks + b"0\r\n\r\n")
        ((status, _, _),) = responses(read_all(s))
    assert status == 200
    watch.check(engine_calls=1)


@pytest.mark.parametrize("bad", [
    b"zz\r\n{}\r\n0\r\n\r\n",                     # a chunk size that is no hex number
    b"fffffffffffffffffffff\r\n{}\r\n",            # one that overflows
    b"-2\r\n{}\r\n0\r\n\r\n",                      # a negative one
    b"2\r\n{}XX\r\n0\r\n\r\n",                     # chunk data longer than its size (no CRLF after it)
    b"2;\x01\r\n{}\r\n0\r\n\r\n",                  # a control character in a chunk extension
])
def test_bad_chunk_framing_is_a_json_400_and_closed(fs: Stack, watch: Watch, bad: bytes) -> None:
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(head(None) + bad)
        raw = read_all(s)
    ((status, headers, body),) = responses(raw)
    assert (status, headers["connection"], headers["content-type"]) == (400, "close", "application/json")
    err = error_of(body)
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", None, "invalid_http_request")
    assert str(err["message"]).startswith("invalid HTTP request: ")
    watch.check(malformed=1)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_cut_short_by_the_clients_end_of_stream_is_a_400(fs: Stack, watch: Watch, chunked: bool) -> None:
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(head(None) + b"20\r\n" + BODY[:10] if chunked else head(len(BODY) + 50) + BODY)
        s.shutdown(socket.SHUT_WR)  # a half-close: the client can still read the answer
        ((status, _, body),) = responses(read_all(s))
    assert status == 400
    assert error_of(body) == {"message": "invalid HTTP request: the request body ended before its Content-Length "
                                         "or last chunk", "type": "invalid_request_error", "param": None,
                              "code": "invalid_http_request"}
    watch.check(malformed=1)


@pytest.mark.parametrize("path", [b"/v1/chat/completions", b"/v1/score"])
def test_a_client_that_closes_mid_body_gets_nothing_and_costs_nothing(fs: Stack, watch: Watch, path: bytes) -> None:
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(head(len(BODY) + 50, path=path) + BODY)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset on close
    watch.check()  # no 500 counted or logged (the handler saw the disconnect), nothing leased


def test_pipelined_requests_are_answered_in_order_on_one_connection(fs: Stack, watch: Watch) -> None:
    ids = [b"pipe-%d" % i for i in range(3)]
    batch = b"".join(head(extra=b"x-request-id: " + rid + b"\r\n") + BODY for rid in ids)
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(batch)  # three requests in one write
        got: list[tuple[int, dict[str, str], bytes]] = []
        raw = b""
        while len(got) < 3:
            raw += s.recv(65536)
            try:
                got = responses(raw)
            except (ValueError, KeyError):
                continue
    assert [(status, h["x-request-id"]) for status, h, _ in got] == [(200, rid.decode()) for rid in ids]
    watch.check(engine_calls=3)


@pytest.mark.parametrize("tail", [
    b"GARBAGE / HTTP/1.1\r\n\r\n",                       # no HTTP method
    head(None) + b"zz\r\n{}\r\n0\r\n\r\n",              # a pipelined request with a bad chunk size
])
def test_bad_bytes_after_pipelined_requests_close_the_connection_after_their_answers(
        fs: Stack, watch: Watch, tail: bytes) -> None:
    batch = head(extra=b"x-request-id: one\r\n") + BODY + head(extra=b"x-request-id: two\r\n") + BODY + tail
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(batch)
        got = responses(read_all(s))  # the server closes after the two answers
    assert [(status, h["x-request-id"]) for status, h, _ in got] == [(200, "one"), (200, "two")]
    watch.check(malformed=1, engine_calls=2)


def test_a_request_cut_by_the_body_timeout_ends_its_span(tmp_path: Path, tokenizer_dir: Path) -> None:
    exporter = InMemorySpanExporter()
    s = Stack(tmp_path, tokenizer_dir, router_kwargs={"span_exporter": exporter}, tracing={"enabled": True},
              **{"server.body_timeout_s": TIMEOUT_S})
    try:
        with socket.create_connection(("127.0.0.1", s.router.port), timeout=10) as c:
            c.sendall(head() + BODY[:10])
            ((status, _, _),) = responses(read_all(c))
        assert status == 408
        wait_until(lambda: len(exporter.get_finished_spans()) == 1, 5, "the server span to end")
        (span,) = exporter.get_finished_spans()
        assert (span.attributes["http.response.status_code"], span.attributes["error.type"]) == (
            499, "client_disconnect")
        assert s.settled_inflight() == 0
    finally:
        s.close()


CHUNKS = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
NOT_CHUNKED_LAST = "the final transfer coding must be chunked, applied once (RFC 9112 section 6.3)"


@pytest.mark.parametrize(("fields", "version", "status", "message"), [
    (b"transfer-encoding: gzip, chunked\r\n", b"1.1", 501, "gzip"),  # served unzipped before
    (b"transfer-encoding: deflate , Chunked\r\n", b"1.1", 501, "deflate"),
    (b"transfer-encoding: br\r\ntransfer-encoding: chunked\r\n", b"1.1", 501, "br"),  # over two field lines
    (b"transfer-encoding: br\r\n", b"1.1", 400, NOT_CHUNKED_LAST),
    (b"transfer-encoding: identity\r\n", b"1.1", 400, NOT_CHUNKED_LAST),
    (b"transfer-encoding: chunked, gzip\r\n", b"1.1", 400, "Invalid `Transfer-Encoding` header value"),
    (b"transfer-encoding: chunked\r\n", b"1.0", 400, "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 section 6.1)"),
    (b"transfer-encoding: chunked\r\ncontent-length: %d\r\n" % len(CHUNKS), b"1.1", 400,
     "Content-Length can't be present with Transfer-Encoding"),
])
def test_a_transfer_coding_other_than_chunked_alone_is_refused_and_closed(
        fs: Stack, watch: Watch, fields: bytes, version: bytes, status: int, message: str) -> None:
    """RFC 9112 sections 6.1 and 6.3: chunked not final (or in HTTP/1.0, or beside a
    Content-Length): 400; another coding before a final chunked: 501. Closed after either."""
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/" + version + b"\r\nhost: x\r\ncontent-type: application/json\r\n"
                  + fields + b"\r\n" + CHUNKS + head() + BODY)  # and a request after it, never answered
        ((got, headers, body),) = responses(read_all(s))
    assert (got, headers["connection"], headers["content-type"]) == (status, "close", "application/json")
    if status == 501:
        assert error_of(body) == {
            "message": f"transfer coding '{message}' is not supported: send the body with Content-Length, or with "
                       "Transfer-Encoding: chunked alone", "type": "invalid_request_error", "param": None,
            "code": "unsupported_transfer_coding"}
        watch.check(transfer_coding=1)
    else:
        assert error_of(body) == {"message": f"invalid HTTP request: {message}", "type": "invalid_request_error",
                                  "param": None, "code": "invalid_http_request"}
        watch.check(malformed=1)


@pytest.mark.parametrize("value", [b"CHUNKED", b"  chunked  "])
def test_chunked_alone_in_any_case_is_served(fs: Stack, watch: Watch, value: bytes) -> None:
    with socket.create_connection(("127.0.0.1", fs.router.port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"connection: close\r\ntransfer-encoding: " + value + b"\r\n\r\n" + CHUNKS)
        ((status, _, _),) = responses(read_all(s))
    assert status == 200
    watch.check(engine_calls=1)
