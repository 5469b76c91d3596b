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
    assert "advice: 1 speculative + 1 plain engines (learned 1s+1p; best mean_s)" in text
    doc = json.loads(out.read_text())
    assert doc["best_k"] == 1 and [p["k"] for p in doc["predictions"]] == [0, 1, 1, 1, 2]
    assert specgate(["calibrate-split", "--day", str(log), "--no-predict"]) == 0
    # without the true speed model the learned router still makes the split pay
    assert "advice: 1 speculative + 1 plain engines (learned 1s+1p; best mean_s)" in capsys.readouterr().out
    assert specgate(["calibrate-split", "--day", str(tmp_path / "missing.jsonl")]) == 2
    assert specgate(["calibrate-split", "--day", str(log), "--saturation-enter", "4",
                     "--saturation-exit", "4"]) == 2
    assert "must be < --saturation-enter" in capsys.readouterr().err


def test_day_benchmark_writes_its_tables_json_and_plots(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "day.py"), "--engines", "2", "--shapes",
                           "light", "--families", "default", "--out", str(tmp_path), "--logs"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "default / light, N=2: 610 requests over 600 s" in proc.stdout
    doc = json.loads((tmp_path / "day.json").read_text())
    assert [(r["family"], r["shape"], r["k"], r["deployment"]) for r in doc["runs"]] == [
        ("default", "light", 0, "all-plain"), ("default", "light", 1, "routed 1s+1p"),
        ("default", "light", 1, "learned 1s+1p"), ("default", "light", 1, "predict 1s+1p"),
        ("default", "light", 2, "all-spec"),
        ("default", "light", 2, "all-adaptive"), ("default", "light", 2, "specgate 2s+0p")]
    assert doc["families"]["default"]["adaptive_max_batch"] == 41
    # the router at the advised split, against the better static deployment of the same engines
    # (all-adaptive ties all-spec on the light day: its batches stay below 41)
    assert "advice 2 spec + 0 plain (all-spec); specgate 2s+0p: mean 0.989x, p90 0.975x the better " \
        "static deployment (all-spec)" in proc.stdout
    assert doc["advice"][0]["static"] == "all-spec"
    assert (tmp_path / "default-light-n2.png").read_bytes()[:4] == b"\x89PNG"
    assert len(read_request_log(tmp_path / "default-light-n2-all-spec.jsonl")) == 610


def test_day_benchmark_quick_run_of_a_shift_day(tmp_path: Path) -> None:
    """--quick: a quarter of the day, N = 2; the windows after the shift in day.json and the
    recovery line per routed row."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "day.py"), "--quick", "--families",
                           "kv_limited", "--shapes", "shift_sampled", "--out", str(tmp_path), "--no-plots"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "kv_limited / shift_sampled, N=2: 379 requests over 150 s (long = prompt > 2048 tokens, mix shifts " \
        "at 75 s)" in proc.stdout
    assert "after the shift, per 30 s of arrivals, mean / all-plain's:" in proc.stdout
    doc = json.loads((tmp_path / "day.json").read_text())
    assert doc["quick"] is True and {r["engines"] for r in doc["runs"]} == {2}
    predict = next(r for r in doc["runs"] if r["deployment"] == "predict 1s+1p")
    assert [w["start_s"] for w in predict["windows"]] == [75.0, 105.0, 135.0]
    assert set(doc["advice"][0]["recovery_s"]) == {"routed 1s+1p", "learned 1s+1p", "predict 1s+1p",
                                                   doc["advice"][0]["specgate"]}
    bad = subprocess.run([sys.executable, str(root / "benchmarks" / "day.py"), "--families", "nope", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "unknown engine family 'nope'" in bad.stderr


def test_calibrate_split_replays_one_target_of_a_load_test(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def row(target: str, phase: str, rep: int, i: int) -> dict:
        return {"target": target, "bucket": "64-128", "load": 1.0, "phase": phase, "rep": rep, "index": i,
                "t_start": 0.1 * i, "e2e_s": 0.08, "ttft_s": 0.01, "tpot_s": 0.005, "prompt_tokens": 100,
                "output_tokens": 16, "max_tokens": 16, "error": None, "temperature": 0.0}

    rows = [row(t, phase, rep, i) for rep in range(2) for t in ("spec", "plain", "router")
            for phase in ("warmup", "measure") for i in range(4)]
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert specgate(["calibrate-split", "--day", str(log), "--engines", "2", "--no-predict"]) == 0
    out, err = capsys.readouterr()
    # two runs of 4 requests, each 0.38 s long (0.3 + 0.08), laid end to end
    assert ("day: target 'router' of the load test: 8 measured requests of 2 runs, laid end to end at the times "
            "its loop sent them (0.8 s); 0 runs replayed as closed loops (0 requests sent when a response "
            "ended), each run after the previous one's end (4 requests); left out: 8 warmup, 32 other targets") in err
    assert "no --report: the targets' engines are unknown" in err
    assert out.startswith("goodput/s: requests per second of the day (first to last arrival, 0.7 s) finishing "
                          "with TTFT <= 5 s and TPOT <= 0.035 s\n")
    assert specgate(["calibrate-split", "--day", str(log), "--target", "spec", "--no-predict",
                     "--tpot-slo-s", "0.01"]) == 0
    assert "TPOT <= 0.01 s" in capsys.readouterr().out
    assert specgate(["calibrate-split", "--day", str(log), "--target", "nope"]) == 2
    assert "target 'nope' is not in the load test (targets: spec, plain, router)" in capsys.readouterr().err
