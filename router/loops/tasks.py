"""One background asyncio task per component (scraper, canary): started in the app's lifespan,
cancelled and awaited on shutdown."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["LoopTask"]


class LoopTask:
    """Runs ``self._loop()`` as one named task; subclasses implement ``_loop`` and set ``_name``."""

    _name = "specgate-task"
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop task (on the running event loop)."""
        self._task = asyncio.create_task(self._loop(), name=self._name)

    async def stop(self) -> None:
        """Cancel the loop task and wait for it."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        raise NotImplementedError
