"""Helpers of the proxy's upstream call (:mod:`router.upstream.proxy`): pure or self-contained.

- :class:`ReuseMarkingConnector` / :class:`ConnTrace`: the upstream connector tells, per
  request, whether it took the connection from its pool (the proxy resends only a request
  whose *reused* connection broke before any response byte; sgl-project/sglang#20851,
  aio-libs/aiohttp#7363). It replaces aiohttp's ``on_connection_reuseconn`` trace: a session
  with any ``TraceConfig`` builds trace objects and awaits a signal at every request step and
  every response chunk (``aiohttp/tracing.py``), a cost on every request for a fact needed only
  when a connection breaks.
- :func:`classify_event`: what one SSE event says before any content was relayed (the proxy
  holds the status line until the first content event; sgl-project/sglang#28175).
- :func:`find_abort`, :func:`body_abort`, :func:`stream_done`, :func:`sse_data`,
  :func:`event_json`, :func:`may_carry_usage`: the engine's stream and body read by the SSE and
  JSON grammars, not by one serializer's bytes (any JSON spacing, key order or escaping,
  ``data:`` with or without its space, LF/CRLF/CR line ends, comments); the one reader of
  usage, finish reasons and errors (:mod:`router.upstream.observe` reads usage with it).
- :func:`retry_after_seconds`: an engine's ``Retry-After`` (delta-seconds) as an int.
- :class:`IdleWatch`: the between-chunks idle timer of a relayed stream; :class:`Heartbeat`:
  the keep-alive comments written to the client while the engine is silent;
  :class:`Forwarder`: what the relay notes of each forwarded chunk.
- :class:`Deadline`: the first-byte / whole-body deadline of one attempt (``asyncio.timeout_at``
  without its two coroutines per use).
- :func:`abort_request`: SGLang's ``POST /abort_request`` for a list of engine request ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Self

import aiohttp
import orjson

from router.errors import SpecgateError
from router.upstream.specstats import strip_event

if TYPE_CHECKING:
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.client_reqrep import ClientRequest
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace

    from router.upstream.proxy_job import JobNotes

__all__ = [
    "KEEPALIVE_EVENT",
    "Backpressure",
    "ConnTrace",
    "Deadline",
    "Failover",
    "Forwarder",
    "Heartbeat",
    "IdleWatch",
    "ReuseMarkingConnector",
    "Stale",
    "abort_request",
    "body_abort",
    "classify_event",
    "complete_events",
    "event_json",
    "find_abort",
    "may_carry_usage",
    "next_event",
    "read_within",
    "retry_after_seconds",
    "sse_data",
    "stream_done",
]

class ConnTrace:
    """Per-request mark: set when the connector took the connection from its pool."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


class ReuseMarkingConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that marks the calling request's :class:`ConnTrace` as reused when
    the connection it hands out has served a request before (it came from the keep-alive pool).

    The request being sent names its mark through :attr:`marks` (a context variable: the
    connector runs in the sending task, so the value set there is the one read here; other
    requests' tasks have their own). A connection is known by its protocol object, held
    weakly, so a closed connection leaves nothing behind. Takes ``TCPConnector``'s arguments.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marks: contextvars.ContextVar[ConnTrace | None] = contextvars.ContextVar(
            "specgate_conn_mark", default=None)
        self._served: weakref.WeakSet[ResponseHandler] = weakref.WeakSet()

    async def connect(self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout) -> Connection:
        conn = await super().connect(req, traces, timeout)
        proto = conn.protocol
        if proto is not None:
            if proto in self._served:
                mark = self.marks.get()
                if mark is not None:
                    mark.reused = True
            else:
                self._served.add(proto)
        return conn


#: A blank line ending an SSE event: two line ends, each CRLF, LF or CR (WHATWG HTML,
#: "Server-sent events", the event stream's grammar).
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r|\n\r\n|\r\n\n")


