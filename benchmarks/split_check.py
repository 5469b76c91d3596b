"""Re-run ``specgate calibrate-split`` on recorded real-engine runs and tabulate the speed fit and
the replay's check against what each load test measured.

Each run directory holds what ``benchmarks/realcpu.py`` wrote (``report.json``,
``requests.jsonl``); the command is the one that script runs::

    specgate calibrate-split --day RUN/requests.jsonl --report RUN/report.json --engines N --out OUT

Per run the table gives the plain and speculative points the fit used at full weight
(``kept``), at a lower weight (``down``: runs that disagree, :mod:`loadtests.speedfit`) and left
out (``dropped``), the plain pool's fitted ``t0_s`` / ``batch_knee`` / ``attn_s_per_token``, and
per target the measured and predicted mean end-to-end latency (s) and the error.

With ``--by-point TARGET`` it also prints, per run and operating point (bucket x load), that
target's measured mean per-request latency (end to end, TTFT, TPOT) beside the replay's: the
whole day as calibrate-split replays it, and each run replayed alone (no run before it).

Usage::

    python benchmarks/split_check.py runs/realcpu_base5 runs/realcpu_k ... [--engines 2] [--json OUT]
        [--by-point plain]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def check_run(run: Path, engines: int, out_dir: Path) -> dict[str, Any]:
    """Run calibrate-split on ``run``; ``{"run", "returncode", "fit", "checks", "stderr"}``."""
    out = out_dir / f"{run.name}.split.json"
    cmd = [sys.executable, "-c", "import sys; from router.cli import main; sys.exit(main())", "calibrate-split",
           "--day", str(run / "requests.jsonl"), "--report", str(run / "report.json"), "--engines", str(engines),
           "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    doc = json.loads(out.read_text()) if p.returncode == 0 and out.exists() else {}
    fit = doc.get("speed_model") or {}
    return {"run": run.name, "returncode": p.returncode, "fit": fit, "checks": doc.get("checks") or [],
            "stderr": p.stderr[-2000:]}


def _counts(fit: dict[str, Any], role: str) -> str:
    pts = (fit.get("points") or {}).get(role) or []
    full = sum(1 for p in pts if p.get("weight", 1.0) >= 1.0)
    down = len(pts) - full
    dropped = sum(1 for w in fit.get("warnings", []) if w.startswith(f"{role}: ") and "left out of the fit" in w)
    return f"{full}/{down}/{dropped}"


def table(rows: list[dict[str, Any]]) -> str:
    """The text table (module docstring)."""
    lines = [(f"{'run':<16} {'plain k/d/x':>11} {'spec k/d/x':>10} {'t0 ms':>7} {'knee':>6} {'attn us':>8}  "
              "per target: measured s -> predicted s (error)")]
    for r in rows:
        fit = r["fit"]
        plain = (fit.get("pools") or {}).get("plain") or {}
        t0, knee, attn = plain.get("t0_s"), plain.get("batch_knee"), plain.get("attn_s_per_token")
        cells = "; ".join(f"{c['target']} {c['measured']['mean_s']:.3f} -> {c['predicted']['mean_s']:.3f} "
                          f"({c['predicted']['mean_s'] / c['measured']['mean_s'] - 1:+.0%})" for c in r["checks"])
        if r["returncode"]:
            cells = f"exit {r['returncode']}: {r['stderr'].strip().splitlines()[-1] if r['stderr'].strip() else ''}"
        lines.append(f"{r['run']:<16} {_counts(fit, 'plain'):>11} {_counts(fit, 'spec'):>10} "
                     f"{'-' if t0 is None else f'{t0 * 1e3:.2f}':>7} {'-' if knee is None else f'{knee:.2f}':>6} "
                     f"{'-' if attn is None else f'{attn * 1e6:.2f}':>8}  {cells}")
    return "\n".join(lines) + "\n"


def by_point(run: Path, target: str) -> str:
    """The per-point table of ``target`` in ``run`` (module docstring)."""
    import statistics
    from collections import defaultdict

    from loadtests.dayreport import read_request_log
    from loadtests.dayrouter import settings_for
    from loadtests.dayshapes import default_engine_model
    from loadtests.daysim import simulate_day
    from loadtests.report import load_report
    from loadtests.speedfit import engine_model_from_fit, fit_speed_model
    from loadtests.split import specgate_at
    from loadtests.splitlog import load_test_day, target_deployments

    rows = read_request_log(run / "requests.jsonl")
    report = load_report(run / "report.json")
    model = engine_model_from_fit(fit_speed_model(report), default_engine_model())
    settings = settings_for(model)
    label, _, dep = target_deployments(report, lambda k, n: specgate_at(k, n, settings))[target]
    day = load_test_day(rows, target)
    res = simulate_day(day.requests, dep, model, follows=day.follows)
    out: dict[tuple[str, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    runs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("target") == target and r.get("phase") == "measure":
            runs.setdefault((r["bucket"], r["load"], r["rep"]), []).append(r)
    for (bucket, load, _), run_rows in runs.items():   # each run alone: its requests, the same loops
        alone = load_test_day(run_rows, target)
        for rec in simulate_day(alone.requests, dep, model, follows=alone.follows).records:
            out[(bucket, load)]["alone"].append(rec.e2e_s or math.nan)
    for req, meas, rec in zip(day.requests, day.measured, res.records, strict=True):
        row = out[(req.kind, _load_of(runs, req.kind, meas))]
        for key, v in (("m_e2e", meas.e2e_s), ("p_e2e", rec.e2e_s), ("m_ttft", meas.ttft_s), ("p_ttft", rec.ttft_s),
                       ("m_tpot", meas.tpot_s), ("p_tpot", rec.tpot_s)):
            row[key].append(math.nan if v is None else float(v))
    lines = [f"{run.name} {target} ({label}): mean per request, measured / replayed (day) / replayed alone",
             f"{'point':<18} {'n':>3} {'e2e s':>22} {'ttft s':>14} {'tpot ms':>14}"]
    for (bucket, load), d in sorted(out.items()):
        f = statistics.fmean
        lines.append(f"{bucket + ' x ' + format(load, 'g'):<18} {len(d['m_e2e']):>3} "
                     f"{f(d['m_e2e']):>6.3f} {f(d['p_e2e']):>7.3f} {f(d['alone']):>7.3f} "
                     f"{f(d['m_ttft']):>6.3f} {f(d['p_ttft']):>7.3f} "
                     f"{1e3 * f(d['m_tpot']):>6.2f} {1e3 * f(d['p_tpot']):>7.2f}")
    return "\n".join(lines) + "\n"


def _load_of(runs: dict[tuple[Any, ...], list[dict[str, Any]]], bucket: str, meas: Any) -> float:
    """The load of the run whose row measured ``meas`` (matched by bucket, e2e and ttft)."""
    for (b, load, _), run_rows in runs.items():
        if b == bucket and any(r.get("e2e_s") == meas.e2e_s and r.get("ttft_s") == meas.ttft_s for r in run_rows):
            return float(load)
    raise LookupError(f"no run of {bucket} measured {meas}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--json", help="write the rows (fit, checks) here")
    ap.add_argument("--by-point", metavar="TARGET", help="also the per-point replay of this target (module docstring)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [check_run(Path(r), args.engines, Path(tmp)) for r in args.runs]
    sys.stdout.write(table(rows))
    if args.by_point:
        for r in args.runs:
            sys.stdout.write(by_point(Path(r), args.by_point))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
