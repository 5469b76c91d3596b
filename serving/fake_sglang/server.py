"""``FakeServer`` and ``run_fake_server``: a fake app under uvicorn in a background thread."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, Self

from serving.fake_sglang.app import create_fake_app
from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.state import FakeState
from serving.fake_sglang.stepping import StepEngine

__all__ = ["FakeServer", "run_fake_server"]


class FakeServer:
    """Serve a fake app with uvicorn in a background thread on 127.0.0.1.

    ``FakeServer(config, port=0, host="127.0.0.1")``: port 0 picks a free port (the listening
    socket is bound before the thread starts, so there is no race); another loopback ``host``
    (``127.0.0.2``...) lets several fakes share one port, like pods behind one Service;
    ``step_engine`` drives generation by a step model (:mod:`serving.fake_sglang.stepping`);
    ``keep_alive_s`` is uvicorn's idle keep-alive (SGLang's ``SGLANG_TIMEOUT_KEEP_ALIVE``, 5 s by
    default there, sgl-project/sglang#20851). Use as a context manager or call
    ``start()`` then ``stop()``/``kill()``. Attributes once started: ``base_url``
    (``http://127.0.0.1:PORT``), ``port``, ``app``, ``state`` (``FakeState``).

    ``stop(grace_s)``: graceful: stop accepting, let open requests end (hung ones are ended),
    wait at most ``grace_s`` seconds, then cancel the rest.
    ``kill()``: abrupt, like ``kill -9`` of an engine: every open connection is reset (RST) and
    the port stops listening at once; clients see connection resets / refused connections.
    ``call(fn, *args)``: run ``fn(state, *args)`` on the server's event loop and return its
    result (for in-process control without HTTP).
    Errors: ``RuntimeError`` if uvicorn does not start within ``start_timeout_s`` seconds.
    """

    def __init__(
        self, config: FakeConfig | None = None, *, port: int = 0, start_timeout_s: float = 10.0,
        host: str = "127.0.0.1", keep_alive_s: float = 30.0, step_engine: StepEngine | None = None,
    ) -> None:
        self.config = config or FakeConfig()
        self.app = create_fake_app(self.config, step_engine=step_engine)
        self.state: FakeState = self.app.state.fake
        self._want_port = port
        self.host = host
        self.keep_alive_s = keep_alive_s
        self._timeout = start_timeout_s
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self.port = 0
        self.base_url = ""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        """Bind, start uvicorn in a thread, wait until it serves; returns self."""
        import uvicorn

        sock = socket.socket(
            socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
        )  # IPPROTO_TCP: asyncio then sets TCP_NODELAY
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._want_port))
        sock.listen(2048)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.base_url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            ws="none",
            access_log=False,
            timeout_graceful_shutdown=2,
            timeout_keep_alive=self.keep_alive_s,  # type: ignore[arg-type]  # float works
        )
        self._server = uvicorn.Server(config)
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def serve() -> None:
                task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
                while not self._server.started and not task.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await task

            try:
                loop.run_until_complete(serve())
            finally:
                ready.set()
                pending = asyncio.all_tasks(loop)
                for t in pending:
                    t.cancel()
                with contextlib.suppress(Exception):
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()
                sock.close()

        self._thread = threading.Thread(target=run, name=f"fake-sglang-{self.port}", daemon=True)
        self._thread.start()
        if not ready.wait(self._timeout) or not self._server.started:
            self.stop()
            raise RuntimeError(f"fake SGLang server did not start on port {self.port}")
        return self

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 10.0) -> Any:
        """Run ``fn(state, *args)`` on the server loop; returns its result."""
        if self._loop is None:
            raise RuntimeError("server not started")

        async def go() -> Any:
            return fn(self.state, *args)

        return asyncio.run_coroutine_threadsafe(go(), self._loop).result(timeout_s)

    def script(self, *behaviours: dict[str, Any] | Behaviour) -> int:
        """Queue behaviours (dicts are validated like ``/_fake/script``)."""
        parsed = [b if isinstance(b, Behaviour) else Behaviour.from_dict(b) for b in behaviours]
        return int(self.call(lambda st: st.script(parsed)))

    def relaunch(self, *, restart: bool = True, **flags: Any) -> FakeConfig:
        """``FakeState.relaunch`` on the server loop: the same address with other launch flags
        (``restart``: as a new process, every connection reset); returns the new config."""
        new: FakeConfig = self.call(lambda st: st.relaunch(flags, restart=restart))
        self.config = new
        return new

    def requests(self, path: str | None = None) -> dict[str, Any]:
        """The access log (see ``FakeState.requests``)."""
        return dict(self.call(lambda st: st.requests(path)))

    def stop(self, grace_s: float = 2.0) -> None:
        """Graceful stop; see the class docstring. Idempotent."""
        if self._thread is None:
            return
        loop, server = self._loop, self._server
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.state.closing.set)
        if server is not None:
            server.should_exit = True
        self._thread.join(grace_s + 5.0)
        self._thread = None

    def kill(self) -> None:
        """Abrupt stop: reset every connection and stop listening now. Idempotent."""
        if self._thread is None:
            return
        loop, server = self._loop, self._server
        done = threading.Event()

        def hard() -> None:
            try:
                for srv in list(getattr(server, "servers", []) or []):
                    srv.close()
                for conn in list(getattr(getattr(server, "server_state", None), "connections", [])):
                    tr = getattr(conn, "transport", None)
                    if tr is None:
                        continue
                    sock = tr.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(
                                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                            )
                    tr.abort()
                self.state.closing.set()
                server.force_exit = True
                server.should_exit = True
            finally:
                done.set()

        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(hard)
                done.wait(5.0)
        self._thread.join(10.0)
        self._thread = None


@contextlib.contextmanager
def run_fake_server(config: FakeConfig | None = None, *, port: int = 0) -> Iterator[str]:
    """Serve ``config`` on a free 127.0.0.1 port for the ``with`` block; yields the base URL.

    The server is stopped gracefully on exit. For abrupt kills use ``FakeServer`` directly.
    """
    srv = FakeServer(config, port=port).start()
    try:
        yield srv.base_url
    finally:
        srv.stop()
