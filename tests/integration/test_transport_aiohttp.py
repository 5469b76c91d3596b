""":class:`router.upstream.transport_aiohttp.AiohttpTransport` (its ``post`` and ``fetch``) maps aiohttp's failures to the transport's
own tree (:mod:`router.upstream.transport`), over real sockets on 127.0.0.1: a raw asyncio server that
answers each request on a connection as scripted (the proxy's behaviour on these failures is
tests/unit/test_proxy_transport.py, without sockets).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest

from router.upstream.relay import ReuseMarkingConnector
from router.upstream.transport import (
    ConnectFailed,
    ConnectionBroken,
    Fetched,
    PayloadBroken,
    TransportError,
)
from router.upstream.transport_aiohttp import AiohttpTransport
from router.upstream.transport_h1 import H1Transport
from tests.support import free_port

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
CUT = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"a\""


async def raw_server(answer: Callable[[int], bytes | None]) -> tuple[asyncio.Server, str, list[bytes]]:
    """A server that reads each request of a connection and writes ``answer(i)`` (``i``: the
    request's number on its connection, from 1), closing the connection when it is None or a
    cut body. Returns the server, its base URL and the bodies it read."""
    bodies: list[bytes] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                bodies.append(await reader.readexactly(length))
                n += 1
                reply = answer(n)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if reply is CUT:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", bodies


async def transport() -> tuple[AiohttpTransport, list[aiohttp.ClientSession]]:
    pooled = aiohttp.ClientSession(connector=ReuseMarkingConnector(limit=10))
    fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
    return AiohttpTransport(pooled, fresh), [pooled, fresh]


async def post(t: AiohttpTransport, url: str, *, fresh: bool = False) -> bytes:
    resp = await t.post(url + "/v1/chat/completions", b'{"x":1}', {"content-type": "application/json"},
                        connect_timeout_s=2.0, fresh=fresh)
    try:
        return await resp.read()
    finally:
        resp.close()


async def test_a_refused_connection_is_connect_failed():
    t, sessions = await transport()
    try:
        with pytest.raises(ConnectFailed):
            await post(t, f"http://127.0.0.1:{free_port()}")
    finally:
        for s in sessions:
            await s.close()


async def test_a_reused_connection_closed_before_the_status_is_broken_and_reused():
    server, base, bodies = await raw_server(lambda n: OK if n == 1 else None)  # the 2nd request: closed
    t, sessions = await transport()
    try:
        assert await post(t, base) == b"{}"
        with pytest.raises(ConnectionBroken) as broken:
            await post(t, base)
        assert broken.value.reused is True
        assert bodies == [b'{"x":1}', b'{"x":1}']  # the engine read the body: an abort is due
    finally:
        for s in sessions:
            await s.close()
        server.close()


async def test_a_fresh_connection_closed_before_the_status_is_broken_and_not_reused():
    server, base, _ = await raw_server(lambda n: None)
    t, sessions = await transport()
    try:
        for fresh in (False, True):  # the pooled session's first connection, then a fresh one
            with pytest.raises(ConnectionBroken) as broken:
                await post(t, base, fresh=fresh)
            assert broken.value.reused is False
    finally:
        for s in sessions:
            await s.close()
        server.close()


async def test_a_body_cut_short_maps_to_payload_broken():
    server, base, _ = await raw_server(lambda n: CUT)
    t, sessions = await transport()
    try:
        with pytest.raises(t.errors) as raised:  # the body read is aiohttp's own
            await post(t, base)
        assert isinstance(t.map_error(raised.value), PayloadBroken)
    finally:
        for s in sessions:
            await s.close()
        server.close()


async def test_map_error_keeps_the_transport_tree_and_maps_aiohttp_resets():
    t, sessions = await transport()
    try:
        mine = PayloadBroken("x")
        assert t.map_error(mine) is mine
        assert type(t.map_error(aiohttp.ServerDisconnectedError())) is ConnectionBroken
        assert type(t.map_error(aiohttp.ClientOSError(104, "reset"))) is ConnectionBroken
        assert all(issubclass(e, Exception) for e in t.errors) and TransportError in t.errors
    finally:
        for s in sessions:
            await s.close()


async def fetch(t: AiohttpTransport | H1Transport, url: str, timeout_s: float | None = 5.0) -> Fetched:
    return await t.fetch("POST", url + "/v1/embeddings", body=b'{"x":1}',
                         headers={"content-type": "application/json"}, timeout_s=timeout_s, connect_timeout_s=2.0)


async def test_fetch_reads_the_whole_answer_with_lower_case_header_names():
    server, base, bodies = await raw_server(lambda n: OK)
    t, sessions = await transport()
    h1 = H1Transport(t, max_connections=4, keepalive_timeout_s=4.0)  # fetch goes through its fallback
    try:
        for client in (t, h1):
            got = await fetch(client, base)
            assert (got.status, got.body, got.headers["content-type"]) == (200, b"{}", "application/json")
            assert "Content-Type" not in got.headers
        assert bodies == [b'{"x":1}', b'{"x":1}']
    finally:
        h1.close()
        for s in sessions:
            await s.close()
        server.close()


async def test_fetch_maps_the_failures_to_the_transport_tree():
    t, sessions = await transport()
    server, base, _ = await raw_server(lambda n: OK if n == 1 else None)  # the 2nd request: closed
    cut_server, cut_base, _ = await raw_server(lambda n: CUT)
    try:
        with pytest.raises(ConnectFailed):
            await fetch(t, f"http://127.0.0.1:{free_port()}")
        assert (await fetch(t, base)).status == 200
        with pytest.raises(ConnectionBroken) as broken:
            await fetch(t, base)
        assert broken.value.reused is True  # the pooled connection had served the first
        with pytest.raises(PayloadBroken):
            await fetch(t, cut_base)
    finally:
        for s in sessions:
            await s.close()
        server.close()
        cut_server.close()


async def test_fetch_raises_timeout_error_when_the_engine_does_not_answer():
    answered = asyncio.Event()

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        answered.set()
        await reader.read()  # never answers; returns when the client gives up
        writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    t, sessions = await transport()
    try:
        with pytest.raises(TimeoutError):
            await fetch(t, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", timeout_s=0.2)
        assert answered.is_set()
    finally:
        for s in sessions:
            await s.close()
        server.close()
