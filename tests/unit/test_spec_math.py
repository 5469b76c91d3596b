"""Speculative-decoding math (drafters.spec_math) and the ``specgate spec-math`` command.

Reference figures (from the formulas of Leviathan et al. 2023, arXiv:2211.17192):
alpha 0.8, c 0.05 -> S_max ~ 3.1, every gamma in 6..11 within 3% of it;
alpha 0.95, c 0.05 -> S_max ~ 6.6 at gamma* ~ 21; gamma 1 -> (1 + alpha) / (1 + c).
"""

from __future__ import annotations

import itertools
import json
import math

import pytest

from drafters import spec_math as sm
from router.cli import main

ALPHAS = [0.0, 0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]
COSTS = [0.001, 0.01, 0.05, 0.1, 0.3, 0.7]


# --------------------------------------------------------------------------- E[tau], S
@pytest.mark.parametrize(
    ("alpha", "gamma", "expected"),
    [
        (0.0, 1, 1.0),
        (0.0, 7, 1.0),
        (1.0, 1, 2.0),
        (1.0, 7, 8.0),
        (0.5, 1, 1.5),
        (0.5, 3, 1.875),  # 1 + .5 + .25 + .125
        (0.8, 4, 3.3616),  # 1 + .8 + .64 + .512 + .4096
    ],
)
def test_expected_tokens_exact(alpha: float, gamma: int, expected: float) -> None:
    assert sm.expected_tokens(alpha, gamma) == pytest.approx(expected, rel=1e-12)


def test_expected_tokens_continuous_at_alpha_one() -> None:
    assert sm.expected_tokens(1 - 1e-9, 10) == pytest.approx(11.0, rel=1e-6)


def test_published_alpha_08() -> None:
    c = 0.05
    g_opt = sm.optimal_gamma(0.8, c)
    s_max = sm.speedup(0.8, g_opt, c)
    assert g_opt == 8
    assert s_max == pytest.approx(3.1, abs=0.05)
    assert s_max == pytest.approx(3.0920795428571433, rel=1e-12)
    # Flat peak: every gamma in 6..11 is within 3% of the maximum, 5 and 12 are not.
    for g in range(6, 12):
        assert sm.speedup(0.8, g, c) >= 0.97 * s_max, g
    assert sm.speedup(0.8, 5, c) < 0.97 * s_max
    assert sm.speedup(0.8, 12, c) < 0.97 * s_max


def test_published_alpha_095() -> None:
    g_opt = sm.optimal_gamma(0.95, 0.05)
    assert g_opt == 21
    assert sm.speedup(0.95, g_opt, 0.05) == pytest.approx(6.6, abs=0.01)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("c", [0.0, *COSTS])
def test_gamma_one_closed_form(alpha: float, c: float) -> None:
    assert sm.speedup(alpha, 1, c) == pytest.approx((1 + alpha) / (1 + c), rel=1e-12)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("c", COSTS)
def test_speedup_never_exceeds_bound(alpha: float, c: float) -> None:
    bound = sm.speedup_bound(alpha, c)
    assert bound == min(1 / c, math.inf if alpha == 1 else 1 / (1 - alpha))
    assert all(sm.speedup(alpha, g, c) <= bound for g in range(1, 200))


def test_bound_is_approached() -> None:
    # c -> 0 with large gamma approaches 1 / (1 - alpha); alpha -> 1 approaches 1 / c (gamma big).
    assert sm.speedup(0.5, 60, 1e-9) == pytest.approx(2.0, rel=1e-6)
    assert sm.speedup_bound(1.0, 0.0) == math.inf


# --------------------------------------------------------------------------- optimum
@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("c", COSTS)
def test_optimal_gamma_is_the_brute_force_argmax(alpha: float, c: float) -> None:
    grid = range(1, 2001)
    speeds = [sm.speedup(alpha, g, c) for g in grid]
    best = max(speeds)
    brute = next(g for g, s in zip(grid, speeds, strict=True) if s == best)
    assert sm.optimal_gamma(alpha, c) == brute


@pytest.mark.parametrize(("alpha", "c"), [(0.8, 0.05), (0.95, 0.05), (0.6, 0.01), (0.9, 0.2)])
def test_continuous_optimum_solves_stationarity(alpha: float, c: float) -> None:
    g = sm._continuous_optimum(alpha, c)
    lhs = alpha ** (g + 1) * (c - (c * g + 1) * math.log(alpha))
    assert lhs == pytest.approx(c, rel=1e-7)
    # and is a maximum of the continuous S
    s = lambda x: (1 - alpha ** (x + 1)) / (1 - alpha) / (c * x + 1)
    assert s(g) >= s(g - 0.01) and s(g) >= s(g + 0.01)


