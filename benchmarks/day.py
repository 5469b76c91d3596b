"""Does routing pay at equal hardware? A simulated day per shape, every deployment of N engines.

    /work/main/.venv/bin/python benchmarks/day.py [--engines 2,4] [--seed 0] [--out runs/day]
    /work/main/.venv/bin/python benchmarks/day.py --real [--config examples/demo.yaml] [--out runs/day-real]

``--real`` runs a short day on real SGLang CPU pools instead, for correctness
(:mod:`loadtests.dayreal`); everything below is the simulator.

For each named day shape (:mod:`loadtests.dayshapes`: ``light``, ``heavy``, ``mixed``, rates
scaled to N engines) and each N, the same requests go through ``all-spec`` and ``all-plain``
(client round robin), and for k = 1..N-1 ``routed ks+(N-k)p`` (``router.policy.decide`` through
:class:`loadtests.dayrouter.PolicyRouter` on its thresholds alone, from
:func:`loadtests.dayrouter.settings_for`) and ``predict ks+(N-k)p`` (the same with every pool's
speed model: the choice by predicted completion time) in the discrete-event simulator
(:mod:`loadtests.daysim`; virtual time, seeded). Printed per shape: mean / p90 end-to-end
latency, mean for long prompts, goodput under the objective of :mod:`loadtests.dayreport`
(TTFT <= 5 s and TPOT <= 35 ms), decisions by reason. Then the split ``specgate
calibrate-split`` advises on that day (:func:`loadtests.split.best_prediction` over the rows
above, lowest mean; ties to fewer speculative engines) is run with the router in front
(``specgate ks+(N-k)p``, :func:`loadtests.split.specgate_at`: at k = N the router fronts the
speculative engines alone, its bypasses falling back to them), and its mean is printed as a
ratio of the better static deployment's (``all-spec`` / ``all-plain``, the lower mean).
Written under ``--out``: ``day.json`` (every summary, and ``advice``: per shape and N the
advised k, specgate's mean there and the ratio), ``<shape>-n<N>.png`` (pool loads and accept-length gauges over the day) and
``<shape>-n<N>-<deployment>.jsonl`` request logs (``--logs``; input to
``specgate calibrate-split``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadtests.dayreport import Objective, plot_loads, summarize, write_request_log
from loadtests.dayrouter import settings_for
from loadtests.dayshapes import (
    SHAPES,
    DayShape,
    EngineModel,
    Request,
    default_engine_model,
    get_shape,
)
from loadtests.daysim import DayResult, Deployment, simulate_day
from loadtests.split import best_prediction, deployments_for, specgate_at


def _f(v: object, w: int = 8) -> str:
    return f"{v:>{w}.2f}" if isinstance(v, float) else f"{'-':>{w}}"


def _run(reqs: list[Request], shape: DayShape, k: int, dep: Deployment, model: EngineModel,
         args: argparse.Namespace, objective: Objective, results: list[DayResult], out: Path, *,
         advised: bool = False) -> dict[str, Any]:
    """Simulate one deployment, print its row; returns its summary (``shape``, ``engines``, ``k``,
    ``advised`` added)."""
    res = simulate_day(reqs, dep, model, seed=args.seed)
    results.append(res)
    s = summarize(res, day_s=shape.duration_s, long_prompt_tokens=shape.long_prompt_tokens, objective=objective)
    reasons = ", ".join(f"{a} {b}" for a, b in s["reasons"].items())
    refused = f", refused {s['refused']}" if s["refused"] else ""
    print(f"{dep.name:<16} {_f(s['mean_s'])} {_f(s['p90_s'])} {_f(s['long_mean_s'])} "
          f"{_f(s['goodput_rps'], 10)} {100 * s['goodput_share']:>6.1f}%  {reasons}{refused}")
    if args.logs:
        write_request_log(res.records, out / f"{shape.name}-n{dep.engines}-{dep.name.replace(' ', '_')}.jsonl")
    return {"shape": shape.name, "engines": dep.engines, "k": k, "advised": advised, **s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="2,4", help="engine counts N, comma-separated (default 2,4)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="day shapes (default all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the day and the engines")
    ap.add_argument("--out", default="runs/day", help="output directory (default runs/day)")
    ap.add_argument("--logs", action="store_true", help="also write each run's request log (JSONL)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--real", action="store_true", help="instead: a short day on the real demo stack (real SGLang "
                    "CPU pools), checking every response (loadtests/dayreal.py; correctness, not speed)")
    ap.add_argument("--config", default="examples/demo.yaml", help="--real: the stack's config")
    args = ap.parse_args(argv)
    if args.real:
        from loadtests.dayreal import run_real_day

        return run_real_day(Path(args.config), Path(args.out if args.out != "runs/day" else "runs/day-real"),
                            seed=args.seed)
    model = default_engine_model()
    settings = settings_for(model)
    objective = Objective()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {"seed": args.seed, "policy": settings.as_dict(), "objective": objective.__dict__,
                              "model": {**model.__dict__, "speed": model.speed.__dict__}}
    runs: list[dict[str, Any]] = []
    advice: list[dict[str, Any]] = []
    t_start = time.process_time()
    print(f"policy: long_prompt_tokens {settings.long_prompt_tokens}, saturation "
          f"{settings.saturation_enter}/{settings.saturation_exit}, acceptance bypass below "
          f"{settings.min_expected_speedup}x (gamma {settings.gamma}, c {settings.drafter_cost_ratio}); "
          f"'predict': pools carry the engines' true speed model")
    for n in (int(x) for x in args.engines.split(",") if x):
        for name in args.shapes.split(","):
            shape = get_shape(name, n)
            reqs = shape.requests(args.seed)
            results: list[DayResult] = []
            print(f"\n{name}, N={n}: {len(reqs)} requests over {shape.duration_s:.0f} s "
                  f"(long = prompt > {shape.long_prompt_tokens} tokens)")
            print(f"{'deployment':<16} {'mean s':>8} {'p90 s':>8} {'long s':>8} {'goodput/s':>10} "
                  f"{'good %':>7}  reasons")
            rows: list[dict[str, Any]] = []
            for k, dep in deployments_for(n, settings):
                rows.append(_run(reqs, shape, k, dep, model, args, objective, results, out))
            best = best_prediction(rows)
            k = int(best["k"])
            sg = _run(reqs, shape, k, specgate_at(k, n, settings), model, args, objective, results, out, advised=True)
            runs.extend([*rows, sg])
            static = min((r for r in rows if r["deployment"] in ("all-spec", "all-plain")), key=lambda r: r["mean_s"])
            ratio, p90 = sg["mean_s"] / static["mean_s"], sg["p90_s"] / static["p90_s"]
            advice.append({"shape": name, "engines": n, "k": k, "advised": best["deployment"],
                           "specgate": sg["deployment"], "specgate_mean_s": sg["mean_s"],
                           "static": static["deployment"], "static_mean_s": static["mean_s"],
                           "mean_ratio": ratio, "p90_ratio": p90})
            print(f"advice {k} spec + {n - k} plain ({best['deployment']}); {sg['deployment']}: mean "
                  f"{ratio:.3f}x, p90 {p90:.3f}x the better static deployment ({static['deployment']})")
            if not args.no_plots:
                plot_loads(results, out / f"{name}-n{n}.png", title=f"{name} day, N={n}")
    doc.update(runs=runs, advice=advice)
    (out / "day.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"\nwrote {out / 'day.json'}" + ("" if args.no_plots else f" and the plots in {out}")
          + f"; CPU {time.process_time() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
