"""Relay one request to its engine and the engine's bytes back, unbuffered.

:class:`ProxyResponse` is an ASGI response object: the handler (``router.api``) validates,
counts, decides and takes the in-flight lease synchronously, then returns a ProxyResponse
that owns the rest of the request's life. Its contract:

- **Before the first byte** to the client: a refused connection marks the endpoint down
  (passive health) and fails over to another endpoint or pool the policy allows (the body
  never reached an engine, so a retry is safe); an engine 5xx also fails over (it answered,
  so nothing is generating); an engine 4xx comes back with the same status as an OpenAI
  error (over-length wordings become ``context_length_exceeded``, HANDED C03); a reset after
  the body was sent is 502 without retry (the engine may be generating: never send a
  generation twice, HANDED C18); no first byte within
  ``first_byte_timeout_s + first_byte_s_per_1k_tokens * P / 1000`` aborts upstream and
  answers 504 ``upstream_timeout``. For streams the client's headers wait for the engine's
  first body chunk, so all of these are still real HTTP statuses, never SSE with 200.
- **After the first byte**: bytes are relayed as they arrive (``readany``, no re-encoding, no
  compression, HANDED C14/C15); never retried; an upstream failure or idle timeout sends one
  ``data: {"error": ...}`` event and closes; a stream that ends without ``data: [DONE]`` gets
  the same error event, and ``[DONE]`` is never invented (HANDED C02).
- **Client disconnect** (watched on the ASGI ``receive`` channel, also while waiting for the
  engine): the upstream request is closed and ``POST /abort_request {"rid": ...}`` goes to the
  endpoint that owns it, once per engine request id (one prompt: its ``rid``; a batch of
  prompts: ``<rid>_<i>``), because SGLang's own disconnect cleanup has regressed
  (sglang#37833). With ``n > 1`` SGLang gives each sample an id no abort can name: closing the
  connection is all the router can do then.
- **Leases**: the in-flight lease is released exactly once, in ``finally``.

Non-streaming responses are read whole from the engine (bounded by
``upstream.nonstream_timeout_s``) and sent with a Content-Length, so a client never sees a
truncated JSON body.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from starlette.responses import Response

from router.errors import (
    SpecgateError,
    UpstreamError,
    UpstreamTimeout,
    map_engine_error,
)
from router.features import RequestFeatures
from router.policy import Decision
from router.pools import Lease

__all__ = ["UPSTREAM_FAILED_EVENT", "ProxyJob", "ProxyResponse"]

#: The one terminal SSE event sent when the engine fails mid-stream (HANDED C02).
UPSTREAM_FAILED_EVENT = (
    b'data: {"error":{"message":"upstream worker failed","type":"server_error",'
    b'"param":null,"code":"upstream_error"}}\n\n'
)
UPSTREAM_TIMEOUT_EVENT = (
    b'data: {"error":{"message":"upstream timed out between chunks","type":"server_error",'
    b'"param":null,"code":"upstream_timeout"}}\n\n'
)
_DONE = b"data: [DONE]"
_ERROR_EVENT = b'data: {"error"'
_MAX_ERROR_BODY = 64 * 1024


class _ClientGone(Exception):
    """The client disconnected."""


@dataclass(slots=True)
class ProxyJob:
    """Everything the proxy needs about one admitted request.

    Attributes:
        request_id: the router's request id (``x-request-id``).
        path: upstream path, e.g. ``/v1/chat/completions``.
        body: the JSON body to send (bytes).
        features: the request's features (prompt tokens drive the first-byte timeout).
        decision: the current routing decision (updated on failover).
        lease: the in-flight lease on the chosen endpoint (replaced on failover).
        abort_rids: the engine request ids that ``/abort_request`` must name to stop every
            sample of this request: the body's ``rid`` for one prompt, ``<rid>_<i>`` for a batch
            of prompts (SGLang's ``_normalize_rid``); empty when none can be named (``n > 1``:
            SGLang gives each sample a fresh id, ``regenerate_rid``).
        received_at: ``time.perf_counter()`` when the request arrived (s).
        end_events: for a stream that does not end with ``data: [DONE]`` (``/v1/responses``):
            the byte strings of which one must appear for the stream to count as complete;
            None: the ``[DONE]`` rule.
        observer: sees the relayed bytes (a :class:`router.observe.ResponseObserver`: usage
            and ending metrics) and is told the pool when the response ends; None: none.
    """

    request_id: str
    path: str
    body: bytes
    features: RequestFeatures
    decision: Decision
    lease: Lease
    abort_rids: tuple[str, ...]
    received_at: float
    end_events: tuple[bytes, ...] | None = None
    observer: Any = None
    status: int = 0
    outcome: str = "ok"
    ttfb_s: float | None = None
    attempts: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


class ProxyResponse(Response):
    """ASGI response that performs the upstream call (see the module docstring).

    A Starlette ``Response`` subclass only so that FastAPI passes it through untouched; it
    does not use the base class's body machinery.

    Args:
        job: the admitted request.
        session: the shared aiohttp session.
        upstream: the ``upstream`` config section (timeouts, attempts).
        redecide: ``redecide(excluded_urls) -> (Decision, Lease) | Decision`` for failover; a
            bare Decision means the policy refused (e.g. 503).
        on_done: called once with the job when the response is finished (metrics, log).
        spawn: schedules a background coroutine (used for ``/abort_request``).
    """

    def __init__(self, job: ProxyJob, *, session: aiohttp.ClientSession, upstream: Any,
                 redecide: Callable[[frozenset[str]], Any], on_done: Callable[[ProxyJob], None],
                 spawn: Callable[[Any], None], retry_after_s: int = 5) -> None:
        self.job = job
        self._session = session
        self._up = upstream
        self._redecide = redecide
        self._on_done = on_done
        self._spawn = spawn
        self._retry_after = retry_after_s
        self.background = None

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        job = self.job
        task = asyncio.current_task()
        assert task is not None
        gone = running = False

        async def watch() -> None:  # the client's disconnect cancels the upstream call
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            if running:  # (uvicorn also answers "disconnect" once the response is complete)
                gone = True
                task.cancel()

        # One watcher task; the relay runs in the handler's own task (a second task and an
        # asyncio.wait per request are avoidable work on the hot path, issue 8).
        watcher = asyncio.create_task(watch())
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
            watcher.cancel()
            job.lease.release()
            if job.observer is not None and job.status == 200:
                job.observer.finish(job.decision.pool or "none")
            self._on_done(job)

    # -- the upstream call ------------------------------------------------------------
    def _first_byte_timeout(self) -> float:
        return self._up.first_byte_timeout_s + self._up.first_byte_s_per_1k_tokens * self.job.features.prompt_tokens / 1000

    async def _run(self, send: Callable[..., Any]) -> None:
        job = self.job
        excluded: set[str] = set()
        while True:
            endpoint = job.lease.endpoint
            try:
                await self._attempt(endpoint, send)
                return
            except _Failover as fo:
                excluded.add(endpoint.url)
                if job.attempts >= self._up.max_attempts:
                    await self._send_error(send, fo.error)
                    return
                nxt = self._redecide(frozenset(excluded))
                if isinstance(nxt, Decision):  # nowhere left to go: the engine's failure stands
                    await self._send_error(send, fo.error)
                    return
                job.lease.release()
                job.decision, job.lease = nxt
                job.attempts += 1
            except asyncio.CancelledError:
                self._abort(endpoint)
                raise
            except SpecgateError as err:
                await self._send_error(send, err)
                return

    async def _attempt(self, endpoint: Any, send: Callable[..., Any]) -> None:
        job = self.job
        up = self._up
        loop = asyncio.get_running_loop()
        first_deadline = loop.time() + (self._first_byte_timeout() if job.features.stream
                                        else up.nonstream_timeout_s)
        timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=up.connect_timeout_s,
                                        sock_read=None)
        headers = {"content-type": "application/json", "x-request-id": job.request_id,
                   "accept-encoding": "identity"}
        resp: aiohttp.ClientResponse | None = None
        try:
            try:
                async with asyncio.timeout_at(first_deadline):
                    resp = await self._session.post(endpoint.target(job.path), data=job.body,
                                                    headers=headers, timeout=timeout)
                    if resp.status >= 400:
                        body = await resp.content.read(_MAX_ERROR_BODY)
                        err = map_engine_error(resp.status, body, param=job.features.param)
                        if resp.status >= 500:
                            raise _Failover(err)
                        raise err
                    first = await (resp.content.readany() if job.features.stream else resp.read())
            except TimeoutError:
                self._abort(endpoint)
                job.outcome = "upstream_timeout"
                raise UpstreamTimeout("the engine sent nothing before the first-byte timeout") from None
            except aiohttp.ClientConnectorError:
                endpoint.mark_down()
                job.outcome = "connect_failed"
                raise _Failover(UpstreamError("upstream worker unreachable")) from None
            except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                endpoint.mark_down()
                job.outcome = "upstream_reset"
                raise UpstreamError("upstream worker failed") from None
            if not first:
                job.outcome = "upstream_empty"
                raise UpstreamError("upstream worker failed")
            if job.features.stream and first.startswith(_ERROR_EVENT):
                await self._raise_stream_error(resp, first)
            job.ttfb_s = time.perf_counter() - job.received_at
            ctype = resp.headers.get("content-type", "application/json")
            if job.observer is not None:
                (job.observer.feed if job.features.stream else job.observer.body)(first)
            if not job.features.stream:
                await self._start(send, resp.status, ctype, len(first))
                await send({"type": "http.response.body", "body": first, "more_body": False})
                job.status = resp.status
                return
            await self._start(send, resp.status, ctype, None)
            job.status = resp.status
            await send({"type": "http.response.body", "body": first, "more_body": True})
            await self._relay(resp, first, endpoint, send)
        finally:
            if resp is not None:
                resp.close()

    async def _raise_stream_error(self, resp: aiohttp.ClientResponse, first: bytes) -> None:
        """The engine's first SSE event is an error (SGLang streams scheduler-side refusals,
        e.g. "Input length ... exceeds the maximum allowed length", as HTTP 200 plus one
        ``data: {"error": ...}`` event; so did SGLang before PR #21900 for over-length input).
        Nothing reached the client yet, so answer with a real HTTP status instead.
        """
        event = first
        with contextlib.suppress(TimeoutError, aiohttp.ClientError):
            async with asyncio.timeout(self._up.idle_timeout_s):
                while b"\n\n" not in event and len(event) < _MAX_ERROR_BODY:
                    more = await resp.content.readany()
                    if not more:
                        break
                    event += more
        payload = event[len(b"data: "):].split(b"\n\n", 1)[0]
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
        err = map_engine_error(status, payload, param=self.job.features.param)
        if status >= 500:
            raise _Failover(err)
        raise err

    async def _relay(self, resp: aiohttp.ClientResponse, first: bytes, endpoint: Any,
                     send: Callable[..., Any]) -> None:
        job = self.job
        loop = asyncio.get_running_loop()
        tail = first[-32:]
        ends = job.end_events
        ended = ends is not None and any(e in first for e in ends)
        observer = job.observer
        read = resp.content.readany
        watch = _IdleWatch(self._up.idle_timeout_s)
        try:
            while True:
                chunk = await read()
                if not chunk:
                    break
                watch.last = loop.time()
                if ends is not None and not ended:
                    ended = any(e in tail + chunk for e in ends)
                if observer is not None:
                    observer.feed(chunk)
                tail = (tail + chunk)[-32:]
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except asyncio.CancelledError:
            if not watch.fired:
                raise
            watch.task.uncancel()
            self._abort(endpoint)
            job.outcome = "upstream_idle_timeout"
            await send({"type": "http.response.body", "body": UPSTREAM_TIMEOUT_EVENT, "more_body": False})
            return
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            endpoint.mark_down()
            job.outcome = "upstream_reset_midstream"
            await send({"type": "http.response.body", "body": UPSTREAM_FAILED_EVENT, "more_body": False})
            return
        finally:
            watch.close()
        complete = ended if ends is not None else _DONE in tail
        if not complete:
            job.outcome = "upstream_truncated"
            await send({"type": "http.response.body", "body": UPSTREAM_FAILED_EVENT, "more_body": False})
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _start(self, send: Callable[..., Any], status: int, ctype: str, length: int | None) -> None:
        job = self.job
        headers = [
            (b"content-type", ctype.encode("latin-1")),
            (b"x-request-id", job.request_id.encode()),
            (b"x-specgate-pool", (job.decision.pool or "none").encode()),
            (b"x-specgate-reason", job.decision.reason.value.encode()),
        ]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        else:
            headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        await send({"type": "http.response.start", "status": status, "headers": headers})

    async def _send_error(self, send: Callable[..., Any], err: SpecgateError) -> None:
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
        ]
        await send({"type": "http.response.start", "status": err.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    def _abort(self, endpoint: Any) -> None:
        """Ask the owning engine to stop generating this request (fire and forget)."""
        if not self.job.abort_rids:
            return
        self.job.extra["aborted"] = endpoint.url
        self._spawn(_abort_request(self._session, endpoint.url, self.job.abort_rids, self._up.abort_timeout_s))


class _IdleWatch:
    """Cancels the current task when ``last`` (loop time, s) is ``idle`` seconds old.

    The relay stores ``loop.time()`` in :attr:`last` per chunk, and one timer per idle period
    checks it, instead of re-arming a timer per chunk as ``asyncio.timeout().reschedule``
    does (a timer-heap push and a cancelled handle per relayed event, issue 8). After the
    cancellation :attr:`fired` is True; the relay calls ``task.uncancel()`` and reports the
    idle timeout.
    """

    __slots__ = ("fired", "handle", "idle", "last", "loop", "task")

    def __init__(self, idle: float) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.idle = idle
        self.fired = False
        self.last = self.loop.time()
        self.handle = self.loop.call_at(self.last + idle, self._check)

    def _check(self) -> None:
        due = self.last + self.idle
        if self.loop.time() >= due:
            self.fired = True
            self.task.cancel()
        else:
            self.handle = self.loop.call_at(due, self._check)

    def close(self) -> None:
        self.handle.cancel()


class _Failover(Exception):
    def __init__(self, error: SpecgateError) -> None:
        super().__init__(error.message)
        self.error = error


async def _abort_request(session: aiohttp.ClientSession, base_url: str, rids: tuple[str, ...],
                         timeout_s: float) -> None:
    """``POST {base_url}/abort_request {"rid": rid}`` for each of ``rids`` (SGLang looks each
    up by equality); errors are ignored (best effort, each within ``timeout_s`` seconds)."""
    for rid in rids:
        with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
            async with session.post(base_url + "/abort_request", json={"rid": rid},
                                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                await resp.read()
