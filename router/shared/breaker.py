"""The shared state's consecutive-failure circuit breaker (M. Nygard, *Release It!*, 2007,
chapter 5), used by :class:`router.shared.state.RedisState` (which re-exports it)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["CircuitBreaker"]


class CircuitBreaker:
    """Consecutive-failure circuit breaker (Nygard, *Release It!*).

    closed -> open after ``failure_threshold`` consecutive failures; while open :meth:`allow`
    refuses every call; ``reset_after_s`` seconds later one probe is allowed (half-open): its
    success closes the breaker, its failure reopens it for another ``reset_after_s``.

    Args:
        failure_threshold: consecutive failures that open it.
        reset_after_s: seconds open before the probe.
        clock: monotonic clock (s).
    """

    def __init__(self, failure_threshold: int, reset_after_s: float, clock: Callable[[], float]) -> None:
        self.failure_threshold = failure_threshold
        self.reset_after_s = reset_after_s
        self._clock = clock
        self.state = "closed"
        self.failures = 0
        self._opened_at = 0.0
        self._probing = False

    def allow(self) -> bool:
        """May a call go out now? (In half-open, only the one probe.)"""
        if self.state == "closed":
            return True
        if self.state == "open":
            if self._clock() - self._opened_at < self.reset_after_s:
                return False
            self.state = "half_open"
            self._probing = False
        if self._probing:
            return False
        self._probing = True
        return True

    def success(self) -> None:
        """A call succeeded: close."""
        self.state = "closed"
        self.failures = 0
        self._probing = False

    def failure(self) -> None:
        """A call failed: count it; open at the threshold or when the probe failed."""
        self.failures += 1
        self._probing = False
        if self.state == "half_open" or self.failures >= self.failure_threshold:
            self.state = "open"
            self._opened_at = self._clock()
