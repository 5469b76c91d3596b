"""Helpers of the proxy's upstream call (:mod:`router.proxy`): pure or self-contained.

- :class:`ReuseMarkingConnector` / :class:`ConnTrace`: the upstream connector tells, per
  request, whether it took the connection from its pool (the proxy resends only a request
  whose *reused* connection broke before any response byte; sgl-project/sglang#20851,
  aio-libs/aiohttp#7363). It replaces aiohttp's ``on_connection_reuseconn`` trace: a session
  with any ``TraceConfig`` builds trace objects and awaits a signal at every request step and
  every response chunk (``aiohttp/tracing.py``), a cost on every request for a fact needed only
  when a connection breaks.
- :func:`classify_event`: what one SSE event says before any content was relayed (the proxy
  holds the status line until the first content event; sgl-project/sglang#28175).
- :func:`retry_after_seconds`: an engine's ``Retry-After`` (delta-seconds) as an int.
- :class:`IdleWatch`: the between-chunks idle timer of a relayed stream.
- :func:`abort_request`: SGLang's ``POST /abort_request`` for a list of engine request ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

if TYPE_CHECKING:
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.client_reqrep import ClientRequest
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace

__all__ = ["ConnTrace", "IdleWatch", "ReuseMarkingConnector", "abort_request", "classify_event",
           "retry_after_seconds"]

_ERROR_EVENT = b'data: {"error"'


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


def classify_event(event: bytes) -> str:
    """What one SSE event (without its blank line) says before any content was relayed:
    ``"content"`` (commit the response: content, a non-abort finish, ``[DONE]``, or anything
    not JSON), ``"error"`` (an error event), ``"abort"`` (``finish_reason: "abort"``) or
    ``"skip"`` (no content yet: the role chunk, a usage chunk)."""
    if event.startswith(_ERROR_EVENT):
        return "error"
    if not event.startswith(b"data: {"):
        return "content"
    try:
        doc = orjson.loads(event[6:])
    except orjson.JSONDecodeError:
        return "content"
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list):
        return "content"
    verdict = "skip"
    for choice in choices:
        if not isinstance(choice, dict):
            return "content"
        delta = choice.get("delta")
        if choice.get("text") or (isinstance(delta, dict) and any(
                v for k, v in delta.items() if k != "role")):
            return "content"
        finish = choice.get("finish_reason")
        if finish == "abort":
            verdict = "abort"
        elif finish is not None:
            return "content"
    return verdict


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


async def abort_request(session: aiohttp.ClientSession, base_url: str, rids: tuple[str, ...],
                         timeout_s: float) -> None:
    """``POST {base_url}/abort_request {"rid": rid}`` for each of ``rids`` (SGLang looks each
    up by equality); errors are ignored (best effort, each within ``timeout_s`` seconds)."""
    for rid in rids:
        with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
            async with session.post(base_url + "/abort_request", json={"rid": rid},
                                    timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                await resp.read()
