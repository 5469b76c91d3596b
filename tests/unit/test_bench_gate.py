"""The release gate of ``benchmarks/router_overhead.py`` (``make bench-check``): its arithmetic
on given measurements, no timing (the benchmark itself is never run by the test suite). Resolving the base revision runs
``git``: tests/integration/test_bench_gate_git.py."""

from __future__ import annotations

import pytest

from benchmarks.router_overhead import check_cpu, summarise


def run(rps: float, cpu: float, p50: float = 1.0) -> dict[str, float]:
    return {"rps": rps, "requests": rps * 5, "p50_ms": p50, "p99_ms": 2 * p50, "errors": 0,
            "cpu_us_per_req": cpu}


def results(base: list[float], now: list[float], c: str = "16") -> dict:
    return {"nonstream": {c: {"base": [run(1000, x) for x in base], "specgate": [run(1000, x) for x in now]}}}


def test_ratio_is_the_median_of_the_paired_rounds():
    # round ratios 1.10, 0.90, 1.05 -> median 1.05 (the ratio of the medians would be 1.0)
    [row] = summarise(results([100, 100, 100], [110, 90, 105]), {})
    assert row["cpu_specgate_over_base"] == pytest.approx(1.05)
    assert row["cpu_specgate_over_base_rounds"] == "1.10, 0.90, 1.05"
    assert row["rps_specgate_over_base"] == pytest.approx(1.0)


def test_gate_passes_at_the_tolerance_and_fails_above(capsys):
    at = summarise(results([200, 200, 200], [220, 220, 220]), {})
    assert check_cpu(at, 0.10) == 0
    above = summarise(results([200, 200, 200], [221, 224, 230]), {})
    assert check_cpu(above, 0.10) == 1
    assert "nonstream c=16: specgate/base CPU per request 1.120 > 1.10: REGRESSION" in capsys.readouterr().out


def test_concurrency_one_cells_are_not_gated():
    rows = summarise(results([100, 100, 100], [300, 300, 300], c="1"), {})
    assert check_cpu(rows, 0.10) == 0

