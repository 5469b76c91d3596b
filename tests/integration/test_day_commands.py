"""`specgate calibrate-split` and `benchmarks/day.py` as commands: exit codes, advice text,
the files they write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.dayreport import read_request_log, write_request_log
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.dayshapes import default_engine_model, get_shape
from loadtests.daysim import routed, simulate_day
from router.cli import main as specgate


def test_calibrate_split_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = default_engine_model()
    reqs = get_shape("heavy").requests(0)
    res = simulate_day(reqs, routed(1, 2, lambda: PolicyRouter(settings_for(model))), model)
    log = write_request_log(res.records, tmp_path / "heavy.jsonl")
    out = tmp_path / "advice.json"
    assert specgate(["calibrate-split", "--day", str(log), "--engines", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "advice: 1 speculative + 1 plain engines (predict 1s+1p; best mean_s)" in text
    doc = json.loads(out.read_text())
    assert doc["best_k"] == 1 and [p["k"] for p in doc["predictions"]] == [0, 1, 1, 2]
    assert specgate(["calibrate-split", "--day", str(log), "--no-predict"]) == 0
    assert "advice: 0 speculative + 2 plain engines (all-plain; best mean_s)" in capsys.readouterr().out
    assert specgate(["calibrate-split", "--day", str(tmp_path / "missing.jsonl")]) == 2
    assert specgate(["calibrate-split", "--day", str(log), "--saturation-enter", "4",
                     "--saturation-exit", "4"]) == 2
    assert "must be < --saturation-enter" in capsys.readouterr().err


def test_day_benchmark_writes_its_tables_json_and_plots(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "day.py"), "--engines", "2", "--shapes",
                           "light", "--out", str(tmp_path), "--logs"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "light, N=2: 610 requests over 600 s" in proc.stdout
    doc = json.loads((tmp_path / "day.json").read_text())
    assert [(r["shape"], r["k"], r["deployment"]) for r in doc["runs"]] == [
        ("light", 0, "all-plain"), ("light", 1, "routed 1s+1p"), ("light", 1, "predict 1s+1p"),
        ("light", 2, "all-spec"), ("light", 2, "specgate 2s+0p")]
    # the router at the advised split, against the better static deployment of the same engines
    assert "advice 2 spec + 0 plain (all-spec); specgate 2s+0p: mean 0.989x, p90 0.975x the better " \
        "static deployment (all-spec)" in proc.stdout
    assert (tmp_path / "light-n2.png").read_bytes()[:4] == b"\x89PNG"
    assert len(read_request_log(tmp_path / "light-n2-all-spec.jsonl")) == 610
