"""router.upstream.relay.Deadline: asyncio.timeout_at's behaviour with one timer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from router.upstream.relay import Deadline, IdleWatch, LoopTimers


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


def test_shared_timers_fire_each_due_deadline_once_in_time_order() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        timers = LoopTimers()
        order: list[int] = []

        async def guarded(i: int, after: float, sleep: float) -> str:
            try:
                with Deadline(loop.time() + after, None, timers):
                    await asyncio.sleep(sleep)
            except TimeoutError:
                order.append(i)
                return "timeout"
            return "ok"

        results = await asyncio.gather(guarded(0, 0.06, 5), guarded(1, 0.02, 5), guarded(2, 5, 0.01),
                                       guarded(3, 0.04, 5), guarded(4, 5, 0.03))
        assert results == ["timeout", "timeout", "ok", "timeout", "ok"]
        assert order == [1, 3, 0] and len(timers) == 0
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    asyncio.run(main())


def test_shared_timers_drop_finished_deadlines_behind_a_long_one() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        timers = LoopTimers()
        with Deadline(loop.time() + 60, None, timers):  # a long request holds the top of the heap
            for _ in range(1000):
                with Deadline(loop.time() + 120, None, timers):
                    pass
            assert len(timers) == 1 and len(timers._heap) <= 2 * 1 + 65
        assert len(timers) == 0 and not timers._heap

    asyncio.run(main())


def test_shared_timers_of_another_loop_give_the_deadline_its_own_timer() -> None:
    timers = LoopTimers()

    async def hold() -> None:
        with Deadline(asyncio.get_running_loop().time() + 60, None, timers):
            await asyncio.sleep(0)
            await other()

    async def other() -> None:  # a second loop while the first one still owns the timers
        def run() -> str:
            async def inner() -> str:
                try:
                    with Deadline(asyncio.get_running_loop().time() + 0.01, None, timers) as d:
                        await asyncio.sleep(5)
                except TimeoutError:
                    return "timeout" if isinstance(d.handle, asyncio.TimerHandle) else "shared"
                return "ok"
            return asyncio.run(inner())

        assert await asyncio.get_running_loop().run_in_executor(None, run) == "timeout"

    asyncio.run(hold())


def test_loop_timers_run_an_idle_watch_and_report_a_raising_callback() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        timers = LoopTimers()
        errors: list[BaseException] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx["exception"]))

        def boom() -> None:
            raise ValueError("boom")

        ran: list[str] = []
        timers.call_at(loop.time() + 0.01, boom)
        timers.call_at(loop.time() + 0.01, lambda: ran.append("after"))
        cancelled = timers.call_at(loop.time() + 0.01, lambda: ran.append("cancelled"))
        cancelled.cancel()
        watch = IdleWatch(0.03, loop, timers)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(5)  # the idle watch cancels this task
        assert watch.fired and watch.task.uncancel() == 0
        watch.close()
        assert ran == ["after"] and [str(e) for e in errors] == ["boom"] and len(timers) == 0

    asyncio.run(main())
