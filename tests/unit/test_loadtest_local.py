"""``specgate loadtest-local`` without SGLang: what fails before any server starts, and the
calibration step's files (the real run is in test_local_sglang.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from loadtests.calibrate import calibrate_report
from loadtests.local import LocalRunError, LocalSettings, LocalStack, run_local
from loadtests.workload import WorkloadError
from router.cli import main as specgate
from router.config import load_config
from serving.launch import engine_argv
from tests.unit.test_calibrate import fixed_report

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "demo.yaml"


def test_stack_reads_the_demo_config(tmp_path: Path) -> None:
    stack = LocalStack(CONFIG, tmp_path)
    assert (stack.spec_pool, stack.plain_pool) == ("spec", "plain")
    ports = {u.rsplit(":", 1)[1] for u in stack.urls.values()}
    assert len(ports) == 3 and not ports & {"30001", "30002", "8000"}  # moved to free ports
    assert Path(stack.doc["model"]["tokenizer"]).is_absolute()
    assert stack.processes == {} and stack.stop() >= 0.0  # nothing started, stop is a no-op
    # the pools get what `specgate serve` execs; CPU engines sleep when idle (CPU_FLAGS)
    for name in ("spec", "plain"):
        argv = stack.pool_argv(name)
        assert argv == engine_argv(stack.config, name)
        assert argv.count("--sleep-on-idle") == 1
        assert argv[argv.index("--port") + 1] == stack.urls[name].rsplit(":", 1)[1]


def test_config_without_engines_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load(CONFIG.read_text())
    for pool in doc["pools"]:
        pool.pop("engine")
    doc["model"]["tokenizer"] = str(ROOT / "models" / "tiny-llama")
    cfg = tmp_path / "router.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    with pytest.raises(LocalRunError, match="engine"):
        run_local(LocalSettings(config=cfg, out=tmp_path / "out"), note=lambda _m: None)


def test_bad_grid_fails_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="unknown grid key"):
        run_local(LocalSettings(config=CONFIG, out=tmp_path / "out", grid="ctx=100-300;depth=3"),
                  note=lambda _m: None)
    assert specgate(["loadtest-local", "--config", str(CONFIG), "--out", str(tmp_path / "o2"),
                     "--grid", "ctx=300-100;conc=1", "--quiet"]) == 2


def test_time_limit_too_short_starts_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(LocalRunError, match="no time to start"):
        run_local(LocalSettings(config=CONFIG, out=out, time_limit_s=60, reserve_s=45), note=lambda _m: None)
    run = json.loads((out / "run.json").read_text())
    assert run["exit_code"] == 1 and run["patch"] is None and set(run["phases_s"]) == {"stop"}
    assert not (out / "stack" / "pool-spec.log").exists()


def test_calibrate_report_merges_into_the_demo_config(tmp_path: Path) -> None:
    report = fixed_report({"100-300": {1: 1.5, 4: 0.8}, "1000-1400": {1: 0.9, 4: 0.7}})
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    merged_path = tmp_path / "elsewhere" / "merged.yaml"
    merged_path.parent.mkdir()
    cal, merged, text, written = calibrate_report(path, config=CONFIG, merged_config=merged_path)
    # load 1: 1.5x at sqrt(100*300) = 173.2 tokens, 0.9x at sqrt(1000*1400) = 1183.2 tokens:
    # S = 1 at exp(ln 173.2 + 0.5/0.6 * ln(1183.2/173.2)) = 858.97 tokens.
    # 100-300: 1.5x at 1, 0.8x at 4: 1 + 0.5/0.7 * 3 = 3.14 -> enter 4, exit min(3, floor(3)) = 3.
    patch = cal.patch()
    assert patch["routing"] == {"long_prompt_tokens": 858, "saturation": {"enter": 4, "exit": 3}}
    # the report's plain runs give the plain pool's speed block (no accept length: no spec block)
    assert [p["name"] for p in patch["pools"]] == ["plain"]
    assert patch["pools"][0]["speed"]["attention_s_per_token"] == 0.0  # a fitted 5e-20 written as 0
    assert [p.name for p in written] == ["calibration.yaml", "calibration.json", "merged.yaml"]
    assert yaml.safe_load(text) == cal.patch()
    # the merged file lives elsewhere: its paths were made absolute, so it loads from there
    cfg = load_config(merged_path)
    assert cfg.routing.long_prompt_tokens == 858 and cfg.model.tokenizer == str((ROOT / "models" / "tiny-llama").resolve())
    assert merged["pools"][0]["engine"]["speculative_num_draft_tokens"] == 4
    assert specgate(["config", "check", str(merged_path)]) == 0