def next_event(buf: bytes, pos: int = 0) -> tuple[int, int] | None:
    """``(end, after)`` of the first SSE event in ``buf`` from ``pos``: the event is
    ``buf[pos:end]``, the next one starts at ``after``; None when no event ends there yet.
    Without CR bytes one byte search finds the usual ``\\n\\n``; else the grammar's regex.
    (Byte searches here use ``find``, not ``in``: on CPython 3.11 ``bytes.__contains__``
    first tries its argument as an int and clears that TypeError, about 100 ns a test.)"""
    if buf.find(b"\r") < 0:
        end = buf.find(b"\n\n", pos)
        return None if end < 0 else (end, end + 2)
    m = _EVENT_END.search(buf, pos)
    return None if m is None else (m.start(), m.end())


def complete_events(buf: bytes) -> int:
    """How many leading bytes of ``buf`` are whole SSE events (0: no event ends in it)."""
    if buf.endswith((b"\n\n", b"\r\n\r\n")):
        return len(buf)
    best = buf.rfind(b"\n\n") + 2
    if buf.find(b"\r") >= 0:
        for sep in (b"\r\n\r\n", b"\r\r", b"\n\r\n"):
            at = buf.rfind(sep, max(best - 2, 0))
            if at >= 0:
                best = max(best, at + len(sep))
    return best if best > 1 else 0


def sse_data(event: bytes) -> bytes | None:
    """The data of one SSE event (without its blank line), read by the event-stream grammar
    (WHATWG HTML, "Server-sent events", interpreting an event stream): its ``data`` field
    lines, each with ``data:`` and one optional space after it removed, joined by ``\\n``;
    lines may end with CRLF, LF or CR. None when the event has no ``data`` field (a comment such
    as ``: keep-alive``, or another field only)."""
    if event.startswith(b"data: ") and event.find(b"\n") < 0 and event.find(b"\r") < 0:  # the usual one-line event
        return event[6:]
    parts = []
    for line in event.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if line == b"data":
            parts.append(b"")
        elif line.startswith(b"data:"):
            parts.append(line[6:] if line.startswith(b"data: ") else line[5:])
    return b"\n".join(parts) if parts else None


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def event_json(event: bytes) -> dict[str, Any] | None:
    """The JSON object one SSE event (without its blank line) carries in its data, else None
    (a comment, another field only, ``[DONE]``, anything not a JSON object)."""
    data = sse_data(event)
    return None if data is None else _json_object(data)


def may_carry_usage(data: bytes, end: int) -> bool:
    """False only when ``data[:end]`` cannot hold a non-null ``usage`` member in any JSON
    spelling (``"usage": {`` as well as ``"usage":{``; a key written with a ``\\u`` escape is
    let through), so only chunks that may carry one are parsed. SGLang writes ``"usage":null``
    in every chunk: that one does not pass. Two or three byte searches per relayed chunk."""
    at = data.find(b'usage"', 0, end)
    while at >= 0:
        if not data.startswith(b":null", at + 6):
            return True
        at = data.find(b'usage"', at + 6, end)
    return data.find(b"\\u", 0, end) >= 0


def _has_content(choice: dict[str, Any]) -> bool:
    """Whether one choice (a stream chunk's or a whole response's) carries generated output."""
    if choice.get("text"):
        return True
    for key in ("delta", "message"):
        part = choice.get(key)
        if isinstance(part, dict):
            for k, v in part.items():  # a plain loop: no generator per choice (once per stream)
                if k != "role" and v:
                    return True
    return False


def classify_event(event: bytes) -> str:
    """What one SSE event (without its blank line) says before any content was relayed:
    ``"content"`` (commit the response: content, a non-abort finish, ``[DONE]``, or data that
    is not a JSON object), ``"error"`` (an error event: an object with ``error`` and no
    ``choices``), ``"abort"`` (``finish_reason: "abort"``) or ``"skip"`` (no content yet: the
    role chunk, a usage chunk, an event without data such as a ``: keep-alive`` comment or
    ``event:``/``id:``/``retry:`` fields alone, which the SSE grammar dispatches as nothing).
    Read by the SSE and JSON grammars, any spacing."""
    data = sse_data(event)
    if data is None:  # a comment (": keep-alive") or event:/id:/retry: only: no content yet
        return "skip"
    doc = _json_object(data)
    if doc is None:
        return "content"
    choices = doc.get("choices")
    if not isinstance(choices, list):
        return "error" if "error" in doc else "content"
    verdict = "skip"
    for choice in choices:
        if not isinstance(choice, dict):
            return "content"
        if _has_content(choice):
            return "content"
        finish = choice.get("finish_reason")
        if finish == "abort":
            verdict = "abort"
        elif finish is not None:
            return "content"
    return verdict