def test_optimal_gamma_unimodal_and_capped() -> None:
    speeds = [sm.speedup(0.95, g, 0.05) for g in range(1, 100)]
    peak = speeds.index(max(speeds))
    assert all(a < b for a, b in itertools.pairwise(speeds[: peak + 1]))
    assert all(a > b for a, b in itertools.pairwise(speeds[peak:]))
    assert sm.optimal_gamma(0.95, 0.05, gamma_max=10) == 10
    assert sm.optimal_gamma(0.95, 0.05, gamma_max=40) == 21


@pytest.mark.parametrize(
    ("alpha", "c", "gamma_max", "expected"),
    [
        (0.0, 0.05, None, 1),  # nothing is ever accepted
        (0.3, 0.5, None, 1),  # S falls from gamma = 0 on
        (1.0, 1.0, None, 1),  # S = 1 for every gamma: take the cheapest
        (1.0, 2.0, None, 1),
        (1.0, 0.05, 12, 12),  # unbounded: the cap wins
        (0.9, 0.0, 30, 30),
    ],
)
def test_optimal_gamma_edges(alpha: float, c: float, gamma_max: int | None, expected: int) -> None:
    assert sm.optimal_gamma(alpha, c, gamma_max) == expected


@pytest.mark.parametrize(("alpha", "c"), [(1.0, 0.05), (0.9, 0.0)])
def test_optimal_gamma_unbounded_needs_cap(alpha: float, c: float) -> None:
    with pytest.raises(ValueError, match="without bound"):
        sm.optimal_gamma(alpha, c)


# --------------------------------------------------------------------------- break-even
@pytest.mark.parametrize("c", [0.0, 0.05, 0.2, 0.5, 1.0])
def test_break_even_gamma_one_is_c(c: float) -> None:
    assert sm.break_even_alpha(c, 1) == pytest.approx(c, abs=1e-12)


@pytest.mark.parametrize("c", [0.01, 0.05, 0.1, 0.3])
@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8, 16])
def test_break_even_is_where_speedup_crosses_one(c: float, gamma: int) -> None:
    a = sm.break_even_alpha(c, gamma)
    assert sm.speedup(a, gamma, c) == pytest.approx(1.0, abs=1e-12)
    assert sm.speedup(a + 1e-6, gamma, c) > 1.0
    assert sm.speedup(max(0.0, a - 1e-6), gamma, c) < 1.0


def test_break_even_known_value() -> None:
    # c = 0.05, gamma = 4: 1 + a + a^2 + a^3 + a^4 = 1.2  ->  a = 0.16677418...
    a = sm.break_even_alpha(0.05, 4)
    assert a + a**2 + a**3 + a**4 == pytest.approx(0.2, abs=1e-12)
    assert a == pytest.approx(0.1667741801, abs=1e-9)


def test_break_even_impossible_when_drafting_costs_more_than_target() -> None:
    with pytest.raises(ValueError, match="no break-even"):
        sm.break_even_alpha(1.5, 3)


# --------------------------------------------------------------------------- compute ratio
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95, 0.999])
@pytest.mark.parametrize("gamma", [1, 3, 5, 8])
@pytest.mark.parametrize("c_hat", [0.0, 0.02, 0.2])
def test_compute_ratio_exceeds_one(alpha: float, gamma: int, c_hat: float) -> None:
    ratio = sm.compute_cost_ratio(alpha, gamma, c_hat)
    expected = (1 - alpha) * (gamma * c_hat + gamma + 1) / (1 - alpha ** (gamma + 1))
    assert ratio == pytest.approx(expected, rel=1e-12)
    assert ratio > 1.0


def test_compute_ratio_values() -> None:
    assert sm.compute_cost_ratio(0.8, 4, 0.05) == pytest.approx(5.2 / 3.3616, rel=1e-12)
    assert sm.compute_cost_ratio(1.0, 4, 0.0) == 1.0  # the only break-even point
    assert sm.compute_cost_ratio(1.0, 4, 0.1) == pytest.approx(5.4 / 5, rel=1e-12)


