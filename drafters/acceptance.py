"""Acceptance statistics of speculative decoding from per-cycle accepted-draft counts (pure).

One verify cycle drafts ``gamma`` tokens and accepts a prefix of ``a`` of them, a in
[0, gamma], then emits ``a + 1`` tokens (the accepted drafts plus the correction or bonus
token; Leviathan et al. 2023, arXiv:2211.17192). From the cycles' ``a`` values, or from their
histogram ``h[a]`` (the form SGLang reports per request as ``meta_info.
spec_correct_drafts_histogram``), this module computes:

``accept_length``        tau = mean(a + 1), tokens per cycle, in [1, gamma + 1] (SGLang's
                         ``spec_accept_length`` / ``avg_spec_accept_length``).
``position_reach[k]``    P(a > k): draft token k + 1 accepted (unconditional), k = 0..gamma-1;
                         non-increasing in k, and ``1 + sum(position_reach) == accept_length``
                         (E[a] = sum_k P(a > k)).
``position_acceptance[k]`` P(a > k | a >= k): token k + 1 accepted given tokens 1..k were
                         (conditional; 0 when no cycle reached position k + 1).
``alpha``                the i.i.d. acceptance rate with E[tau](alpha, gamma) = tau
                         (:func:`drafters.spec_math.alpha_from_expected_tokens`).

and, with a relative drafter cost ``c`` (draft time per token / target pass time), the speedup
S(g) = E[tau](alpha, g) / (c g + 1) that this alpha implies for every draft length g
(:func:`drafters.spec_math.speedup`), its optimum and its value at the measured gamma. The
extrapolation to g != gamma assumes i.i.d. acceptance; the value at g = gamma does not:
S(gamma) = tau / (c gamma + 1) exactly.

Standard library and :mod:`drafters.spec_math` only (no torch), so the ``specgate`` CLI can
import it eagerly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from drafters import spec_math

__all__ = [
    "AcceptanceStats",
    "ImpliedSpeedup",
    "acceptance_from_counts",
    "acceptance_from_histogram",
    "implied_speedup",
]


@dataclass(frozen=True)
class AcceptanceStats:
    """Acceptance of ``cycles`` verify cycles of ``gamma`` drafts (see the module docstring).

    ``accepted_histogram`` has ``gamma + 1`` entries (cycles with a = 0..gamma accepted);
    ``tokens_emitted`` = sum(a + 1). Floats are unrounded.
    """

    gamma: int
    cycles: int
    tokens_emitted: int
    accept_length: float
    alpha: float
    position_acceptance: list[float]
    position_reach: list[float]
    accepted_histogram: list[int]


@dataclass(frozen=True)
class ImpliedSpeedup:
    """S(g) = E[tau](alpha, g) / (c g + 1) for g = 1..len(table); ``gamma`` is the measured one.

    ``table[g - 1]`` = (E[tau], S) at draft length g; ``gamma_opt`` maximises S
    (:func:`drafters.spec_math.optimal_gamma`); ``speedup_bound`` = min(1/c, 1/(1-alpha)).
    """

    alpha: float
    c: float
    gamma: int
    speedup_at_gamma: float
    gamma_opt: int
    speedup_max: float
    speedup_bound: float
    table: list[spec_math.SpeedupRow]


def acceptance_from_histogram(histogram: Sequence[int], gamma: int) -> AcceptanceStats:
    """Statistics from ``histogram[a]`` = cycles that accepted ``a`` drafts.

    Args:
        histogram: non-negative counts; shorter than ``gamma + 1`` is zero-padded (SGLang's
            per-request histograms stop at the largest ``a`` seen).
        gamma: drafts per cycle, int >= 1.

    Raises:
        ValueError: gamma < 1, a negative count, a non-zero count at ``a > gamma``, or no
            cycle at all.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
    hist = [int(h) for h in histogram]
    if any(h < 0 for h in hist):
        raise ValueError(f"histogram counts must be >= 0, got {hist}")
    if any(hist[gamma + 1 :]):
        raise ValueError(f"histogram has cycles with more than gamma={gamma} accepted: {hist}")
    hist = (hist + [0] * (gamma + 1))[: gamma + 1]
    cycles = sum(hist)
    if cycles == 0:
        raise ValueError("no verify cycle to measure")
    tokens = sum((a + 1) * h for a, h in enumerate(hist))
    tau = tokens / cycles
    at_least = [sum(hist[k:]) for k in range(gamma + 1)]  # cycles with a >= k
    reach = [at_least[k + 1] / cycles for k in range(gamma)]
    cond = [at_least[k + 1] / at_least[k] if at_least[k] else 0.0 for k in range(gamma)]
    return AcceptanceStats(
        gamma=gamma,
        cycles=cycles,
        tokens_emitted=tokens,
        accept_length=tau,
        alpha=spec_math.alpha_from_expected_tokens(tau, gamma),
        position_acceptance=cond,
        position_reach=reach,
        accepted_histogram=hist,
    )


def acceptance_from_counts(counts: Sequence[int], gamma: int) -> AcceptanceStats:
    """Statistics from per-cycle accepted-draft counts (each in [0, gamma]).

    Raises:
        ValueError: as :func:`acceptance_from_histogram`, or a count outside [0, gamma].
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
    hist = [0] * (gamma + 1)
    for a in counts:
        if not 0 <= a <= gamma:
            raise ValueError(f"accepted count {a!r} outside [0, {gamma}]")
        hist[a] += 1
    return acceptance_from_histogram(hist, gamma)


def implied_speedup(
    accept_length: float, gamma: int, c: float, gamma_max: int | None = None
) -> ImpliedSpeedup:
    """The S(g) curve implied by a measured mean accepted length at draft length ``gamma``.

    Args:
        accept_length: measured tau at ``gamma``, in [1, gamma + 1].
        gamma: the draft length it was measured at.
        c: relative drafter cost, >= 0.
        gamma_max: last g of the table (default max(16, gamma, ceil(1.5 * gamma_opt)),
            with gamma_opt searched up to 256 when S grows without bound).

    Raises:
        ValueError: invalid inputs (see :mod:`drafters.spec_math`).
    """
    alpha = spec_math.alpha_from_expected_tokens(accept_length, gamma)
    cap = 256 if gamma_max is None else gamma_max
    gamma_opt = spec_math.optimal_gamma(alpha, c, cap)
    if gamma_max is None:
        gamma_max = max(16, gamma, math.ceil(1.5 * gamma_opt))
    table = spec_math.speedup_table(alpha, c, gamma_max)
    return ImpliedSpeedup(
        alpha=alpha,
        c=float(c),
        gamma=gamma,
        speedup_at_gamma=spec_math.speedup(alpha, gamma, c),
        gamma_opt=gamma_opt,
        speedup_max=spec_math.speedup(alpha, gamma_opt, c),
        speedup_bound=spec_math.speedup_bound(alpha, c),
        table=table,
    )
