"""drafters.acceptance (per-position statistics, implied speedup) and
spec_math.alpha_from_expected_tokens: exact values on hand-made cycles."""

from __future__ import annotations

import math

import pytest

from drafters import spec_math
from drafters.acceptance import (
    acceptance_from_counts,
    acceptance_from_histogram,
    implied_speedup,
)

# 10 cycles of gamma = 3: accepted 0 x2, 1 x3, 2 x1, 3 x4
COUNTS = [0, 1, 3, 3, 1, 0, 2, 3, 1, 3]


def test_counts_statistics_are_exact() -> None:
    s = acceptance_from_counts(COUNTS, 3)
    assert (s.cycles, s.tokens_emitted, s.accepted_histogram) == (10, 27, [2, 3, 1, 4])
    assert s.accept_length == pytest.approx(2.7, abs=1e-12)
    assert s.position_reach == pytest.approx([0.8, 0.5, 0.4], abs=1e-12)
    assert s.position_acceptance == pytest.approx([0.8, 5 / 8, 4 / 5], abs=1e-12)
    # tau = 1 + sum of the unconditional per-position acceptance; reach is non-increasing
    assert s.accept_length == pytest.approx(1 + sum(s.position_reach), abs=1e-12)
    assert all(a >= b for a, b in zip(s.position_reach, s.position_reach[1:], strict=False))
    assert spec_math.expected_tokens(s.alpha, 3) == pytest.approx(2.7, abs=1e-12)


def test_histogram_form_is_the_same_and_zero_padded() -> None:
    assert acceptance_from_histogram([2, 3, 1, 4], 3) == acceptance_from_counts(COUNTS, 3)
    short = acceptance_from_histogram([5, 5], 4)  # SGLang's histograms stop at the largest a
    assert short.accepted_histogram == [5, 5, 0, 0, 0]
    assert short.position_reach == [0.5, 0.0, 0.0, 0.0]
    assert short.position_acceptance == [0.5, 0.0, 0.0, 0.0]  # position 3 never reached
    assert acceptance_from_histogram([0, 0, 3, 0], 2).accept_length == 3.0


@pytest.mark.parametrize(
    ("hist", "gamma"),
    [([], 3), ([0, 0], 3), ([1, -1], 3), ([1, 0, 0, 0, 1], 3), ([1], 0), ([1], True)],
)
def test_histogram_rejects(hist: list[int], gamma: int) -> None:
    with pytest.raises(ValueError):
        acceptance_from_histogram(hist, gamma)


def test_counts_reject_out_of_range() -> None:
    with pytest.raises(ValueError, match="outside"):
        acceptance_from_counts([0, 4], 3)


@pytest.mark.parametrize("gamma", [1, 3, 7, 21])
@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.5, 0.748, 0.95, 0.999, 1.0])
def test_alpha_from_expected_tokens_inverts_expected_tokens(alpha: float, gamma: int) -> None:
    tau = spec_math.expected_tokens(alpha, gamma)
    assert spec_math.alpha_from_expected_tokens(tau, gamma) == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize(("tau", "gamma"), [(0.99, 3), (4.01, 3), (math.nan, 3), (2.0, 0), (True, 3)])
def test_alpha_from_expected_tokens_rejects(tau: float, gamma: int) -> None:
    with pytest.raises(ValueError):
        spec_math.alpha_from_expected_tokens(tau, gamma)


def test_implied_speedup_matches_spec_math_for_the_derived_alpha() -> None:
    tau, gamma, c = 2.727, 3, 0.05
    s = implied_speedup(tau, gamma, c)
    alpha = spec_math.alpha_from_expected_tokens(tau, gamma)
    assert s.alpha == alpha
    assert s.speedup_at_gamma == pytest.approx(tau / (c * gamma + 1), abs=1e-9)
    assert s.gamma_opt == spec_math.optimal_gamma(alpha, c)
    assert s.speedup_max == spec_math.speedup(alpha, s.gamma_opt, c)
    assert s.speedup_bound == spec_math.speedup_bound(alpha, c)
    assert len(s.table) == max(16, math.ceil(1.5 * s.gamma_opt))
    for row in s.table:
        assert row.speedup == spec_math.speedup(alpha, row.gamma, c)
        assert row.expected_tokens == spec_math.expected_tokens(alpha, row.gamma)
    assert max(r.speedup for r in s.table) == s.speedup_max


def test_implied_speedup_unbounded_cases_are_capped() -> None:
    s = implied_speedup(4.0, 3, 0.0)  # alpha = 1, c = 0: S grows without bound
    assert (s.alpha, s.gamma_opt, len(s.table), s.speedup_bound) == (1.0, 256, 384, math.inf)
    assert implied_speedup(2.0, 3, 0.05, gamma_max=5).table[-1].gamma == 5
