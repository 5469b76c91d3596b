"""``specgate loadtest-local`` without SGLang: what fails before any server starts, and the
calibration step's files (the real run is in test_local_sglang.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from loadtests.calibrate import calibrate_report
from loadtests.local import LocalRunError, LocalSettings, LocalStack, _workload, run_local
from loadtests.simulate import SimModel, simulate_report
from loadtests.workload import WorkloadError, parse_buckets
from router.cli import build_parser
from router.cli import main as specgate
from router.config.tree import load_config
from serving.launch import engine_argv
from tests.support.calibrate import fixed_report

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


@pytest.mark.sglang  # `specgate config check` loads the demo's model tokenizer: models/tiny-llama (make models)
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


def test_default_workload_sends_both_temperature_classes(tmp_path: Path) -> None:
    # every 4th request of a run is sampled (temperature 1), so one `make loadtest` measures both
    # classes' accept lengths and `specgate calibrate` can write complete speed blocks
    args = build_parser().parse_args(["loadtest-local"])
    assert args.sampled_fraction == 0.25
    stack = LocalStack(CONFIG, tmp_path)
    w = _workload(LocalSettings(config=CONFIG, out=tmp_path / "out"), stack, 100.0)
    assert w.sampled_fraction == 0.25 and w.temperature == 0.0 and w.loads == (1.0, 4.0, 12.0)
    assert [w.requests_for(x) for x in w.loads] == [4, 4, 12]
    assert [w.temperature_of(i) for i in range(4)] == [0.0, 0.0, 0.0, 1.0]
    assert [w.temperature_of(i) for i in range(12)] == [0.0, 0.0, 0.0, 1.0] * 3
    greedy = _workload(LocalSettings(config=CONFIG, out=tmp_path / "out", sampled_fraction=0.0), stack, 100.0)
    assert {greedy.temperature_of(i) for i in range(12)} == {0.0}


def test_a_quarter_sampled_gives_the_demo_pools_complete_speed_blocks(tmp_path: Path) -> None:
    # the local grid's shape (2 buckets x loads 1, 4, 12, 4 requests per run) from the speed model,
    # a quarter of the requests sampled: both accept lengths, so both pools get a speed block
    m = SimModel(t0_s=0.02, batch_knee=40, attn_s_per_token=5e-8, prefill_s_per_token=1e-5, alpha_short=0.8,
                 alpha_knee_tokens=150, alpha_drop_per_doubling=0.1, gamma=3, c=0.3)
    report = simulate_report(m, parse_buckets("100-300,1000-1400"), [1, 4, 12], repetitions=3,
                             requests_per_run=4, sampled_fraction=0.25, alpha_sampled_short=0.5)
    by_class = report["points"][0]["targets"]["spec"]["accept_length_by_class"]
    assert (by_class["greedy"]["n"], by_class["sampled"]["n"]) == (9, 3)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    _cal, merged, text, _ = calibrate_report(path, config=CONFIG)
    speed = {p["name"]: p["speed"] for p in yaml.safe_load(text)["pools"]}
    assert set(speed) == {"spec", "plain"} and "left out" not in text
    assert {"accept_length_greedy", "accept_length_sampled"} <= set(speed["spec"])
    assert speed["spec"]["accept_length_sampled"] < speed["spec"]["accept_length_greedy"]
    assert {p["name"]: "speed" in p for p in merged["pools"]} == {"spec": True, "plain": True}


def test_the_router_view_keeps_each_pools_model_and_checked_predictions() -> None:
    from loadtests.local import router_view

    pred = {"median_relative_error": 0.54, "checks": 64, "fallback": True}
    ready = {"ready": True, "pools": {
        "spec": {"healthy_endpoints": 1, "speed_model": {"batch_knee": 0.9}, "prediction": pred},
        "plain": {"healthy_endpoints": 1, "speed_model": None, "prediction": None}}}
    assert router_view(ready) == {"spec": {"speed_model": {"batch_knee": 0.9}, "prediction": pred},
                                  "plain": {"speed_model": None, "prediction": None}}
    assert router_view({"ready": False}) == {}
