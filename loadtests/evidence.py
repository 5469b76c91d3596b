"""Is a calibration axis evidence, or noise? The checks ``specgate calibrate`` runs before it
states a crossover (:mod:`loadtests.calibrate`) and the speed-model fit runs on its points
(:mod:`loadtests.speedfit`).

An axis is a row (speedup against prompt length at one load) or a column (speedup against
load in one bucket) of measured cells, in axis order. It is **not evidence** when:

1. a measured cell's runs disagree: its spread verdict (:func:`loadtests.stats.spread_verdict`,
   docs/loadtests.md "Spread and the bimodal flag") is ``noisy`` (wide, no recurring modes) or
   ``bimodal`` (two recurring modes: the median describes neither); or it is ``unsettled``
   (wider than the threshold, fewer than 4 runs) *and* its runs lie on both sides of the
   break-even ``m`` (``min < m <= max``: which side the cell is on is chance). An unsettled
   cell whose runs all agree on the side is noted, not refused; ``converging`` (a
   disturbance faded) and ``stable``/``single`` pass;
2. or the axis is not monotone: the speedup *rises* from one cell to the next by more than the
   report's spread threshold ``t`` (``workload.spread_threshold``, default 1.10:
   ``S[i+1] > t * S[i]``). Speculation's benefit falls with context and with batch (the
   operating points in docs/loadtests.md), so a rise larger than run-to-run agreement is
   measurement trouble (co-tenants, warm-up), not a crossover.

Then no threshold is proposed from that axis; the warning names each cell with its spread
(max / min of its runs) and what would settle it: more measured runs (``--repetitions``: at
least 6, or twice the runs made) and more requests per run (``--requests``), or, for a bimodal
cell, one workload per mode (e.g. ``copy_fraction: 0`` and ``1``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["UNTRUSTED_VERDICTS", "AxisCheck", "advice", "check_axis", "suggested_repetitions", "untrusted"]

#: Spread verdicts whose runs disagree too much to read a threshold from.
UNTRUSTED_VERDICTS = frozenset({"noisy", "unsettled", "bimodal"})


def untrusted(verdict: str | None) -> bool:
    """True for a verdict in :data:`UNTRUSTED_VERDICTS`."""
    return verdict in UNTRUSTED_VERDICTS


def suggested_repetitions(runs: int | None) -> int:
    """Measured runs to ask for next: ``max(6, 2 * runs)`` (6 with an unknown count: the
    bimodal test needs >= 4 runs and two halves of >= 3)."""
    return max(6, 2 * runs) if runs else 6


@dataclass(frozen=True)
class AxisCheck:
    """The verdict on one axis.

    Attributes:
        ok: True when a threshold may be read from the axis.
        problems: one sentence per problem (empty when ok).
        spreads: per cell label, its spread (max / min of the runs) where known.
        repetitions: the suggested ``--repetitions`` (None when ok).
        notes: unsettled cells that did not refuse the axis (every run on one side of ``m``).
    """

    ok: bool
    problems: tuple[str, ...]
    spreads: dict[str, float]
    repetitions: int | None
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"ok": self.ok, "problems": list(self.problems), "notes": list(self.notes),
                "spreads": dict(self.spreads), "suggested_repetitions": self.repetitions}


def check_axis(cells: Sequence[Mapping[str, Any]], *, threshold: float, axis: str,
               min_speedup: float = 1.0) -> AxisCheck:
    """Check one axis (module docstring).

    Args:
        cells: in axis order, each ``{"label", "speedup", "source", "verdict", "spread",
            "runs", "min", "max"}`` (``source`` ``measured`` or ``model``; only measured cells
            carry a verdict and the runs' ``min``/``max`` speedups; model cells skip check 1
            but count for check 2).
        threshold: the spread threshold ``t`` (> 1).
        axis: how the axis reads in a sentence (``"along the context at load 1"``).
        min_speedup: the break-even ``m`` (dimensionless).

    Returns:
        The :class:`AxisCheck`; ``notes`` lists unsettled cells that did not refuse the axis.
    """
    problems: list[str] = []
    notes: list[str] = []
    spreads: dict[str, float] = {}
    runs: list[int] = []
    for c in cells:
        if c.get("spread") is not None and math.isfinite(c["spread"]):
            spreads[c["label"]] = float(c["spread"])
        if c.get("source") != "measured" or not untrusted(c.get("verdict")):
            continue
        spread = c.get("spread")
        text = f"{spread:.2f}x" if spread is not None and math.isfinite(spread) else "unknown"
        n = c.get("runs")
        lo, hi = c.get("min"), c.get("max")
        sentence = f"{c['label']} is {c['verdict']} (spread {text} over {n or '?'} runs"
        if c["verdict"] == "unsettled" and lo is not None and hi is not None and not lo < min_speedup <= hi:
            notes.append(sentence + f", every run {'at or above' if lo >= min_speedup else 'below'} "
                         f"{min_speedup:g}x)")
            continue
        if lo is not None and hi is not None:
            sentence += f", runs {lo:.2f}x-{hi:.2f}x"
        problems.append(sentence + ")")
        runs.append(int(n or 0))
    for a, b in itertools.pairwise(cells):
        if a["speedup"] and b["speedup"] and b["speedup"] > threshold * a["speedup"]:
            problems.append(f"the speedup rises {axis} from {a['speedup']:.2f}x at {a['label']} to "
                            f"{b['speedup']:.2f}x at {b['label']} (more than the {threshold:g}x the runs "
                            "agree within: not monotone)")
    if not problems:
        return AxisCheck(True, (), spreads, None, tuple(notes))
    return AxisCheck(False, tuple(problems), spreads, suggested_repetitions(max(runs, default=0) or None),
                     tuple(notes))


def advice(check: AxisCheck, *, bimodal: bool) -> str:
    """What would settle an axis that failed: the suggested repetitions and requests, and
    for a bimodal cell one workload per mode."""
    text = (f"rerun with --repetitions {check.repetitions} (or more) and more requests per run "
            "(--requests), on a quiet machine")
    if bimodal:
        text += "; a bimodal cell needs one workload per mode (e.g. copy_fraction 0 and 1)"
    return text
