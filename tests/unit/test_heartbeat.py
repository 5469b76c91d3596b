"""router.upstream.Heartbeat: keep-alive comments while the engine is silent, the idle watch
untouched by them; the setting's bounds."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from router.config import UpstreamConfig
from router.upstream import KEEPALIVE_EVENT, Heartbeat, IdleWatch


def test_the_setting_defaults_to_15_s_and_0_turns_it_off():
    assert UpstreamConfig().stream_keepalive_s == 15.0
    assert UpstreamConfig(stream_keepalive_s=0).stream_keepalive_s == 0
    with pytest.raises(ValidationError):
        UpstreamConfig(stream_keepalive_s=-1)


def test_silence_gets_comments_then_the_engine_bytes():
    async def run() -> tuple[list[bytes], list[bytes], float]:
        sent: list[bytes] = []
        got: list[bytes] = []
        arrived = asyncio.Event()

        async def read() -> bytes:
            await arrived.wait()
            return b"data: x\n\n"

        async def send(message: dict) -> None:
            sent.append(message["body"])

        watch = IdleWatch(10.0)
        start = watch.last
        beat = Heartbeat(0.05, watch)
        asyncio.get_running_loop().call_later(0.28, arrived.set)
        while True:
            chunk = await beat.read(read, send)
            if chunk is not KEEPALIVE_EVENT:
                got.append(chunk)
                break
        moved = watch.last - start
        beat.close()
        watch.close()
        return sent, got, moved

    sent, got, moved = asyncio.run(run())
    assert got == [b"data: x\n\n"]
    assert 4 <= len(sent) <= 6 and set(sent) == {KEEPALIVE_EVENT}  # about one per 50 ms of 280 ms
    assert moved == 0  # comments never reset the idle watch: it counts the engine's silence


def test_other_cancellations_propagate():
    async def run() -> None:
        async def read() -> bytes:
            await asyncio.sleep(10)
            return b""

        async def send(message: dict) -> None:
            raise AssertionError("no comment for a cancelled relay")

        watch = IdleWatch(10.0)
        beat = Heartbeat(5.0, watch)
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_later(0.05, task.cancel)
        try:
            with pytest.raises(asyncio.CancelledError):
                await beat.read(read, send)
        finally:
            task.uncancel()
            beat.close()
            watch.close()

    asyncio.run(run())
