"""router.upstream.relay.Deadline: asyncio.timeout_at's behaviour with one timer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from router.upstream.relay import Deadline


async def _guarded(when: float, body: Any) -> Any:
    with Deadline(when):
        return await body


async def _value(v: int, delay: float = 0.0) -> int:
    await asyncio.sleep(delay)
    return v


def test_returns_before_the_deadline_and_leaves_no_timer() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert await _guarded(loop.time() + 5, _value(7)) == 7
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0.02)  # a stale timer would cancel this

    asyncio.run(main())


def test_past_the_deadline_is_a_timeout_error_and_the_task_is_not_left_cancelled() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await _guarded(loop.time() + 0.01, _value(1, 5))
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0)  # not cancelled again

    asyncio.run(main())


def test_a_deadline_already_past_fires_at_the_next_await() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await _guarded(loop.time() - 1, _value(1, 5))

    asyncio.run(main())


def test_another_cancellation_with_the_deadline_stays_a_cancellation() -> None:
    async def inner() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        loop.call_at(loop.time() + 0.01, task.cancel)  # the client's disconnect, at the same time
        await _guarded(loop.time() + 0.01, _value(1, 5))

    async def main() -> None:
        task = asyncio.create_task(inner())
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_an_exception_inside_passes_through() -> None:
    async def boom() -> None:
        raise ValueError("x")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(ValueError):
            await _guarded(loop.time() + 5, boom())

    asyncio.run(main())


def test_outside_a_task_it_refuses() -> None:
    with pytest.raises(RuntimeError), Deadline(0.0):
        pass


def test_the_timer_is_gone_after_the_block() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        with Deadline(loop.time() + 0.01) as timer:
            pass
        assert timer.handle.cancelled()
        await asyncio.sleep(0.03)  # not cancelled by it

    asyncio.run(main())


def test_the_task_given_by_the_caller_is_the_one_cancelled() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        with pytest.raises(TimeoutError), Deadline(loop.time() + 0.01, task) as d:
            await asyncio.sleep(5)
        assert d.task is task and d.fired and task is not None and task.cancelling() == 0

    asyncio.run(main())

