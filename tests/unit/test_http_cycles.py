"""router.front.http_cycles.PlainCycle against uvicorn's RequestResponseCycle (0.55): the same
bytes on the wire, the same state and the same errors for the same ASGI messages; the head of
a Content-Length response goes out with the body's first message in one write."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from router.front.http_cycles import PlainCycle

DATE = [(b"date", b"Mon, 07 Dec 2026 02:00:00 GMT")]


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(cls: type[RequestResponseCycle], method: str = "POST", keep_alive: bool = True,
           default_headers: list[tuple[bytes, bytes]] | None = None) -> tuple[Any, _Transport, list[int]]:
    transport = _Transport()
    done: list[int] = []
    log = logging.getLogger("test-http-cycles")
    kw: dict[str, Any] = {
        "scope": {"type": "http", "method": method, "http_version": "1.1", "path": "/", "query_string": b""},
        "transport": transport, "flow": FlowControl(transport), "logger": log, "access_logger": log,
        "access_log": False, "default_headers": DATE if default_headers is None else default_headers,
        "message_event": asyncio.Event(), "expect_100_continue": False, "keep_alive": keep_alive,
        "on_response": lambda: done.append(1)}
    if cls is PlainCycle:
        cycle = PlainCycle(*kw.values())
    else:
        cycle = cls(**kw)
    return cycle, transport, done


def _state(cycle: Any) -> tuple[Any, ...]:
    return (cycle.response_started, cycle.response_complete, cycle.chunked_encoding,
            cycle.expected_content_length, cycle.keep_alive, cycle.message_event.is_set())


async def _run(cls: type[RequestResponseCycle], messages: list[dict[str, Any]], **kw: Any
               ) -> tuple[bytes, list[bytes], tuple[Any, ...], str | None, bool, int]:
    cycle, transport, done = _cycle(cls, **kw)
    error = None
    try:
        for message in messages:
            await cycle.send(message)
    except (RuntimeError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(cycle, PlainCycle):
            cycle.flush_head()  # what run_asgi does before it closes
    return b"".join(transport.writes), transport.writes, _state(cycle), error, transport.closed, len(done)


def start(status: int = 200, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": headers or []}


def body(data: bytes = b"", more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


JSON = [(b"content-type", b"application/json"), (b"x-request-id", b"abc"), (b"content-length", b"5")]
CASES: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "length": ([start(200, JSON), body(b"hello")], {}),
    "length in two parts": ([start(200, JSON), body(b"he", more=True), body(b"llo")], {}),
    "length, empty first part": ([start(200, JSON), body(b"", more=True), body(b"hello")], {}),
    "chunked stream": ([start(200, [(b"content-type", b"text/event-stream")]), body(b"data: 1\n\n", more=True),
                        body(b"", more=True), body(b"data: 2\n\n", more=True), body(b"")], {}),
    "chunked, last part with data": ([start(200), body(b"a", more=True), body(b"bc")], {}),
    "HEAD": ([start(200, JSON), body(b"")], {"method": "HEAD"}),
    "204": ([start(204), body(b"")], {}),
    "304 with length": ([start(304, [(b"content-length", b"0")]), body(b"")], {}),
    "upper-case names": ([start(200, [(b"Content-Type", b"a/b"), (b"Content-Length", b"2"), (b"X-Y", b"z")]),
                          body(b"ok")], {}),
    "connection close": ([start(200, [(b"Connection", b"Keep-Alive, Close"), (b"content-length", b"2")]),
                          body(b"ok")], {}),
    "not kept alive": ([start(200, JSON), body(b"hello")], {"keep_alive": False}),
    "transfer-encoding chunked given": ([start(200, [(b"transfer-encoding", b"Chunked")]), body(b"xy")], {}),
    "length after chunked": ([start(200, [(b"transfer-encoding", b"chunked"), (b"content-length", b"3")]),
                              body(b"xyz")], {}),
    "two lengths": ([start(200, [(b"content-length", b"3"), (b"content-length", b"9")]), body(b"xyz")], {}),
    "no default headers": ([start(200, JSON), body(b"hello")], {"default_headers": []}),
    "too long": ([start(200, JSON), body(b"hello!")], {}),
    "too short": ([start(200, JSON), body(b"hell")], {}),
    "bad name": ([start(200, [(b"x-ok", b"1"), (b"bad name", b"v"), (b"x-bad", b"a\nb")]), body(b"")], {}),
    "bad value first": ([start(200, [(b"x-bad", b"a\x00b"), (b"bad(name", b"v")]), body(b"")], {}),
    "bad length": ([start(200, [(b"content-length", b"five")]), body(b"")], {}),
    "body first": ([body(b"x")], {}),
    "start twice": ([start(200, JSON), start(200, JSON)], {}),
    "after the end": ([start(200, JSON), body(b"hello"), body(b"")], {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_plain_cycle_is_uvicorns_on_the_wire(name: str) -> None:
    messages, kw = CASES[name]
    theirs = await _run(RequestResponseCycle, messages, **kw)
    ours = await _run(PlainCycle, messages, **kw)
    assert ours[0] == theirs[0]  # the bytes
    assert ours[2:] == theirs[2:]  # state, error, closed, on_response calls


async def test_head_goes_out_with_the_body_in_one_write() -> None:
    _, writes, *_ = await _run(PlainCycle, [start(200, JSON), body(b"hello")])
    assert writes == [(b"HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 02:00:00 GMT\r\ncontent-type: application/json\r\n"
                       b"x-request-id: abc\r\ncontent-length: 5\r\n\r\nhello")]
    _, writes, *_ = await _run(PlainCycle, [start(200, [(b"content-type", b"text/event-stream")]),
                                            body(b"data: 1\n\n", more=True), body(b"")])
    assert len(writes) == 3 and writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n")  # a stream's head at once


async def test_held_head_is_written_before_a_close_without_the_body() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(start(200, JSON))  # and returns without the body

    cycle, transport, _ = _cycle(PlainCycle)
    await cycle.run_asgi(app)
    assert transport.closed and transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"content-length: 5\r\n\r\n")


async def test_a_disconnected_client_gets_nothing() -> None:
    cycle, transport, _ = _cycle(PlainCycle)
    await cycle.send(start(200, JSON))
    cycle.disconnected = True
    await cycle.send(body(b"hello"))
    cycle.flush_head()
    assert transport.writes == []
