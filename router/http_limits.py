"""Limits on a request's head (request line and header fields), enforced as bytes arrive.

uvicorn's httptools protocol has no limit that can be set on the head (Kludex/uvicorn#1684:
llhttp's own cap cannot be changed); one client could send a multi-megabyte header, 20,000
header fields, or a head that never ends, and the router would buffer all of it
(httptools joins a field's pieces into one ``bytes``, so the copying also grows with the
square of its size and stalls the event loop). The h11 protocol's only limit,
``h11_max_incomplete_event_size``, is on the whole head, and h11 costs several times
httptools' CPU per request. :func:`limited_protocol` keeps httptools and adds, per request
(``server.headers``, :class:`router.config_server.HeaderLimitsConfig`):

- ``max_bytes``: the head's bytes (request line, fields, line ends), counted on each chunk
  *before* it reaches the parser: the chunk that would pass the limit is never parsed, so a
  connection holds at most the limit plus one read of head bytes (python-hyper/h11#155:
  count bytes as they arrive, not headers after parsing);
- ``max_fields``: header fields, counted as the parser yields them;
- ``max_field_bytes``: one field's name plus value, and the request target;
- ``head_timeout_s``: a head that has not arrived whole this long after its first byte (a
  client dripping bytes to hold the connection: uvicorn's keep-alive timer restarts on every
  byte) is answered 408 ``request_timeout`` and the connection closed. The timer is armed
  only when a head spans more than one read, so the usual request costs none.

Over any limit the answer is written at once and the connection closed::

    HTTP/1.1 431 Request Header Fields Too Large
    content-type: application/json
    connection: close

    {"error":{"message":"request header fields too large (limit: 65536 bytes)",
              "type":"invalid_request_error","param":null,"code":"request_header_fields_too_large"}}

(RFC 6585 section 5), and ``specgate_header_limit_rejections_total{limit}`` counts it
(``bytes``, ``fields``, ``field_bytes``; ``head_timeout`` for the 408). The limits are read from the app's current config
when a connection opens, so a reload applies to new connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from router.config_server import HeaderLimitsConfig
from router.errors import error_body

__all__ = ["LimitsSource", "app_limits", "limited_protocol", "rejection_response"]

#: Limits source: () -> the current limits and the rejection counter ``(limit) -> None``.
LimitsSource = Callable[[], tuple[HeaderLimitsConfig, Callable[[str], None]]]


class _HeadTooLarge(Exception):
    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


def rejection_response(limit: str, limits: HeaderLimitsConfig) -> bytes:
    """The whole 431 response for a head over ``limit`` (``bytes``, ``fields``, ``field_bytes``),
    or the 408 for ``head_timeout``."""
    if limit == "head_timeout":
        body = error_body(f"the request head did not arrive within {limits.head_timeout_s:g} s",
                          "invalid_request_error", None, "request_timeout")
        return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: "
                + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
    what = {"bytes": f"{limits.max_bytes} bytes", "fields": f"{limits.max_fields} fields",
            "field_bytes": f"{limits.max_field_bytes} bytes per field"}[limit]
    body = error_body(f"request header fields too large (limit: {what})", "invalid_request_error", None,
                      "request_header_fields_too_large")
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n"
            b"x-should-retry: false\r\n\r\n" + body)


def app_limits(app: Any) -> LimitsSource:
    """The :data:`LimitsSource` of a router app: its current config's ``server.headers`` and
    its ``specgate_header_limit_rejections_total`` (read per connection, after the lifespan
    built ``app.state.specgate``)."""
    def source() -> tuple[HeaderLimitsConfig, Callable[[str], None]]:
        state = app.state.specgate
        counter = state.metrics.header_limit_rejections
        return state.runtime.config.server.headers, lambda limit: counter.inc((limit,))
    return source


class _LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head limits of the module docstring; ``source``
    is read once per connection. :func:`limited_protocol` binds it to one app."""

    def __init__(self, source: LimitsSource, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits, self._count = source()
        self._in_head = True  # reading a request's head (until its headers are complete)
        self._head_bytes = 0
        self._fields = 0
        self._tail = b""  # the last 3 head bytes: a CRLFCRLF split between two reads
        self._rejected = False
        self._head_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self._rejected:
            return
        if self._in_head:
            tail = self._tail
            seen = tail + data if tail else data
            end = seen.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else max(0, end + 4 - len(tail))
            if self._head_bytes > self._limits.max_bytes:
                self._reject("bytes")
                return
            if end < 0:
                self._tail = seen[-3:]
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__ or exc.__cause__
            if isinstance(cause, _HeadTooLarge):
                self._reject(cause.limit)
                return
            self._bad_request()
        except httptools.HttpParserError:
            self._bad_request()
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._in_head and self._head_bytes and self._head_timer is None and not self._rejected:
            self._head_timer = self.loop.call_later(self._limits.head_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._in_head and not self._rejected and not self.transport.is_closing():
            self._reject("head_timeout")

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _bad_request(self) -> None:
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        self.send_400_response(msg)

    def _reject(self, limit: str) -> None:
        self._rejected = True
        self._count(limit)
        self.transport.write(rejection_response(limit, self._limits))
        self.transport.close()

    # on_url and on_header repeat uvicorn's bodies (0.54) rather than call them: a parser
    # callback per header is the hot path, and a super() call there costs a frame each.
    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > self._limits.max_field_bytes:
            raise _HeadTooLarge("field_bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        limits = self._limits
        if self._fields > limits.max_fields:
            raise _HeadTooLarge("fields")
        if len(name) + len(value) > limits.max_field_bytes:
            raise _HeadTooLarge("field_bytes")
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._fields, self._tail = True, 0, 0, b""


def limited_protocol(source: LimitsSource) -> type[asyncio.Protocol]:
    """An httptools protocol class for ``uvicorn.Config(http=...)`` that enforces the limits
    ``source()`` returns (module docstring). One class per app; no state outside it."""

    class LimitedHttpToolsProtocol(_LimitedProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(source, *args, **kwargs)

    return LimitedHttpToolsProtocol
