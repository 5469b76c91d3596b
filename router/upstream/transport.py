"""The proxy's upstream seam: what :class:`router.upstream.proxy.ProxyResponse` needs from an HTTP client.

One small typed :class:`Transport` (the way httpx's one-method transport classes make
``httpx.MockTransport`` the natural unit-test seam). Two implementations:
:class:`router.upstream.transport_h1.H1Transport` (HTTP/1.1 on httptools' parser, the default,
``upstream.client: httptools``), which hands ``https://`` targets and the aborts to
:class:`router.upstream.transport_aiohttp.AiohttpTransport` (aiohttp; the whole client with
``upstream.client: aiohttp``); tests drive the real proxy through
``tests.support.transport.MockTransport`` without sockets.

The calls:

- :meth:`Transport.post` sends one engine request: ``url`` (a ``yarl.URL`` or str), the body
  bytes, the headers, the connect timeout (s) and ``fresh`` (open a new connection and close
  it after: the one resend after a stale keep-alive connection). It returns once the status
  line and headers arrived, as an :class:`UpstreamResponse`.
- :meth:`Transport.fetch` is every other engine call, small and read whole: the scrapes of
  ``/metrics``, ``/v1/models`` and ``/server_info``, the warm-up probes, the canary's probes and
  the pass-through routes (embeddings, rerank, ...). It returns a :class:`Fetched` (status,
  headers with lower-case names, body bytes) within ``timeout_s`` seconds for the whole call.
- :meth:`Transport.close` drops the transport's own idle connections at shutdown.
- :meth:`Transport.abort` is SGLang's ``POST {base_url}/abort_request {"rid": rid}`` for each
  engine request id, best effort (errors are swallowed), each within ``timeout_s`` seconds.

The failures, one tree, mapped from the client library at the boundary:

- :class:`TransportError`
   - :class:`ConnectFailed`: no connection was made (refused, unreachable, DNS): the body
     never reached an engine.
   - :class:`ConnectionBroken`: the connection closed or reset; :attr:`ConnectionBroken.reused`
     tells whether it came from the keep-alive pool (only a reused connection that breaks
     before the status line is resent, sgl-project/sglang#20851, aio-libs/aiohttp#7363).
     Raised by :meth:`Transport.post` (before the status line) or by a body read (after it).
   - :class:`PayloadBroken`: the body's framing broke mid-body (connection lost before the
     declared length or the last chunk).

A timeout (the connect timeout included) is the builtin ``TimeoutError``, which the proxy
handles as its own first-byte or whole-body deadline.

:meth:`Transport.post` raises these itself. A response's body reads are the client's own
(aiohttp's response object satisfies :class:`UpstreamResponse` as it is, so a relayed chunk
costs no extra Python call); they may raise the client's exception types, which are listed
in :attr:`Transport.errors` and turned into this tree by :meth:`Transport.map_error` at the
proxy's ``except`` (evaluated only when something was raised: nothing on the hot path).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from yarl import URL

__all__ = ["BodyReader", "ConnectFailed", "ConnectionBroken", "Fetched", "PayloadBroken", "Transport",
           "TransportError", "UpstreamResponse"]


class TransportError(Exception):
    """An upstream transport failure (see the module docstring for the tree)."""


class ConnectFailed(TransportError):
    """No connection to the engine could be made; nothing was sent."""


class ConnectionBroken(TransportError):
    """The connection closed or reset.

    Attributes:
        reused: the connection had served a request before (it came from the keep-alive
            pool); False when unknown or after the status line.
    """

    def __init__(self, message: str = "connection broken", *, reused: bool = False) -> None:
        super().__init__(message)
        self.reused = reused


class PayloadBroken(TransportError):
    """The response body ended or broke before its framing said it was complete."""


class BodyReader(Protocol):
    """A response body read as it arrives (aiohttp's ``StreamReader`` has this shape)."""

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (-1: to the end); b"" at the end."""
        ...

    async def readany(self) -> bytes:
        """The bytes that arrived next (at least one unless the body ended: then b"")."""
        ...


class UpstreamResponse(Protocol):
    """An engine response after its status line (aiohttp's ``ClientResponse`` has this shape)."""

    @property
    def status(self) -> int:
        """The HTTP status."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The response headers; keys are read lower-case (case-insensitive in aiohttp)."""
        ...

    @property
    def content(self) -> BodyReader:
        """The body, read incrementally."""
        ...

    async def read(self) -> bytes:
        """The whole body."""
        ...

    def close(self) -> None:
        """Release the connection (closing it when the body was not read to the end)."""
        ...


@dataclass(frozen=True, slots=True)
class Fetched:
    """A small engine call's whole answer (:meth:`Transport.fetch`).

    Attributes:
        status: the HTTP status.
        headers: the response headers, names lower-case.
        body: the whole body (its content coding left as the engine sent it).
    """

    status: int
    headers: Mapping[str, str]
    body: bytes


class Transport(Protocol):
    """What the router sends engine requests through (module docstring)."""

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """The exception types :meth:`post` and a response's reads may raise, besides
        ``TimeoutError``: :class:`TransportError` and the client library's own read errors."""
        ...

    async def post(self, url: URL | str, body: bytes, headers: Mapping[str, str], *,
                   connect_timeout_s: float, fresh: bool) -> UpstreamResponse:
        """Send ``POST url`` and return the response once its headers arrived.

        Raises:
            ConnectFailed: no connection.
            ConnectionBroken: the connection broke before the status line (``reused`` set).
            TimeoutError: the connect timeout passed.
        """
        ...

    def map_error(self, exc: Exception) -> TransportError:
        """The :class:`TransportError` for one of :attr:`errors` (itself when it is one)."""
        ...

    async def abort(self, base_url: str, rids: tuple[str, ...], timeout_s: float, *,
                    fresh: bool = False) -> None:
        """``POST {base_url}/abort_request {"rid": rid}`` for each of ``rids``; never raises
        (best effort, each within ``timeout_s`` seconds; ``fresh``: on a new connection)."""
        ...

    async def fetch(self, method: str, url: str, *, body: bytes | None = None,
                    headers: Mapping[str, str] | None = None, timeout_s: float | None,
                    connect_timeout_s: float | None = None) -> Fetched:
        """Send one small engine call and read its whole answer.

        Args:
            method: ``GET`` or ``POST``.
            url: the absolute URL.
            body: the request body (None: none).
            headers: the request's headers.
            timeout_s: seconds for the whole call (None: no limit).
            connect_timeout_s: seconds to connect (None: within ``timeout_s``).

        Raises:
            ConnectFailed: no connection.
            ConnectionBroken: the connection broke (``reused`` set when it came from the pool
                and broke before the status line).
            PayloadBroken: the body's framing broke.
            TimeoutError: ``timeout_s`` or ``connect_timeout_s`` passed.
        """
        ...

    def close(self) -> None:
        """At shutdown: close the idle connections the transport itself holds (none when it
        runs over sessions the app owns and closes)."""
        ...
