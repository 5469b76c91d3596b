"""Graceful drain of a router process (a rolling update's SIGTERM with streams in flight).

A drain starts on the first SIGTERM/SIGINT or on ``GET /drain`` (the Kubernetes preStop hook,
``specgate drain``; loopback clients only). Then, in this order:

1. ``/ready`` answers 503 at once (the Service stops sending) while ``/health`` stays 200.
   Every response that starts from now on carries ``Connection: close``, and requests already
   in flight on a kept-alive connection close it once answered.
2. The listener stays open for ``server.drain_listen_s`` seconds: requests that still arrive
   while the endpoint removal propagates are served, not refused (uvicorn alone closes its
   listener at the first signal, Kludex/uvicorn#2829).
3. The listener closes; requests in flight get ``server.drain_timeout_s`` more seconds and
   streams that end in time end byte-identical, ``[DONE]`` included.
4. At the deadline each request still running is cut: its task is cancelled, so
   :class:`router.upstream.proxy.ProxyResponse` posts ``/abort_request`` for its engine request ids
   and releases its lease; a stream then gets one terminal event :data:`SHUTDOWN_EVENT`, a
   request with no response yet a 503 with the same error, and the connection closes.
5. One log line gives the drained and cut counts; the exit code is 0 when nothing was cut and
   no second signal came, else 1. A second SIGTERM/SIGINT during the drain cuts at once.

Worst case from the drain's start to the exit: ``drain_listen_s + drain_timeout_s`` plus the
aborts (``upstream.abort_timeout_s`` each) and the shutdown; the Helm chart's
``terminationGracePeriodSeconds`` is computed from these (BerriAI/litellm#14334, llm-d/llm-d#2444).

Only generation requests (``/v1/chat/completions``, ``/v1/completions``) are tracked (by
:class:`router.app.asgi.RouterApp`, in :attr:`Drainer.inflight`) and counted; probes, ``/metrics`` and admin calls are short and end with uvicorn's own shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["CUT_KEY", "PROXY_KEY", "SHUTDOWN_BODY", "SHUTDOWN_EVENT", "Drainer", "is_loopback"]

log = logging.getLogger("specgate.drain")

#: The terminal SSE event of a stream cut by the drain deadline.
SHUTDOWN_EVENT = (
    b'data: {"error":{"message":"router is shutting down","type":"server_error",'
    b'"param":null,"code":"router_shutdown"}}\n\n'
)
#: The 503 body of a cut request whose response had not started.
SHUTDOWN_BODY = (
    b'{"error":{"message":"router is shutting down","type":"server_error",'
    b'"param":null,"code":"router_shutdown"}}'
)
#: ASGI scope keys: the in-flight :class:`router.upstream.proxy.ProxyResponse` (set by the proxy), and
#: the mark that the drain, not the client, cancelled the request.
PROXY_KEY = "specgate.proxy"
CUT_KEY = "specgate.cut"


def is_loopback(scope: Mapping[str, Any]) -> bool:
    """Whether the ASGI client address is a loopback address (127.0.0.0/8, ::1, or an
    IPv4-mapped 127.x); False when the server gives none or not an IP (a Unix socket)."""
    client = scope.get("client")
    if not client:
        return False
    try:
        addr = ipaddress.ip_address(client[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1 on a dual-stack listener
    return (mapped or addr).is_loopback


class Drainer:
    """The drain state of one app (:class:`router.app.asgi.RouterApp` holds one).

    Args:
        clock: monotonic clock (s).

    The process runner (:func:`router.app.server.serve`) sets :attr:`close_listener`,
    :attr:`stop_server` and :attr:`connections` (uvicorn's open connections); without them
    (an app served elsewhere, the tests' in-thread server) a drain still turns ``/ready`` to
    503, adds ``Connection: close`` and cuts at the deadline, but nothing exits.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.active = False
        self.started_at: float | None = None
        self.listening = True
        self.forced = False
        self.signals = 0
        self.drained = 0
        self.cut = 0
        self.exit_code: int | None = None
        self.inflight: dict[asyncio.Task[Any], dict[str, Any]] = {}
        self.close_listener: Callable[[], None] | None = None
        self.stop_server: Callable[[], None] | None = None
        self.connections: Callable[[], Any] | None = None
        self.finished = asyncio.Event()
        self._force = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._settings: Callable[[], tuple[float, float, float]] = lambda: (0.0, 0.0, 2.0)
        self._wait_aborts: Callable[[float], Any] | None = None

    def configure(self, settings: Callable[[], tuple[float, float, float]],
                  wait_aborts: Callable[[float], Any]) -> None:
        """Set where ``(drain_listen_s, drain_timeout_s, abort_timeout_s)`` come from (the
        current config, read when the drain starts) and how to await the spawned aborts."""
        self._settings = settings
        self._wait_aborts = wait_aborts

    # -- triggers ---------------------------------------------------------------------------
    def on_signal(self) -> None:
        """A SIGTERM/SIGINT: the first starts the drain (or joins one ``/drain`` started), a
        second one cuts what is in flight now and exits non-zero."""
        self.signals += 1
        if self.signals == 1:
            self.begin("signal")
        else:
            self.forced = True
            self.begin("signal")
            self._force.set()

    def begin(self, reason: str) -> None:
        """Start the drain (idempotent). Must run on the app's event loop."""
        if self.active:
            return
        self.active = True
        self.started_at = self.clock()
        listen_s, timeout_s, _ = self._settings()
        log.warning("drain started (%s): /ready answers 503; listener open %.1f s, then %.1f s "
                    "for %d in-flight request(s)", reason, listen_s, timeout_s, len(self.inflight))
        self._close_kept_alive()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def status(self) -> dict[str, Any]:
        """The ``/drain`` answer: ``{"draining", "listening", "in_flight", "elapsed_s"}``."""
        elapsed = None if self.started_at is None else round(self.clock() - self.started_at, 3)
        return {"draining": self.active, "listening": self.listening,
                "in_flight": len(self.inflight), "elapsed_s": elapsed}

    # -- per request ------------------------------------------------------------------------
    def closing(self, send: Callable[..., Any]) -> Callable[..., Any]:
        """``send`` with ``Connection: close`` added to the response start."""
        async def wrapped(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)
        return wrapped

    @staticmethod
    async def send_cut(scope: dict[str, Any], send: Callable[..., Any]) -> None:
        """Answer a request the drain cancelled: a stream's terminal :data:`SHUTDOWN_EVENT`,
        or a 503 :data:`SHUTDOWN_BODY` when nothing was sent yet; the connection then closes."""
        proxy = scope.get(PROXY_KEY)
        job = getattr(proxy, "job", None)
        cycle = getattr(send, "__self__", None)  # uvicorn's RequestResponseCycle, when served by it
        started = getattr(cycle, "response_started", None)
        if started is None:
            started = job is not None and job.status != 0
        if getattr(cycle, "response_complete", False):
            return
        if cycle is not None and hasattr(cycle, "keep_alive"):
            cycle.keep_alive = False  # uvicorn closes the connection after this response
        with contextlib.suppress(Exception):  # the client may be gone already
            if not started:
                await send({"type": "http.response.start", "status": 503, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(SHUTDOWN_BODY)).encode()),
                    (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": SHUTDOWN_BODY, "more_body": False})
            elif job is not None and job.features.stream:
                await send({"type": "http.response.body", "body": SHUTDOWN_EVENT, "more_body": False})

    # -- the drain itself -------------------------------------------------------------------
    def _close_kept_alive(self) -> None:
        """Requests in flight right now close their connection once answered (uvicorn adds
        ``Connection: close`` to a response not yet started)."""
        if self.connections is None:
            return
        for conn in list(self.connections()):
            cycle = getattr(conn, "cycle", None)
            if cycle is not None and not getattr(cycle, "response_complete", True):
                cycle.keep_alive = False

    async def _wait(self, seconds: float, done: Callable[[], bool] = lambda: False) -> None:
        deadline = self.clock() + seconds
        while not self._force.is_set() and not done():
            left = deadline - self.clock()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.05)):
                    await self._force.wait()

    async def _run(self) -> None:
        listen_s, timeout_s, abort_s = self._settings()
        try:
            await self._wait(listen_s)
            self.listening = False
            if self.close_listener is not None:
                self.close_listener()
            await self._wait(timeout_s, lambda: not self.inflight)
            await self.cut_all()
            if self._wait_aborts is not None:
                await self._wait_aborts(abort_s)
        finally:
            self.exit_code = 1 if (self.cut or self.forced) else 0
            log.warning("drain finished: %d drained, %d cut%s, exit %d", self.drained, self.cut,
                        " (second signal)" if self.forced else "", self.exit_code)
            self.finished.set()
            if self.stop_server is not None:
                self.stop_server()

    async def cut_all(self) -> None:
        """Cut every tracked request now and wait until each has answered (at most 5 s)."""
        tasks = list(self.inflight.items())
        for task, scope in tasks:
            scope[CUT_KEY] = True
            job = getattr(scope.get(PROXY_KEY), "job", None)
            if job is not None:
                job.outcome = "router_shutdown"
                if job.status == 0:
                    job.status = 503
            task.cancel()
        self.cut += len(tasks)
        if tasks:
            await asyncio.wait([t for t, _ in tasks], timeout=5.0)
