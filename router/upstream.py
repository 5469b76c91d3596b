"""Helpers of the proxy's upstream call (:mod:`router.proxy`): pure or self-contained.

- :func:`connection_trace_config` / :class:`ConnTrace`: aiohttp's ``on_connection_reuseconn``
  trace tells, per request, whether the connector took the connection from its pool (the
  proxy resends only a request whose *reused* connection broke before any response byte;
  sgl-project/sglang#20851, aio-libs/aiohttp#7363).
- :func:`classify_event`: what one SSE event says before any content was relayed (the proxy
  holds the status line until the first content event; sgl-project/sglang#28175).
- :func:`aborted_whole`: whether a non-streamed body carries an engine abort.
- :func:`retry_after_seconds`: an engine's ``Retry-After`` (delta-seconds) as an int.
- :class:`IdleWatch`: the between-chunks idle timer of a relayed stream.
- :func:`abort_request`: SGLang's ``POST /abort_request`` for a list of engine request ids.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson

__all__ = ["ConnTrace", "IdleWatch", "abort_request", "aborted_whole", "classify_event",
           "connection_trace_config", "retry_after_seconds"]

_ERROR_EVENT = b'data: {"error"'


class ConnTrace:
    """Per-request trace context: set when aiohttp took the connection from its pool."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _on_reuse(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any) -> None:
    info = ctx.trace_request_ctx
    if isinstance(info, ConnTrace):
        info.reused = True


def connection_trace_config() -> aiohttp.TraceConfig:
    """An aiohttp trace that marks a request's ``trace_request_ctx`` (a :class:`ConnTrace`) when
    the connector reuses a pooled connection (``on_connection_reuseconn``); the proxy resends
    only requests whose reused connection broke before any response byte."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_on_reuse)
    return trace


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


def aborted_whole(body: bytes) -> bool:
    """True when a non-streamed 200 body (chat or completions JSON) has a choice that the
    engine aborted (``finish_reason: "abort"``, SGLang's in-band abort): its content is cut or
    empty, so it must not reach the client as a success. Anything that is not such a JSON
    object is False (relayed as it is)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list):
        return False
    return any(isinstance(c, dict) and c.get("finish_reason") == "abort" for c in choices)


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
