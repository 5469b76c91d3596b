"""Closed-form model of speculative decoding: tokens per cycle, speedup, optimum, break-even.

Symbols and units
-----------------
alpha   acceptance rate, dimensionless in [0, 1]: the probability that the target accepts one
        draft token, alpha = sum_u min(p(u), q(u)) = 1 - TV(p, q) for target distribution p and
        draft distribution q. A quoted alpha is an average over positions and contexts.
gamma   draft length, an integer >= 1: draft tokens proposed per cycle (one cycle = gamma draft
        steps + one target forward pass that scores gamma + 1 positions).
c       relative drafter cost, dimensionless >= 0: c = T_draft / (gamma * T_target), where
        T_draft is the wall time to draft all gamma tokens and T_target the wall time of one
        target forward pass (so drafting one token costs c target passes).
c_hat   drafter FLOP ratio, dimensionless >= 0: FLOPs of one draft step / FLOPs of one target
        token (used by the compute-cost ratio).
tau     tokens emitted by one cycle, an integer in [1, gamma + 1]: accepted drafts + 1 (the
        corrected token at the first rejection, or the bonus token when all are accepted).

Formulas (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding", arXiv:2211.17192, section 3)
-----------------------------------------------------------------------------
E[tau]      = (1 - alpha^(gamma+1)) / (1 - alpha)              (= gamma + 1 at alpha = 1)
S(gamma)    = E[tau] / (c * gamma + 1)                        wall-time speedup over plain decode
S          <= min(1 / c, 1 / (1 - alpha))                      (bounds over all gamma)
S(1)        = (1 + alpha) / (1 + c)                            a loss unless alpha > c
gamma*      solves alpha^(gamma+1) * (c - (c*gamma + 1) * ln alpha) = c  (d S / d gamma = 0);
            the left side minus c is strictly decreasing in gamma, so S is unimodal in gamma
            and the best integer is floor(gamma*) or ceil(gamma*).
break-even  the alpha at which S(gamma) = 1, i.e. 1 + alpha + ... + alpha^gamma = 1 + c*gamma.
inverse     alpha_from_expected_tokens: the alpha whose E[tau] equals a measured mean accepted
            length (exact only if acceptances are i.i.d. across positions; an average otherwise).
compute     (1 - alpha)(gamma * c_hat + gamma + 1) / (1 - alpha^(gamma+1)): expected FLOPs per
            emitted token relative to plain decoding; > 1 except at alpha = 1 with c_hat = 0.

Speculative speculative decoding (SSD; Kumar, Dao and May 2026, arXiv:2603.03251), times in units of one
target forward pass:
speedup_SSD = (p_hit E_hit + (1 - p_hit) E_miss) / (p_hit max(1, T_p) + (1 - p_hit)(1 + T_b))
and, against plain speculative decoding with E_SD tokens per cycle and draft time T_SD,
(1 + T_SD) (E_hit / E_SD) p_hit <= speedup_SSD / speedup_SD <= (1 + T_SD) (E_hit / E_SD).

Every function validates its inputs and raises ``ValueError`` with the offending name and value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "SpeedupRow",
    "alpha_from_expected_tokens",
    "break_even_alpha",
    "compute_cost_ratio",
    "expected_tokens",
    "optimal_gamma",
    "speedup",
    "speedup_bound",
    "speedup_table",
    "ssd_gain_bounds",
    "ssd_speedup",
]


# --------------------------------------------------------------------------- validation
# Every invalid input, wrong type included, raises ValueError: one error type for callers.
def _check_unit(name: str, value: float) -> float:
    """Return ``value`` as float if it is a number in [0, 1], else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")  # noqa: TRY004
    v = float(value)
    if not 0.0 <= v <= 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


def _check_nonneg(name: str, value: float) -> float:
    """Return ``value`` as float if it is a finite number >= 0, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")  # noqa: TRY004
    v = float(value)
    if not (v >= 0.0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def _check_gamma(value: int, name: str = "gamma") -> int:
    """Return ``value`` if it is an int >= 1 (bools rejected), else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")  # noqa: TRY004
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


