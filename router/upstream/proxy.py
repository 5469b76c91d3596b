"""Relay one request to its engine and the engine's bytes back, unbuffered.

:class:`ProxyResponse` is an ASGI response object: the handler (``router.front.api``) validates,
counts, decides and takes the in-flight lease synchronously, then returns a ProxyResponse
that owns the rest of the request's life. Its contract:

- **Before the first byte** to the client: a refused connection marks the endpoint down
  (passive health) and fails over to another endpoint or pool the policy allows (the body
  never reached an engine, so a retry is safe); an engine 5xx other than 503 also fails over
  (it answered, so nothing is generating); an engine 4xx other than 429 comes back with the
  same status as an OpenAI error (over-length wordings become ``context_length_exceeded``);
  no first byte of a stream within ``first_byte_timeout_s + first_byte_s_per_1k_tokens * P /
  1000`` aborts upstream and fails over (the endpoint must pass its warm-up probes again
  unless it is its pool's last routable one, :meth:`router.state.endpoint.Endpoint.record_stall`); with nowhere left to go, or for a
  non-streamed request past ``nonstream_timeout_s``, the answer is 504 ``upstream_timeout``. For streams the client's headers wait
  for the engine's first *content* event, so all of these are still real HTTP statuses,
  never SSE with 200.
- **Stale keep-alive connections** (sgl-project/sglang#20851, aio-libs/aiohttp#9138 and
  #7297): the upstream client keeps idle connections ``upstream.keepalive_timeout_s`` seconds,
  below every engine's keep-alive (checked at config load), so the router normally drops a
  connection before the engine closes it. A connection can still die in the race; aiohttp
  resends only idempotent methods, never a POST (aio-libs/aiohttp#7363). So when a *reused*
  connection (:attr:`router.upstream.transport.ConnectionBroken.reused`, set by the session's
  :class:`router.upstream.relay.ReuseMarkingConnector`) breaks before any response byte, the proxy
  first sends ``/abort_request`` for the request's engine ids (the engine may have read the
  body; it must never finish two generations), then resends once on a fresh connection
  (``Transport.post(fresh=True)``: ``AppState.fresh_session``, ``force_close``), same
  endpoint and lease. It is not a health signal and is counted in
  ``specgate_upstream_stale_connection_retries_total``. A break on a fresh connection (the
  first try or that resend) marks the endpoint down and answers 502
  ``{"error":{"message":"upstream connection failed","type":"server_error","param":null,
  "code":"upstream_connection_error"}}``, never resent (the engine may be generating). A break
  after the status line is 502 ``upstream_error`` without retry.
- **Engine back-pressure** (sgl-project/sglang#28175, #30341, vllm-project/vllm#49330): a 503
  or 429 status, or a 200 stream whose first events carry an error with code 503/429 (SGLang's
  queue-full refusal after the status was committed) or a ``finish_reason: "abort"`` before
  any content, is a refusal before the first byte; so is a non-streamed 200 body with a
  choice whose ``finish_reason`` is ``"abort"`` (an engine eviction, e.g. SGLang's
  priority-based ``_abort_on_queued_limit``, sgl-project/sglang#16369: its content is cut or
  empty, and nothing reached the client yet, so it is never relayed as a 200). The endpoint is *not* ejected: it records
  back-pressure (:meth:`router.state.endpoint.Endpoint.record_backpressure`, for the engine's
  ``Retry-After`` up to ``upstream.backpressure_max_hold_s``, else
  ``upstream.backpressure_hold_s``), and the request is resent once to another pool
  (``redecide`` with the refusing pool excluded). When that pool refuses too, or no other
  pool can take it, the answer is a real 503 ``{"error":{"message":"all pools are at
  capacity","type":"server_error","param":null,"code":"engine_overloaded"}}`` with
  ``Retry-After`` (the largest an engine sent, else ``health.retry_after_s``), streamed or
  not; when another try failed otherwise (e.g. a 500), that failure's 502 stands instead.
  503 rather than 429: the servers, not the client's rate, are the limit. Refusals are
  counted in ``specgate_engine_rejections_total{pool, reason}``.
- **After the first byte**: bytes are relayed as they arrive (``readany``, no re-encoding, no
  compression), whole SSE events at a time (an incomplete trailing event waits for its end);
  never retried; an upstream failure or idle timeout sends one ``data: {"error": ...}`` event
  and closes (engine silence: ``upstream.idle_timeout_s``, the client's own reads do not count;
  meanwhile a ``: keep-alive`` comment every ``upstream.stream_keepalive_s``, ``Heartbeat``);
  a stream that ends without ``data: [DONE]`` gets the same error event, and
  ``[DONE]`` is never invented. An engine-initiated abort after content (a chunk with a
  choice ending ``finish_reason: "abort"``, not an OpenAI value, vllm-project/vllm#57082) is
  not relayed: the content before it is, then one ``data: {"error":{"message":"generation
  aborted by engine","type":"server_error","param":null,"code":"engine_abort"}}`` event, no
  ``[DONE]``, no retry. Events are read by the SSE and JSON grammars (any spacing, escaping,
  ``data:`` with or without its space, LF/CRLF/CR; :mod:`router.upstream.relay`).
- **Non-streamed aborts** (a choice ending ``"abort"``): with no output, a capacity refusal
  (``body_abort``, resent as above); with output, 502 ``engine_abort``; never a 200.
- **Client disconnect** (watched on the ASGI ``receive`` channel, also while waiting for the
  engine): the upstream request is closed and ``POST /abort_request {"rid": ...}`` goes to the
  endpoint that owns it, once per engine request id (one prompt: its ``rid``; a batch of
  prompts: ``<rid>_<i>``), because SGLang's own disconnect cleanup has regressed
  (sgl-project/sglang#37833). With ``n > 1`` SGLang gives each sample an id no abort can name: closing the
  connection is all the router can do then.
- **Leases**: a resend on a fresh connection keeps the lease; a failover or back-pressure
  resend releases it and takes one on the new endpoint; the lease held at the end is released
  exactly once, in ``finally``.

The upstream client is a :class:`router.upstream.transport.Transport` (the seam the unit tests drive
without sockets, ``tests/support/transport.py``); its failures arrive as the transport's own
exception tree (:class:`~router.upstream.transport.ConnectFailed`, :class:`~router.upstream.transport.ConnectionBroken`,
:class:`~router.upstream.transport.PayloadBroken`), never as the client library's types.

Non-streaming responses are read whole from the engine (bounded by
``upstream.nonstream_timeout_s``) and sent with a Content-Length, so a client never sees a
truncated JSON body.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from router.config.tree import UpstreamConfig
from router.errors import (
    EngineOverloaded,
    SpecgateError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamTimeout,
    map_engine_error,
)
from router.ops.spans import end_span
from router.upstream.disconnect import DisconnectWatch
from router.upstream.proxy_job import ProxyJob, Redecide, Redecision
from router.upstream.relay import Backpressure as _Backpressure
from router.upstream.relay import (
    Deadline,
    Forwarder,
    Heartbeat,
    IdleWatch,
    body_abort,
    classify_event,
    complete_events,
    find_abort,
    next_event,
    read_within,
    retry_after_seconds,
    sse_data,
)
from router.upstream.relay import Failover as _Failover
from router.upstream.relay import Stale as _Stale
from router.upstream.specstats import strip_body
from router.upstream.transport import (
    ConnectFailed,
    ConnectionBroken,
    Transport,
    TransportError,
    UpstreamResponse,
)

if TYPE_CHECKING:
    from router.state.endpoint import Endpoint

__all__ = ["ENGINE_ABORT_EVENT", "UPSTREAM_FAILED_EVENT", "ProxyJob", "ProxyResponse", "Redecide",
           "Redecision"]

#: The one terminal SSE event sent when the engine fails mid-stream.
UPSTREAM_FAILED_EVENT = (
    b'data: {"error":{"message":"upstream worker failed","type":"server_error",'
    b'"param":null,"code":"upstream_error"}}\n\n'
)
UPSTREAM_TIMEOUT_EVENT = (
    b'data: {"error":{"message":"upstream timed out between chunks","type":"server_error",'
    b'"param":null,"code":"upstream_timeout"}}\n\n'
)
#: Sent instead of the engine's ``finish_reason: "abort"`` chunk once content was relayed.
ENGINE_ABORT_EVENT = (
    b'data: {"error":{"message":"generation aborted by engine","type":"server_error",'
    b'"param":null,"code":"engine_abort"}}\n\n'
)
_MAX_ERROR_BODY = 64 * 1024
_MAX_HELD = 1 << 20  # bytes of an incomplete SSE event held back before relaying them anyway
_BACKPRESSURE = (429, 503)


class _ClientGone(Exception):
    """The client disconnected."""


class ProxyResponse(Response):
    """ASGI response that performs the upstream call (see the module docstring).

    A Starlette ``Response`` subclass only so that FastAPI passes it through untouched; it
    does not use the base class's body machinery.

    Args:
        job: the admitted request.
        transport: the upstream client (:class:`router.upstream.transport.Transport`; in the app a
            :class:`router.upstream.transport_aiohttp.AiohttpTransport`).
        upstream: the ``upstream`` config section (timeouts, attempts).
        redecide: ``redecide(excluded_urls, excluded_pools) -> Redecision`` for failover
            (:data:`Redecide`); a :class:`Redecision` without a lease means the policy found
            nowhere left to go.
        on_done: called once with the job when the response is finished (metrics, log).
        spawn: schedules a background coroutine (used for ``/abort_request``).
        retry_after_s: ``Retry-After`` (s) of ``engine_overloaded`` when no engine sent one.
        clock: monotonic clock (s) for back-pressure records.
        tracing: a :class:`router.ops.tracing.Tracing`: a client span per attempt, whose context
            is sent upstream (None: the job's ``trace`` headers as they are).
    """

    def __init__(self, job: ProxyJob, *, transport: Transport, upstream: UpstreamConfig,
                 redecide: Redecide, on_done: Callable[[ProxyJob], None],
                 spawn: Callable[[Any], None], retry_after_s: int = 5,
                 clock: Callable[[], float] = time.monotonic, tracing: Any = None) -> None:
        self.job = job
        self._tracing = tracing
        self._transport = transport
        self._up = upstream
        self._redecide = redecide
        self._on_done = on_done
        self._spawn = spawn
        self._retry_after = retry_after_s
        self._clock = clock
        self._task: asyncio.Task[Any] | None = None  # the handler's task, while it runs
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        job = self.job
        scope["specgate.proxy"] = self  # router.front.drain.PROXY_KEY: the drain's deadline cuts it
        task = self._task = asyncio.current_task()
        assert task is not None
        gone = running = False

        def lost() -> None:  # the client's disconnect cancels the upstream call
            nonlocal gone
            if running:  # (uvicorn also answers "disconnect" once the response is complete)
                gone = True
                task.cancel()

        watch = DisconnectWatch(scope, receive, lost)  # the relay runs in the handler's own task
        running = True
        try:
            await self._run(send)
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()
            job.outcome = "client_disconnect"
            if job.status == 0:
                job.status = 499
        finally:
            running = False
            self._task = None
            watch.close()
            if job.observer is not None and job.status == 200:
                job.observer.finish(job.decision.pool or "none")
            # the lease first: the learning's end-of-request load excludes this request; a test that
            # reads the metrics waits for them, not for the in-flight count
            job.lease.release()
            self._on_done(job)

    # -- the upstream call ------------------------------------------------------------
    async def _run(self, send: Send) -> None:
        job = self.job
        up = self._up
        excluded: set[str] = set()
        excluded_pools: set[str] = set()
        fresh = False  # the next try goes out on a new connection (after a stale one)
        refused = 0  # capacity refusals so far
        retry_after: int | None = None  # the largest Retry-After (s) an engine sent
        failed: SpecgateError | None = None  # the last failure that was not a capacity refusal
        while True:
            endpoint = job.lease.endpoint
            try:
                await self._attempt(endpoint, send, fresh)
                return
            except _Stale:
                job.stale_retries.append(endpoint.pool)
                job.outcome = "ok"
                fresh = True
                await self._abort_now(endpoint)  # before the resend: never two generations
                continue
            except _Backpressure as bp:
                refused += 1
                job.rejections.append((endpoint.pool, bp.reason))
                job.outcome = "engine_overloaded"
                if bp.retry_after is not None:
                    retry_after = max(retry_after or 0, bp.retry_after)
                hold = up.backpressure_hold_s if bp.retry_after is None else min(
                    float(bp.retry_after), up.backpressure_max_hold_s)
                endpoint.record_backpressure(self._clock(), hold)
                excluded.add(endpoint.url)
                excluded_pools.add(endpoint.pool)
                nxt = None if refused > 1 or job.attempts >= up.max_attempts else self._redecide(
                    frozenset(excluded), frozenset(excluded_pools))
                if nxt is None or nxt.lease is None:
                    seconds = retry_after if retry_after is not None else self._retry_after
                    if failed is not None:
                        job.outcome = failed.code or "error"
                    await self._send_error(send, failed or EngineOverloaded(
                        "all pools are at capacity", headers={"retry-after": str(seconds)}))
                    return
            except _Failover as fo:
                failed = fo.error
                excluded.add(endpoint.url)
                if job.attempts >= up.max_attempts:
                    await self._send_error(send, fo.error)
                    return
                nxt = self._redecide(frozenset(excluded), frozenset(excluded_pools))
                if nxt.lease is None:  # nowhere left to go: the engine's failure stands
                    await self._send_error(send, fo.error)
                    return
            except asyncio.CancelledError:
                self._abort(endpoint)
                raise
            except SpecgateError as err:
                await self._send_error(send, err)
                return
            job.lease.release()
            job.decision, job.lease = nxt.decision, nxt.lease
            job.attempts += 1
            fresh = False

    async def _attempt(self, endpoint: Endpoint, send: Send, fresh: bool) -> None:
        job = self.job
        up = self._up
        loop = asyncio.get_running_loop()
        first_deadline = loop.time() + (  # the first-byte timeout of a stream (module docstring)
            up.first_byte_timeout_s + up.first_byte_s_per_1k_tokens * job.features.prompt_tokens / 1000
            if job.features.stream else up.nonstream_timeout_s)
        headers, span = self._engine_headers(endpoint)
        resp: UpstreamResponse | None = None
        transport = self._transport
        try:
            try:
                with Deadline(first_deadline, self._task):  # asyncio.timeout_at with one timer (router.upstream.relay)
                    resp = await transport.post(
                        endpoint.target(job.path), job.pool_bodies.get(endpoint.pool, job.body) if
                        job.pool_bodies else job.body, headers, connect_timeout_s=up.connect_timeout_s,
                        fresh=fresh)
                    if resp.status >= 400:
                        body = await resp.content.read(_MAX_ERROR_BODY)
                        if resp.status in _BACKPRESSURE:
                            raise _Backpressure(f"http_{resp.status}", retry_after_seconds(resp.headers))
                        err = map_engine_error(resp.status, body, param=job.features.param)
                        if resp.status >= 500:
                            raise _Failover(err)
                        raise err
                    if job.features.stream:
                        first = await self._first_events(resp, first_deadline)
                    else:
                        first = await resp.read()
            except TimeoutError:
                self._abort(endpoint)
                job.outcome = "upstream_timeout"
                err = UpstreamTimeout("the engine sent nothing before the first-byte timeout")
                if job.features.stream:  # nothing reached the client: another endpoint may serve it
                    endpoint.record_stall("a stream got no first byte in time")
                    raise _Failover(err) from None
                raise err from None
            except transport.errors as exc:  # evaluated only when something was raised
                self._broken(transport.map_error(exc), endpoint, resp is None, fresh)
            self._check_first(first)
            await self._answer(resp, first, endpoint, send)
        finally:
            if resp is not None:
                resp.close()
            if span is not None:
                end_span(span, None if resp is None else resp.status,
                                  None if job.outcome == "ok" else job.outcome)

    def _broken(self, err: TransportError, endpoint: Endpoint, before_status: bool, fresh: bool) -> NoReturn:
        """Raise what a transport failure of one attempt means (module docstring): no
        connection fails over; a reused connection broken before the status line is stale
        (resent); any other break marks the endpoint down and is a 502."""
        job = self.job
        if isinstance(err, ConnectFailed):
            endpoint.mark_down()
            job.outcome = "connect_failed"
            raise _Failover(UpstreamError("upstream worker unreachable")) from None
        if before_status and isinstance(err, ConnectionBroken):
            if err.reused and not fresh:
                raise _Stale() from None
            endpoint.mark_down()  # nothing came back on a new connection
            job.outcome = "upstream_connection_error"
            raise UpstreamConnectionError("upstream connection failed") from None
        endpoint.mark_down()
        job.outcome = "upstream_reset"
        raise UpstreamError("upstream worker failed") from None

    def _engine_headers(self, endpoint: Endpoint) -> tuple[dict[str, str], Any]:
        """The engine request's headers and, with tracing on, the attempt's span (its context
        goes upstream in the headers; None without tracing)."""
        job = self.job
        headers = {"content-type": "application/json", "x-request-id": job.request_id,
                   "accept-encoding": "identity", **job.trace}
        span = None
        if self._tracing is not None and job.span is not None:  # its context goes upstream
            span, context = self._tracing.start_attempt(job.span, endpoint.url, job.path, endpoint.pool, job.attempts)
            headers.update(context)
        return headers, span

    def _check_first(self, first: bytes) -> None:
        """Refuse what came before the first byte reached the client: nothing at all (502), or
        a whole body that is an engine abort (before any content: back-pressure; else 502
        ``engine_abort``)."""
        job = self.job
        if not first:
            job.outcome = "upstream_empty"
            raise UpstreamError("upstream worker failed")
        if not job.features.stream:
            aborted = body_abort(first)
            if aborted == "before_content":  # a refusal, as a stream's abort before content
                job.outcome = "engine_overloaded"
                raise _Backpressure("body_abort", None)
            if aborted is not None:
                job.outcome = "engine_abort"
                raise UpstreamError("generation aborted by engine", code="engine_abort")

    async def _answer(self, resp: UpstreamResponse, first: bytes, endpoint: Endpoint,
                      send: Send) -> None:
        """Send the client the engine's status and ``first``: a whole body (its ``spec_stats``
        read, and stripped when asked), or a stream's first events, then relay the rest."""
        job = self.job
        job.ttfb_s = time.perf_counter() - job.received_at
        ctype = resp.headers.get("content-type", "application/json")
        if not job.features.stream and job.extra.get("spec_stats") is not None:
            stripped, job.extra["spec_accept_length"] = strip_body(first)
            if job.extra["spec_stats"] == "strip":
                first = stripped
        if job.observer is not None and not job.features.stream:
            job.observer.body(first)  # a stream's events are fed as they are relayed
        if not job.features.stream:
            await self._start(send, resp.status, ctype, len(first))
            await send({"type": "http.response.body", "body": first, "more_body": False})
            job.status = resp.status
            return
        await self._start(send, resp.status, ctype, None)
        job.status = resp.status
        await self._relay(resp, first, endpoint, send)

    async def _first_events(self, resp: UpstreamResponse, deadline: float) -> bytes:
        """Read a 200 stream until its first *content* event and return the bytes read.

        SGLang sends the role chunk at the first token, usually with the first content chunk,
        so holding the events before content (role chunk, usage) costs no latency. Raises for
        an engine refusal made after its status line (sgl-project/sglang#28175): an error event
        (:meth:`_stream_error`) or ``finish_reason: "abort"`` before any content
        (:class:`_Backpressure`, ``stream_abort``). Returns early on ``[DONE]``, end of body,
        non-JSON framing or ``_MAX_HELD`` bytes, leaving those to :meth:`_relay`; and once a
        data event came (the role chunk: the first byte is in) with no content
        ``upstream.stream_keepalive_s`` (else ``idle_timeout_s``) later, as with hidden
        reasoning or a buffered tool call: the status commits and :meth:`_relay` times the
        silence and fills it with comments, instead of the first-byte ``deadline`` (loop time)
        failing over a generation that is running.
        """
        buf = await resp.content.readany()
        pos = 0
        hold = 0.0  # loop time at which the held events commit (set by the first data event)
        while True:
            found = next_event(buf, pos)
            if found is None:
                if len(buf) >= _MAX_HELD:
                    return buf
                more = await (read_within(resp.content.readany, hold, self._task) if hold
                              else resp.content.readany())
                if not more:
                    return buf
                buf += more
                continue
            end, after = found
            kind = classify_event(buf[pos:end])
            if kind == "content":
                return buf
            if kind == "error":
                self._stream_error(sse_data(buf[pos:end]) or b"")
            if kind == "abort":
                self.job.outcome = "engine_overloaded"
                raise _Backpressure("stream_abort", None)
            if not hold and sse_data(buf[pos:end]) is not None:  # the engine generates: its first byte is in
                up = self._up
                hold = min(asyncio.get_running_loop().time() + (up.stream_keepalive_s or up.idle_timeout_s),
                           deadline - 0.01)  # before the first-byte deadline's own timer
            pos = after

    def _stream_error(self, payload: bytes) -> None:
        """The engine's first SSE event is an error (SGLang streams scheduler-side refusals
        as HTTP 200 plus one ``data: {"error": ...}`` event: "Input length ... exceeds the
        maximum allowed length", "The request queue is full."). Nothing reached the client
        yet, so this raises: :class:`_Backpressure` for code 503/429, else the mapped engine
        error (5xx fail over)."""
        status = 400
        try:
            inner = orjson.loads(payload).get("error")
            code = inner.get("code") if isinstance(inner, dict) else None
            if type(code) is int and 400 <= code <= 599:
                status = code
            payload = orjson.dumps(inner) if isinstance(inner, dict) else payload
        except (orjson.JSONDecodeError, AttributeError):
            pass
        self.job.outcome = "upstream_stream_error"
        if status in _BACKPRESSURE:
            raise _Backpressure("stream_error", None)
        err = map_engine_error(status, payload, param=self.job.features.param)
        if status >= 500:
            raise _Failover(err)
        raise err

    async def _relay(self, resp: UpstreamResponse, first: bytes, endpoint: Endpoint,
                     send: Send) -> None:
        """Relay whole SSE events as they arrive, starting with ``first`` (module docstring)."""
        job = self.job
        loop = asyncio.get_running_loop()
        held = b""  # an incomplete trailing event
        chunk = first
        forward = Forwarder(job.end_events, job.observer, job.extra)
        read = resp.content.readany
        watch = IdleWatch(self._up.idle_timeout_s, loop, self._task)
        beat = Heartbeat(self._up.stream_keepalive_s, watch)
        try:
            while True:
                if held:
                    chunk, held = held + chunk, b""
                if not chunk.endswith(b"\n\n") and len(chunk) < _MAX_HELD:
                    cut = complete_events(chunk)  # whole events only (CRLF or LF line ends)
                    chunk, held = chunk[:cut], chunk[cut:]
                if chunk:
                    at = find_abort(chunk)
                    if at is not None:
                        before = chunk[:at]
                        if before:
                            await send({"type": "http.response.body", "body": before, "more_body": True})
                        job.outcome = "engine_abort"
                        await send({"type": "http.response.body", "body": ENGINE_ABORT_EVENT,
                                    "more_body": False})
                        return
                    if chunk := forward(chunk):
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                beat.reading = True
                try:
                    chunk = await read()
                except asyncio.CancelledError:
                    if not await beat.keep_alive(send):  # not the heartbeat's: the idle timeout, a disconnect
                        raise
                    chunk = b""  # a comment went out; the engine's silence goes on
                    continue
                beat.reading = False
                if not chunk:
                    break
                watch.last = loop.time()
        except asyncio.CancelledError:
            if not watch.fired:
                raise
            watch.task.uncancel()
            self._abort(endpoint)
            job.outcome = "upstream_idle_timeout"
            await send({"type": "http.response.body", "body": UPSTREAM_TIMEOUT_EVENT, "more_body": False})
            return
        except self._transport.errors:  # a reset or a cut body mid-stream (router.upstream.transport)
            endpoint.mark_down()
            job.outcome = "upstream_reset_midstream"
            await send({"type": "http.response.body", "body": UPSTREAM_FAILED_EVENT, "more_body": False})
            return
        finally:
            beat.close()  # and the idle watch
        if held and (held := forward(held)):  # bytes after the last complete event (not SSE): as they are
            await send({"type": "http.response.body", "body": held, "more_body": True})
        if not forward.complete():
            job.outcome = "upstream_truncated"
            await send({"type": "http.response.body", "body": UPSTREAM_FAILED_EVENT, "more_body": False})
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _start(self, send: Send, status: int, ctype: str, length: int | None) -> None:
        job = self.job
        headers = [
            (b"content-type", ctype.encode("latin-1")),
            (b"x-request-id", job.request_id.encode()),
            (b"x-specgate-pool", (job.decision.pool or "none").encode()),
            (b"x-specgate-reason", job.decision.reason._value_.encode()),  # _value_: no enum property call
        ]
        if job.default_budget is not None:
            headers.append((b"x-specgate-max-tokens", job.default_budget.encode()))
        headers += job.headers  # x-ratelimit-* of a limited key (router/access/limits.py)
        caveat = job.caveats.get(job.decision.pool or "") if job.caveats else None
        if caveat is not None:
            headers += [(b"x-specgate-degraded", b"sampling"), (b"x-specgate-sampling-fields", caveat.encode())]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        else:
            headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        await send({"type": "http.response.start", "status": status, "headers": headers})

    async def _send_error(self, send: Send, err: SpecgateError) -> None:
        job = self.job
        job.status = err.status
        if job.outcome == "ok":
            job.outcome = err.code or "error"
        body = err.body()
        headers = [(k.encode(), v.encode()) for k, v in err.response_headers().items()]
        headers += [
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", job.request_id.encode()),
            (b"x-specgate-pool", (job.decision.pool or "none").encode()),
            (b"x-specgate-reason", job.decision.reason.value.encode()),
            *job.headers,
        ]
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    def _abort(self, endpoint: Endpoint) -> None:
        """Ask the owning engine to stop generating this request (fire and forget)."""
        if not self.job.abort_rids:
            return
        self.job.extra["aborted"] = endpoint.url
        self._spawn(self._transport.abort(endpoint.url, self.job.abort_rids, self._up.abort_timeout_s))

    async def _abort_now(self, endpoint: Endpoint) -> None:
        """``/abort_request`` for this request's engine ids on a fresh connection, awaited
        (before the resend after a stale connection; best effort, bounded by
        ``upstream.abort_timeout_s`` per id)."""
        if self.job.abort_rids:
            await self._transport.abort(endpoint.url, self.job.abort_rids, self._up.abort_timeout_s, fresh=True)
