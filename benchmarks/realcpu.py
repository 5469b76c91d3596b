"""The router's model checked on the real SGLang CPU pools (``make loadtest``'s stack, learning on).

    .venv/bin/python benchmarks/realcpu.py [--out runs/realcpu] [--grid "ctx=100-300,1000-1400;conc=1,4,12"]
        [--repetitions 3] [--time-limit-s 600] [--engines 2]

One start of the demo's pools (``examples/demo.yaml``: the tiny Llama, a speculative EAGLE-3
pool and a plain one, both real SGLang 0.5.23 CPU servers) and the router, used for every check:

1. the config is ``examples/demo.yaml`` with ``routing.learning.enabled: true`` (the demo turns
   it off to stage its thresholds) and an admin key (``auth.admin_api_key``, for the planner's
   window); written to ``OUT/config.yaml`` with absolute paths;
2. :func:`loadtests.local.run_local` (``specgate loadtest-local``): the comparison grid against
   the spec pool, the plain pool and the router, the report, the calibration; its ``run.json``
   carries the router's ``/ready`` view after the grid (``router_view``: per pool the learned
   speed model and the checked predictions, :mod:`router.decision.prediction_check`);
3. while the stack is still up: ``specgate plan --router URL --engines N --once --json`` (its
   standard output, exit status and standard error kept);
4. after the stop: ``specgate calibrate-split --day OUT/requests.jsonl --report OUT/report.json
   --engines N --out OUT/split.json``: every target's measured mean beside the simulator's
   prediction for the same requests.

Printed: per pool the median relative error of the router's completion-time predictions and
the learned ``decode_s_per_token`` / ``batch_knee``, the fitted speed blocks of the calibration,
the plan's advice, and calibrate-split's predicted against measured mean per target. JSON to
``OUT/realcpu.json``. Every process started is stopped on the way out (``run_local``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SPECGATE = str(Path(sys.executable).with_name("specgate"))
ADMIN_KEY = "realcpu-admin-key"


def learning_config(src: Path, out: Path) -> Path:
    """``src`` with learning on, an admin key and every path absolute, written to ``out``."""
    from serving.demo import absolute_config

    doc = absolute_config(src)
    doc.setdefault("routing", {})["learning"] = {"enabled": True}
    doc.setdefault("auth", {})["admin_api_key"] = ADMIN_KEY
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def main(argv: list[str] | None = None) -> int:
    from loadtests.local import DEFAULT_GRID, LocalSettings, run_local

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "examples" / "demo.yaml"))
    ap.add_argument("--out", default="runs/realcpu")
    ap.add_argument("--grid", default=DEFAULT_GRID)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--time-limit-s", type=float, default=600.0)
    ap.add_argument("--engines", type=int, default=2)
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = learning_config(Path(args.config), out / "config.yaml")
    doc: dict[str, Any] = {"config": str(config), "grid": args.grid, "repetitions": args.repetitions}

    def plan(stack: Any) -> None:
        env = {**os.environ, "SPECGATE_ADMIN_KEY": ADMIN_KEY}
        cmd = [SPECGATE, "plan", "--router", stack.urls["router"], "--engines", str(args.engines), "--once", "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        try:
            advice = json.loads(p.stdout) if p.stdout.strip() else None
        except ValueError:
            advice = None
        doc["plan"] = {"returncode": p.returncode, "advice": advice, "stdout": p.stdout[-4000:],
                       "stderr": p.stderr[-4000:]}
        print(f"plan: exit {p.returncode}, advised {None if advice is None else advice.get('advised')}", flush=True)

    settings = LocalSettings(config=config, out=out, grid=args.grid, repetitions=args.repetitions,
                             time_limit_s=args.time_limit_s, plots=False)
    res = run_local(settings, while_up=plan)
    doc.update({"exit_code": res.exit_code, "wall_s": res.wall_s, "phases_s": res.phases_s,
                "problems": res.problems, "load": {k: v for k, v in res.load.items() if k != "samples_1m"},
                "router_view": res.router_view, "patch": res.patch})
    cal = out / "calibration.json"
    if cal.exists():
        doc["speed_model"] = json.loads(cal.read_text()).get("speed_model")
    if (out / "requests.jsonl").exists():
        cmd = [SPECGATE, "calibrate-split", "--day", str(out / "requests.jsonl"), "--report", str(out / "report.json"),
               "--engines", str(args.engines), "--out", str(out / "split.json")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        doc["calibrate_split"] = {"returncode": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-4000:]}
        if (out / "split.json").exists():
            doc["calibrate_split"]["checks"] = json.loads((out / "split.json").read_text()).get("checks")
        print(p.stdout, p.stderr[-2000:], sep="\n", flush=True)
    for pool, view in (res.router_view or {}).items():
        pred, sm = view.get("prediction") or {}, view.get("speed_model") or {}
        print(f"pool {pool}: prediction median relative error {pred.get('median_relative_error')} over "
              f"{pred.get('checks')} checks (bias {(pred.get('completion') or {}).get('bias')}); learned "
              f"decode_s_per_token {sm.get('decode_s_per_token')}, batch_knee {sm.get('batch_knee')}, "
              f"observations {sm.get('observations')}")
    for pool in (res.patch or {}).get("pools", []):
        print(f"calibration speed block {pool['name']}: {pool['speed']}")
    (out / "realcpu.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"wrote {out / 'realcpu.json'}")
    return res.exit_code


if __name__ == "__main__":
    sys.exit(main())