def _aborts(doc: dict[str, Any] | None) -> bool:
    choices = doc.get("choices") if doc is not None else None
    return isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") == "abort" for c in choices)


def _may_abort(data: bytes) -> bool:
    """False only when ``data`` cannot hold the JSON string ``"abort"``: it would be written
    ``abort`` or with a ``\\u`` escape. Two byte searches, so a relayed chunk is parsed only
    when it may carry an abort."""
    return data.find(b"abort") >= 0 or data.find(b"\\u") >= 0


def find_abort(chunk: bytes) -> int | None:
    """The offset of the first whole SSE event in ``chunk`` (events end with a blank line)
    whose JSON has a choice with ``finish_reason: "abort"`` (any JSON spacing or escaping,
    ``data:`` with or without its space), else None. The events before that offset are
    complete and may be relayed."""
    if not _may_abort(chunk):
        return None
    pos = 0
    while True:
        found = next_event(chunk, pos)
        if found is None:
            return None
        end, after = found
        event = chunk[pos:end]
        if _may_abort(event):
            data = sse_data(event)
            if data is not None and _aborts(_json_object(data)):
                return pos
        pos = after


def body_abort(body: bytes) -> str | None:
    """What a non-streamed response body says about an engine abort: None (no choice ended
    ``finish_reason: "abort"``), ``"before_content"`` (one did and no choice carries output)
    or ``"after_content"``. Parsed only when it may hold ``"abort"``."""
    if not _may_abort(body):
        return None
    doc = _json_object(body)
    if not _aborts(doc):
        return None
    assert doc is not None  # _aborts: an object with choices
    return "after_content" if any(isinstance(c, dict) and _has_content(c) for c in doc["choices"]) \
        else "before_content"


def stream_done(data: bytes) -> bool:
    """Whether ``data`` (relayed bytes from an event boundary, or a stream's last bytes) holds
    the ``[DONE]`` event, with or without the space after ``data:``, whatever follows it in
    the stream (comments, ``id:`` fields, another event): a line ``data: [DONE]`` or
    ``data:[DONE]`` (CR, LF or the end of ``data`` around it: never one inside a JSON string,
    which cannot hold a raw line end). Each ``[DONE]`` found is checked
    by its neighbours, not by a regular expression scanning the whole chunk (it runs on every
    relayed chunk: 16 us per KiB that way, under 1 us this way)."""
    i = data.find(b"[DONE]")
    while i >= 0:
        end = i + 6
        if end == len(data) or data[end] in b"\r\n":
            start = i - 6 if data[i - 1:i] == b" " else i - 5
            if start >= 0 and data.startswith(b"data:", start) and (start == 0 or data[start - 1] in b"\r\n"):
                return True
        i = data.find(b"[DONE]", end)
    return False


def retry_after_seconds(headers: Any) -> int | None:
    """An engine's ``Retry-After`` in whole seconds (delta-seconds form only), else None."""
    value = headers.get("retry-after")
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


class IdleWatch:
    """Cancels the current task when ``last`` (loop time, s) is ``idle`` seconds old.

    The relay stores ``loop.time()`` in :attr:`last` per chunk, and one timer per idle period
    checks it, instead of re-arming a timer per chunk as ``asyncio.timeout().reschedule``
    does (a timer-heap push and a cancelled handle per relayed event). After the
    cancellation :attr:`fired` is True; the relay calls ``task.uncancel()`` and reports the
    idle timeout. ``loop``, ``task``: the running loop and the current task when the caller
    has them at hand (else looked up).
    """

    __slots__ = ("call_at", "fired", "handle", "idle", "last", "loop", "task")

    def __init__(self, idle: float, loop: asyncio.AbstractEventLoop | None = None,
                 task: asyncio.Task[Any] | None = None) -> None:
        self.loop = loop or asyncio.get_running_loop()
        task = task or asyncio.current_task()
        assert task is not None
        self.task = task
        #: ``loop.call_at`` (the heartbeat's too)
        self.call_at: Callable[[float, Callable[[], object]], Any] = self.loop.call_at
        self.idle = idle
        self.fired = False
        self.last = self.loop.time()
        self.handle = self.call_at(self.last + idle, self._check)

    def _check(self) -> None:
        due = self.last + self.idle
        if self.loop.time() >= due:
            self.fired = True
            self.task.cancel()
        else:
            self.handle = self.call_at(due, self._check)

    def close(self) -> None:
        self.handle.cancel()


