"""router.upstream.disconnect.DisconnectWatch: the protocol's callback when it can tell, else one task
waiting on ``receive``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from router.upstream.disconnect import CONNECTION_KEY, DisconnectWatch


def _conn(read_paused: bool = False, closing: bool = False) -> SimpleNamespace:
    return SimpleNamespace(on_lost=None, flow=SimpleNamespace(read_paused=read_paused),
                           transport=SimpleNamespace(is_closing=lambda: closing))


async def _never() -> dict:
    await asyncio.Event().wait()
    return {}


async def test_under_the_protocol_the_callback_is_set_and_cleared():
    conn, calls = _conn(), []
    watch = DisconnectWatch({CONNECTION_KEY: conn}, _never, lambda: calls.append("lost"))
    assert watch._task is None and conn.on_lost is not None
    conn.on_lost()  # what connection_lost does
    assert calls == ["lost"]
    watch.close()
    assert conn.on_lost is None
    watch.close()  # idempotent


async def test_close_leaves_a_later_requests_callback_alone():
    conn = _conn()
    watch = DisconnectWatch({CONNECTION_KEY: conn}, _never, lambda: None)
    conn.on_lost = later = lambda: None  # the next request on the connection took it
    watch.close()
    assert conn.on_lost is later


async def test_without_the_protocol_or_with_reading_paused_a_task_waits_on_receive():
    for scope in ({}, {CONNECTION_KEY: _conn(read_paused=True)}, {CONNECTION_KEY: _conn(closing=True)}):
        messages = asyncio.Queue()
        gone = asyncio.Event()
        watch = DisconnectWatch(scope, messages.get, gone.set)
        assert watch._task is not None
        if CONNECTION_KEY in scope:
            assert scope[CONNECTION_KEY].on_lost is None
        await messages.put({"type": "http.request", "body": b"", "more_body": False})
        await messages.put({"type": "http.disconnect"})
        await asyncio.wait_for(gone.wait(), 2)
        watch.close()


async def test_closed_before_the_disconnect_nothing_is_called():
    messages, calls = asyncio.Queue(), []
    watch = DisconnectWatch({}, messages.get, lambda: calls.append("lost"))
    task = watch._task
    assert task is not None
    watch.close()
    await asyncio.gather(task, return_exceptions=True)  # the watching task has ended
    assert task.cancelled() and watch._task is None
    await messages.put({"type": "http.disconnect"})
    assert calls == [] and messages.qsize() == 1  # nobody reads the channel any more
