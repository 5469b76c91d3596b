"""How one request's response is framed and ended on the wire, by the request's HTTP version
and expectation: the parts of uvicorn's httptools request/response cycle that
:mod:`router.front.http_limits` changes (uvicorn 0.55, ``RequestResponseCycle``).

- :class:`CloseDelimitedCycle`, for an HTTP/1.0 request: a response without
  ``Content-Length`` (a stream) is sent without ``Transfer-Encoding`` and without chunk
  framing, its body delimited by closing the connection (RFC 9112 section 6.1: no
  ``Transfer-Encoding`` unless the request is HTTP/1.1 or later; section 6.3 item 8). uvicorn
  chunks it whatever the version (Kludex/uvicorn#1360). A response with ``Content-Length``
  (not streamed, errors) keeps it. The connection closes after every HTTP/1.0 response
  (uvicorn offers no keep-alive to HTTP/1.0).
- :class:`ContinueCycle`, for an HTTP/1.1 request with ``Expect: 100-continue``: the interim
  ``100 Continue`` is written when the handler first reads the body (uvicorn's behaviour), but
  not when some or all of the body already arrived (RFC 9110 section 10.1.1 lets a server omit
  it); a final answer written before the body was asked for (401, 404, 413) closes the
  connection, so a client that waits for ``100`` need not send the body (section 10.1.1: the
  server indicates whether it will read the body or close).
- :func:`expectation_failed`: the ASGI app answering an ``Expect`` the router cannot meet
  (any member other than ``100-continue``) with 417 and the OpenAI error envelope (section
  10.1.1), before any body is read.
- :class:`ResponseTransport`: what a cycle writes through; closing it while the request's body
  is still arriving asks the protocol for a lingering close instead
  (:meth:`router.front.http_limits` ``_LimitedProtocol.close_answered``), so a client still
  uploading reads the answer rather than a reset.

The protocol (``router.front.http_limits``) moves a cycle to one of these classes right after uvicorn
built it, before its task first runs; nothing else changes class or state of uvicorn's objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from router.errors import error_body

__all__ = ["CloseDelimitedCycle", "ContinueCycle", "ResponseTransport", "expectation_failed"]

_EXPECTATION_FAILED = error_body(
    "the router meets no expectation but 100-continue (Expect header)", "invalid_request_error",
    None, "expectation_failed")


async def expectation_failed(scope: Any, receive: Any, send: Any) -> None:
    """ASGI app: 417 ``expectation_failed`` (E-400 envelope), the connection closed after it."""
    await send({"type": "http.response.start", "status": 417, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(_EXPECTATION_FAILED)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": _EXPECTATION_FAILED, "more_body": False})


class ResponseTransport:
    """The transport a cycle writes to: ``write`` and ``is_closing`` are the real transport's
    own bound methods (no extra call per write); ``close`` is the protocol's, which lingers
    when the request's body is still arriving."""

    __slots__ = ("close", "is_closing", "write")

    def __init__(self, transport: asyncio.Transport, close: Callable[[], None]) -> None:
        self.write = transport.write
        self.is_closing = transport.is_closing
        self.close = close


class CloseDelimitedCycle(RequestResponseCycle):
    """A cycle for an HTTP/1.0 request (module docstring): a body without ``Content-Length``
    is written as it comes and ended by closing the connection."""

    _close_delimited = False  # set per instance at the response's start

    async def send(self, message: Any) -> None:
        if not self.response_started:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(name.lower() == b"content-length" for name, _ in headers):
                    self._close_delimited = True
                    self.chunked_encoding = False  # uvicorn then adds no transfer-encoding
                    message = {**message, "headers": [
                        (name, value) for name, value in headers if name.lower() != b"transfer-encoding"]}
            await super().send(message)
            return
        if not self._close_delimited or self.response_complete or message["type"] != "http.response.body":
            await super().send(message)  # uvicorn's own checks and errors
            return
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        body = message.get("body", b"")
        if body and self.scope["method"] != "HEAD":
            self.transport.write(body)
        if not message.get("more_body", False):
            self.response_complete = True
            self.message_event.set()
            self.transport.close()  # the end of the body (keep_alive is off for HTTP/1.0)
            self.on_response()


class ContinueCycle(RequestResponseCycle):
    """A cycle for an HTTP/1.1 request with ``Expect: 100-continue`` (module docstring)."""

    async def send(self, message: Any) -> None:
        if self.waiting_for_100_continue and self.more_body and not self.response_started:
            self.keep_alive = False  # answered before the body was asked for: close after it
        await super().send(message)

    async def receive(self) -> Any:
        if self.waiting_for_100_continue and (self.body or not self.more_body):
            self.waiting_for_100_continue = False  # the body is already arriving: no 100
        return await super().receive()
