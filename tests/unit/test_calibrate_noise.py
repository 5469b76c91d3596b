"""Calibration refuses to read a threshold from noise: a cell whose runs disagree (noisy,
bimodal, or unsettled across the break-even) or a speedup that rises along an axis gives a
warning in the patch and calibration.json and no threshold; the same report gives the same patch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadtests.calibrate import calibrate, calibrate_report
from loadtests.evidence import check_axis, suggested_repetitions
from router.cli import main as specgate
from tests.support.calibrate import fixed_report

#: The shape of the local CPU stack's report: the short bucket's load axis is not monotone
#: (0.95x at 4, 1.17x at 12) and its load-1 cell is noisy.
LOCAL = {"100-300": {1: 1.20, 4: 0.95, 12: 1.17}, "1000-1400": {1: 0.90, 4: 0.80, 12: 0.85}}


def set_spread(report: dict[str, Any], bucket: str, load: int, verdict: str, spread: float, n: int,
               lo: float, hi: float) -> None:
    for p in report["points"]:
        if p["bucket"] == bucket and p["load"] == load:
            block = p["ratios"]["spec_vs_plain"]["decode_speedup"]
            block["spread"].update(verdict=verdict, spread=spread, n=n)
            block["min"], block["max"] = lo, hi


def noisy_local() -> dict[str, Any]:
    report = fixed_report(LOCAL)
    set_spread(report, "100-300", 1, "noisy", 3.46, 5, 0.60, 2.08)
    return report


def test_noisy_cell_and_non_monotone_load_axis_propose_nothing() -> None:
    cal = calibrate(noisy_local())
    assert (cal.long_prompt_tokens, cal.saturation_enter, cal.saturation_exit) == (None, None, None)
    assert "routing" not in cal.patch()  # the plain pool's speed block is still fitted (its points agree)
    noisy = "100-300 x 1 is noisy (spread 3.46x over 5 runs, runs 0.60x-2.08x)"
    rises = ("the speedup rises along the load in 100-300 from 0.95x at 100-300 x 4 to 1.17x at "
             "100-300 x 12 (more than the 1.1x the runs agree within: not monotone)")
    settle = ("To settle it: rerun with --repetitions 10 (or more) and more requests per run "
              "(--requests), on a quiet machine")
    assert cal.evidence["warnings"] == [
        f"long_prompt_tokens not proposed, the evidence is noise: {noisy}. {settle}",
        f"saturation not proposed, the evidence is noise: {noisy}; {rises}. {settle}",
    ]
    sat = cal.evidence["saturation"]["check"]
    assert sat == {"ok": False, "problems": [noisy, rises], "notes": [],
                   "spreads": {"100-300 x 1": 3.46, "100-300 x 4": 1.0, "100-300 x 12": 1.0},
                   "suggested_repetitions": 10}
    assert cal.evidence["long_prompt_tokens"]["summary"].startswith(
        "not proposed: the speedups along the context at load 1 are noise")
    text = cal.patch_yaml("report.json")
    assert f"# warning: long_prompt_tokens not proposed, the evidence is noise: {noisy}" in text
    assert "# warning: saturation not proposed" in text and "crossover" not in text
    assert yaml.safe_load(text) == cal.patch() and "routing" not in cal.patch()


def test_non_monotone_load_axis_alone_refuses_saturation_only() -> None:
    cal = calibrate(fixed_report(LOCAL))           # every cell single-run: no verdict problem
    assert cal.long_prompt_tokens is not None     # 1.20x -> 0.90x along the context at load 1
    assert cal.saturation_enter is None and "saturation" not in cal.patch()["routing"]
    [warning] = cal.evidence["warnings"]
    assert warning.startswith("saturation not proposed, the evidence is noise: the speedup rises along "
                              "the load in 100-300 from 0.95x")
    assert "--repetitions 6" in warning              # run count unknown to the check: at least 6


def test_a_rise_within_the_spread_threshold_is_not_noise() -> None:
    cal = calibrate(fixed_report({"1k-2k": {1: 1.5, 8: 0.95, 16: 1.02}, "8k-16k": {1: 1.2, 8: 0.9, 16: 0.8}}))
    assert cal.saturation_enter == 8 and cal.evidence["saturation"]["check"]["ok"] is True
    report = fixed_report({"1k-2k": {1: 1.5, 8: 0.95, 16: 1.02}, "8k-16k": {1: 1.2, 8: 0.9, 16: 0.8}})
    report["workload"]["spread_threshold"] = 1.05  # the report's own threshold: 1.02/0.95 = 1.074 > 1.05
    assert calibrate(report).saturation_enter is None


def test_unsettled_cell_refuses_only_across_the_break_even() -> None:
    report = fixed_report()
    set_spread(report, "1k-2k", 8, "unsettled", 1.3, 3, 1.40, 1.82)   # every run pays
    cal = calibrate(report)
    assert (cal.saturation_enter, cal.saturation_exit) == (15, 11)
    assert cal.evidence["warnings"] == [
        "saturation: 1k-2k x 8 is unsettled (spread 1.30x over 3 runs, every run at or above 1x): used"]
    set_spread(report, "1k-2k", 8, "unsettled", 1.3, 3, 0.92, 1.20)   # runs on both sides of 1.0x
    cal = calibrate(report)
    assert cal.saturation_enter is None
    assert cal.evidence["saturation"]["check"]["problems"] == [
        "1k-2k x 8 is unsettled (spread 1.30x over 3 runs, runs 0.92x-1.20x)"]
    assert cal.evidence["saturation"]["check"]["suggested_repetitions"] == 6


def test_bimodal_cell_advises_one_workload_per_mode() -> None:
    report = fixed_report()
    set_spread(report, "8k-16k", 1, "bimodal", 1.55, 15, 1.2, 1.86)
    cal = calibrate(report)
    assert cal.long_prompt_tokens is None and cal.saturation_enter == 15
    [warning] = cal.evidence["warnings"]
    assert warning.endswith("--repetitions 30 (or more) and more requests per run (--requests), on a quiet "
                            "machine; a bimodal cell needs one workload per mode (e.g. copy_fraction 0 and 1)")


@pytest.mark.parametrize(("runs", "suggested"), [(None, 6), (2, 6), (3, 6), (5, 10), (15, 30)])
def test_suggested_repetitions(runs: int | None, suggested: int) -> None:
    assert suggested_repetitions(runs) == suggested


def test_model_cells_count_for_monotonicity_only() -> None:
    cells = [{"label": "a", "speedup": 1.0, "source": "model", "verdict": "noisy", "spread": 5.0},
             {"label": "b", "speedup": 1.5, "source": "measured", "verdict": "stable", "spread": 1.01}]
    check = check_axis(cells, threshold=1.1, axis="along x")
    assert check.ok is False and len(check.problems) == 1 and check.problems[0].startswith("the speedup rises")


def test_same_report_same_patch_and_the_cli_prints_the_warning(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    report_path = tmp_path / "report.json"
    report_path.write_text(json.dumps(noisy_local()))
    outs = []
    for i in range(2):
        _cal, _merged, text, written = calibrate_report(report_path, out=tmp_path / f"p{i}.yaml")
        outs.append((text, json.loads(written[1].read_text())))
    assert outs[0] == outs[1]
    evidence = outs[0][1]
    assert "routing" not in evidence["patch"] and len(evidence["evidence"]["warnings"]) == 2
    assert evidence["evidence"]["saturation"]["check"]["suggested_repetitions"] == 10
    assert yaml.safe_load(outs[0][0]) == evidence["patch"]
    capsys.readouterr()
    assert specgate(["calibrate", str(report_path), "--out", str(tmp_path / "cli.yaml")]) == 0
    err = capsys.readouterr().err
    assert ("warning: saturation not proposed, the evidence is noise: 100-300 x 1 is noisy (spread 3.46x over 5 "
            "runs, runs 0.60x-2.08x)") in err
    assert "saturation: not proposed: the speedups along the load in 100-300 are noise" in err


def test_speed_fit_weighs_noisy_points_and_leaves_out_bimodal_ones() -> None:
    from loadtests.speedfit import FitError, fit_speed_model

    report = fixed_report()
    clean = fit_speed_model(report)
    for p in report["points"]:
        if p["bucket"] == "1k-2k" and p["load"] == 8:
            p["targets"]["plain"]["spread"].update(verdict="noisy", spread=2.5, n=5)
            p["targets"]["spec"]["spread"].update(verdict="bimodal", spread=1.6, n=8)
    fit = fit_speed_model(report)
    # weight (ln 1.1 / ln 2.5)^2 = 0.0108
    assert "plain: 1k-2k x 8 weighted 0.01 in the fit: its runs are noisy (decode tok/s spread 2.50x over 5 runs; " \
           "weight (ln 1.1 / ln spread)^2)" in fit["warnings"]
    assert "spec: 1k-2k x 8 left out of the fit: its runs are bimodal (decode tok/s spread 1.60x over 8 runs; " \
           "rerun with --repetitions 16)" in fit["warnings"]
    assert len(fit["points"]["plain"]) == len(clean["points"]["plain"])
    assert [round(p["weight"], 4) for p in fit["points"]["plain"] if p["weight"] < 1] == [0.0108]
    assert len(fit["points"]["spec"]) == len(clean["points"]["spec"]) - 1
    # every plain point equally noisy: equal weights, the clean fit
    for p in report["points"]:
        p["targets"]["plain"]["spread"].update(verdict="noisy", spread=2.5, n=5)
    assert fit_speed_model(report)["pools"]["plain"] == pytest.approx(clean["pools"]["plain"], rel=1e-9)
    for p in report["points"]:
        p["targets"]["plain"]["spread"].update(verdict="bimodal", spread=2.5, n=5)
    with pytest.raises(FitError, match="every plain point is bimodal or without a spread"):
        fit_speed_model(report)
    assert calibrate(report).evidence["speed_model"]["pools"] == {}   # the thresholds do not need it
    # the thresholds keep the stricter rule: a noisy cell on the axis still refuses it
    assert calibrate(noisy_local()).long_prompt_tokens is None