# --------------------------------------------------------------------------- core formulas
def expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens emitted per cycle, E[tau] = (1 - alpha^(gamma+1)) / (1 - alpha).

    Args:
        alpha: acceptance rate in [0, 1].
        gamma: draft length, int >= 1.

    Returns:
        E[tau] in tokens per target forward pass, in [1, gamma + 1]; gamma + 1 at alpha = 1.

    Raises:
        ValueError: alpha outside [0, 1] or gamma not an int >= 1.
    """
    a = _check_unit("alpha", alpha)
    g = _check_gamma(gamma)
    if a == 1.0:
        return float(g + 1)
    if a == 0.0:
        return 1.0
    # (1 - a^(g+1)) / (1 - a) via expm1/log: no cancellation as a -> 1 (1 - a is exact there).
    return -math.expm1((g + 1) * math.log(a)) / (1.0 - a)


def speedup(alpha: float, gamma: int, c: float) -> float:
    """Wall-time speedup over plain decoding, S = E[tau] / (c * gamma + 1).

    Args:
        alpha: acceptance rate in [0, 1].
        gamma: draft length, int >= 1.
        c: relative drafter cost (draft time per token / target pass time), >= 0.

    Returns:
        S, dimensionless (> 1 is a gain, < 1 a loss).

    Raises:
        ValueError: on an invalid alpha, gamma or c.
    """
    e_tau = expected_tokens(alpha, gamma)
    cc = _check_nonneg("c", c)
    return e_tau / (cc * gamma + 1.0)


def speedup_bound(alpha: float, c: float) -> float:
    """Upper bound on S over every gamma: min(1 / c, 1 / (1 - alpha)).

    Returns ``math.inf`` when both c = 0 and alpha = 1 (no bound).

    Raises:
        ValueError: alpha outside [0, 1] or c < 0.
    """
    a = _check_unit("alpha", alpha)
    cc = _check_nonneg("c", c)
    by_cost = math.inf if cc == 0.0 else 1.0 / cc
    by_accept = math.inf if a == 1.0 else 1.0 / (1.0 - a)
    return min(by_cost, by_accept)


def _stationarity(alpha: float, c: float, gamma: float) -> float:
    """f(gamma) = alpha^(gamma+1) (c - (c gamma + 1) ln alpha) - c; strictly decreasing, root = gamma*."""
    return alpha ** (gamma + 1.0) * (c - (c * gamma + 1.0) * math.log(alpha)) - c


def _continuous_optimum(alpha: float, c: float) -> float:
    """Root gamma* >= 0 of the stationarity condition (0 when S already falls at gamma = 0).

    Only for 0 < alpha < 1 and c > 0, where the root exists and is unique. Bisection to 1e-9.
    """
    if _stationarity(alpha, c, 0.0) <= 0.0:
        return 0.0
    lo, hi = 0.0, 1.0
    while _stationarity(alpha, c, hi) > 0.0:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _stationarity(alpha, c, mid) > 0.0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return 0.5 * (lo + hi)


def optimal_gamma(alpha: float, c: float, gamma_max: int | None = None) -> int:
    """Best integer draft length: argmax over gamma in [1, gamma_max] of S(gamma).

    Solves the stationarity condition alpha^(gamma+1) (c - (c gamma + 1) ln alpha) = c for the
    continuous optimum gamma*, then compares floor(gamma*) and ceil(gamma*) (S is unimodal).
    Ties go to the smaller gamma (same speed, less compute).

    Args:
        alpha: acceptance rate in [0, 1].
        c: relative drafter cost >= 0.
        gamma_max: largest gamma allowed (int >= 1), or None for no cap.

    Returns:
        The optimal gamma, an int in [1, gamma_max].

    Raises:
        ValueError: invalid inputs, or S grows without bound in gamma (c = 0 with alpha > 0, or
            alpha = 1 with c < 1) and no gamma_max was given.
    """
    a = _check_unit("alpha", alpha)
    cc = _check_nonneg("c", c)
    cap = None if gamma_max is None else _check_gamma(gamma_max, "gamma_max")

    if a == 0.0:  # E[tau] = 1 for every gamma: drafting only costs
        return 1
    unbounded = (cc == 0.0) or (a == 1.0 and cc < 1.0)
    if unbounded:
        if cap is None:
            raise ValueError(
                f"S(gamma) increases without bound for alpha={alpha!r}, c={c!r}; pass gamma_max"
            )
        return cap
    if a == 1.0:  # c >= 1: S = (gamma + 1) / (c gamma + 1) is non-increasing
        return 1

    g_star = _continuous_optimum(a, cc)
    lo = max(1, math.floor(g_star))
    hi = max(1, math.ceil(g_star))
    if cap is not None:
        lo, hi = min(lo, cap), min(hi, cap)
    return lo if speedup(a, lo, cc) >= speedup(a, hi, cc) else hi


def break_even_alpha(c: float, gamma: int) -> float:
    """Acceptance rate at which speculation exactly pays for itself, S(gamma) = 1.

    Solves 1 + alpha + ... + alpha^gamma = 1 + c * gamma for alpha in [0, 1] (the left side is
    strictly increasing in alpha). At gamma = 1 the answer is alpha = c.

    Args:
        c: relative drafter cost, in [0, 1].
        gamma: draft length, int >= 1.

    Returns:
        alpha_break in [0, 1]; S > 1 exactly when alpha > alpha_break.

    Raises:
        ValueError: invalid inputs, or c > 1 (then S < 1 for every alpha: no break-even).
    """
    cc = _check_nonneg("c", c)
    g = _check_gamma(gamma)
    if cc > 1.0:
        raise ValueError(f"c={c!r} > 1: S(gamma) < 1 for every alpha, there is no break-even")
    if cc == 1.0:  # 1 + a + ... + a^g = 1 + g only at a = 1
        return 1.0
    target = 1.0 + cc * g
    return _invert_expected_tokens(target, g)


def _invert_expected_tokens(tokens: float, g: int) -> float:
    """alpha in [0, 1] with E[tau](alpha, g) = tokens, by bisection to 1e-15 (E[tau] is
    strictly increasing in alpha); ``tokens`` must lie in [1, g + 1]."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if expected_tokens(mid, g) < tokens:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return 0.5 * (lo + hi)


