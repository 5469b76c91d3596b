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
- :class:`PlainCycle`, for every other request, and the base of the two above: uvicorn's
  cycle built with positional arguments, its ``send`` with the same checks, framing, bytes and
  errors in fewer steps (header names and values each checked by one search of uvicorn's
  patterns over their concatenation; the per-field search runs only to name the first bad
  field). The head of a response with ``Content-Length`` is held and written with the body's
  first message, one ``write`` (one wake-up of the client instead of two; the sockets have
  ``TCP_NODELAY``); a chunked head (a stream) and a ``HEAD`` answer's are written at once, and
  a held head is written before any close that ends the response without its body
  (:meth:`PlainCycle.flush_head`), so the client reads the same bytes in every case.
- :class:`ResponseTransport`: what a cycle writes through; closing it while the request's body
  is still arriving asks the protocol for a lingering close instead
  (:meth:`router.front.http_limits` ``_LimitedProtocol.close_answered``), so a client still
  uploading reads the answer rather than a reset.

The protocol (``router.front.http_limits``) builds each request's cycle as one of these classes
(uvicorn's ``on_headers_complete``, inline there); nothing else changes class or state of
uvicorn's objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

from router.errors import error_body

__all__ = ["CloseDelimitedCycle", "ContinueCycle", "PlainCycle", "ResponseTransport", "expectation_failed"]

#: Header names whose value changes the framing (uvicorn's ``send`` reads these three).
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))

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


def _nothing() -> None:
    """A finished cycle's ``on_response`` (uvicorn's ``lambda: None``)."""


class PlainCycle(RequestResponseCycle):
    """uvicorn's cycle (0.55) with the same state, wire bytes and ``RuntimeError`` for the
    same messages (module docstring); built with positional arguments, in uvicorn's order."""

    _held: bytes | None = None

    def __init__(self, scope: Any, transport: Any, flow: Any, logger: Any, access_logger: Any,
                 access_log: bool, default_headers: list[tuple[bytes, bytes]], message_event: asyncio.Event,
                 expect_100_continue: bool, keep_alive: bool, on_response: Callable[..., None]) -> None:
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.logger = logger
        self.access_logger = access_logger
        self.access_log = access_log
        self.default_headers = default_headers
        self.message_event = message_event
        self.on_response = on_response
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.body = bytearray()
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0

    async def run_asgi(self, app: Any) -> None:
        """uvicorn's ``run_asgi`` (0.55), with a held head written before each close."""
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self.flush_head()
                self.transport.close()
        else:
            if result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.flush_head()
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                self.logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                self.logger.error("ASGI callable returned without completing response.")
                self.flush_head()
                self.transport.close()
        finally:
            self.on_response = _nothing

    def flush_head(self) -> None:
        """Write a held head now (before the connection closes without the body)."""
        held = self._held
        if held is not None:
            self._held = None
            if not self.disconnected:
                self.transport.write(held)

    async def send(self, message: Any) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        if not self.response_started:
            self._start(message)
            return
        held = self._held
        if held is not None:
            self._held = None
            if message["type"] == "http.response.body" and not self.response_complete:
                body = message.get("body", b"")
                if len(body) <= self.expected_content_length:
                    self.expected_content_length -= len(body)
                    self.transport.write(held + body)
                    if not message.get("more_body", False):
                        self._complete()
                    return
            self.transport.write(held)
        if self.response_complete:
            raise RuntimeError(f"Unexpected ASGI message '{message['type']}' sent, after response already completed.")
        if message["type"] != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{message['type']}'.")
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            if body:
                self.transport.write(b"".join((b"%x\r\n" % len(body), body, b"\r\n" if more_body else b"\r\n0\r\n\r\n")))
            else:
                self.transport.write(b"" if more_body else b"0\r\n\r\n")
        else:
            num_bytes = len(body)
            if num_bytes > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= num_bytes
            self.transport.write(body)
        if not more_body:
            self._complete()

    def _complete(self) -> None:
        """The response's last body message was written: check its length, wake the reader,
        close a connection that is not kept alive, and hand the connection on."""
        if self.expected_content_length != 0:
            raise RuntimeError("Response content shorter than Content-Length")
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

    def _start(self, message: Any) -> None:
        """An ``http.response.start`` message: the status line and fields, in one write."""
        if message["type"] != "http.response.start":
            raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{message['type']}'.")
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        headers = self.default_headers + list(message.get("headers", []))
        if self.access_log:
            self.access_logger.info('%s - "%s %s HTTP/%s" %d', get_client_addr(self.scope), self.scope["method"],
                                    get_path_with_query_string(self.scope), self.scope["http_version"], status_code)
        content = [STATUS_LINE[status_code]]
        for name, value in headers:
            content += (name, b": ", value, b"\r\n")
        if HEADER_RE.search(b"".join(content[1::4])) or HEADER_VALUE_RE.search(b"".join(content[3::4])):
            for name, value in headers:  # the first bad field, in uvicorn's order
                if HEADER_RE.search(name):
                    raise RuntimeError("Invalid HTTP header name.")
                if HEADER_VALUE_RE.search(value):
                    raise RuntimeError("Invalid HTTP header value.")
        has_connection_close = length = False
        for i in range(1, len(content), 4):
            name = content[i]
            if not name.islower():
                name = content[i] = name.lower()
            if name in _FRAMING:
                value = content[i + 2]
                if name == b"content-length":
                    if self.chunked_encoding is None:
                        self.expected_content_length = int(value.decode())
                        self.chunked_encoding = False
                        length = True
                elif name == b"transfer-encoding":
                    if value.lower() == b"chunked":
                        self.expected_content_length = 0
                        self.chunked_encoding = True
                elif b"close" in [token.lower().strip() for token in value.split(b",")]:
                    self.keep_alive = False
                    has_connection_close = True
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status_code not in (204, 304):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        if length and self.scope["method"] != "HEAD":  # framed by its Content-Length: with the body
            self._held = b"".join(content)
        else:
            self.transport.write(b"".join(content))


class CloseDelimitedCycle(PlainCycle):
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


class ContinueCycle(PlainCycle):
    """A cycle for an HTTP/1.1 request with ``Expect: 100-continue`` (module docstring)."""

    async def send(self, message: Any) -> None:
        if self.waiting_for_100_continue and self.more_body and not self.response_started:
            self.keep_alive = False  # answered before the body was asked for: close after it
        await super().send(message)

    async def receive(self) -> Any:
        if self.waiting_for_100_continue and (self.body or not self.more_body):
            self.waiting_for_100_continue = False  # the body is already arriving: no 100
        return await super().receive()
