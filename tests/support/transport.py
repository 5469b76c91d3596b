"""A :class:`router.upstream.transport.Transport` without sockets, for the proxy's unit tests.

:class:`MockTransport` calls a handler per engine request, as ``httpx.MockTransport`` does:
``handler(request: MockRequest) -> Scripted`` (sync or async). The handler may raise a
:class:`router.upstream.transport.TransportError` (a failure before the status line) or return a
:class:`Scripted` response, whose ``chunks`` are what each ``readany()`` returns in turn: bytes,
an exception to raise at that point of the body, or :data:`HANG` (wait until cancelled, e.g.
for a first-byte or idle timeout). Every request and every ``/abort_request`` is recorded
(:attr:`MockTransport.requests`, :attr:`MockTransport.aborts`), and :attr:`MockTransport.arrived`
is set on each request, so a test waits on events, never on a sleep.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from yarl import URL

from router.upstream.transport import Fetched, TransportError

__all__ = ["HANG", "MockAbort", "MockRequest", "MockTransport", "Scripted", "sse"]

#: A chunk that never arrives: the read waits until it is cancelled.
HANG = object()


def sse(*docs: bytes | str, done: bool = True) -> list[bytes]:
    """Chunks of an SSE stream: one ``data: <doc>`` event per doc, then ``data: [DONE]``."""
    out = [b"data: " + (d.encode() if isinstance(d, str) else d) + b"\n\n" for d in docs]
    return out + [b"data: [DONE]\n\n"] if done else out


@dataclass
class MockRequest:
    """One engine request the proxy sent.

    Attributes:
        url: the full URL; base: its scheme and authority (the endpoint's URL); path: its path.
        body, headers: as sent. connect_timeout_s: the connect timeout asked for (s).
        fresh: sent on a new connection (the resend after a stale one).
    """

    url: str
    base: str
    path: str
    body: bytes
    headers: dict[str, str]
    connect_timeout_s: float
    fresh: bool


@dataclass(frozen=True)
class MockAbort:
    """One ``POST {base}/abort_request {"rid": rid}``; ``fresh``: on a new connection."""

    base: str
    rid: str
    fresh: bool


class _Body:
    """The scripted body, read by ``readany`` / ``read(n)`` like aiohttp's ``StreamReader``."""

    def __init__(self, chunks: list[Any]) -> None:
        self._chunks = list(chunks)
        self._buf = b""

    async def _next(self) -> bytes:
        if not self._chunks:
            return b""
        item = self._chunks.pop(0)
        if item is HANG:
            await asyncio.Event().wait()  # until the reader is cancelled
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, bytes), item
        return item

    async def readany(self) -> bytes:
        if self._buf:
            out, self._buf = self._buf, b""
            return out
        return await self._next()

    async def read(self, n: int = -1) -> bytes:
        out = self._buf
        self._buf = b""
        while n < 0 or len(out) < n:
            more = await self._next()
            if not more:
                break
            out += more
        if n >= 0 and len(out) > n:
            out, self._buf = out[:n], out[n:]
        return out


@dataclass
class Scripted:
    """A scripted engine response (an :class:`router.upstream.transport.UpstreamResponse`).

    Attributes:
        status: HTTP status; headers: lower-case names; chunks: the body (module docstring).
        closed: set by ``close()`` (the proxy closes every response it got).
    """

    status: int = 200
    chunks: list[Any] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    closed: bool = False

    def __post_init__(self) -> None:
        self.content = _Body(self.chunks)
        self.headers = {k.lower(): v for k, v in self.headers.items()}
        self.headers.setdefault("content-type", "application/json")

    @classmethod
    def json(cls, status: int, body: bytes | str, headers: Mapping[str, str] | None = None) -> Scripted:
        """A whole JSON body in one chunk."""
        return cls(status, [body.encode() if isinstance(body, str) else body], dict(headers or {}))

    @classmethod
    def stream(cls, chunks: list[Any], status: int = 200) -> Scripted:
        """An SSE body."""
        return cls(status, chunks, {"content-type": "text/event-stream"})

    async def read(self) -> bytes:
        return await self.content.read()

    def close(self) -> None:
        self.closed = True


Handler = Callable[[MockRequest], "Scripted | Awaitable[Scripted]"]


class MockTransport:
    """:class:`router.upstream.transport.Transport` that answers every request with ``handler``.

    Attributes:
        requests: every :class:`MockRequest`, in order; responses: what each returned.
        aborts: every :class:`MockAbort`, in order (one per rid).
        log: requests and aborts together, in the order they came.
        arrived: set when a request arrives (a test clears it to wait for the next one).
        aborted: set when an ``/abort_request`` arrives.
    """

    errors: tuple[type[Exception], ...] = (TransportError,)

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[MockRequest] = []
        self.responses: list[Scripted] = []
        self.aborts: list[MockAbort] = []
        self.log: list[MockRequest | MockAbort] = []
        self.arrived = asyncio.Event()
        self.aborted = asyncio.Event()

    async def post(self, url: URL | str, body: bytes, headers: Mapping[str, str], *,
                   connect_timeout_s: float, fresh: bool) -> Scripted:
        u = URL(str(url))
        request = MockRequest(str(u), str(u.origin()), u.path, body, dict(headers), connect_timeout_s, fresh)
        self.requests.append(request)
        self.log.append(request)
        self.arrived.set()
        result = self.handler(request)
        response = await result if inspect.isawaitable(result) else result
        assert isinstance(response, Scripted), response
        self.responses.append(response)
        return response

    def map_error(self, exc: Exception) -> TransportError:
        assert isinstance(exc, TransportError), exc
        return exc

    async def abort(self, base_url: str, rids: tuple[str, ...], timeout_s: float, *,
                    fresh: bool = False) -> None:
        for rid in rids:
            self.aborts.append(MockAbort(base_url, rid, fresh))
            self.log.append(self.aborts[-1])
        self.aborted.set()

    async def fetch(self, method: str, url: str, *, body: bytes | None = None,
                    headers: Mapping[str, str] | None = None, timeout_s: float | None,
                    connect_timeout_s: float | None = None) -> Fetched:
        """A small call (:meth:`router.upstream.transport.Transport.fetch`): recorded and answered by
        the handler like :meth:`post`, its scripted body read whole within ``timeout_s``."""
        resp = await self.post(url, body or b"", dict(headers or {}), connect_timeout_s=connect_timeout_s or 0.0,
                               fresh=False)
        async with asyncio.timeout(timeout_s):
            data = await resp.read()
        return Fetched(resp.status, dict(resp.headers), data)

    def close(self) -> None:
        """No connections to close."""

    def bases(self) -> list[str]:
        """The endpoint of each request, in order."""
        return [r.base for r in self.requests]
