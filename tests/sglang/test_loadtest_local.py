"""``specgate loadtest-local`` against the real SGLang CPU pools of ``examples/demo.yaml``.

A 1-bucket x 1-concurrency micro-grid, one measured run of 2 requests per target, 8 output
tokens: the whole path (start both pools and the router, compare, report, calibrate,
validate the patch, stop) in about 50 s on a quiet 2-core machine, 35-40 s of it the two
SGLang start-ups (about 2 minutes when co-tenants keep both cores busy). The full default
grid is measured in docs/loadtests.md, not here.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest
import yaml

from loadtests.local import LocalSettings, run_local
from loadtests.report import SCHEMA_NAME, SCHEMA_VERSION, load_report
from router.cli import main as specgate
from router.config.tree import load_config

pytestmark = pytest.mark.sglang

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "demo.yaml"


@pytest.fixture(scope="module")
def demo_models() -> None:
    """Skips without SGLang or without the demo's models (``make models``)."""
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang is not installed (run `make cpu-engine`)")
    for d in ("tiny-llama", "tiny-llama-eagle3"):
        if not (ROOT / "models" / d / "model.safetensors").exists():
            pytest.skip(f"models/{d} is missing (run `make models`)")


@pytest.mark.timeout(300)
def test_loadtest_local_micro_grid(demo_models: None, tmp_path: Path) -> None:
    out = tmp_path / "out"
    notes: list[str] = []
    settings = LocalSettings(config=CONFIG, out=out, grid="ctx=100-200;conc=1", output_tokens=8,
                             warmup_runs=0, repetitions=1, requests_per_run=2, time_limit_s=280)
    result = run_local(settings, note=notes.append)
    assert result.exit_code == 0, (result.problems, notes)

    names = {p.name for p in out.iterdir() if p.is_file()}
    assert {"report.json", "report.md", "requests.jsonl", "speedup_heatmap.png", "latency_percentiles.png",
            "accept_length.png", "calibration.yaml", "calibration.json", "merged-config.yaml",
            "run.json"} <= names
    report = load_report(out / "report.json")
    assert report["schema"] == {"name": SCHEMA_NAME, "version": SCHEMA_VERSION} == \
        {"name": "specgate-loadtest", "version": 1}
    assert report["model"] == "tiny-llama"
    assert report["stopped"]["reason"] == "completed"
    c = report["counts"]
    assert (c["planned"], c["sent"], c["ok"], c["warmup"], c["not_sent"]) == (6, 6, 6, 0, 0)
    assert [t["role"] for t in report["targets"]] == ["spec", "plain", "router"]
    [point] = report["points"]
    for name, tp in point["targets"].items():
        assert tp["requests"] == {"planned": 2, "sent": 2, "ok": 2}, name
        assert tp["errors_by_status"] == {}, name
        assert tp["output_tokens"]["min"] == tp["output_tokens"]["max"] == 8.0
        assert 100 <= tp["prompt_tokens"]["min"] and tp["prompt_tokens"]["max"] <= 200 + 40  # + chat template
    # short prompts at concurrency 1: the router sends them to the spec pool, or to plain once
    # the live accept length says speculation does not pay (the tiny model on a CPU)
    assert set(point["targets"]["router"]["reasons"]) <= {"speculative", "low_acceptance"}
    assert point["ratios"]["spec_vs_plain"]["decode_speedup"]["median"] > 0

    # the patch is the one calibrate wrote, and the config loader (`specgate config check`) accepts it
    patch = yaml.safe_load((out / "calibration.yaml").read_text()) or {}
    assert patch == result.patch
    assert set(patch.get("routing", {})) <= {"long_prompt_tokens", "saturation"}
    merged = load_config(out / "merged-config.yaml")
    if "saturation" in patch.get("routing", {}):
        assert merged.routing.saturation.enter == patch["routing"]["saturation"]["enter"]
    assert specgate(["config", "check", str(out / "merged-config.yaml")]) == 0

    run = json.loads((out / "run.json").read_text())
    assert run["exit_code"] == 0 and run["wall_s"] == pytest.approx(result.wall_s)
    assert {"start", "warmup", "loadtest", "stop", "report", "calibrate"} <= set(run["phases_s"])
    # everything was stopped: nothing answers at the pools' and the router's addresses
    for t in report["targets"]:
        with pytest.raises(httpx.TransportError):
            httpx.get(t["url"] + "/health", timeout=2)
