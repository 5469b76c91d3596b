"""Summary statistics for load-test samples: percentiles, spreads, and the bimodality verdict.

Percentiles
-----------
:func:`percentile` interpolates linearly between closest ranks (Hyndman and Fan type 7, the
default of numpy, R and Excel ``PERCENTILE.INC``): for sorted values ``x[0..n-1]`` and
``q`` in [0, 100], ``h = (n - 1) * q / 100`` and the result is
``x[floor h] + (h - floor h) * (x[floor h + 1] - x[floor h])``. So for 1..10, p50 = 5.5,
p90 = 9.1, p99 = 9.91. Units are those of the input (seconds, tokens/s, ...).

Spread and the bimodal flag (docs/loadtests.md, "Spread and the bimodal flag")
--------------------------------------------------------------------------
A point is measured in ``n`` repetitions ("runs"); each run gives one value (for example the
run's median decode tokens/s, or the run's spec/plain speedup). The *spread* of a set of runs
is ``max / min`` (a long-context GPU measurement reran within 1.00-1.02x on a quiet node and
1.02-1.09x in general; a node shared with a quality job showed 6.28x).

The rule (docs/loadtests.md): *a spread that does not shrink with more repetitions is a bimodal
workload, not noise* (copy task at concurrency 16: 1.52x at 5 runs, 1.55x at 15; free-form
at the same concurrency: a stable 1.05x). Because ``max / min`` over a growing set never
decreases, "shrink" is judged by comparing the runs' first half with their second half
(``ceil(n/2)`` runs each; for odd ``n`` the middle run is in both):

1. ``n < 2``: verdict ``single``.
2. spread of all runs ``<= threshold`` (default 1.10, just above the quiet-node 1.09x):
   ``stable``; otherwise, with fewer than 4 runs: ``unsettled`` (too few runs to tell two
   modes from noise: rerun with more repetitions).
3. Split the runs into a low and a high cluster at the largest gap between consecutive
   sorted values (on a log scale). The runs are ``bimodal`` (``bimodal: true``, the two
   cluster means as ``modes``) when each cluster holds at least 2 runs, the gap is at least
   half of the whole log range and at least twice the log range inside either cluster, and
   *both* clusters have members among the first-half runs *and* among the second-half runs:
   the spread recurred instead of fading.
4. Otherwise, if the second half's spread is at most the square root of the first half's
   (its log-spread halved), the disturbance faded (warm-up, a co-tenant job ending):
   ``converging``. Else ``noisy`` (wide but without two recurring modes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

__all__ = [
    "DEFAULT_SPREAD_THRESHOLD",
    "SpreadVerdict",
    "percentile",
    "spread",
    "spread_verdict",
    "summarize",
]

#: Spread (max / min) above which repeated runs are not "the same" (on GPUs a quiet
#: node reran within 1.00-1.02x, runs generally within 1.02-1.09x).
DEFAULT_SPREAD_THRESHOLD = 1.10


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` by linear interpolation (type 7).

    Args:
        values: the sample (any units); need not be sorted.
        q: percentile in [0, 100].

    Returns:
        The interpolated value, in the units of ``values``.

    Raises:
        ValueError: empty sample, a NaN in it, or ``q`` outside [0, 100].
    """
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("percentile of an empty sample")
    if any(math.isnan(x) for x in xs):
        raise ValueError("percentile of a sample containing NaN")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], got {q!r}")
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def summarize(values: Iterable[float]) -> dict[str, float | int] | None:
    """``{"n", "mean", "min", "p50", "p90", "p99", "max"}`` of a sample, or None when empty.

    Units are those of the input.
    """
    xs = [float(v) for v in values]
    if not xs:
        return None
    return {
        "n": len(xs),
        "mean": sum(xs) / len(xs),
        "min": min(xs),
        "p50": percentile(xs, 50),
        "p90": percentile(xs, 90),
        "p99": percentile(xs, 99),
        "max": max(xs),
    }


