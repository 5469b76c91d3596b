"""Every prediction checked against what happened: a pool's prediction errors, kept online.

The router chooses a pool by predicted completion time (:mod:`router.decision.predict`, with the speed
model :mod:`router.decision.learn` fits live). A model is a claim; this module keeps, per pool, what
its claims turned out to be worth, and says when the pool's predictions are too wrong to
route on (:func:`router.decision.hysteresis.next_prediction_fallback`, the hysteresis; the decision then
joins the shorter queue, reason ``shortest_queue``).

What is checked (:meth:`PredictionCheck.add`): for a request answered in full, the decision's
prediction for the pool it went to, evaluated again with the request's *realised* output
tokens (the decision had only the client's budget; the load, KV, cached prefix and accept
length are those the decision saw), against the realised time from its dispatch to the engine to its last byte (``completion``:
the router's own time before the dispatch, reading and counting the prompt, is not the pool's);
for a stream also the prediction of its first token (the same with one output token) against
the realised time from dispatch to the first byte (``ttft``). The
relative error of one check is ``(predicted - realised) / realised``: positive when the model
was too slow, negative when too fast; ``|error|`` is what the bounds read.

What the checks correct (:meth:`PredictionCheck.corrections`): a model that is consistently off
in a cell (a speculative pool's fit too slow on long prompts, a stale accept length after a
task change) is off by a factor, and a factor is what the checks measure: in a completion cell
with at least :data:`MIN_CELL_CHECKS` recent checks, the pool's predictions are multiplied by
``1 / (1 + b)``, where ``bias`` is the median relative error of the cell's last
:data:`CORRECTION_CHECKS` checks (the model's own: the checks always evaluate the uncorrected
prediction, so the correction does not chase itself; the last few only, so that a refit that
puts the model right is followed within a few requests, not half a window) and ``b`` is what
of it lies beyond :data:`CORRECTION_BAND` (``sign(bias) * max(0, |bias| - band)``): only a
model that is clearly off is corrected. A bias within the band is what the fits scatter by
between refits and between router replicas that each fit their own, and a correction of it
lags the next refit by a few checks: corrected, it moved a conversation's turns between pools
by noise (``benchmarks/multiturn.py --topology spec2-plain1``, two replicas: 1.14x the ideal
prefill work with no band) and made two nearly equal pools trade places request by request
(the load-test quick start, docs/loadtests.md). Bounded to ``[1 / MAX_CORRECTION,
MAX_CORRECTION]`` and rounded to :data:`CORRECTION_STEP`. The median
of ``predicted / realised`` is ``1 + bias``: a prediction divided by it is right at the median.
(Online recalibration of a forecaster by its recent errors: Gneiting, Balabdaoui & Raftery
2007, "Probabilistic forecasts, calibration and sharpness", J. R. Stat. Soc. B 69(2).)

Kept: per pool, the last ``window`` checks of each kind, and per ``(kind, temperature class,
context bucket)`` cell the last ``window`` of that cell (:data:`router.decision.learn.CONTEXT_BUCKETS`),
each with its time; checks older than ``max_age_s`` are not counted. The figures read are
medians (a few requests that queued behind a burst the scrape missed do not move them): the
*median relative error* ``median |error|`` and the *bias* ``median error``. Memory: at most
``window`` floats per cell, 2 kinds x 2 classes x 5 buckets cells per pool. Pure apart from
its own state: the caller passes every time (monotonic s).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from router.decision.learn import bucket_label

__all__ = ["CORRECTION_BAND", "CORRECTION_CHECKS", "CORRECTION_STEP", "KINDS", "MAX_CORRECTION", "MIN_CELL_CHECKS", "PredictionCheck", "median"]

#: The checked kinds: the whole request, and a stream's first token.
KINDS = ("completion", "ttft")

#: Recent completion checks a ``(class, bucket)`` cell needs to count as measured
#: (:meth:`PredictionCheck.measured_cells`): exploration sends a request to a runner-up pool
#: whose cell for it is not, however slow that pool is predicted there. A cell whose latest
#: check found the pool no faster than predicted beyond :data:`CORRECTION_BAND` counts at once.
MIN_CELL_CHECKS = 4

#: The largest factor a cell's correction moves a prediction by, either way (ratio): a fit
#: extrapolated to prompts it has not seen was measured 4-6x too slow (the load-test quick
#: start, docs/loadtests.md).
MAX_CORRECTION = 4.0

#: The last checks of a cell its correction reads (count).
CORRECTION_CHECKS = 8

#: The part of a cell's median bias left uncorrected, either way (relative error).
CORRECTION_BAND = 0.3

#: Corrections are rounded to this (ratio): they change only when the cell's bias moves by
#: about a percent, not on every check (a pool's snapshot is cached while its inputs stay).
CORRECTION_STEP = 0.01


def median(values: Iterable[float]) -> float | None:
    """The median of ``values`` (the mean of the middle two for an even count); None: empty."""
    s = sorted(values)
    n = len(s)
    if n == 0:
        return None
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


class PredictionCheck:
    """One pool's checked predictions (module docstring).

    Args:
        window: checks kept per kind and per cell (> 0).
        max_age_s: checks older than this (s) are not counted (> 0).

    Attributes:
        fallback: the pool's decisions fall back to the shorter queue (set by the runtime's
            hysteresis step, :func:`router.decision.hysteresis.next_prediction_fallback`).
        fallback_since: monotonic time (s) the fallback last turned on or off (None: never).
        checked: checks taken per kind since start.
        fallbacks: times the fallback turned on.
        measured: :meth:`measured_cells` as of the runtime's last scrape round, and a cell that
            became measured since (:meth:`add`).
        correction: :meth:`corrections` as of the runtime's last scrape round.
        measured_factor: :meth:`corrections` with no band, as of the same round: each measured
            cell's full median bias taken off (what the fallback's tie-break reads,
            :func:`router.decision.predicted.shortest_queue`).
    """

    __slots__ = ("_cells", "_pool", "checked", "correction", "fallback", "fallback_since", "fallbacks", "max_age_s",
                 "measured", "measured_factor", "window")

    def __init__(self, window: int = 64, max_age_s: float = 300.0) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        if max_age_s <= 0:
            raise ValueError("max_age_s must be > 0")
        self.window = window
        self.max_age_s = max_age_s
        self._pool: dict[str, deque[tuple[float, float]]] = {k: deque(maxlen=window) for k in KINDS}
        self._cells: dict[tuple[str, str, int], deque[tuple[float, float]]] = {}
        self.checked = dict.fromkeys(KINDS, 0)
        self.fallback = False
        self.fallback_since: float | None = None
        self.fallbacks = 0
        self.measured: frozenset[tuple[str, int]] = frozenset()  # as of the last scrape round (the runtime sets it)
        self.correction: tuple[tuple[tuple[str, int], float], ...] = ()  # the same
        self.measured_factor: tuple[tuple[tuple[str, int], float], ...] = ()  # the same

    def add(self, kind: str, temperature: str, bucket: int, predicted_s: float, realised_s: float,
            now: float) -> float | None:
        """Take one check; returns its relative error, or None when ``realised_s`` is not
        positive (nothing taken).

        Args:
            kind: one of :data:`KINDS`.
            temperature: the request's temperature class (``greedy`` / ``sampled``).
            bucket: its context bucket (:func:`router.decision.learn.context_bucket` of its prompt).
            predicted_s, realised_s: seconds.
            now: monotonic s.
        """
        if not realised_s > 0:
            return None
        err = (predicted_s - realised_s) / realised_s
        self._pool[kind].append((now, err))
        key = (kind, temperature, bucket)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = deque(maxlen=self.window)
        cell.append((now, err))
        self.checked[kind] += 1
        if kind == "completion" and (temperature, bucket) not in self.measured and (
                len(cell) >= MIN_CELL_CHECKS or err <= CORRECTION_BAND):
            # measured at once, not at the next scrape round: exploration stops as soon as the
            # cell is (the round recounts its checks by age)
            self.measured = self.measured | {(temperature, bucket)}
        return err

    def new_model(self) -> None:
        """The pool's model was replaced (a reload with another prior): forget the per-cell
        checks, whose biases were the old model's (no correction, every cell unmeasured until
        checked again); the pool's own checks stay, so the fallback keeps its state and
        judges the new model as its checks come in."""
        self._cells.clear()
        self.correction = self.measured_factor = ()
        self.measured = frozenset()

    def _recent(self, ring: deque[tuple[float, float]], now: float) -> list[float]:
        horizon = now - self.max_age_s
        return [e for at, e in ring if at >= horizon]

    def error(self, now: float, kind: str = "completion") -> tuple[float | None, int]:
        """``(median relative error, checks counted)`` of the pool's recent checks of ``kind``
        (None with no recent check)."""
        recent = self._recent(self._pool[kind], now)
        return median(abs(e) for e in recent), len(recent)

    def cells(self, now: float) -> dict[tuple[str, str, int], tuple[float | None, float | None, int]]:
        """``{(kind, class, bucket): (median relative error, bias, checks)}`` of the cells with
        a recent check."""
        out = {}
        for key, ring in self._cells.items():
            recent = self._recent(ring, now)
            if recent:
                out[key] = (median(abs(e) for e in recent), median(recent), len(recent))
        return out

    def measured_cells(self, now: float) -> frozenset[tuple[str, int]]:
        """The ``(temperature class, context bucket)`` cells with at least
        :data:`MIN_CELL_CHECKS` recent completion checks, or whose latest recent check found
        the pool no faster than predicted beyond :data:`CORRECTION_BAND` (relative error at
        most the band): what exploration measures a runner-up's cell for is a pool predicted
        slower than it is (a fit extrapolated to prompts it has not served), and one check
        that rules that out is enough; one that confirms it asks for the checks a correction
        needs. The periodic share (``routing.learning.explore_every``) goes on either way."""
        horizon = now - self.max_age_s
        out = []
        for (kind, cls, bucket), ring in self._cells.items():
            if kind != "completion" or not ring or ring[-1][0] < horizon:
                continue
            if ring[-1][1] <= CORRECTION_BAND or sum(1 for at, _ in ring if at >= horizon) >= MIN_CELL_CHECKS:
                out.append((cls, bucket))
        return frozenset(out)

    def corrections(self, now: float, band: float = CORRECTION_BAND) -> tuple[tuple[tuple[str, int], float], ...]:
        """``((temperature class, context bucket), factor)`` of every measured completion cell
        (:meth:`measured_cells`) whose factor is not 1 (module docstring): ``1 / (1 + b)``,
        ``b`` the median bias of its last :data:`CORRECTION_CHECKS` recent checks beyond
        ``band`` (:data:`CORRECTION_BAND`; 0: the whole bias), within ``[1 / MAX_CORRECTION,
        MAX_CORRECTION]``, rounded to :data:`CORRECTION_STEP`; sorted by cell (a value, hashable)."""
        horizon = now - self.max_age_s
        out = []
        for (kind, cls, bucket), ring in self._cells.items():
            if kind != "completion":
                continue
            recent = [e for at, e in ring if at >= horizon]
            if len(recent) < MIN_CELL_CHECKS:
                continue
            bias = median(recent[-CORRECTION_CHECKS:])
            assert bias is not None  # recent is not empty
            b = max(0.0, bias - band) if bias > 0 else min(0.0, bias + band)
            factor = min(MAX_CORRECTION, max(1.0 / MAX_CORRECTION, 1.0 / (1.0 + b)))  # errors are > -1
            factor = round(round(factor / CORRECTION_STEP) * CORRECTION_STEP, 6)
            if factor != 1.0:
                out.append(((cls, bucket), factor))
        return tuple(sorted(out))

    def status(self, now: float) -> dict[str, object]:
        """What ``/ready`` shows: the fallback state, the completion checks' median relative
        error (``median_relative_error``, over ``checks`` recent ones; ``checked`` since start),
        and per kind the pool's median relative error, bias and recent checks, with the same per
        ``class/bucket`` cell (a completion cell also with its ``correction``, :meth:`corrections`).
        The errors are the uncorrected model's."""
        err, n = self.error(now)
        corrections = dict(self.corrections(now))
        out: dict[str, object] = {
            "fallback": self.fallback, "fallbacks": self.fallbacks,
            "median_relative_error": None if err is None else round(err, 4), "checks": n,
            "checked": self.checked["completion"],
            "fallback_age_s": None if self.fallback_since is None else round(now - self.fallback_since, 3)}
        for kind in KINDS:
            recent = self._recent(self._pool[kind], now)
            err, bias = median(abs(e) for e in recent), median(recent)
            out[kind] = {
                "median_relative_error": None if err is None else round(err, 4),
                "bias": None if bias is None else round(bias, 4),
                "checks": len(recent), "checked": self.checked[kind],
                "cells": {f"{c}/{bucket_label(b)}": {"median_relative_error": round(e, 4), "bias": round(bi, 4),
                                                     "checks": n,
                                                     **({"correction": corrections.get((c, b), 1.0)}
                                                        if kind == "completion" else {})}
                          for (k, c, b), (e, bi, n) in sorted(self.cells(now).items())
                          if k == kind and e is not None and bi is not None}}
        return out
