"""Following drift in what the router learns: a mean with a memory in seconds, and a change detector.

The live speed fit (:mod:`router.decision.learn`) forgets per observation, which is the right unit
for the regression's noise but the wrong one for drift: a pool that receives one request a
second keeps ~200 s of history at ``forgetting`` 0.995, and a context bucket that receives one
request in ten keeps half an hour. Two tools bound how long a change in the traffic or the
engine stays hidden:

- :class:`DecayedMean`: an exponentially weighted mean whose observations lose weight with
  time, ``w_i = exp(-(now - t_i) / memory_s)``, and at most ``max_weight`` observations' worth
  in all (the per-observation forgetting, ``1 / (1 - forgetting)``). A cell fed often
  averages over its last ``max_weight`` observations; one fed rarely over its last
  ``memory_s`` seconds, so after a change it reaches the new level in a few time constants
  whatever its rate. After a long silence the first new observation outweighs the old mean.
- :class:`Cusum`: Page's two-sided cumulative-sum test (E. S. Page, "Continuous inspection
  schemes", Biometrika 41, 1954) on a standardised residual ``z = (r - m) / s``, where ``m``
  and ``s`` are the residual's own slow running mean and mean absolute deviation (so a model
  whose errors are biased or noisy by design does not alarm): ``S+ = max(0, S+ + z - k)``,
  ``S- = max(0, S- - z - k)``; an alarm when either passes ``h``. With ``k`` 0.5 and ``h`` 8 a
  shift of 1.5 deviations alarms after ~8 observations, and white noise about once per
  several thousand (the average run length of the normal CUSUM at these values). On an alarm
  the caller discounts the history it learned from (the regression's information matrix: the
  "covariance resetting" of adaptive control, K. J. Astrom and B. Wittenmark, Adaptive
  Control, 2nd ed., section 6.6), and the detector restarts.

Pure: no I/O, no clock (the caller passes ``now``); a few floats per instance.
"""

from __future__ import annotations

import math

__all__ = ["Cusum", "DecayedMean"]

_MAD_TO_SD = math.sqrt(math.pi / 2)  # a normal's standard deviation over its mean absolute deviation


class DecayedMean:
    """A mean over the last ``memory_s`` seconds and at most ``max_weight`` observations.

    Args:
        memory_s: the time constant of an observation's weight (s, > 0).
        max_weight: the most observations' worth the mean holds (>= 1).

    Attributes:
        value: the mean (None before the first observation).
        count: observations taken (all time).
    """

    __slots__ = ("_at", "_weight", "count", "max_weight", "memory_s", "value")

    def __init__(self, memory_s: float, max_weight: float) -> None:
        if memory_s <= 0 or max_weight < 1:
            raise ValueError("memory_s must be > 0 and max_weight >= 1")
        self.memory_s = memory_s
        self.max_weight = max_weight
        self.value: float | None = None
        self.count = 0
        self._weight = 0.0
        self._at = 0.0

    def add(self, x: float, now: float) -> float:
        """Take ``x`` observed at ``now`` (s, monotonic); returns the new mean."""
        decay = math.exp(-max(0.0, now - self._at) / self.memory_s) if self.count else 0.0
        self._weight = min(self._weight * decay + 1.0, self.max_weight)
        self.value = x if self.value is None else self.value + (x - self.value) / self._weight
        self._at = now
        self.count += 1
        return self.value

    def weight(self, now: float) -> float:
        """The observations' worth the mean holds at ``now`` (0 before the first)."""
        if not self.count:
            return 0.0
        return self._weight * math.exp(-max(0.0, now - self._at) / self.memory_s)


class Cusum:
    """Two-sided CUSUM on a self-standardised residual (module docstring).

    Args:
        k: the allowance per observation, in deviations (> 0).
        h: the alarm threshold, in deviations (> 0).
        memory: observations the residual's mean and deviation average over (>= 2).
        warmup: observations before the detector may alarm (its mean and deviation settle).

    Attributes:
        alarms: alarms raised so far.
    """

    __slots__ = ("_dev", "_mean", "_n", "_neg", "_pos", "alarms", "h", "k", "memory", "warmup")

    def __init__(self, *, k: float = 0.5, h: float = 12.0, memory: float = 100.0, warmup: int = 20) -> None:
        if k <= 0 or h <= 0 or memory < 2 or warmup < 0:
            raise ValueError("k and h must be > 0, memory >= 2, warmup >= 0")
        self.k, self.h, self.memory, self.warmup = k, h, memory, warmup
        self._mean = 0.0
        self._dev = 0.0
        self._n = 0
        self._pos = 0.0
        self._neg = 0.0
        self.alarms = 0

    def add(self, r: float) -> bool:
        """Take one residual; True on an alarm (the sums restart, the residual's mean and
        deviation restart from this residual)."""
        self._n += 1
        if self._n == 1:
            self._mean, self._dev = r, 0.0
            return False
        s = self._dev * _MAD_TO_SD if self._dev > 0 else abs(r - self._mean)
        z = (r - self._mean) / s if s > 0 else 0.0
        w = max(1.0 / self._n, 1.0 / self.memory)
        self._mean += w * (r - self._mean)
        self._dev += w * (abs(r - self._mean) - self._dev)
        if self._n <= self.warmup:
            return False
        self._pos = max(0.0, self._pos + z - self.k)
        self._neg = max(0.0, self._neg - z - self.k)
        if self._pos > self.h or self._neg > self.h:
            self.alarms += 1
            self._pos = self._neg = 0.0
            self._n, self._mean, self._dev = 1, r, 0.0
            return True
        return False
