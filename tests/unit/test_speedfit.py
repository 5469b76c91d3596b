"""The speed-model fit (loadtests/speedfit.py) on an engine whose time per token grows with load
times context, as the demo's SGLang CPU pools measure (each decode step reads every running
sequence's KV; long prompts joining are prefilled between steps): the model's ``kv_read`` term."""

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


def test_the_kv_read_term_is_recovered_from_the_context_slope_at_each_load() -> None:
    # d tpot / d L is ATTN + K * b at every load: the line through the three loads' slopes gives
    # both; t0 and the knee then come from the shortest bucket with that context term taken off
    fit = fit_speed_model(_report())
    plain = fit["pools"]["plain"]
    assert (plain["t0_s"], plain["batch_knee"], plain["attn_s_per_token"], plain["kv_read_s_per_token"]) == \
        pytest.approx((T0, KNEE, ATTN, K), rel=1e-3)
    assert not [w for w in fit["warnings"] if w.startswith("plain: at ")]
    assert fit["residual_s"]["plain"] == pytest.approx(0.0, abs=1e-5)
    blocks = speed_blocks(fit)
    assert blocks["plain"]["kv_read_s_per_token"] == pytest.approx(K, rel=1e-3)
    # the speculative pool runs the same target on the same hardware: its t0, knee and context
    # terms are the plain pool's, its own cost is the drafter's c
    assert (blocks["spec"]["decode_s_per_token"], blocks["spec"]["batch_knee"], blocks["spec"]["kv_read_s_per_token"]) \
        == (plain["t0_s"], plain["batch_knee"], plain["kv_read_s_per_token"])


def test_lengths_at_one_load_only_leave_the_kv_read_term_out() -> None:
    # without a second load measured at two lengths, the product cannot be told from attention:
    # the lowest load's context slope is attention, the term is 0, and the fit says so
    report = _report()
    report["points"] = [p for p in report["points"]
                        if p["load"] == 1 or p["targets"]["plain"]["prompt_tokens"]["p50"] < 1000]
    fit = fit_speed_model(report)
    plain = fit["pools"]["plain"]
    assert plain["kv_read_s_per_token"] == 0.0
    assert plain["attn_s_per_token"] == pytest.approx(ATTN + K, rel=1e-3)
    assert "prompt lengths measured at one load only: kv_read_s_per_token not fitted (0)" in fit["warnings"]


def test_a_model_without_the_product_is_recovered_exactly() -> None:
    m = SimModel(t0_s=T0, batch_knee=KNEE, attn_s_per_token=ATTN, prefill_s_per_token=2e-4, alpha_short=0.7,
                 alpha_knee_tokens=200, alpha_drop_per_doubling=0.0, gamma=3, c=0.5)
    report = simulate_report(m, parse_buckets("100-300,1000-1400"), [1, 4, 12], repetitions=1, output_tokens=32)
    fit = fit_speed_model(report)
    plain = fit["pools"]["plain"]
    assert (plain["t0_s"], plain["batch_knee"], plain["attn_s_per_token"]) == pytest.approx((T0, KNEE, ATTN), rel=1e-3)
    assert not [w for w in fit["warnings"] if w.startswith("plain: at ")]
    assert fit["residual_s"]["plain"] == pytest.approx(0.0, abs=1e-5)
