"""Percentile math on fixed data and the spread/bimodal verdict on constructed samples."""

from __future__ import annotations

import math

import pytest

from loadtests.stats import percentile, spread, spread_verdict, summarize


@pytest.mark.parametrize(("q", "expected"), [(0, 1.0), (50, 5.5), (90, 9.1), (99, 9.91), (100, 10.0)])
def test_percentile_type7_on_1_to_10(q: float, expected: float) -> None:
    assert percentile(range(10, 0, -1), q) == pytest.approx(expected, abs=1e-12)


def test_percentile_small_samples() -> None:
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 3.0], 50) == 2.0
    assert percentile([0.010, 0.020, 0.030, 0.040], 90) == pytest.approx(0.037)


@pytest.mark.parametrize("bad", [[], [1.0, math.nan]])
def test_percentile_rejects_empty_and_nan(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        percentile(bad, 50)


def test_percentile_rejects_q_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize_fixed() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert s == {"n": 4, "mean": 2.5, "min": 1.0, "p50": 2.5, "p90": pytest.approx(3.7),
                 "p99": pytest.approx(3.97), "max": 4.0}
    assert summarize([]) is None


def test_spread() -> None:
    assert spread([2.0, 3.0, 2.5]) == 1.5
    assert spread([0.0, 1.0]) == math.inf


def test_bimodal_copy_task_like_article_003() -> None:
    # Two modes ~1.52x apart that keep recurring: the spread does not shrink with more runs.
    runs = [100.0, 152.0, 101.0, 150.0, 99.0, 153.0, 100.5, 151.0, 152.5, 99.5]
    v = spread_verdict(runs)
    assert v.verdict == "bimodal" and v.bimodal
    assert v.spread == pytest.approx(153.0 / 99.0)
    assert v.spread_first_half == pytest.approx(152.0 / 99.0)
    assert v.spread_second_half == pytest.approx(153.0 / 99.5)
    assert v.modes == (pytest.approx(100.0), pytest.approx(151.7))
    assert len(v.spread_curve) == 10 and v.spread_curve[0] == 1.0


def test_bimodal_needs_two_runs_per_mode() -> None:
    assert spread_verdict([1.0, 1.5, 1.02]).verdict == "unsettled"  # 3 runs cannot tell
    v = spread_verdict([1.0, 1.5, 1.02, 1.52])
    assert v.verdict == "bimodal" and v.modes == (pytest.approx(1.01), pytest.approx(1.51))
    # One outlier run is not a mode: noise that did not fade.
    assert spread_verdict([1.0, 1.01, 1.02, 1.0, 1.5, 1.01]).verdict == "noisy"
    # Two clusters whose gap is no wider than their own spread are not two modes.
    assert spread_verdict([1.0, 1.1, 1.2, 1.35, 1.0, 1.1, 1.2, 1.35]).verdict == "noisy"


def test_warmup_outlier_converges() -> None:
    # A first run slowed by graph capture, then tight runs: the spread shrank.
    v = spread_verdict([40.0, 95.0, 99.0, 100.0, 100.5, 99.5])
    assert v.verdict == "converging" and not v.bimodal


def test_stable_and_single_and_unsettled() -> None:
    assert spread_verdict([1.00, 1.05, 1.02, 1.01]).verdict == "stable"
    assert spread_verdict([5.0]).verdict == "single"
    assert spread_verdict([1.0, 2.0]).verdict == "unsettled"


def test_noisy_without_two_modes() -> None:
    # Wide, evenly spread runs: no gap splits them into two recurring modes.
    v = spread_verdict([1.0, 1.2, 1.4, 1.1, 1.3, 1.5])
    assert v.verdict == "noisy" and not v.bimodal


def test_verdict_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        spread_verdict([1.0, 0.0])
    with pytest.raises(ValueError):
        spread_verdict([1.0, 2.0], threshold=1.0)


def test_verdict_as_dict_is_json_ready() -> None:
    d = spread_verdict([1.0, 1.5, 1.0, 1.5]).as_dict()
    assert d["verdict"] == "bimodal" and isinstance(d["modes"], list) and isinstance(d["spread_curve"], list)
