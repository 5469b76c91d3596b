"""router.upstream.relay.Heartbeat: keep-alive comments while the engine is silent, the idle watch
untouched by them; the setting's bounds."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from router.config.tree import UpstreamConfig
from router.upstream.relay import KEEPALIVE_EVENT, Heartbeat, IdleWatch


def test_the_setting_defaults_to_15_s_and_0_turns_it_off():
    assert UpstreamConfig().stream_keepalive_s == 15.0
    assert UpstreamConfig(stream_keepalive_s=0).stream_keepalive_s == 0
    with pytest.raises(ValidationError):
        UpstreamConfig(stream_keepalive_s=-1)


async def relay_read(beat: Heartbeat, read, send) -> bytes | None:
    """The relay's read step (router.upstream.proxy.ProxyResponse._relay): None when a comment went out."""
    beat.reading = True
    try:
        chunk = await read()
    except asyncio.CancelledError:
        if not await beat.keep_alive(send):
            raise
        return None
    beat.reading = False
    return chunk


def test_silence_gets_comments_then_the_engine_bytes():
    async def run() -> tuple[list[bytes], bytes, float]:
        sent: list[bytes] = []
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
        while (chunk := await relay_read(beat, read, send)) is None:
            pass
        moved = watch.last - start
        beat.close()
        return sent, chunk, moved

    sent, chunk, moved = asyncio.run(run())
    assert chunk == b"data: x\n\n"
    assert 4 <= len(sent) <= 6 and set(sent) == {KEEPALIVE_EVENT}  # about one per 50 ms of 280 ms
    assert moved == 0  # comments never reset the idle watch: it counts the engine's silence


def test_no_comment_while_the_relay_writes_to_the_client():
    async def run() -> bool:
        watch = IdleWatch(10.0)
        beat = Heartbeat(0.02, watch)
        await asyncio.sleep(0.15)  # "sending" to a slow client: not reading, so never cancelled here
        due = beat.due
        beat.close()
        return due

    assert asyncio.run(run()) is False


@pytest.mark.parametrize("interval", [5.0, 0])
def test_other_cancellations_propagate(interval):
    async def run() -> None:
        async def read() -> bytes:
            await asyncio.sleep(10)
            return b""

        async def send(message: dict) -> None:
            raise AssertionError("no comment for a cancelled relay")

        watch = IdleWatch(10.0)
        beat = Heartbeat(interval, watch)
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_later(0.05, task.cancel)
        try:
            with pytest.raises(asyncio.CancelledError):
                await relay_read(beat, read, send)
        finally:
            task.uncancel()
            beat.close()

    asyncio.run(run())