def alpha_from_expected_tokens(tokens: float, gamma: int) -> float:
    """The acceptance rate alpha whose E[tau](alpha, gamma) equals ``tokens`` (the inverse of
    :func:`expected_tokens` in alpha; a measured mean accepted length -> the i.i.d. alpha).

    Args:
        tokens: tokens per cycle (accepted drafts + 1), in [1, gamma + 1].
        gamma: draft length, int >= 1.

    Returns:
        alpha in [0, 1]: 0 at tokens = 1, 1 at tokens = gamma + 1; bisection to 1e-15 on the
        strictly increasing E[tau].

    Raises:
        ValueError: gamma not an int >= 1, or tokens not a number in [1, gamma + 1].
    """
    g = _check_gamma(gamma)
    if isinstance(tokens, bool) or not isinstance(tokens, (int, float)):
        raise ValueError(f"tokens must be a number in [1, {g + 1}], got {tokens!r}")  # noqa: TRY004
    t = float(tokens)
    if not 1.0 <= t <= g + 1.0:  # also rejects NaN
        raise ValueError(f"tokens must be in [1, {g + 1}] for gamma={g}, got {tokens!r}")
    if t == 1.0:
        return 0.0
    if t == g + 1.0:
        return 1.0
    return _invert_expected_tokens(t, g)


