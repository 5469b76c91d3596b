"""The generation requests' upstream client: HTTP/1.1 on httptools' parser, connections pooled.

:class:`H1Transport` is the :class:`router.upstream.transport.Transport` the router sends engine
generation requests through (``upstream.client: httptools``, the default): an
``asyncio.Protocol`` per connection, whose response bytes go through httptools'
``HttpResponseParser`` (llhttp, the parser uvicorn's httptools server runs), and a LIFO pool of
keep-alive connections per ``host:port``. It does only what a router's engine request needs:

- ``POST`` with a ``Content-Length`` body over plain ``http://``; the request head and body go
  out in one write. ``https://`` targets and ``/abort_request`` go through the fallback
  transport (aiohttp, :class:`router.upstream.transport_aiohttp.AiohttpTransport`).
- A response framed by ``Content-Length``, by chunked transfer coding (llhttp decodes it; its
  trailers are dropped) or by the connection's end (also a non-chunked ``Transfer-Encoding``);
  interim ``1xx`` responses are skipped, a ``101`` is a broken connection. Header names are
  lower-cased; a repeated header's values are joined with ``", "`` (RFC 9110 section 5.3). A
  response nobody asked for (a second one in the same read) closes the connection.
- A connection goes back to the pool as soon as its response's last byte arrived (the body
  waits in the response for its reader, as with aiohttp's release at the payload's end) when
  llhttp says it may be kept (``should_keep_alive``: HTTP/1.1 without ``Connection: close``); an idle
  connection older than ``keepalive_timeout_s`` is closed instead of reused (below the engines'
  keep-alive: sgl-project/sglang#20851). A response closed before its end closes its
  connection (the engine sees the client go and stops generating).
- Reading pauses while more than :data:`HIGH_WATER` bytes wait for a slow reader of a stream
  (``transport.pause_reading``), and resumes when they are taken; a whole-body read never
  pauses.
- At most ``max_connections`` connections are open at once, across engines; a request beyond
  that waits until one is parked (it takes it when it is its engine's) or closes (an idle one
  of another engine is closed to make room).

Errors are the transport's own tree (:mod:`router.upstream.transport`): no connection (refused,
unreachable, DNS) is :class:`~router.upstream.transport.ConnectFailed`; the connect timeout is
``TimeoutError``; a connection that closes or sends what llhttp rejects before the status
line is :class:`~router.upstream.transport.ConnectionBroken` (``reused``: it had served a request);
after the status line, a body cut before its framing's end is
:class:`~router.upstream.transport.PayloadBroken`. A request cancelled in flight resets its connection
(``transport.abort``: a ``close`` would wait for an unsent body to drain into an engine that
may not be reading, keeping the connection's slot).

Why not aiohttp here (it stays for everything else): on the same pass-through
(``benchmarks/bare_proxy.py``, c=16, one core) this client costs 13 us less CPU per
non-streamed request and about 90 us less per streamed one (docs/performance.md, "The
upstream client"); aiohttp's ``ClientSession`` does per request what a router needs once
(cookie, redirect, auth, proxy and timeout handling, a body-writer task on Python 3.11, a
``StreamReader`` per chunk).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import Any

import httptools
from yarl import URL

from router.upstream.transport import (
    ConnectFailed,
    ConnectionBroken,
    Fetched,
    PayloadBroken,
    Transport,
    TransportError,
)

__all__ = ["HIGH_WATER", "H1Response", "H1Transport"]

#: Bytes a response may hold unread before the connection stops reading (a stream's reader is
#: slower than its engine); reading resumes when the reader takes them.
HIGH_WATER = 1 << 16

#: Request bodies up to this size are joined to the head for one ``write``; larger ones are
#: handed over as two buffers (``writelines``), not copied.
_JOIN_BODY = 1 << 16


class H1Response:
    """One engine response after its status line (:class:`router.upstream.transport.UpstreamResponse`).

    Attributes:
        status: the HTTP status.
        headers: lower-cased header name -> value (a repeated header's values joined ``", "``).
        content: the body reader (the response itself: ``read``/``readany``).
    """

    __slots__ = ("_chunks", "_conn", "_eof", "_error", "_paused", "_size", "_waiter", "_whole", "headers",
                 "status")

    def __init__(self, conn: _Connection, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._conn: _Connection | None = conn
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._eof = False
        self._error: TransportError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._whole = False

    @property
    def content(self) -> H1Response:
        """The body reader: the response itself (a property, not an attribute: no reference cycle)."""
        return self

    # -- fed by the connection ------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size > HIGH_WATER and not self._whole and not self._paused and self._conn is not None:
            self._paused = True
            self._conn.transport.pause_reading()
        self._wake()

    def _finish(self, error: TransportError | None = None) -> None:
        self._eof = True
        self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        if self._paused:
            self._resume()
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await waiter

    def _resume(self) -> None:
        self._paused = False
        conn = self._conn
        if conn is not None and not conn.closed:
            conn.transport.resume_reading()

    def _take(self) -> bytes:
        chunks = self._chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._size = 0
        if self._paused:
            self._resume()
        return data

    # -- read by the proxy ----------------------------------------------------------------

    async def readany(self) -> bytes:
        """The bytes that arrived next; b"" at the body's end.

        Raises:
            PayloadBroken: the body ended before its framing's end (after what had arrived).
        """
        while not self._chunks:
            if self._eof:
                if self._error is not None:
                    raise self._error
                return b""
            await self._wait()
        return self._take()

    async def read(self, n: int = -1) -> bytes:
        """The whole body (``n < 0``), else up to ``n`` bytes (``n``: a count of bytes): what
        arrived once ``n`` bytes did or the body ended.

        Raises:
            PayloadBroken: the body ended before its framing's end (whole-body reads; an
                ``n``-byte read returns what arrived first).
        """
        if n < 0:
            self._whole = True
            while not self._eof:
                await self._wait()
            if self._error is not None:
                raise self._error
            return self._take() if self._chunks else b""
        while self._size < n and not self._eof:
            await self._wait()
        if self._error is not None and not self._chunks:
            raise self._error
        data = self._take() if self._chunks else b""
        if len(data) > n:
            self._chunks.append(data[n:])
            self._size = len(data) - n
            data = data[:n]
        return data

    def close(self) -> None:
        """Done with the response. Its connection went back to the pool when the body ended
        (if it may be kept); a connection still held here is closed. Idempotent."""
        conn = self._conn
        if conn is not None:
            self._conn = None
            conn.discard()


class _Pool:
    """The idle keep-alive connections to one ``host:port`` (a LIFO stack: the most recently
    used first, the oldest expire at the bottom)."""

    __slots__ = ("host", "idle", "port")

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.idle: deque[_Connection] = deque()


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: at most one request in flight (no pipelining)."""

    def __init__(self, owner: H1Transport, pool: _Pool, fresh: bool) -> None:
        self.owner = owner
        self.pool = pool
        self.fresh = fresh
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.served = 0  # requests answered in full on this connection
        self.busy = False
        self.closed = False
        self.idle_since = 0.0
        self.waiter: asyncio.Future[H1Response] | None = None
        self.response: H1Response | None = None
        self._fields: list[tuple[bytes, bytes]] = []
        self._interim = False
        self._until_close = False

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # bytes nobody asked for: the connection cannot be trusted
            self.transport.close()
            return
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:  # 101 raises the latter
            self._broken(f"the engine's response is not valid HTTP/1.1: {exc!r}", stale=False)
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.owner._closed(self)
        if self.busy:
            if self.response is not None and self._until_close and exc is None:
                self.busy = False
                self.response._finish()  # a body framed by the connection's end: complete
            else:
                self._broken(str(exc) if exc is not None else "the engine closed the connection")

    # -- httptools callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        if not self.busy:  # a second response in the same read, to no request: not ours
            raise ConnectionError("an unsolicited response")  # httptools raises HttpParserCallbackError

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is None:  # trailers (after the head) are not headers
            self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        fields, self._fields = self._fields, []
        if status < 200:  # 100 Continue, 103 Early Hints: the answer follows
            self._interim = True
            return
        headers: dict[str, str] = {}
        for raw_name, raw_value in fields:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        coding = headers.get("transfer-encoding")  # llhttp reads a non-chunked coding to the end
        self._until_close = ("content-length" not in headers if coding is None
                             else not coding.rstrip().lower().endswith("chunked"))
        response = self.response = H1Response(self, status, headers)
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._fields = []
        keep = self.parser.should_keep_alive()  # valid only inside the callback (llhttp resets after it)
        self.busy = False
        response, self.response = self.response, None
        if response is None:
            return
        response._finish()
        if keep and not self.fresh:  # the body is all in the response's buffer: the connection is free
            if response._paused:
                response._resume()
            response._conn = None
            self.served += 1
            self.owner._park(self)

    # -- used by the transport ------------------------------------------------------------

    def send(self, head: bytes, body: bytes) -> asyncio.Future[H1Response]:
        """Write one request; the future resolves with its response after the status line."""
        self.busy = True
        self.response = None
        waiter = self.waiter = self.owner.loop.create_future()
        if len(body) <= _JOIN_BODY:
            self.transport.write(head + body)
        else:
            self.transport.writelines((head, body))
        return waiter

    def discard(self) -> None:
        """Its response was closed while it still held the connection (before the body's end,
        or the connection may not be kept): close it (reset it mid-request, see :meth:`abort`)."""
        self.response = None
        if self.busy:
            self.abort()
        elif not self.closed:
            self.transport.close()

    def abort(self) -> None:
        """Reset the connection mid-request (``transport.abort``: ``close`` would wait for an
        unsent body to drain into an engine that may not read it, holding its slot)."""
        self.busy = False
        if not self.closed:
            self.transport.abort()

    def _broken(self, message: str, *, stale: bool = True) -> None:
        """Fail the request in flight; ``stale``: a break before the status line on a reused
        connection may be a stale keep-alive connection (not so for a response llhttp rejects)."""
        self.busy = False
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():  # before the status line
            waiter.set_exception(ConnectionBroken(message, reused=stale and self.served > 0))
        elif self.response is not None:
            self.response._finish(PayloadBroken(f"the response body broke: {message}"))


