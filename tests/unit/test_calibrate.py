"""Calibration: exact thresholds on a fixed report, model fill-in, recovery of a speed model's
crossovers (no timing), and a patch the router's config loader and `specgate config check`
accept."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml

from drafters.spec_math import expected_tokens
from loadtests.calibrate import (
    CalibrationError,
    alpha_from_accept_length,
    calibrate,
    speculation_from_config,
    validate_patch,
)
from loadtests.report import ReportError, validate_report
from loadtests.simulate import SimModel, simulate_report
from loadtests.workload import parse_buckets
from router.cli import main as specgate
from tests.support.calibrate import TABLE, fixed_report


def test_fixed_report_exact_thresholds() -> None:
    cal = calibrate(fixed_report())
    # load 1: 1.80x at sqrt(8k*16k) = 11585 tokens, 0.90x at sqrt(80k*128k) = 103622 tokens;
    # log-interpolated S = 1 at exp(ln 11585 + 0.8/0.9 * ln(103622/11585)) = 81231.17 tokens.
    assert cal.long_prompt_tokens == 81231
    # 1k-2k: 1.60x at 8, 0.90x at 16 -> 8 + 0.6/0.7 * 8 = 14.86 -> enter 15, exit floor(15*0.75) = 11.
    assert (cal.saturation_enter, cal.saturation_exit) == (15, 11)
    # the plain pool's complete speed block; the speculative one's needs both accept lengths
    assert cal.patch() == {"routing": {"long_prompt_tokens": 81231, "saturation": {"enter": 15, "exit": 11}},
                           "pools": [{"name": "plain", "speed": {"decode_s_per_token": 0.004, "batch_knee": 16.0, "attention_s_per_token": 0.0, "kv_read_s_per_token": 0.0,
                                    "prefill_s_per_token": 0.0}}]}
    ev = cal.evidence
    assert ev["long_prompt_tokens"]["load"] == 1
    assert ev["long_prompt_tokens"]["rows"]["1"]["kind"] == "crossed"
    assert ev["long_prompt_tokens"]["rows"]["16"]["kind"] == "never_pays"
    assert ev["saturation"]["bucket"] == "1k-2k"
    assert ev["saturation"]["columns"]["80k-128k"]["kind"] == "never_pays"
    assert ev["saturation"]["columns"]["1k-2k"]["x"] == pytest.approx(8 + 0.6 / 0.7 * 8)
    assert ev["warnings"] == []
    assert "81231" in ev["long_prompt_tokens"]["summary"]


def test_min_speedup_and_hysteresis_and_bucket_choice() -> None:
    cal = calibrate(fixed_report(), min_speedup=1.5, hysteresis=0.5)
    assert cal.long_prompt_tokens == 24048  # 11585 * (103622/11585)^(0.3/0.9)
    assert (cal.saturation_enter, cal.saturation_exit) == (10, 5)  # 8 + 0.1/0.7*8 = 9.14
    cal = calibrate(fixed_report(), saturation_bucket="8k-16k")
    # 8k-16k: 1.30x at 8, 0.85x at 16 -> 8 + 0.3/0.45*8 = 13.33 -> 14, exit 10
    assert (cal.saturation_enter, cal.saturation_exit) == (14, 10)
    with pytest.raises(CalibrationError):
        calibrate(fixed_report(), saturation_bucket="nope")


def test_always_pays_and_never_pays() -> None:
    paying = {"1k-2k": {1: 2.0, 8: 1.5}, "8k-16k": {1: 1.4, 8: 1.1}}
    cal = calibrate(fixed_report(paying))
    assert cal.long_prompt_tokens == 16384  # the longest measured prompt (validated range)
    assert cal.saturation_enter is None and "saturation" not in cal.patch()["routing"]
    losing = {"1k-2k": {1: 0.9, 8: 0.8}, "8k-16k": {1: 0.8, 8: 0.7}}
    cal = calibrate(fixed_report(losing))
    assert cal.long_prompt_tokens == 1023
    assert (cal.saturation_enter, cal.saturation_exit) == (1, 0)
    assert len(cal.evidence["warnings"]) == 2


def test_missing_cells_filled_by_speedup_model() -> None:
    table: dict[str, dict[int, float | None]] = copy.deepcopy(TABLE)  # type: ignore[arg-type]
    table["80k-128k"] = {1: None, 8: None, 16: None}
    report = fixed_report(table)
    for p in report["points"]:
        if p["bucket"] == "80k-128k":
            p["targets"]["spec"]["pool_metrics"]["accept_length"]["mean"] = 1.1
    report["speculation"] = {"gamma": None, "drafter_cost_ratio": None}
    lone = fixed_report({"1k-2k": {1: None}})
    lone["speculation"] = {"gamma": None, "drafter_cost_ratio": None}
    with pytest.raises(CalibrationError, match="no operating point"):
        calibrate(lone)
    # Without gamma and c the long bucket stays unknown: speculation paid wherever measured.
    cal = calibrate(report)
    assert [c["source"] for c in cal.evidence["cells"] if c["bucket"] == "80k-128k"] == ["missing"] * 3
    assert cal.long_prompt_tokens == 16384
    cal = calibrate(report, gamma=4, drafter_cost_ratio=0.05)
    cells = [c for c in cal.evidence["cells"] if c["bucket"] == "80k-128k"]
    assert [c["source"] for c in cells] == ["model"] * 3
    # E[tau] = 1.1 -> S = 1.1 / (0.05 * 4 + 1) = 0.9167
    assert cells[0]["speedup"] == pytest.approx(1.1 / 1.2, abs=1e-9)
    assert expected_tokens(cells[0]["alpha"], 4) == pytest.approx(1.1, abs=1e-9)
    frac = 0.8 / (1.8 - 1.1 / 1.2)
    L0, L1 = math.sqrt(8192 * 16384), math.sqrt(81920 * 131072)
    assert cal.long_prompt_tokens == math.floor(math.exp(math.log(L0) + frac * math.log(L1 / L0)))
    assert any("speedup model" in w for w in cal.evidence["warnings"])


def test_alpha_from_accept_length() -> None:
    for alpha in (0.0, 0.3, 0.8, 0.95):
        assert alpha_from_accept_length(expected_tokens(alpha, 5), 5) == pytest.approx(alpha, abs=1e-9)
    assert alpha_from_accept_length(9.0, 3) == 1.0
    assert alpha_from_accept_length(0.5, 3) == 0.0


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_recovers_speed_model_thresholds_within_one_bucket(noise: float) -> None:
    model = SimModel(alpha_short=0.8, alpha_knee_tokens=4096, alpha_drop_per_doubling=0.15,
                     gamma=4, c=0.05, batch_knee=16)
    buckets = parse_buckets("1k-2k,2k-4k,4k-8k,8k-16k,16k-32k,32k-64k,64k-128k")
    loads = [1, 2, 4, 8, 16, 32, 64]
    cal = calibrate(simulate_report(model, buckets, loads, noise=noise, seed=1))
    true_ctx = model.crossover_context(1.0)
    true_load = model.crossover_load(buckets[0].midpoint)
    assert true_ctx is not None and true_load is not None
    assert cal.long_prompt_tokens is not None and cal.saturation_enter is not None
    # Buckets double, so "within one bucket" is a factor of 2 in prompt length.
    assert abs(math.log2(cal.long_prompt_tokens / true_ctx)) <= 1.0
    j = next(i for i, x in enumerate(loads) if x > true_load)
    assert loads[j - 1] <= cal.saturation_enter <= loads[j]
    assert cal.saturation_exit < cal.saturation_enter


def test_patch_validates_with_router_config_and_cli(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    report_path.write_text(json.dumps(fixed_report()))
    config = {
        "model": {"name": "m", "tokenizer": "tok"},
        "limits": {"max_context_tokens": 131072},
        "pools": [
            {"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:9001"],
             "drafter_cost_ratio": 0.04,
             "engine": {"model_path": "m", "speculative_algorithm": "EAGLE3",
                        "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                        "speculative_num_draft_tokens": 4}},
            {"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:9002"]},
        ],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 32, "exit": 24}},
    }
    assert speculation_from_config(config) == {"gamma": 3, "drafter_cost_ratio": 0.04}
    cfg_path = tmp_path / "router.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    cal = calibrate(fixed_report())
    merged, cfg = validate_patch(cal, config, tmp_path)
    assert cfg.routing.long_prompt_tokens == 81231 and cfg.routing.saturation.enter == 15
    assert merged["pools"] == [config["pools"][0], {**config["pools"][1], "speed": cal.patch()["pools"][0]["speed"]}]
    assert cfg.pools[1].speed is not None and cfg.pools[1].speed.batch_knee == 16.0
    _, skeleton_cfg = validate_patch(cal)
    assert skeleton_cfg.routing.saturation.exit == 11

    out, merged_path = tmp_path / "patch.yaml", tmp_path / "merged.yaml"
    rc = specgate(["calibrate", str(report_path), "--config", str(cfg_path), "--out", str(out),
                   "--merged-config", str(merged_path)])
    assert rc == 0
    patch = yaml.safe_load(out.read_text())
    assert patch == cal.patch()
    assert out.read_text().startswith("# specgate calibrate")
    evidence = json.loads(out.with_suffix(".json").read_text())
    assert evidence["patch"] == patch and evidence["evidence"]["params"]["gamma"] == 4  # report's
    assert specgate(["config", "check", "--no-paths", str(merged_path)]) == 0


def test_rejects_a_patch_the_router_refuses(tmp_path: Path) -> None:
    cal = calibrate(fixed_report())
    bad = {"model": {"name": "m", "tokenizer": "t"}, "limits": {"max_context_tokens": 4096},
           "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:1"],
                      "bogus": 1}],
           "routing": {"long_prompt_tokens": 1, "saturation": {"enter": 2, "exit": 1}}}
    with pytest.raises(CalibrationError, match="invalid"):
        validate_patch(cal, bad, tmp_path)


def test_bad_reports(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="schema"):
        validate_report({"schema": {"name": "other", "version": 1}})
    r = fixed_report()
    r["schema"]["version"] = 99
    with pytest.raises(ReportError, match="version"):
        validate_report(r)
    p = tmp_path / "bad.json"
    p.write_text("{")
    assert specgate(["calibrate", str(p)]) == 2
