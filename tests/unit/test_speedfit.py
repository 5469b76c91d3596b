"""The speed-model fit (loadtests/speedfit.py) on an engine whose time per token grows with load
times context, as the demo's SGLang CPU pools measure (each decode step reads every running
sequence's KV; long prompts joining are prefilled between steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadtests.simulate import SimModel, simulate_report
from loadtests.speedfit import fit_speed_model, noise_weight, speed_blocks
from loadtests.workload import parse_buckets

T0, KNEE, ATTN, K = 0.004, 1.0, 2e-6, 1e-5  # s, sequences, s per context token, s per (sequence x token)


def _report() -> dict:
    """The demo grid (100-300 and 1000-1400 tokens x loads 1, 4, 12) of the speed model, with
    ``K * b * L`` added to every plain point's time per token."""
    m = SimModel(t0_s=T0, batch_knee=KNEE, attn_s_per_token=ATTN, prefill_s_per_token=2e-4, alpha_short=0.7,
                 alpha_knee_tokens=200, alpha_drop_per_doubling=0.0, gamma=3, c=0.5)
    report = simulate_report(m, parse_buckets("100-300,1000-1400"), [1, 4, 12], repetitions=1, output_tokens=32)
    for p in report["points"]:
        t = p["targets"]["plain"]
        t["tpot_s"]["p50"] += K * p["load"] * t["prompt_tokens"]["p50"]
    return report


def _plain_points(report: dict) -> list[tuple[float, float, float]]:
    return [(p["load"], p["targets"]["plain"]["prompt_tokens"]["p50"], p["targets"]["plain"]["tpot_s"]["p50"])
            for p in report["points"]]


def test_one_joint_least_squares_makes_the_knee_degenerate_there() -> None:
    # the cause: t0 + slope * b + attn * L over every point puts the long, loaded points' growth
    # into the slope and the intercept t0 below zero (a knee t0 / slope of no sequence at all)
    pts = _plain_points(_report())
    x = np.array([[1.0, b, length] for b, length, _ in pts])
    (t0, slope, _attn), *_ = np.linalg.lstsq(x, np.array([t for *_, t in pts]), rcond=None)
    assert t0 < 0 and t0 / slope < 0.1


def test_the_fit_takes_each_term_where_it_dominates() -> None:
    report = _report()
    short = {length for b, length, _ in _plain_points(report) if length < 1000}
    assert len(short) == 1
    ls = short.pop()
    fit = fit_speed_model(report)
    plain = fit["pools"]["plain"]
    # attention from load 1 across lengths: ATTN + K; t0 and the slope from the shortest bucket
    # after that attention: t0 = T0 - K * Ls, slope = T0 / KNEE + K * Ls
    assert plain["attn_s_per_token"] == pytest.approx(ATTN + K, rel=1e-3)
    assert plain["t0_s"] == pytest.approx(T0 - K * ls, rel=1e-3)
    assert plain["batch_knee"] == pytest.approx((T0 - K * ls) / (T0 / KNEE + K * ls), rel=1e-3)
    assert 0.3 < plain["batch_knee"] < KNEE
    misfit = [w for w in fit["warnings"] if w.startswith("plain: at ")]
    assert [w.split(" the time")[0] for w in misfit] == ["plain: at 1000-1400 x 4", "plain: at 1000-1400 x 12"]
    assert "2.30x the fitted model's" in misfit[1]
    blocks = speed_blocks(fit)
    assert blocks["plain"]["batch_knee"] == plain["batch_knee"]
    # the speculative pool runs the same target on the same hardware: its t0 and knee are the plain
    # pool's, its own cost is the drafter's c
    assert (blocks["spec"]["decode_s_per_token"], blocks["spec"]["batch_knee"]) == (plain["t0_s"], plain["batch_knee"])


def test_a_model_without_the_product_is_recovered_exactly() -> None:
    m = SimModel(t0_s=T0, batch_knee=KNEE, attn_s_per_token=ATTN, prefill_s_per_token=2e-4, alpha_short=0.7,
                 alpha_knee_tokens=200, alpha_drop_per_doubling=0.0, gamma=3, c=0.5)
    report = simulate_report(m, parse_buckets("100-300,1000-1400"), [1, 4, 12], repetitions=1, output_tokens=32)
    fit = fit_speed_model(report)
    plain = fit["pools"]["plain"]
    assert (plain["t0_s"], plain["batch_knee"], plain["attn_s_per_token"]) == pytest.approx((T0, KNEE, ATTN), rel=1e-3)
    assert not [w for w in fit["warnings"] if w.startswith("plain: at ")]
    assert fit["residual_s"]["plain"] == pytest.approx(0.0, abs=1e-5)


#: The demo grid's plain points whose runs disagree: ``(verdict, spread, factor on the exact tpot)``.
#: Load 1 stays exact and ``single``: the batch slope is in the noisy points alone.
NOISY = {("100-300", 4): ("unsettled", 1.15, 1.03), ("100-300", 12): ("noisy", 1.6, 0.90),
         ("1000-1400", 4): ("unsettled", 1.2, 1.0), ("1000-1400", 12): ("unsettled", 1.2, 1.0)}


