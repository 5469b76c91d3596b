"""router.http_cycles.HeldHeadCycle: a head with Content-Length goes out with the body in one
write; a streamed head, a HEAD request's and a disconnected client's are not held."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from router.http_cycles import HeldHeadCycle


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def cycle(method: str = "POST") -> tuple[HeldHeadCycle, Recorder, list[int]]:
    rec, done = Recorder(), []
    scope: dict[str, Any] = {"type": "http", "method": method, "http_version": "1.1", "path": "/",
                             "query_string": b"", "client": None, "headers": []}
    c = HeldHeadCycle(scope=scope, transport=rec, flow=FlowControl(rec), logger=logging.getLogger("t"),  # type: ignore[arg-type]
                      access_logger=logging.getLogger("t"), access_log=False, default_headers=[],
                      message_event=asyncio.Event(), expect_100_continue=False, keep_alive=True,
                      on_response=lambda: done.append(1))
    return c, rec, done


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_head_with_content_length_is_written_with_the_body_in_one_write() -> None:
    async def go() -> tuple[Recorder, list[int], HeldHeadCycle]:
        c, rec, done = cycle()
        await c.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
        assert rec.writes == []
        await c.send({"type": "http.response.body", "body": b"{}", "more_body": False})
        return rec, done, c

    rec, done, c = run(go())
    assert rec.writes == [HEAD + b"{}"]
    assert done == [1] and c.response_complete and c.expected_content_length == 0


def test_a_body_in_two_messages_writes_the_head_with_the_first() -> None:
    async def go() -> Recorder:
        c, rec, _ = cycle()
        await c.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
        await c.send({"type": "http.response.body", "body": b"{", "more_body": True})
        await c.send({"type": "http.response.body", "body": b"}", "more_body": False})
        return rec

    assert run(go()).writes == [HEAD + b"{", b"}"]


def test_a_body_longer_than_its_content_length_still_raises_and_writes_nothing() -> None:
    async def go() -> Recorder:
        c, rec, _ = cycle()
        await c.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        with pytest.raises(RuntimeError, match="longer than Content-Length"):
            await c.send({"type": "http.response.body", "body": b"abc", "more_body": False})
        return rec

    assert run(go()).writes == []


def test_a_streamed_head_and_a_head_request_are_written_at_once() -> None:
    async def go(method: str, headers: list[tuple[bytes, bytes]]) -> Recorder:
        c, rec, _ = cycle(method)
        await c.send({"type": "http.response.start", "status": 200, "headers": headers})
        assert len(rec.writes) == 1
        await c.send({"type": "http.response.body", "body": b"", "more_body": False})
        return rec

    stream = run(go("POST", [(b"content-type", b"text/event-stream")]))
    assert stream.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n") and stream.writes[1] == b"0\r\n\r\n"
    head = run(go("HEAD", [(b"content-length", b"2")]))
    assert head.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"]


def test_a_client_gone_before_the_body_gets_nothing() -> None:
    async def go() -> Recorder:
        c, rec, _ = cycle()
        await c.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        c.disconnected = True
        await c.send({"type": "http.response.body", "body": b"{}", "more_body": False})
        return rec

    assert run(go()).writes == []
