""":class:`router.upstream.transport_h1.H1Transport` over real sockets on 127.0.0.1: framing, keep-alive,
the failure tree, cancellation, the connection limit and flow control. The cases both
transports must agree on run against :class:`router.upstream.transport_aiohttp.AiohttpTransport` too.

The engine is a raw asyncio server that answers each request of a connection as scripted, so
every byte on the wire is the test's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from yarl import URL

from router.upstream.relay import ReuseMarkingConnector
from router.upstream.transport import ConnectFailed, ConnectionBroken, PayloadBroken
from router.upstream.transport_aiohttp import AiohttpTransport
from router.upstream.transport_h1 import HIGH_WATER, H1Transport
from tests.support import free_port

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
CUT = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"a\""
CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"f\r\ndata: {\"a\":1}\n\n\r\n" b"e\r\ndata: [DONE]\n\n\r\n" b"0\r\n\r\n")
CLOSE = object()  # answer: close the connection without a reply


@dataclass
class Engine:
    """What the scripted server saw: one entry per connection, the requests' heads and bodies."""

    base: str
    server: asyncio.Server
    connections: list[list[tuple[bytes, bytes]]] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # a connection ended
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # a request was read


async def engine(answer: Callable[[int], Any]) -> Engine:
    """``answer(n)`` for the n-th request of a connection (from 1): bytes to write (the
    connection stays open), a list of bytes written one ``drain`` apart, :data:`CLOSE`, or an
    ``asyncio.Event`` to wait on (or the client's going) before closing."""
    seen: list[list[tuple[bytes, bytes]]] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests: list[tuple[bytes, bytes]] = []
        seen.append(requests)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                requests.append((head, await reader.readexactly(length)))
                eng.arrived.set()
                reply = answer(len(requests))
                if reply is CLOSE:
                    break
                if isinstance(reply, asyncio.Event):  # hold until it is set or the client goes
                    waits = {asyncio.ensure_future(reply.wait()), asyncio.ensure_future(reader.read(1))}
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    for w in waits:
                        w.cancel()
                    break
                parts = reply if isinstance(reply, list) else [reply]
                for part in parts:
                    writer.write(part)
                    await writer.drain()
                if reply is CUT or b"Connection: close" in parts[0]:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()
        eng.closed.set()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    eng = Engine(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", server, seen)
    return eng


@contextlib.asynccontextmanager
async def serving(answer: Callable[[int], Any]) -> AsyncIterator[Engine]:
    """:func:`engine`, closed at the end of the block."""
    eng = await engine(answer)
    try:
        yield eng
    finally:
        eng.server.close()


class Fallback:
    """A transport that records what :class:`H1Transport` hands over to it."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        self.aborts: list[tuple[str, tuple[str, ...]]] = []

    async def post(self, url: Any, body: bytes, headers: Any, *, connect_timeout_s: float, fresh: bool) -> Any:
        self.posts.append(str(url))
        return "fallback"

    async def abort(self, base_url: str, rids: tuple[str, ...], timeout_s: float, *, fresh: bool = False) -> None:
        self.aborts.append((base_url, rids))


async def h1(**kw: Any) -> tuple[H1Transport, Callable[[], Any]]:
    kw.setdefault("max_connections", 10)
    kw.setdefault("keepalive_timeout_s", 30.0)
    t = H1Transport(kw.pop("fallback", Fallback()), **kw)

    async def close() -> None:
        t.close()
    return t, close


async def aio() -> tuple[AiohttpTransport, Callable[[], Any]]:
    pooled = aiohttp.ClientSession(connector=ReuseMarkingConnector(limit=10), auto_decompress=False)
    fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))

    async def close() -> None:
        await pooled.close()
        await fresh.close()
    return AiohttpTransport(pooled, fresh), close


async def post(t: Any, url: str, *, fresh: bool = False, body: bytes = b'{"x":1}') -> Any:
    return await t.post(URL(url + "/v1/chat/completions"), body, {"content-type": "application/json"},
                        connect_timeout_s=2.0, fresh=fresh)


async def read_all(t: Any, url: str, **kw: Any) -> bytes:
    resp = await post(t, url, **kw)
    try:
        return await resp.read()
    finally:
        resp.close()


@pytest.fixture(params=["httptools", "aiohttp"])
async def either(request: pytest.FixtureRequest) -> Any:
    t, close = await (h1() if request.param == "httptools" else aio())
    yield t
    await close()


# -- the contract both transports meet ---------------------------------------------------------

async def test_a_refused_connection_is_connect_failed(either):
    with pytest.raises(ConnectFailed):
        await post(either, f"http://127.0.0.1:{free_port()}")


async def test_keep_alive_reuses_one_connection_and_a_reused_one_closed_before_the_status_is_broken_and_reused(either):
    async with serving(lambda n: OK if n <= 2 else CLOSE) as eng:
        assert await read_all(either, eng.base) == b"{}"
        assert await read_all(either, eng.base) == b"{}"
        with pytest.raises(ConnectionBroken) as broken:
            await post(either, eng.base)
        assert broken.value.reused is True
        assert len(eng.connections) == 1 and len(eng.connections[0]) == 3  # the engine read all three
        assert [body for _, body in eng.connections[0]] == [b'{"x":1}'] * 3


async def test_the_connection_is_pooled_once_the_body_arrived_before_the_response_is_closed(either):
    async with serving(lambda n: OK) as eng:
        first = await post(either, eng.base)
        assert await first.read() == b"{}"
        assert await read_all(either, eng.base) == b"{}"  # the first response is not closed yet
        first.close()
        assert [len(c) for c in eng.connections] == [2]


async def test_a_new_or_fresh_connection_closed_before_the_status_is_broken_and_not_reused(either):
    async with serving(lambda n: CLOSE) as eng:
        for fresh in (False, True):
            with pytest.raises(ConnectionBroken) as broken:
                await post(either, eng.base, fresh=fresh)
            assert broken.value.reused is False


async def test_a_body_cut_short_is_payload_broken(either):
    async with serving(lambda n: CUT) as eng:
        with pytest.raises(either.errors) as raised:
            await read_all(either, eng.base)
        assert isinstance(either.map_error(raised.value), PayloadBroken)


async def test_a_chunked_stream_is_decoded_and_read_as_it_arrives(either):
    async with serving(lambda n: CHUNKED) as eng:
        resp = await post(either, eng.base)
        assert resp.status == 200 and resp.headers.get("content-type") == "text/event-stream"
        got = b""
        while chunk := await resp.content.readany():
            got += chunk
        resp.close()
        assert got == b'data: {"a":1}\n\ndata: [DONE]\n\n'


async def test_an_error_body_is_read_up_to_n_bytes(either):
    body = b'{"error": {"message": "bad"}}' + b" " * 100
    reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\nRetry-After: 3\r\n\r\n%s" % (len(body), body)
    async with serving(lambda n: reply) as eng:
        resp = await post(either, eng.base)
        assert resp.status == 400 and resp.headers.get("retry-after") == "3"
        assert await resp.content.read(29) == body[:29]
        resp.close()


# -- httptools' client only -------------------------------------------------------------------

async def test_the_request_head_carries_host_common_headers_and_the_length_in_one_write():
    eng = await engine(lambda n: OK)
    t, close = await h1(headers={"authorization": "Bearer k"})
    try:
        await read_all(t, eng.base)
        head, body = eng.connections[0][0]
        port = eng.base.rsplit(":", 1)[1]
        assert head == (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:" + port.encode()
                        + b"\r\nauthorization: Bearer k\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n")
        assert body == b'{"x":1}'
        await read_all(t, eng.base, fresh=True)  # a fresh connection asks the engine to close it
        assert eng.connections[1][0][0].endswith(b"content-length: 7\r\nconnection: close\r\n\r\n")
    finally:
        await close()
        eng.server.close()


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent():
    eng = await engine(lambda n: OK)
    t, close = await h1()
    try:
        for bad in ({"x-request-id": "a\r\nx-admin: 1"}, {"x-a\nb": "1"}, {"x-a": "b\rc"}):
            with pytest.raises(ValueError, match="line break"):
                await t.post(URL(eng.base + "/v1/chat/completions"), b"{}", bad, connect_timeout_s=2.0, fresh=False)
        assert eng.connections == [] and t.open_connections == 0
        with pytest.raises(ValueError, match="line break"):
            H1Transport(Fallback(), max_connections=1, keepalive_timeout_s=1.0, headers={"authorization": "k\n"})
    finally:
        await close()
        eng.server.close()


async def test_interim_responses_are_skipped_and_repeated_headers_joined():
    reply = (b"HTTP/1.1 100 Continue\r\n\r\n"
             b"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 2\r\n\r\nok")
    eng = await engine(lambda n: reply)
    t, close = await h1()
    try:
        resp = await post(t, eng.base)
        assert resp.status == 200 and resp.headers == {"x-a": "1, 2", "content-length": "2"}
        assert await resp.read() == b"ok"
        resp.close()
    finally:
        await close()
        eng.server.close()


async def test_a_body_framed_by_the_connection_end_is_complete_and_the_connection_not_kept():
    eng = await engine(lambda n: [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nab", b"cd"])
    t, close = await h1()
    try:
        assert await read_all(t, eng.base) == b"abcd"
        assert await read_all(t, eng.base) == b"abcd"
        assert len(eng.connections) == 2
    finally:
        await close()
        eng.server.close()


async def test_an_expired_idle_connection_is_not_reused():
    eng = await engine(lambda n: OK)
    t, close = await h1(keepalive_timeout_s=1e-9)  # any idle connection is past it
    try:
        assert await read_all(t, eng.base) == b"{}"
        assert await read_all(t, eng.base) == b"{}"
        assert [len(c) for c in eng.connections] == [1, 1]
    finally:
        await close()
        eng.server.close()


async def test_a_response_closed_before_its_end_closes_the_connection():
    eng = await engine(lambda n: [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"])
    t, close = await h1()
    try:
        resp = await post(t, eng.base)
        assert await resp.content.readany() == b"abc"
        resp.close()
        await eng.closed.wait()  # the engine saw the client go
        assert t.open_connections == 0
    finally:
        await close()
        eng.server.close()


async def test_a_request_cancelled_before_the_status_line_closes_its_connection():
    hold = asyncio.Event()
    eng = await engine(lambda n: hold)
    t, close = await h1()
    try:
        task = asyncio.ensure_future(post(t, eng.base))
        await eng.arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eng.closed.wait()
        assert t.open_connections == 0
    finally:
        hold.set()
        await close()
        eng.server.close()


async def test_beyond_max_connections_a_request_waits_for_one_to_close():
    hold = asyncio.Event()
    eng = await engine(lambda n: hold if len(eng.connections) == 1 else OK)
    t, close = await h1(max_connections=1)
    try:
        first = asyncio.ensure_future(post(t, eng.base))
        await eng.arrived.wait()
        second = asyncio.ensure_future(read_all(t, eng.base))
        await asyncio.sleep(0)  # the second reaches the limit's wait
        assert len(eng.connections) == 1 and not second.done()
        hold.set()  # the engine closes the first connection without an answer
        with pytest.raises(ConnectionBroken):
            await first
        assert await second == b"{}"
        assert len(eng.connections) == 2 and t.open_connections == 1
    finally:
        hold.set()
        await close()
        eng.server.close()


async def test_a_slow_reader_pauses_the_connection_and_gets_every_byte():
    payload = bytes(range(256)) * (4 * HIGH_WATER // 256)  # four high-water marks
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload)
    parts = [reply] + [payload[i:i + 8192] for i in range(0, len(payload), 8192)]
    eng = await engine(lambda n: parts)
    t, close = await h1()
    try:
        resp = await post(t, eng.base)
        conn = resp._conn
        got = b""
        async with asyncio.timeout(5):
            while conn.transport.is_reading():  # not read: the buffer passes the mark and reading stops
                await asyncio.sleep(0.001)
        assert resp._size > HIGH_WATER
        while chunk := await resp.content.readany():
            got += chunk
        resp.close()
        assert got == payload
        assert await read_all(t, eng.base) == payload  # the connection was kept and reused
        assert len(eng.connections) == 1
    finally:
        await close()
        eng.server.close()


async def test_https_targets_and_aborts_go_to_the_fallback():
    fallback = Fallback()
    t, close = await h1(fallback=fallback)
    try:
        assert await t.post(URL("https://engine:8443/v1/completions"), b"{}", {}, connect_timeout_s=1.0,
                            fresh=False) == "fallback"
        await t.abort("http://e:1", ("r1",), 1.0)
        assert fallback.posts == ["https://engine:8443/v1/completions"]
        assert fallback.aborts == [("http://e:1", ("r1",))]
    finally:
        await close()


# -- regressions found in review ----------------------------------------------------------------

async def test_a_request_cancelled_with_its_body_unsent_frees_its_slot_for_other_engines():
    gate, accepted = asyncio.Event(), asyncio.Event()

    async def wedged(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:  # reads nothing
        accepted.set()
        await gate.wait()
        writer.close()

    stuck = await asyncio.start_server(wedged, "127.0.0.1", 0)
    t, close = await h1(max_connections=1)
    try:
        async with serving(lambda n: OK) as eng:
            url = f"http://127.0.0.1:{stuck.sockets[0].getsockname()[1]}"
            task = asyncio.ensure_future(post(t, url, body=b"x" * (32 << 20)))  # more than the socket buffers
            await accepted.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with asyncio.timeout(5):
                assert await read_all(t, eng.base) == b"{}"  # the one slot came free at once
    finally:
        gate.set()
        await close()
        stuck.close()


async def test_at_the_connection_limit_a_freed_connection_is_reused_not_replaced():
    t, close = await h1(max_connections=2)
    try:
        async with serving(lambda n: OK) as eng:
            async def client() -> None:
                for _ in range(10):
                    assert await read_all(t, eng.base) == b"{}"
            await asyncio.gather(*(client() for _ in range(6)))
            assert len(eng.connections) == 2 and sum(map(len, eng.connections)) == 60
    finally:
        await close()


async def test_a_waiter_cancelled_as_it_is_woken_passes_the_wake_up_on():
    hold = asyncio.Event()
    t, close = await h1(max_connections=1)
    try:
        async with serving(lambda n: hold if len(eng.connections) == 1 else OK) as eng:
            first = asyncio.ensure_future(post(t, eng.base))
            await eng.arrived.wait()
            w1, w2 = asyncio.ensure_future(post(t, eng.base)), asyncio.ensure_future(read_all(t, eng.base))
            while len(t._slots) < 2:  # both wait for the one connection
                await asyncio.sleep(0)
            closed = t._closed

            def closed_then_cancel(conn: Any) -> None:  # w1 is cancelled in the callback that wakes it
                closed(conn)
                w1.cancel()
            t._closed = closed_then_cancel  # type: ignore[method-assign]
            hold.set()
            with pytest.raises(ConnectionBroken):
                await first
            await asyncio.gather(w1, return_exceptions=True)
            t._closed = closed  # type: ignore[method-assign]
            async with asyncio.timeout(5):
                assert await w2 == b"{}"
    finally:
        hold.set()
        await close()


async def test_the_connect_timeout_is_a_timeout_error_not_connect_failed():
    t, close = await h1()
    real = t.loop

    class NeverConnects:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.Event().wait()

    t.loop = NeverConnects()  # type: ignore[assignment]
    try:
        with pytest.raises(TimeoutError) as raised:
            await t.post(URL("http://127.0.0.1:9/v1/completions"), b"{}", {}, connect_timeout_s=0.05, fresh=False)
        assert not isinstance(raised.value, ConnectFailed)
    finally:
        t.loop = real
        await close()


async def test_trailers_do_not_become_the_next_responses_headers():
    trailer = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-trailer\r\n\r\n"
               b"2\r\nab\r\n0\r\nx-trailer: t\r\n\r\n")
    t, close = await h1()
    try:
        async with serving(lambda n: trailer if n == 1 else OK) as eng:
            assert await read_all(t, eng.base) == b"ab"
            resp = await post(t, eng.base)
            assert resp.headers == {"content-type": "application/json", "content-length": "2"}
            assert await resp.read() == b"{}"
            resp.close()
            assert len(eng.connections) == 1
    finally:
        await close()


async def test_a_second_unasked_response_in_one_read_closes_the_connection_instead_of_sharing_it():
    t, close = await h1()
    try:
        async with serving(lambda n: OK + OK if n == 1 else OK) as eng:
            assert await read_all(t, eng.base) == b"{}"
            await eng.closed.wait()  # the client dropped the connection that sent what nobody asked for
            results = await asyncio.gather(read_all(t, eng.base), read_all(t, eng.base))
            assert results == [b"{}", b"{}"] and len(eng.connections) == 3
    finally:
        await close()


async def test_a_non_chunked_transfer_coding_is_read_to_the_connection_end():
    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nConnection: close\r\n\r\nabc"
    t, close = await h1()
    try:
        async with serving(lambda n: reply) as eng:
            assert await read_all(t, eng.base) == b"abc"
    finally:
        await close()


async def test_a_switching_protocols_answer_is_a_broken_connection(caplog):
    t, close = await h1()
    try:
        async with serving(lambda n: b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n") as eng:
            with pytest.raises(ConnectionBroken) as broken:
                await post(t, eng.base)
            assert broken.value.reused is False
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []  # handled, not fatal
    finally:
        await close()