#: Written to the client while the engine is silent mid-stream (``upstream.stream_keepalive_s``):
#: an SSE comment, which SSE clients skip (WHATWG HTML, "Server-sent events").
KEEPALIVE_EVENT = b": keep-alive\n\n"


class Heartbeat:
    """Marks a relayed stream's silence: ``due`` once the relay has waited ``interval``
    seconds on the engine since the client last got a byte (an engine chunk, ``watch.last``,
    or the previous comment), and then cancels the relay's task, whose handler calls
    :meth:`keep_alive` to write an SSE comment (:data:`KEEPALIVE_EVENT`) and reads on. It
    cancels only while the relay waits on the engine (:attr:`reading`, set around the read),
    never during a write to the client (a client that reads slowly is not silence), and never
    after the idle watch fired, which still counts the engine's silence alone. One timer per
    silent period, as :class:`IdleWatch`; nothing per relayed chunk but the ``reading`` flag.
    ``interval`` 0: never due (no timer).

    A comment every 15 s is what the WHATWG HTML SSE section suggests against proxies that
    close idle connections (nginx's ``proxy_read_timeout`` and cloud load balancers: 60 s).
    """

    __slots__ = ("due", "handle", "interval", "reading", "sent", "watch")

    def __init__(self, interval: float, watch: IdleWatch) -> None:
        self.watch = watch
        self.interval = interval
        self.due = self.reading = False
        self.sent = watch.last
        self.handle = watch.call_at(self.sent + interval, self._check) if interval > 0 else None

    def _check(self) -> None:
        watch = self.watch
        now = watch.loop.time()
        at = max(watch.last, self.sent) + self.interval
        if now < at:
            self.handle = watch.call_at(at, self._check)
        elif not self.reading or watch.fired:
            self.handle = watch.call_at(now + self.interval, self._check)
        else:
            self.due = True
            watch.task.cancel()

    async def keep_alive(self, send: Callable[[Any], Awaitable[None]]) -> bool:
        """In the relay's ``except CancelledError`` around its read: False when the
        cancellation is not this heartbeat's alone (re-raise it: the idle timeout, a client
        disconnect); else withdraw it, write the comment with ``send`` (the client's ASGI
        send), re-arm and return True. Only ever after the status line went out."""
        self.reading = False
        if not self.due:
            return False
        self.due = False
        if self.watch.task.uncancel() > 0 or self.watch.fired:  # another cancellation is pending
            return False
        await send({"type": "http.response.body", "body": KEEPALIVE_EVENT, "more_body": True})
        self.sent = self.watch.loop.time()
        self.handle = self.watch.call_at(self.sent + self.interval, self._check)
        return True

    def close(self) -> None:
        """Stop this timer and the idle watch's."""
        if self.handle is not None:
            self.handle.cancel()
        self.watch.close()


