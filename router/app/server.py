"""Run the router app as a process (``specgate router``): bind, start, serve, drain, exit.

``uvicorn.run`` is not used: on SIGTERM uvicorn closes its listener at once and cuts streams
at ``timeout_graceful_shutdown`` without an error event (Kludex/uvicorn#2829). Here a
``uvicorn.Server`` serves a socket bound beforehand, its signal handling is replaced by the
drain of :mod:`router.front.drain`, and the app's lifespan runs around it, so that:

- a port in use, an invalid config, a missing tokenizer or key file each fail the start with
  one line on stderr and exit status 2 (no traceback);
- the port is bound first (a port in use fails at once) but listens only once the app has
  started (tokenizer loaded, first scrape round done): until then a connection is refused,
  never accepted into the kernel's backlog to wait there for seconds, so a client retrying
  refused connections during a restart on the same port reaches a router that answers
  (measured by the ``roll`` drill, docs/reliability.md);
- the first SIGTERM/SIGINT drains (:class:`router.front.drain.Drainer`), a second one cuts at once;
- the exit status is the drain's: 0 when every request finished, 1 when some were cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Generator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from router.front.http_limits import app_limits, limited_protocol

if TYPE_CHECKING:
    from router.front.drain import Drainer

__all__ = ["StartupError", "bind", "listen", "serve"]

log = logging.getLogger("specgate")

#: Exit status of a failed start (bad config, missing files, port in use).
EXIT_STARTUP = 2


class StartupError(Exception):
    """The router cannot start; ``str(exc)`` is the one line to print."""


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``SO_REUSEADDR``; IPv6 when ``host`` is), not yet
    listening: connections to it are refused until :func:`listen`.

    Raises:
        StartupError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def listen(sock: socket.socket, backlog: int = 2048) -> None:
    """Start listening on a socket from :func:`bind` (connections are accepted from now on).

    Raises:
        StartupError: another socket listens on the address meanwhile.
    """
    try:
        sock.listen(backlog)
    except OSError as exc:
        host, port = sock.getsockname()[:2]
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


class _DrainingServer(uvicorn.Server):
    """uvicorn's server with the signals routed to the app's drain (never re-raised)."""

    def __init__(self, config: uvicorn.Config, drainer: Drainer) -> None:
        super().__init__(config)
        self.drainer = drainer
        self.loop: asyncio.AbstractEventLoop | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # installed by serve() for the whole life of the process instead

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.drainer.on_signal)


async def _main(app: Any, sock: socket.socket, *, log_level: str) -> int:
    # httptools with the head limits of server.headers, the idle timeout of
    # server.keepalive_timeout_s (it replaces uvicorn's timeout_keep_alive per connection) and
    # the HTTP/1.0, Expect and upgrade handling of router.front.http_limits
    config = uvicorn.Config(app, lifespan="off", loop="none", http=limited_protocol(app_limits(app)),
                            log_level=log_level,
                            access_log=False, timeout_graceful_shutdown=5,
                            # no X-Forwarded-* rewriting (nothing reads the client address but
                            # /drain's loopback check) and no `server` header: both cost CPU on
                            # every request (docs/performance.md).
                            proxy_headers=False, server_header=False)
    drainer = app.drain
    server = _DrainingServer(config, drainer)
    server.loop = asyncio.get_running_loop()
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            lifespan = app.router.lifespan_context(app)
            await lifespan.__aenter__()
        except Exception as exc:  # noqa: BLE001 - any start failure: one line, exit 2
            raise StartupError(_one_line(exc)) from None
        try:
            if drainer.active:  # a signal during the start: nothing to serve
                return 0
            drainer.close_listener = lambda: [s.close() for s in getattr(server, "servers", [])]
            drainer.stop_server = lambda: setattr(server, "should_exit", True)
            drainer.connections = lambda: server.server_state.connections
            listen(sock)  # only now: connections before this are refused, not left waiting
            host, port = sock.getsockname()[:2]
            log.info("specgate router listening on http://%s:%d", host, port)
            await server.serve(sockets=[sock])
        finally:
            await lifespan.__aexit__(None, None, None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if drainer.exit_code is None else drainer.exit_code


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename:
        text = f"{exc.strerror or text}: {exc.filename}"
    return " ".join(text.split()) if "\n" not in text else "; ".join(
        line.strip() for line in text.splitlines() if line.strip())


def serve(config_path: str | Path, host: str, port: int, *, log_level: str = "warning") -> int:
    """Serve the router for ``config_path`` on ``host:port`` until drained; returns the exit
    status (0 drained, 1 cut, 2 failed to start: the reason is printed on stderr)."""
    from router.app.asgi import create_app

    try:
        sock = bind(host, port)
    except StartupError as exc:
        print(f"specgate router: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    try:
        app = create_app(config_path)
        import uvloop

        return uvloop.run(_main(app, sock, log_level=log_level))
    except StartupError as exc:
        print(f"specgate router: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    finally:
        sock.close()
