"""Limits on a request's head (request line and header fields), enforced as bytes arrive.

uvicorn's httptools protocol has no limit that can be set on the head (Kludex/uvicorn#1684:
llhttp's own cap cannot be changed); one client could send a multi-megabyte header, 20,000
header fields, or a head that never ends, and the router would buffer all of it
(httptools joins a field's pieces into one ``bytes``, so the copying also grows with the
square of its size and stalls the event loop). The h11 protocol's only limit,
``h11_max_incomplete_event_size``, is on the whole head, and h11 costs several times
httptools' CPU per request. :func:`limited_protocol` keeps httptools and adds, per request
(``server.headers``, :class:`router.config.server.HeaderLimitsConfig`):

- ``max_bytes``: the head's bytes (request line, fields, line ends), counted on each chunk
  *before* it reaches the parser: the chunk that would pass the limit is never parsed, so a
  connection holds at most the limit plus one read of head bytes (python-hyper/h11#155:
  count bytes as they arrive, not headers after parsing). A read is parsed a part at a time
  (head, ``Content-Length`` body, next head), so a head in the same read as the request before
  it counts too (after a chunked body: the bytes after the read's last blank line);
- ``max_fields``: header fields, counted as the parser yields them;
- ``max_field_bytes``: one field's name plus value, and the request target;
- ``head_timeout_s``: a head that has not arrived whole this long after the connection opened
  or its previous response ended (nginx's ``client_header_timeout``; after its first byte when
  it follows a request still being answered) is answered 408 ``request_timeout`` and the
  connection closed: a client dripping bytes to hold the connection (uvicorn's keep-alive
  timer restarts on every byte), or idle first and dripping after. The timer is armed only
  when a head spans more than one read, so the usual request costs none.

Over any limit the answer (a JSON 431 ``request_header_fields_too_large``, RFC 6585 section 5;
:mod:`router.front.http_answers`) is written at once and the connection closed (when the head
follows a request still being answered, pipelined, nothing is written into that answer: the 431
or 408 follows it, then the close), and ``specgate_header_limit_rejections_total{limit}`` counts
it (``bytes``, ``fields``, ``field_bytes``; ``head_timeout`` for the 408).

The body and the framing around it (``specgate_request_framing_rejections_total{reason}``):

- ``server.body_timeout_s``: a body that has not arrived whole this long after its head, one
  second more per ``server.body_min_rate_bytes_s`` bytes of it received (Apache's
  ``RequestReadTimeout body=20,MinRate=500``: a body sent a byte at a time, or stalled
  mid-way, is cut; one that keeps arriving at that rate is not) is answered 408
  ``request_timeout`` and the connection closed (``body_timeout``); the handler waiting for it
  sees a disconnect, and nothing was leased yet. Armed only when a body spans more than one
  read; when it falls while the server is not reading the connection (a pipelined request
  waiting its turn, a body buffered past uvicorn's high-water mark) it starts again. If the
  router had already answered (an early 413 or 404), the connection is just closed.
- malformed framing (``malformed``): bytes httptools cannot parse (a bad chunk size or chunk
  end, an invalid request line or header), or a body cut by the client's end of stream
  before its ``Content-Length`` or last chunk, get a JSON 400 ``invalid_http_request``
  (instead of uvicorn's plain-text one) and the connection closed. When an earlier request on
  the connection (pipelined, or this one answered early) is still being answered, no 400 is
  written into its response: the bad bytes and anything after them are dropped, and the
  connection is closed once that response is complete.
- a ``Transfer-Encoding`` other than ``chunked`` alone (RFC 9112 section 6.1,
  :mod:`router.front.http_answers`): a 400 as above, or a JSON 501 ``unsupported_transfer_coding``
  (``transfer_coding``) for a coding before a final ``chunked`` (``gzip, chunked``), closed the
  same way; llhttp refuses one beside a ``Content-Length`` (400, ``malformed``).

A client that closes its connection mid-body gets nothing (nobody to answer); the handler
sees the disconnect and returns without a 500.

The connection and the HTTP semantics uvicorn's protocol gets wrong for real clients:

- idle connections (``server.keepalive_timeout_s``): uvicorn arms its keep-alive timer only
  after a first response and never for a connection that sends nothing (Kludex/uvicorn#1192);
  here it is armed when the connection opens too, so a connection idle before its first byte
  or between requests is closed on the same timeout (then the head and body timers apply);
- a lingering close (``server.linger_s``): every answer after which the router closes while
  the client may still be sending (the 431s, 408s and 400s above, an early 413, 401, 404 or
  417 to a request whose body is still arriving) is followed by a FIN, and what the client
  still sends is read and discarded until it closes or ``linger_s`` passed. Closing at once
  would reset the connection and the client's stack would drop the answer unread (a client
  writing an 8 MiB header would see a broken pipe instead of the 431);
- upgrade offers (``Connection: upgrade`` with ``Upgrade: h2c``, ``websocket``...): ignored
  (RFC 9110 section 7.8), the request served as HTTP/1.1 with its body, whatever its framing
  and however its bytes are split, and the connection stays in step for the next request.
  httptools drops the body of such a request (MagicStack/httptools#124, Kludex/uvicorn#2722);
  :meth:`_LimitedProtocol._without_upgrade` has llhttp read it by its framing. A prior-knowledge
  HTTP/2 preface (``PRI * HTTP/2.0``) gets the JSON 400 ``invalid_http_request`` and the close,
  another request line of a major version other than 1 (``GET / HTTP/2.0``) a JSON 505
  ``http_version_not_supported`` and the close;
- HTTP/1.0 requests: a response without ``Content-Length`` (a stream) is delimited by the
  close, never chunked (:class:`router.front.http_cycles.CloseDelimitedCycle`);
- ``Expect``: ``100-continue`` is honoured only in HTTP/1.1 (RFC 9110 section 10.1.1: ignored
  in HTTP/1.0), the interim ``100`` omitted when the body is already arriving, and a final
  answer given before the body was asked for closes the connection
  (:class:`router.front.http_cycles.ContinueCycle`); any other expectation is answered 417
  ``expectation_failed`` in its turn and counted (``expectation``).

The hop-by-hop fields of these requests (``Connection`` and the fields it names, ``Upgrade``,
``HTTP2-Settings``, ``Expect``) never reach an engine: the proxy sends only its own headers
(router/upstream/proxy.py). The limits are read from the app's current config when a connection
opens, so a reload applies to new connections.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from router.config.server import ServerConfig
from router.front.http_answers import (
    bad_request_response,
    body_timeout_response,
    rejection_response,
    transfer_coding_error,
    version_response,
)
from router.front.http_cycles import (
    CloseDelimitedCycle,
    ContinueCycle,
    PlainCycle,
    ResponseTransport,
    expectation_failed,
)
from router.upstream.disconnect import CONNECTION_KEY

__all__ = ["ConnectionLimits", "LimitsSource", "app_limits", "bad_request_response", "limited_protocol",
           "rejection_response"]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one connection enforces (read when it opens).

    Attributes:
        server: the ``server`` config section (``headers`` limits, ``body_timeout_s``).
        count_head: counts a head rejection: ``(limit) -> None``.
        count_framing: counts a body or framing rejection: ``(reason) -> None``.
    """

    server: ServerConfig
    count_head: Callable[[str], None]
    count_framing: Callable[[str], None]