def _noisy_report(marks: dict = NOISY) -> dict:
    m = SimModel(t0_s=T0, batch_knee=KNEE, attn_s_per_token=ATTN, prefill_s_per_token=2e-4, alpha_short=0.7,
                 alpha_knee_tokens=200, alpha_drop_per_doubling=0.0, gamma=3, c=0.5)
    report = simulate_report(m, parse_buckets("100-300,1000-1400"), [1, 4, 12], repetitions=1, output_tokens=32)
    for p in report["points"]:
        mark = marks.get((p["bucket"], int(p["load"])))
        if mark:
            t = p["targets"]["plain"]
            t["spread"].update(verdict=mark[0], spread=mark[1], n=3)
            t["tpot_s"]["p50"] *= mark[2]
    return report


def test_noise_weight_is_inverse_log_spread_squared_floored_at_the_threshold() -> None:
    assert [noise_weight(v, s, 1.1) for v, s in (("stable", 1.05), ("single", None), ("converging", 1.5),
                                                (None, None), ("unsettled", 1.08))] == [1.0] * 5
    assert noise_weight("unsettled", 1.2, 1.1) == pytest.approx((math.log(1.1) / math.log(1.2)) ** 2)
    assert round(noise_weight("noisy", 1.78, 1.1), 4) == 0.0273  # type: ignore[arg-type]
    assert [noise_weight(v, s, 1.1) for v, s in (("bimodal", 1.5), ("noisy", math.inf), ("unsettled", None))] == \
        [None, None, None]


def test_noisy_points_alone_carry_the_batch_slope_and_the_weighted_fit_recovers_it() -> None:
    report = _noisy_report()
    fit = fit_speed_model(report)
    plain = fit["pools"]["plain"]
    short = [p for p in fit["points"]["plain"] if p["bucket"] == "100-300"]
    # attention from the exact load-1 points; t0 and the slope by weighted least squares over the
    # short bucket's loads 1, 4, 12 with weights 1, (ln 1.1 / ln 1.15)^2, (ln 1.1 / ln 1.6)^2
    assert plain["attn_s_per_token"] == pytest.approx(ATTN, rel=1e-3)
    w = np.array([1.0, (math.log(1.1) / math.log(1.15)) ** 2, (math.log(1.1) / math.log(1.6)) ** 2])
    assert [p["weight"] for p in short] == pytest.approx(w.tolist())
    b = np.array([p["b"] for p in short])
    y = np.array([p["tpot"] - plain["attn_s_per_token"] * p["L"] for p in short])
    x = np.column_stack([np.ones(3), b])
    t0, slope = np.linalg.solve(x.T @ (w[:, None] * x), x.T @ (w * y))   # the normal equations
    assert (plain["t0_s"], plain["batch_knee"]) == pytest.approx((t0, t0 / slope), rel=1e-9)
    # within 15% (t0) and 25% (knee) of the truth; equal weights would miss by 36% and 57%
    assert abs(plain["t0_s"] / T0 - 1) < 0.15 and abs(plain["batch_knee"] / KNEE - 1) < 0.25
    ols_slope, ols_t0 = np.polyfit(b, y, 1)
    assert abs(ols_t0 / T0 - 1) > 0.35 and abs(ols_t0 / ols_slope / KNEE - 1) > 0.55
    assert [x for x in fit["warnings"] if " weighted " in x] == [
        f"plain: {k} x {n} weighted {wt} in the fit: its runs are {v} (decode tok/s spread {s} over 3 runs; "
        "weight (ln 1.1 / ln spread)^2)"
        for k, n, wt, v, s in (("100-300", 4, "0.47", "unsettled", "1.15x"), ("100-300", 12, "0.04", "noisy", "1.60x"),
                               ("1000-1400", 4, "0.27", "unsettled", "1.20x"),
                               ("1000-1400", 12, "0.27", "unsettled", "1.20x"))]
    assert "one load only: batch_knee not fitted" not in fit["warnings"]


def test_a_bimodal_point_is_still_left_out() -> None:
    fit = fit_speed_model(_noisy_report({**NOISY, ("100-300", 12): ("bimodal", 1.6, 0.90)}))
    plain = fit["pools"]["plain"]
    assert [(p["bucket"], p["load"]) for p in fit["points"]["plain"] if p["bucket"] == "100-300"] == \
        [("100-300", 1.0), ("100-300", 4.0)]
    assert "plain: 100-300 x 12 left out of the fit: its runs are bimodal (decode tok/s spread 1.60x over 3 runs; " \
           "rerun with --repetitions 6)" in fit["warnings"]
    # two loads left: the line through them, whatever their weights (load 4 is 3% slow)
    (y1, y4) = [p["tpot"] - plain["attn_s_per_token"] * p["L"] for p in fit["points"]["plain"]
                if p["bucket"] == "100-300"]
    slope = (y4 - y1) / 3
    assert (plain["t0_s"], plain["batch_knee"]) == pytest.approx((y1 - slope, (y1 - slope) / slope), rel=1e-9)
    assert round(plain["t0_s"] / T0 - 1, 3) == -0.050 and round(plain["batch_knee"] / KNEE - 1, 3) == -0.096
