"""The speed-model fit (loadtests/speedfit.py) on an engine whose time per token grows with load
times context, as the demo's SGLang CPU pools measure (each decode step reads every running
sequence's KV; long prompts joining are prefilled between steps)."""

from __future__ import annotations

import numpy as np
import pytest

from loadtests.simulate import SimModel, simulate_report
from loadtests.speedfit import fit_speed_model, speed_blocks
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
