"""The load-test quick start (docs/loadtests.md, "Quick start without GPUs") run as documented,
with what the router's model predicted beside what happened.

    .venv/bin/python benchmarks/quickstart.py [--runs 1] [--out runs/quickstart_check.json]
        [--router-arg routing.learning.check.enabled=false ...] [--workdir DIR]

Each run starts the quick start's paced fakes (``specgate loadtest-fakes`` with the documented
flags) and ``specgate router`` over ``examples/loadtest-fakes.yaml`` (ports moved to free ones;
``--router-arg dotted.path=yaml`` changes a setting), waits for ``/ready``, runs the documented
grid (``specgate loadtest``: 3 buckets x 3 concurrencies, spec, plain and the router
interleaved by the load tester), then reads the router's ``/ready`` and ``/metrics``.

Printed per run: the decode speedup of the router over the better of its two targets in each
cell (``router / max(spec, plain)``: the quick start's done-means is >= 0.95 everywhere), the
same for the mean end-to-end latency (``best / router``) with the router's requests per pool and
reason in that cell (the load tester's ``x-specgate-pool`` / ``x-specgate-reason``), the
router's decisions by reason over the run,
and per pool the checked predictions (``/ready``'s ``prediction``: the median relative error
of the completion times per class and context bucket, the fallback state) and the learned
speed model. JSON to ``--out``. Every process started is stopped on the way out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.outofbox_http import _set
from serving.ports import free_port

SPECGATE = str(Path(sys.executable).with_name("specgate"))
FAKE_FLAGS = ["--batch-knee", "8", "--alpha", "0.8", "--alpha-knee-tokens", "256",
              "--alpha-drop-per-doubling", "0.25", "--context-length", "8192"]
GRID = ["--grid", "ctx=64-128,256-512,1k-2k;conc=1,4,16", "--output-tokens", "16", "--requests", "16",
        "--warmup", "1", "--repetitions", "3", "--copy-fraction", "0.25", "--gamma", "4", "--drafter-cost", "0.05"]


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url}/ready did not answer 200 within {timeout} s")


def _reasons(metrics: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in re.finditer(r'^specgate_requests_total\{([^}]*)\} (\S+)$', metrics, re.MULTILINE):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        key = f"{labels['pool']}/{labels['reason']}"
        out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


def one_run(work: Path, router_args: list[str]) -> dict[str, Any]:
    """One quick start: fakes, router, grid; the figures of the module docstring."""
    spec_port, plain_port, router_port = free_port(), free_port(), free_port()
    doc = yaml.safe_load((ROOT / "examples/loadtest-fakes.yaml").read_text())
    doc["model"]["tokenizer"] = str(ROOT / "examples" / doc["model"]["tokenizer"])
    doc["pools"][0]["endpoints"] = [f"http://127.0.0.1:{spec_port}"]
    doc["pools"][1]["endpoints"] = [f"http://127.0.0.1:{plain_port}"]
    doc["server"]["port"] = router_port
    for arg in router_args:
        key, _, value = arg.partition("=")
        _set(doc, key, yaml.safe_load(value))
    cfg = work / "router.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    fakes = _start([SPECGATE, "loadtest-fakes", "--spec-port", str(spec_port), "--plain-port", str(plain_port),
                    *FAKE_FLAGS], work / "fakes.log")
    router = _start([SPECGATE, "router", "--config", str(cfg)], work / "router.log")
    url = f"http://127.0.0.1:{router_port}"
    try:
        _wait_ready(url)
        started = time.monotonic()
        subprocess.run([SPECGATE, "loadtest", "--spec", f"http://127.0.0.1:{spec_port}",
                        "--plain", f"http://127.0.0.1:{plain_port}", "--router", url, *GRID,
                        "--out", str(work / "lt"), "--quiet"], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
        wall = time.monotonic() - started
        ready = httpx.get(url + "/ready", timeout=5).json()
        metrics = httpx.get(url + "/metrics", timeout=5).text
    finally:
        _stop(router)
        _stop(fakes)
    report = json.loads((work / "lt" / "report.json").read_text())
    tables = report["tables"]
    cells: dict[str, dict[str, Any]] = {}
    for row_p, row_s in zip(tables["router_vs_plain"]["rows"], tables["router_vs_spec"]["rows"], strict=True):
        for load, vp in row_p["values"].items():
            vs = row_s["values"][load]
            cells[f"{row_p['bucket']} x {load}"] = {
                "router_vs_plain": vp, "router_vs_spec": vs,
                "router_vs_best": None if vp is None or vs is None else min(vp, vs)}
    for point in report["points"]:
        key = f"{point['bucket']} x {point['load']:g}"
        e2e = {t: v["e2e_s"]["mean"] for t, v in point["targets"].items() if v.get("e2e_s", {}).get("n")}
        if key in cells and {"spec", "plain", "router"} <= set(e2e):
            cells[key]["e2e_best_over_router"] = min(e2e["spec"], e2e["plain"]) / e2e["router"]
        if key in cells:
            tp = point["targets"].get("router") or {}
            cells[key]["router_routed"] = tp.get("routed") or {}
            cells[key]["router_reasons"] = tp.get("reasons") or {}
    pools = {name: {"prediction": p.get("prediction"), "speed_model": p.get("speed_model"),
                    "accept_length_estimate": p.get("accept_length_estimate")}
             for name, p in ready["pools"].items()}
    return {"wall_s": round(wall, 1), "cells": cells, "reasons": _reasons(metrics), "pools": pools}


def _print(run: dict[str, Any]) -> None:
    print(f"grid wall {run['wall_s']} s")
    print(f"{'cell':<14} {'router/plain':>12} {'router/spec':>11} {'router/best':>11} {'e2e best/router':>15}")
    for key, c in run["cells"].items():
        def f(v: Any) -> str:
            return "-" if v is None else f"{v:.2f}x"
        print(f"{key:<14} {f(c['router_vs_plain']):>12} {f(c['router_vs_spec']):>11} {f(c['router_vs_best']):>11} "
              f"{f(c.get('e2e_best_over_router')):>15}  {c.get('router_routed')} {c.get('router_reasons')}")
    worst = min((c["router_vs_best"] for c in run["cells"].values() if c["router_vs_best"] is not None), default=None)
    print(f"worst router/best decode speedup: {worst if worst is None else round(worst, 3)}")
    print("decisions: " + ", ".join(f"{k} {v:g}" for k, v in sorted(run["reasons"].items())))
    for name, p in run["pools"].items():
        pred = p["prediction"] or {}
        comp = pred.get("completion") or {}
        cells = {k: v["median_relative_error"] for k, v in (comp.get("cells") or {}).items()}
        print(f"pool {name}: completion median relative error {pred.get('median_relative_error')} over "
              f"{pred.get('checks')} recent checks (checked {pred.get('checked')}), per cell {cells}; "
              f"ttft {((pred.get('ttft') or {}).get('median_relative_error'))}; fallback {pred.get('fallback')} "
              f"(turned on {pred.get('fallbacks')}x)")
        sm = p["speed_model"] or {}
        print(f"  speed model: decode_s_per_token {sm.get('decode_s_per_token')}, batch_knee {sm.get('batch_knee')}, "
              f"prefill_s_per_token {sm.get('prefill_s_per_token')}, accept_length {sm.get('accept_length')}; "
              f"live accept-length estimate {p['accept_length_estimate']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "quickstart_check.json")
    ap.add_argument("--router-arg", action="append", default=[], metavar="DOTTED=YAML")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keep each run's config, logs and load-test report under DIR/run<i> (default: a "
                         "temporary directory, removed)")
    args = ap.parse_args(argv)
    runs = []
    for i in range(args.runs):
        if args.workdir is not None:
            work = args.workdir / f"run{i + 1}"
            work.mkdir(parents=True, exist_ok=True)
            run = one_run(work, args.router_arg)
        else:
            with tempfile.TemporaryDirectory(prefix="quickstart-") as tmp:
                run = one_run(Path(tmp), args.router_arg)
        print(f"== run {i + 1} of {args.runs}")
        _print(run)
        runs.append(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"router_args": args.router_arg, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