def spread(values: Sequence[float]) -> float:
    """``max / min`` of positive values (dimensionless, >= 1); ``inf`` if the minimum is <= 0.

    Raises:
        ValueError: empty sequence.
    """
    if not values:
        raise ValueError("spread of an empty sample")
    lo, hi = min(values), max(values)
    if lo <= 0:
        return math.inf
    return hi / lo


@dataclass(frozen=True)
class SpreadVerdict:
    """The spread of repeated runs and what it means (see the module docstring).

    Attributes:
        verdict: ``single``, ``stable``, ``unsettled``, ``bimodal``, ``converging`` or ``noisy``.
        bimodal: True only for the ``bimodal`` verdict.
        n: number of runs.
        spread: max / min over all runs (dimensionless).
        spread_first_half: max / min over the first ``ceil(n/2)`` runs (None when n < 2).
        spread_second_half: max / min over the last ``ceil(n/2)`` runs (None when n < 2).
        spread_curve: spread over the first k runs, k = 1..n (docs/loadtests.md quotes it at
            k=5, 15).
        modes: the low and high cluster means when bimodal, else None.
        threshold: the spread threshold used.
    """

    verdict: str
    bimodal: bool
    n: int
    spread: float | None
    spread_first_half: float | None
    spread_second_half: float | None
    spread_curve: tuple[float, ...]
    modes: tuple[float, float] | None
    threshold: float

    def as_dict(self) -> dict[str, object]:
        """JSON-ready dict (tuples become lists, ``inf`` stays a float)."""
        d = asdict(self)
        d["spread_curve"] = list(self.spread_curve)
        d["modes"] = None if self.modes is None else list(self.modes)
        return d


def spread_verdict(values: Sequence[float], threshold: float = DEFAULT_SPREAD_THRESHOLD) -> SpreadVerdict:
    """Classify the spread of repeated runs (in run order) per the module docstring.

    Args:
        values: one positive value per run, in the order the runs were made.
        threshold: spread (max / min) at or below which the runs are ``stable``; > 1.

    Raises:
        ValueError: ``threshold <= 1``, or a value that is not a positive finite number.
    """
    if not threshold > 1.0:
        raise ValueError(f"threshold must be > 1, got {threshold!r}")
    xs = [float(v) for v in values]
    for v in xs:
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"run values must be positive finite numbers, got {v!r}")
    n = len(xs)
    curve = tuple(spread(xs[: k + 1]) for k in range(n))
    if n < 2:
        return SpreadVerdict("single", False, n, curve[0] if n else None, None, None, curve, None,
                             threshold)
    half = math.ceil(n / 2)
    first, second = xs[:half], xs[n - half:]
    s_all, s_first, s_second = spread(xs), spread(first), spread(second)

    def make(verdict: str, modes: tuple[float, float] | None = None) -> SpreadVerdict:
        return SpreadVerdict(verdict, verdict == "bimodal", n, s_all, s_first, s_second, curve,
                             modes, threshold)

    if s_all <= threshold:
        return make("stable")
    if n < 4:
        return make("unsettled")
    logs = sorted(math.log(v) for v in xs)
    gaps = [(logs[i + 1] - logs[i], i) for i in range(n - 1)]
    gap, at = max(gaps)
    cut = math.exp((logs[at] + logs[at + 1]) / 2)  # between the two clusters
    total = logs[-1] - logs[0]
    inside = max(logs[at] - logs[0], logs[-1] - logs[at + 1])
    if gap >= 0.5 * total and gap >= 2 * inside and 2 <= at + 1 <= n - 2:
        def both(run: list[float]) -> bool:
            return any(v < cut for v in run) and any(v > cut for v in run)

        if both(first) and both(second):
            low = [v for v in xs if v < cut]
            high = [v for v in xs if v > cut]
            return make("bimodal", (sum(low) / len(low), sum(high) / len(high)))
    if math.log(s_second) <= 0.5 * math.log(s_first):
        return make("converging")
    return make("noisy")