def compute_cost_ratio(alpha: float, gamma: int, c_hat: float) -> float:
    """Expected FLOPs per emitted token, speculative over plain decoding.

    ratio = (1 - alpha)(gamma * c_hat + gamma + 1) / (1 - alpha^(gamma+1))
          = (gamma * c_hat + gamma + 1) / E[tau]

    (each cycle runs gamma draft steps at c_hat each and scores gamma + 1 target positions).
    It is > 1 unless alpha = 1 and c_hat = 0: speculation buys latency with extra compute.

    Args:
        alpha: acceptance rate in [0, 1].
        gamma: draft length, int >= 1.
        c_hat: drafter FLOP ratio per token, >= 0.

    Raises:
        ValueError: on invalid inputs.
    """
    e_tau = expected_tokens(alpha, gamma)
    ch = _check_nonneg("c_hat", c_hat)
    return (gamma * ch + gamma + 1.0) / e_tau


@dataclass(frozen=True)
class SpeedupRow:
    """One row of a speedup table: draft length, E[tau] (tokens/cycle), S (dimensionless)."""

    gamma: int
    expected_tokens: float
    speedup: float


def speedup_table(alpha: float, c: float, gamma_max: int) -> list[SpeedupRow]:
    """S(gamma) and E[tau] for gamma = 1 .. gamma_max.

    Raises:
        ValueError: on invalid inputs.
    """
    g_max = _check_gamma(gamma_max, "gamma_max")
    return [
        SpeedupRow(g, expected_tokens(alpha, g), speedup(alpha, g, c)) for g in range(1, g_max + 1)
    ]


# ----------------------------------------------------------------- SSD (arXiv:2603.03251)
def ssd_speedup(
    p_hit: float, e_hit: float, e_miss: float, t_primary: float, t_backup: float
) -> float:
    """Expected speedup of speculative speculative decoding (arXiv:2603.03251).

    speedup_SSD = (p_hit E_hit + (1 - p_hit) E_miss) / (p_hit max(1, T_p) + (1 - p_hit)(1 + T_b))

    On a hit the pre-drafted block (primary speculator, time T_p, overlapped with verification)
    is sent at once; on a miss the backup speculator drafts afresh (time T_b, not overlapped).

    Args:
        p_hit: probability that the speculator predicted the verification outcome, in [0, 1].
        e_hit: expected tokens per cycle on a hit (primary speculator), >= 0.
        e_miss: expected tokens per cycle on a miss (backup speculator), >= 0.
        t_primary: primary speculator time T_p, in target forward passes, >= 0.
        t_backup: backup speculator time T_b, in target forward passes, >= 0.

    Returns:
        Speedup over plain decoding, dimensionless.

    Raises:
        ValueError: on invalid inputs.
    """
    p = _check_unit("p_hit", p_hit)
    eh = _check_nonneg("e_hit", e_hit)
    em = _check_nonneg("e_miss", e_miss)
    tp = _check_nonneg("t_primary", t_primary)
    tb = _check_nonneg("t_backup", t_backup)
    return (p * eh + (1.0 - p) * em) / (p * max(1.0, tp) + (1.0 - p) * (1.0 + tb))


def ssd_gain_bounds(p_hit: float, e_hit: float, e_sd: float, t_sd: float) -> tuple[float, float]:
    """Bounds on speedup_SSD / speedup_SD (arXiv:2603.03251).

    (1 + T_SD)(E_hit / E_SD) p_hit <= speedup_SSD / speedup_SD <= (1 + T_SD)(E_hit / E_SD)

    Args:
        p_hit: hit probability in [0, 1].
        e_hit: expected tokens per cycle on a hit, >= 0.
        e_sd: expected tokens per cycle of plain speculative decoding, > 0.
        t_sd: draft time of plain speculative decoding, in target forward passes, >= 0.

    Returns:
        (lower, upper).

    Raises:
        ValueError: on invalid inputs (including e_sd = 0).
    """
    p = _check_unit("p_hit", p_hit)
    eh = _check_nonneg("e_hit", e_hit)
    es = _check_nonneg("e_sd", e_sd)
    ts = _check_nonneg("t_sd", t_sd)
    if es == 0.0:
        raise ValueError("e_sd must be > 0")
    upper = (1.0 + ts) * eh / es
    return upper * p, upper