# --------------------------------------------------------------------------- SSD
def test_ssd_speedup_limits_and_value() -> None:
    # p_hit = 0: every cycle waits for the backup drafter.
    assert sm.ssd_speedup(0.0, 5.0, 3.0, 0.5, 0.2) == pytest.approx(3.0 / 1.2)
    # p_hit = 1: drafting hides behind verification while T_p <= 1.
    assert sm.ssd_speedup(1.0, 5.0, 3.0, 0.5, 0.2) == pytest.approx(5.0)
    assert sm.ssd_speedup(1.0, 5.0, 3.0, 2.0, 0.2) == pytest.approx(2.5)
    assert sm.ssd_speedup(0.6, 4.0, 2.5, 0.8, 0.3) == pytest.approx(
        (0.6 * 4.0 + 0.4 * 2.5) / (0.6 * 1.0 + 0.4 * 1.3), rel=1e-12
    )


def test_ssd_gain_bounds() -> None:
    lo, hi = sm.ssd_gain_bounds(0.7, 4.0, 3.2, 0.25)
    assert hi == pytest.approx(1.25 * 4.0 / 3.2)
    assert lo == pytest.approx(0.7 * hi)
    with pytest.raises(ValueError, match="e_sd"):
        sm.ssd_gain_bounds(0.7, 4.0, 0.0, 0.25)


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: sm.expected_tokens(1.01, 3), "alpha must be in"),
        (lambda: sm.expected_tokens(-0.1, 3), "alpha must be in"),
        (lambda: sm.expected_tokens(float("nan"), 3), "alpha must be in"),
        (lambda: sm.expected_tokens("0.5", 3), "alpha must be a number"),
        (lambda: sm.expected_tokens(0.5, 0), "gamma must be an integer >= 1"),
        (lambda: sm.expected_tokens(0.5, 2.0), "gamma must be an integer >= 1"),
        (lambda: sm.expected_tokens(0.5, True), "gamma must be an integer >= 1"),
        (lambda: sm.speedup(0.5, 3, -0.01), "c must be a finite number >= 0"),
        (lambda: sm.speedup(0.5, 3, math.inf), "c must be a finite number >= 0"),
        (lambda: sm.optimal_gamma(0.5, 0.1, 0), "gamma_max must be an integer >= 1"),
        (lambda: sm.compute_cost_ratio(0.5, 3, -1), "c_hat must be"),
        (lambda: sm.ssd_speedup(1.5, 1, 1, 1, 1), "p_hit must be in"),
        (lambda: sm.ssd_speedup(0.5, 1, 1, -1, 1), "t_primary must be"),
        (lambda: sm.speedup_table(0.5, 0.1, 0), "gamma_max must be"),
    ],
)
def test_invalid_input_raises_value_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


# --------------------------------------------------------------------------- CLI
def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec-math", "--alpha", "0.8", "--c", "0.05", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"gamma_opt", "speedup_max", "table"}
    assert doc["gamma_opt"] == 8
    assert doc["speedup_max"] == pytest.approx(3.0920795428571433, rel=1e-12)
    assert [row["gamma"] for row in doc["table"]] == list(range(1, 17))
    for row in doc["table"]:
        assert set(row) == {"gamma", "expected_tokens", "speedup"}
        assert isinstance(row["gamma"], int)
        assert row["expected_tokens"] == pytest.approx(sm.expected_tokens(0.8, row["gamma"]))
        assert row["speedup"] == pytest.approx(sm.speedup(0.8, row["gamma"], 0.05))


def test_cli_json_gamma_max(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec-math", "--alpha", "0.95", "--c", "0.05", "--gamma-max", "30", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gamma_opt"] == 21
    assert len(doc["table"]) == 30
    assert round(doc["speedup_max"], 1) == 6.6


def test_cli_default_table_covers_the_optimum(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec-math", "--alpha", "0.95", "--c", "0.05", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["table"]) == 32  # ceil(1.5 * 21)
    assert max(r["speedup"] for r in doc["table"]) == doc["speedup_max"]


def test_cli_plain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec-math", "--alpha", "0.8", "--c", "0.05", "--gamma-max", "12"]) == 0
    out = capsys.readouterr().out
    assert "    8     4.329    3.092x  <- optimum" in out
    assert "   12     4.725    2.953x" in out
    assert out.rstrip().endswith(
        "optimum: gamma=8  speedup=3.092x  (bound min(1/c, 1/(1-alpha)) = 5.000x)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--alpha", "1.2", "--c", "0.05"], "alpha must be in [0, 1]"),
        (["--alpha", "0.8", "--c", "-1"], "c must be a finite number >= 0"),
        (["--alpha", "1", "--c", "0.05"], "pass gamma_max"),
        (["--alpha", "0.8", "--c", "0.05", "--gamma-max", "0"], "gamma_max must be"),
    ],
)
def test_cli_invalid(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec-math", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