class H1Transport:
    """:class:`router.upstream.transport.Transport` for generation requests (module docstring).

    Args:
        fallback: the transport for ``https://`` targets and for :meth:`abort`
            (:class:`router.upstream.transport_aiohttp.AiohttpTransport`).
        max_connections: connections open at once across engines (``upstream.max_connections``).
        keepalive_timeout_s: how long an idle connection is kept (``upstream.keepalive_timeout_s``).
        headers: sent on every request before the request's own (the engines' ``authorization``).
    """

    errors: tuple[type[Exception], ...] = (TransportError,)

    def __init__(self, fallback: Transport, *, max_connections: int, keepalive_timeout_s: float,
                 headers: Mapping[str, str] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self._fallback = fallback
        self._max = max_connections
        self._keepalive_s = keepalive_timeout_s
        common = dict(headers or {})
        if any("\r" in f"{k}{v}" or "\n" in f"{k}{v}" for k, v in common.items()):
            raise ValueError("a common header contains a line break")
        self._common = "".join(f"{k}: {v}\r\n" for k, v in common.items())
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._targets: dict[int, tuple[URL, _Pool, str, int]] = {}  # id(url) -> url, pool, head prefix, its lines
        self._open: set[_Connection] = set()
        self._connecting = 0
        self._slots: deque[asyncio.Future[None]] = deque()

    @property
    def open_connections(self) -> int:
        """Connections open now (in flight and idle)."""
        return len(self._open)

    async def post(self, url: URL | str, body: bytes, headers: Mapping[str, str], *,
                   connect_timeout_s: float, fresh: bool) -> Any:
        """Send ``POST url`` (:meth:`router.upstream.transport.Transport.post`); an :class:`H1Response`
        once its status line and headers arrived (the fallback's response for ``https://``).

        Raises:
            ConnectFailed: no connection could be made.
            ConnectionBroken: the connection closed before the status line (``reused`` set).
            TimeoutError: ``connect_timeout_s`` passed while connecting.
            ValueError: a header name or value holds a CR or LF (nothing was sent).
        """
        target = self._targets.get(id(url))
        if target is None or target[0] is not url:
            target = self._target(url)
        if target is None:
            return await self._fallback.post(url, body, headers, connect_timeout_s=connect_timeout_s, fresh=fresh)
        _, pool, prefix, lines = target
        parts = [prefix]
        for name, value in headers.items():
            parts.append(f"{name}: {value}\r\n")
        parts.append(f"content-length: {len(body)}\r\nconnection: close\r\n\r\n" if fresh else
                     f"content-length: {len(body)}\r\n\r\n")
        text = "".join(parts)
        lines += len(headers) + (3 if fresh else 2)
        if text.count("\n") != lines or text.count("\r") != lines:  # a CR or LF inside a name or value
            raise ValueError("a request header contains a line break")
        head = text.encode("latin-1")
        conn = None if fresh else self._take(pool)
        if conn is None:
            conn = await self._connect(pool, connect_timeout_s, fresh)
        waiter = conn.send(head, body)
        try:
            return await waiter
        except BaseException:
            conn.abort()  # cancelled mid-request: the connection is not reusable
            raise

    def map_error(self, exc: Exception) -> TransportError:
        return exc if isinstance(exc, TransportError) else ConnectionBroken(str(exc))

    async def fetch(self, method: str, url: str, *, body: bytes | None = None,
                    headers: Mapping[str, str] | None = None, timeout_s: float | None,
                    connect_timeout_s: float | None = None) -> Fetched:
        """:meth:`router.upstream.transport.Transport.fetch` through the fallback: the small calls
        (scrapes, probes, pass-through) are not on the generation path this client is for."""
        return await self._fallback.fetch(method, url, body=body, headers=headers, timeout_s=timeout_s,
                                          connect_timeout_s=connect_timeout_s)

    async def abort(self, base_url: str, rids: tuple[str, ...], timeout_s: float, *,
                    fresh: bool = False) -> None:
        await self._fallback.abort(base_url, rids, timeout_s, fresh=fresh)

    def close(self) -> None:
        """Close every idle connection (at shutdown; in-flight ones close with their responses;
        the fallback's sessions are the app's to close)."""
        for pool in self._pools.values():
            while pool.idle:
                self._drop(pool.idle.pop())

    # -- internals --------------------------------------------------------------------------

    def _target(self, url: URL | str) -> tuple[URL, _Pool, str, int] | None:
        """Parse ``url`` once (held by id: the endpoints keep their target URLs) into its pool
        and the request head's first lines; None for a scheme this client does not speak."""
        parsed = url if isinstance(url, URL) else URL(url)
        if parsed.scheme != "http" or not parsed.host:
            return None
        key = (parsed.host, parsed.port or 80)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(*key)
        prefix = f"POST {parsed.raw_path_qs} HTTP/1.1\r\nhost: {parsed.host_port_subcomponent}\r\n{self._common}"
        if len(self._targets) >= 4096:  # URLs built per request (not an endpoint's): bounded
            self._targets.clear()
        target = (parsed, pool, prefix, prefix.count("\n"))
        if parsed is url:
            self._targets[id(url)] = target
        return target

    def _take(self, pool: _Pool) -> _Connection | None:
        """An idle connection of ``pool`` still fresh enough to reuse, else None."""
        idle = pool.idle
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            if conn.closed or conn.transport.is_closing():
                continue
            if now - conn.idle_since < self._keepalive_s:
                return conn
            self._drop(conn)
        return None

    def _park(self, conn: _Connection) -> None:
        now = self.loop.time()
        conn.idle_since = now
        idle = conn.pool.idle
        idle.append(conn)
        while idle and now - idle[0].idle_since >= self._keepalive_s:  # expired at the bottom
            self._drop(idle.popleft())
        if self._slots:  # a request waits for room: it takes this one, or closes an idle one itself
            self._wake_slot()

    async def _connect(self, pool: _Pool, timeout_s: float, fresh: bool) -> _Connection:
        while len(self._open) + self._connecting >= self._max:
            if not self._free_one():
                slot = self.loop.create_future()
                self._slots.append(slot)
                try:
                    await slot
                except BaseException:
                    if slot.done() and not slot.cancelled():  # woken, then cancelled: pass it on
                        self._wake_slot()
                    raise
                finally:
                    if slot in self._slots:
                        self._slots.remove(slot)
                if not fresh and (idle := self._take(pool)) is not None:  # parked while it waited
                    return idle
        self._connecting += 1
        timeout = asyncio.timeout(timeout_s)
        try:
            async with timeout:
                _, conn = await self.loop.create_connection(lambda: _Connection(self, pool, fresh), pool.host, pool.port)
        except OSError as exc:  # TimeoutError is an OSError since Python 3.11: the connect timeout stays one
            if timeout.expired():
                raise
            raise ConnectFailed(f"cannot connect to {pool.host}:{pool.port}: {exc}") from exc
        finally:
            self._connecting -= 1
            self._wake_slot()
        self._open.add(conn)
        return conn

    def _free_one(self) -> bool:
        """Close the longest-idle connection of any pool; False when none is idle."""
        oldest: _Pool | None = None
        for pool in self._pools.values():
            if pool.idle and (oldest is None or pool.idle[0].idle_since < oldest.idle[0].idle_since):
                oldest = pool
        if oldest is None:
            return False
        self._drop(oldest.idle.popleft())
        return True

    def _drop(self, conn: _Connection) -> None:
        """Close an idle connection taken out of its pool; it stops counting at once."""
        self._open.discard(conn)
        conn.transport.close()

    def _closed(self, conn: _Connection) -> None:
        self._open.discard(conn)
        if conn in conn.pool.idle:  # the engine closed it while it waited
            conn.pool.idle.remove(conn)
        self._wake_slot()

    def _wake_slot(self) -> None:
        while self._slots:
            slot = self._slots.popleft()
            if not slot.done():
                slot.set_result(None)
                return