#: Limits source: () -> the current :class:`ConnectionLimits`.
LimitsSource = Callable[[], ConnectionLimits]


class _HeadTooLarge(Exception):
    def __init__(self, limit: str) -> None:
        super().__init__(limit)
        self.limit = limit


class _BadFraming(Exception):
    """A head the router refuses with ``answer`` (a 505 for its version, a 400 or 501 for its
    ``Transfer-Encoding``), counted as ``reason``."""

    def __init__(self, detail: str, answer: bytes, reason: str) -> None:
        super().__init__(detail)
        self.answer, self.reason = answer, reason


def app_limits(app: Any) -> LimitsSource:
    """The :data:`LimitsSource` of a router app: its current config's ``server`` section,
    ``specgate_header_limit_rejections_total`` and ``specgate_request_framing_rejections_total``
    (read per connection, after the lifespan built ``app.state.specgate``)."""
    def source() -> ConnectionLimits:
        state = app.state.specgate
        head, framing = state.metrics.header_limit_rejections, state.metrics.framing_rejections
        return ConnectionLimits(state.runtime.config.server, lambda limit: head.inc((limit,)),
                                lambda reason: framing.inc((reason,)))
    return source


class _LimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head limits, the body timer and the framing
    answers of the module docstring; ``source`` is read once per connection.
    :func:`limited_protocol` binds it to one app."""

    def __init__(self, source: LimitsSource, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = source()
        self._limits, self._count, self._count_framing = limits.server.headers, limits.count_head, limits.count_framing
        self._body_timeout_s = limits.server.body_timeout_s
        self._body_min_rate = limits.server.body_min_rate_bytes_s
        self._body_since = 0.0  # loop time the body timer started (s)
        self._body_bytes = 0  # bytes read since then (each body_min_rate of them: 1 s more)
        self._idle_since = 0.0  # loop time the connection opened or its last response ended (s)
        self._linger_s = limits.server.linger_s
        # uvicorn's idle timer, per connection (typed int there; it is handed to call_later as seconds)
        self.timeout_keep_alive = limits.server.keepalive_timeout_s  # type: ignore[assignment]
        self._in_head = True  # reading a request's head (until its headers are complete)
        self._in_body = False  # between a request's complete head and its complete body
        self._head_bytes = 0
        self._fields = 0
        self._tail = b""  # the last 3 head bytes: a CRLFCRLF split between two reads
        self._length = self._codings = b""  # the head's Content-Length, its Transfer-Encodings (joined)
        self._body_left = 0  # Content-Length bytes still to come; -1: chunked (the end is unknown)
        self._unsplit = False  # parsing a chunked body and what follows it in the same read
        self._rejected = False
        self._close_after_response = False  # malformed bytes after a request still being answered
        self._owed_answer = b""  # the 431/408 of a head cut while an earlier response was sent
        self._lingering = False  # answered and half-closed: what still arrives is discarded
        self._upgrade_offer = False  # the request being parsed offered an upgrade (ignored)
        self._replaying = False  # parsing the head written for an ignored upgrade offer
        self._replay_saved: tuple[Any, ...] = ()
        self._unmet_expectation = False  # an Expect member other than 100-continue
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._response_transport: ResponseTransport | None = None
        #: Called once when the connection is lost (set by the request being answered, found
        #: under :data:`router.upstream.disconnect.CONNECTION_KEY`): a disconnect noticed without a task
        #: waiting on ``receive``.
        self.on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._response_transport = ResponseTransport(transport, self.close_answered)
        self._idle_since = self.loop.time()
        # uvicorn arms its idle timer only after a first response (Kludex/uvicorn#1192): a
        # connection that never sends a byte is closed on the same keep-alive timeout
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        """Parse ``data`` a part at a time (a head, a ``Content-Length`` body, a chunked body and
        what follows it), each head's bytes counted before the parser sees them. llhttp parses
        a stream: the split changes what is counted, never what is parsed."""
        if self._rejected:  # answered and closing (or lingering: the bytes are discarded)
            return
        self._unset_keepalive_if_required()
        pos, size = 0, len(data)
        while pos < size:
            stop = size
            if self._in_head:
                tail = self._tail
                end = (tail + data[pos:pos + 3]).find(b"\r\n\r\n") if tail else -1
                if end >= 0:
                    stop = pos + end + 4 - len(tail)
                elif (end := data.find(b"\r\n\r\n", pos)) >= 0:
                    stop = end + 4
                else:
                    self._tail = (tail + data[pos:])[-3:] if size - pos < 3 else data[-3:]
                self._head_bytes += stop - pos
                if self._head_bytes > self._limits.max_bytes:
                    self._reject("bytes")
                    return
            elif self._in_body:
                left = self._body_left
                if 0 < left < size - pos:  # the rest of the read is the next request's
                    stop = pos + left
                self._body_left = max(0, left - (stop - pos)) if left >= 0 else -1
                self._body_bytes += stop - pos
            self._unsplit = self._in_body and self._body_left < 0
            if not self._feed(data if stop - pos == size else memoryview(data)[pos:stop]):
                return
            # a chunked body ended in this piece (only llhttp knows where): the bytes after its last
            # blank line are the next head's (exact when the request before that head is chunked
            # or bodyless; else over by that request's body bytes after a blank line)
            if self._unsplit:
                self._unsplit = False
                if self._in_head:
                    found = data.rfind(b"\r\n\r\n", pos, stop)
                    start = found + 4 if found >= 0 else min(pos + 3, stop)
                    self._head_bytes, self._tail = stop - start, data[max(start, stop - 3):stop]
                    if self._head_bytes > self._limits.max_bytes:
                        self._reject("bytes")
                        return
            pos = stop
        if self._in_head:
            if self._head_bytes and self._head_timer is None:
                cycle = self.cycle  # counted from the idle start, unless a response is owed
                since = self._idle_since if cycle is None or cycle.response_complete else self.loop.time()
                self._head_timer = self.loop.call_at(since + self._limits.head_timeout_s, self._head_late)
        elif self._in_body and self._body_timer is None:
            self._start_body_timer()

    def _feed(self, data: bytes | memoryview) -> bool:
        """Hand ``data`` to the parser; False when the connection was answered or is closing."""
        while True:
            try:
                self.parser.feed_data(data)
                return not self._rejected
            except httptools.HttpParserCallbackError as exc:
                cause = exc.__context__ or exc.__cause__
                if isinstance(cause, _HeadTooLarge):
                    self._reject(cause.limit)
                elif isinstance(cause, _BadFraming):
                    self._malformed(str(cause), cause.answer, cause.reason)
                else:
                    self._malformed(str(exc) or "a parser callback failed")
                return False
            except httptools.HttpParserError as exc:
                self._malformed(str(exc) or "unparsable bytes")
                return False
            except httptools.HttpParserUpgrade as exc:  # the offer is ignored: parse on as HTTP/1.1
                data = self._without_upgrade(data[exc.args[0]:])

    def _should_upgrade(self) -> bool:
        """Called by uvicorn when a head offers an upgrade (``Connection: upgrade`` and
        ``Upgrade``, or ``CONNECT``): the router speaks no other protocol, so the offer is
        ignored (RFC 9110 section 7.8) and noted for :meth:`_without_upgrade`."""
        self._upgrade_offer = True
        return False

    def _without_upgrade(self, rest: bytes | memoryview) -> bytes:
        """What to parse after httptools stopped at an upgrade offer: a head carrying only the
        request's framing (``Content-Length``, ``Transfer-Encoding``, ``Connection: close``),
        then ``rest``, the bytes after the real head. httptools skips the body of any request
        that offers an upgrade (MagicStack/httptools#124) and would parse it as a request of
        its own; this head makes llhttp read the body by its framing, into the request's
        cycle, and then the next request, with a new parser. Its callbacks touch nothing of
        the request (:meth:`on_headers_complete` restores what ``on_message_begin`` reset)."""
        self._upgrade_offer = False
        lines: list[bytes | memoryview] = [b"POST / HTTP/", self.scope["http_version"].encode(), b"\r\n"]
        for name, value in self.headers:
            if name in (b"content-length", b"transfer-encoding"):
                lines += [name, b": ", value, b"\r\n"]
            elif name == b"connection" and b"close" in [t.strip(b" \t").lower() for t in value.split(b",")]:
                lines.append(b"connection: close\r\n")
        lines += [b"\r\n", rest]
        # a fresh parser: after an offer with ``Connection: close`` llhttp ignores what follows
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's
        self._replay_saved = (self.url, self.headers, self.scope, self.expect_100_continue, self._fields)
        self._replaying = True
        return b"".join(lines)

    def eof_received(self) -> None:  # None: asyncio closes the transport
        if self._in_body and not self._rejected:  # the client ended its stream mid-body
            self._malformed("the request body ended before its Content-Length or last chunk")

    def _start_body_timer(self) -> None:
        self._body_since, self._body_bytes = self.loop.time(), 0
        self._body_timer = self.loop.call_at(self._body_since + self._body_timeout_s, self._body_late)

    def _body_late(self) -> None:
        self._body_timer = None
        if not self._in_body or self._rejected or self.transport.is_closing():
            return
        if self.flow.read_paused:  # the server is not reading: not the client's delay
            self._start_body_timer()
            return
        due = self._body_since + self._body_timeout_s + self._body_bytes / self._body_min_rate
        if self.loop.time() < due:  # the body kept arriving: one second more per min_rate bytes
            self._body_timer = self.loop.call_at(due, self._body_late)
            return
        self._count_framing("body_timeout")
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(body_timeout_response(self._body_timeout_s, self._body_min_rate))
            self._linger()
            return
        self._rejected = True
        if isinstance(self.cycle, PlainCycle):
            self.cycle.flush_head()
        self.transport.close()

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _malformed(self, detail: str, answer: bytes | None = None, reason: str = "malformed") -> None:
        """Bytes that are no HTTP request (module docstring): a JSON 400 (or ``answer``) and
        close, or, while a response is still owed on the connection, close once it is complete;
        counted as ``reason``."""
        self._rejected = True
        self._stop_body_timer()
        self._count_framing(reason)
        self.logger.warning("Invalid HTTP request received: %s", detail)
        cycle = self.cycle
        if self._in_body and self.pipeline:  # the broken one is queued behind another: drop it
            self.pipeline.popleft()
        elif self._in_body and cycle is not None and cycle.response_started:  # answered early
            if cycle.response_complete:
                self.transport.close()
                return
            cycle.keep_alive = False
        elif not self.pipeline and (cycle is None or cycle.response_complete or self._in_body):
            self.transport.write(answer or bad_request_response(detail))
            self._linger()
            return
        elif not self.pipeline and cycle is not None:
            cycle.keep_alive = False  # the request being answered: the connection closes at its end
        self._close_after_response = True  # after the last complete request queued, if any

    def on_response_complete(self) -> None:
        if self._lingering:  # closed after this answer (close_answered): no next request
            self.server_state.total_requests += 1
            return
        self.server_state.total_requests += 1
        if self._close_after_response and not self.pipeline:
            if self._owed_answer:  # a head cut while this response was sent: its 431 or 408 now
                self.transport.write(self._owed_answer)
                self._linger()
                return
            self.transport.close()
            return
        transport = self.transport  # uvicorn's on_response_complete, inline
        if transport.is_closing():
            return
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        self.flow.resume_reading()
        if self.pipeline:  # the next pipelined request
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._idle_since = self.loop.time()
            self.timeout_keep_alive_task = self.loop.call_at(self._idle_since + self.timeout_keep_alive,
                                                             self.timeout_keep_alive_handler)

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
        self._stop_body_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        super().connection_lost(exc)
        lost, self.on_lost = self.on_lost, None
        if lost is not None:
            lost()

    def _reject(self, limit: str) -> None:
        """A head over a limit (431) or too slow (408): answered and closed (lingering); when
        the head follows a request still being answered (pipelined), nothing is written into
        that response: the head and what follows are dropped, and the answer and the close
        come once that response is complete (:meth:`on_response_complete`)."""
        self._count(limit)
        answer = rejection_response(limit, self._limits)
        cycle = self.cycle
        if self.pipeline or (cycle is not None and not cycle.response_complete):
            self._rejected = True
            self._stop_head_timer()
            self._owed_answer = answer
            self._close_after_response = True
            return
        self.transport.write(answer)
        self._linger()

    def _linger(self) -> None:
        """Close after an answer while the client may still be sending (a lingering close, as
        nginx's ``lingering_close`` and Apache's): parse nothing more, half-close once the
        answer is written (FIN), and read and discard what still arrives until the client
        closes or ``server.linger_s`` passed. Closing at once with unread bytes makes the
        kernel reset the connection, and the client's reset discards the answer unread."""
        self._rejected = self._lingering = True
        self._stop_head_timer()
        self._stop_body_timer()
        self._unset_keepalive_if_required()
        transport = self.transport
        if transport.is_closing():
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.flow.resume_reading()
        self._linger_timer = self.loop.call_later(self._linger_s, transport.close)

    def close_answered(self) -> None:
        """Close the connection after a response (:class:`router.front.http_cycles.ResponseTransport`):
        at once when no request is partly received, else lingering (:meth:`_linger`): an early
        413, 401 or 417 while the client still uploads its body."""
        if not self._rejected and (self._in_body or self._head_bytes):
            self._linger()
        else:
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
        if name == b"content-length":
            self._length = value
        elif name == b"transfer-encoding":
            self._codings = self._codings + b"," + value if self._codings else value
        elif name == b"expect":
            self._on_expect(value)
        self.headers.append((name, value))

    def _on_expect(self, value: bytes) -> None:
        """An ``Expect`` field: ``100-continue`` (any case, RFC 9110 section 10.1.1) is noted
        for uvicorn; any other member is an expectation the router cannot meet (417)."""
        for member in value.split(b","):
            member = member.strip(b" \t").lower()
            if member == b"100-continue":
                self.expect_100_continue = True
            elif member:
                self._unmet_expectation = True

    def on_headers_complete(self) -> None:
        if self._replaying:  # the head of _without_upgrade: the request has its cycle already
            self._replaying = False
            self.url, self.headers, self.scope, self.expect_100_continue, self._fields = self._replay_saved
            self._length = self._codings = b""
            return
        codings, length = self._codings, self._length
        self._codings = self._length = b""
        if codings and (error := transfer_coding_error(codings, self.parser.get_http_version())):
            raise _BadFraming(*error)  # a 400 or 501: the router frames chunked alone
        if codings or self._unsplit:  # the body's end is llhttp's to find (chunked, or read with one)
            self._body_left = -1
        else:
            self._body_left = int(length) if length.strip(b" \t").isdigit() else -1 if length else 0
        self._in_head = False
        if self._head_timer is not None:
            self._stop_head_timer()
        self.scope[CONNECTION_KEY] = self  # type: ignore[literal-required]  # an extension key
        if self._unmet_expectation:  # 417 in its turn, without asking for the body
            self._unmet_expectation = self.expect_100_continue = False
            self._count_framing("expectation")
            self._start_cycle(expectation_failed)
        else:
            self._start_cycle(None)
        self._in_body = True

    def _start_cycle(self, app: Any) -> None:
        """uvicorn's ``on_headers_complete`` (0.55), inline: the scope's method and path, then
        the request's cycle (:class:`router.front.http_cycles.PlainCycle`, or its HTTP/1.0 or
        ``Expect: 100-continue`` subclass), writing through the protocol's
        :class:`router.front.http_cycles.ResponseTransport`, its task started, or queued behind
        the request being answered. ``app``: None for the protocol's app (uvicorn's 503 over
        its concurrency limit), else that ASGI app (:func:`router.front.http_cycles.expectation_failed`)."""
        parser = self.parser
        scope = self.scope
        http_version = parser.get_http_version()
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            if http_version[:2] != "1.":
                raise _BadFraming(f"HTTP/{http_version}", version_response(http_version), "malformed")
            scope["http_version"] = http_version
            self.expect_100_continue = False  # RFC 9110 section 10.1.1: ignored in HTTP/1.0
        if parser.should_upgrade() and self._should_upgrade():
            return
        parsed_url = httptools.parse_url(self.url)
        raw_path = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root_path = self.root_path
        scope["path"] = root_path + path
        scope["raw_path"] = root_path.encode("ascii") + raw_path
        scope["query_string"] = parsed_url.query or b""
        if app is None:
            app = self.app
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        expect = self.expect_100_continue
        cls = (PlainCycle if not expect else ContinueCycle) if http_version == "1.1" else CloseDelimitedCycle
        existing = self.cycle
        cycle = self.cycle = cls(
            scope, self._response_transport, self.flow, self.logger, self.access_logger, self.access_log,
            self.server_state.default_headers, asyncio.Event(), expect,
            http_version != "1.0" and parser.should_keep_alive(), self.on_response_complete)
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, app)
        else:  # pipelined: queued behind the request being answered
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))

    def on_message_complete(self) -> None:
        if self._upgrade_offer:  # httptools ends the message at the head of an upgrade offer
            return  # (its body, if any, is read by _without_upgrade's framing)
        cycle = self.cycle  # uvicorn's on_message_complete, inline
        if not ((self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete):
            cycle.more_body = False
            cycle.message_event.set()
        self._in_head, self._in_body, self._head_bytes, self._fields, self._tail = True, False, 0, 0, b""
        if self._body_timer is not None:
            self._stop_body_timer()


def limited_protocol(source: LimitsSource) -> type[asyncio.Protocol]:
    """An httptools protocol class for ``uvicorn.Config(http=...)`` that enforces the limits
    ``source()`` returns (module docstring). One class per app; no state outside it."""

    class LimitedHttpToolsProtocol(_LimitedProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(source, *args, **kwargs)

    return LimitedHttpToolsProtocol
