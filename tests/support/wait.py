"""Waiting on a condition with a deadline (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, what: str | Callable[[], object] = "condition",
               interval: float = 0.01) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a truthy value; return it.

    The predicate is called once more at the deadline, so a condition met while the caller
    slept still counts.

    Raises:
        AssertionError: the predicate stayed falsy for ``timeout`` seconds; the message names
            ``what`` (a callable is called then, to report the state that was seen).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {seen}")
        time.sleep(interval)
