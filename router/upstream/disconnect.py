"""Noticing that a client left while its handler waits on something else (the engine).

:class:`DisconnectWatch` calls a callback once when the client's connection goes. Under the
router's own HTTP protocol (:mod:`router.front.http_limits`), which puts itself in the scope under
:data:`CONNECTION_KEY` and keeps reading the connection while the handler waits (a body read
whole leaves reading on), the protocol's ``connection_lost`` makes the call: no task per
request. Under another ASGI server, or while the protocol has paused reading (a pipelined
request behind this one: it would not see the end of the stream), one task waits on the
ASGI ``receive`` channel for ``http.disconnect``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["CONNECTION_KEY", "DisconnectWatch"]

#: ASGI scope key under which the router's HTTP protocol puts itself for the request's handler
#: (its ``on_lost`` attribute: a ``() -> None`` called once when the connection is lost).
CONNECTION_KEY = "specgate.connection"


class DisconnectWatch:
    """Call ``lost`` once if the client disconnects before :meth:`close` (see the module
    docstring for how it is noticed).

    Args:
        scope: the request's ASGI scope.
        receive: its ASGI ``receive`` (read only when the protocol cannot tell).
        lost: called at most once, from the event loop.
    """

    __slots__ = ("_conn", "_lost", "_task")

    def __init__(self, scope: Any, receive: Callable[[], Any], lost: Callable[[], None]) -> None:
        conn = scope.get(CONNECTION_KEY)
        self._lost = lost
        self._task: asyncio.Task[None] | None = None
        if conn is not None and not conn.flow.read_paused and not conn.transport.is_closing():
            conn.on_lost = lost
            self._conn = conn
        else:
            self._conn = None
            self._task = asyncio.create_task(self._watch(receive))

    async def _watch(self, receive: Callable[[], Any]) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._lost()

    def close(self) -> None:
        """Stop watching (idempotent): ``lost`` is not called after this."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        elif self._conn is not None:
            if self._conn.on_lost is self._lost:
                self._conn.on_lost = None
            self._conn = None