class Forwarder:
    """What the relay notes of each chunk it forwards (:meth:`__call__`, a plain call: no
    coroutine per relayed chunk): the speculative statistics read and, when the router asked
    for them, cut out (:mod:`router.upstream.specstats`), the response observer fed, and the stream's
    last 32 bytes kept for its end (``[DONE]``, or one of ``ends``).

    Args:
        ends: the kind's end events (None: ``data: [DONE]``).
        observer: the response's :class:`router.upstream.observe.ResponseObserver`, or None.
        extra: the job's ``extra`` (``spec_stats``: ``strip``/``read``/None; the accept
            length is written back as ``spec_accept_length``).
    """

    __slots__ = ("ended", "ends", "extra", "observer", "spec_stats", "tail")

    def __init__(self, ends: tuple[bytes, ...] | None, observer: Any, extra: JobNotes) -> None:
        self.ends, self.observer, self.extra = ends, observer, extra
        self.spec_stats = extra.get("spec_stats")
        #: The stream's end event went by (``[DONE]``, or one of ``ends``): what follows it
        #: (a trailing comment, an ``id:`` line) does not make the stream incomplete.
        self.ended = False
        self.tail = b""

    def __call__(self, data: bytes) -> bytes:
        """The bytes to relay of ``data`` (b"": none)."""
        if self.spec_stats is not None:
            stripped, tau = strip_event(data)
            if tau is not None:
                self.extra["spec_accept_length"] = tau
            if self.spec_stats == "strip":
                data = stripped
                if not data:
                    return data
        tail = self.tail
        if not self.ended:
            if self.ends is None:  # chunks start at an event boundary (the relay cuts whole events)
                self.ended = data.find(b"[DONE]") >= 0 and stream_done(data)
            else:
                seen = tail[-32:] + data
                self.ended = any(seen.find(e) >= 0 for e in self.ends)
        if self.observer is not None:
            self.observer.feed(data)
        self.tail = data if len(data) >= 32 else (tail + data)[-32:]  # the stream's last 32 bytes
        return data

    def complete(self) -> bool:
        """Whether the stream forwarded so far ended as a complete one."""
        return self.ended or (self.ends is None and stream_done(self.tail[-32:]))


class Deadline:
    """``with Deadline(when):`` around awaits cancels the current task at loop time ``when``
    (s) and turns that cancellation into ``TimeoutError``, as ``async with
    asyncio.timeout_at(when):`` does, with one timer and no coroutine per use (a synchronous
    context manager: ``Timeout.__aenter__`` and ``__aexit__`` are two coroutines per request).

    On exit the timer stops; when it fired, the cancellation it asked for is withdrawn
    (``task.uncancel()``) and a ``CancelledError`` becomes ``TimeoutError`` unless another
    cancellation of the task is pending (a client disconnect at the same time stays a
    cancellation), exactly ``asyncio.Timeout.__aexit__``'s rule. ``task``: the current task
    when the caller holds it (``asyncio.current_task`` is a Python function in 3.11).
    """

    __slots__ = ("_given", "cancelling", "fired", "handle", "task", "when")

    def __init__(self, when: float, task: asyncio.Task[Any] | None = None) -> None:
        self.when = when
        self.fired = False
        self._given = task  # the current task when the caller knows it (None: looked up on entry)

    def __enter__(self) -> Self:
        task = self._given or asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline should be used inside a task")
        self.task = task
        self.cancelling = task.cancelling()
        self.handle = asyncio.get_running_loop().call_at(self.when, self._fire)
        return self

    def _fire(self) -> None:
        self.fired = True
        self.task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        self.handle.cancel()
        if self.fired and self.task.uncancel() <= self.cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc


async def read_within(read: Callable[[], Awaitable[bytes]], when: float,
                      task: asyncio.Task[Any] | None) -> bytes | None:
    """``await read()`` (``task``: the current one, or None to look it up), or None once loop
    time ``when`` (s) passed first (the read is then cancelled, nothing lost: the bytes stay
    in the stream's buffer)."""
    try:
        with Deadline(when, task):
            return await read()
    except TimeoutError:
        return None


async def abort_request(session: aiohttp.ClientSession, base_url: str, rids: tuple[str, ...],
                         timeout_s: float) -> None:
    """``POST {base_url}/abort_request {"rid": rid}`` for each of ``rids`` (SGLang looks each
    up by equality); errors are ignored (best effort, each within ``timeout_s`` seconds)."""
    for rid in rids:
        with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
            async with session.post(base_url + "/abort_request", json={"rid": rid},
                                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                await resp.read()


# -- the proxy's control-flow exceptions (router.upstream.proxy) --------------------------------
class Failover(Exception):
    """An engine failure before the first byte that another endpoint may serve."""

    def __init__(self, error: SpecgateError) -> None:
        super().__init__(error.message)
        self.error = error


class Stale(Exception):
    """A reused keep-alive connection broke before any response byte."""


class Backpressure(Exception):
    """The engine refused for capacity before the first byte.

    Attributes:
        reason: ``http_503``, ``http_429``, ``stream_error``, ``stream_abort`` or ``body_abort``.
        retry_after: the engine's ``Retry-After`` (s), or None.
    """

    def __init__(self, reason: str, retry_after: int | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
