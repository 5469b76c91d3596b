"""Does routing pay at equal hardware? A simulated day per shape, every deployment of N engines.

    /work/main/.venv/bin/python benchmarks/day.py [--engines 2,4] [--seed 0] [--out runs/day]

For each named day shape (:mod:`loadtests.dayshapes`: ``light``, ``heavy``, ``mixed``, rates
scaled to N engines) and each N, the same requests go through ``all-spec`` and ``all-plain``
(client round robin), and for k = 1..N-1 ``routed ks+(N-k)p`` (``router.policy.decide`` through
:class:`loadtests.dayrouter.PolicyRouter` on its thresholds alone, from
:func:`loadtests.dayrouter.settings_for`) and ``predict ks+(N-k)p`` (the same with every pool's
speed model: the choice by predicted completion time) in the discrete-event simulator
(:mod:`loadtests.daysim`; virtual time, seeded). Printed per shape: mean / p90 end-to-end
latency, mean for long prompts, goodput under the objective of :mod:`loadtests.dayreport`
(TTFT <= 5 s and TPOT <= 35 ms), decisions by reason. Written under ``--out``: ``day.json``
(every summary), ``<shape>-n<N>.png`` (pool loads and accept-length gauges over the day) and
``<shape>-n<N>-<deployment>.jsonl`` request logs (``--logs``; input to
``specgate calibrate-split``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadtests.dayreport import Objective, plot_loads, summarize, write_request_log
from loadtests.dayrouter import settings_for
from loadtests.dayshapes import SHAPES, default_engine_model, get_shape
from loadtests.daysim import simulate_day
from loadtests.split import deployments_for


def _f(v: object, w: int = 8) -> str:
    return f"{v:>{w}.2f}" if isinstance(v, float) else f"{'-':>{w}}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="2,4", help="engine counts N, comma-separated (default 2,4)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="day shapes (default all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the day and the engines")
    ap.add_argument("--out", default="runs/day", help="output directory (default runs/day)")
    ap.add_argument("--logs", action="store_true", help="also write each run's request log (JSONL)")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    model = default_engine_model()
    settings = settings_for(model)
    objective = Objective()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {"seed": args.seed, "policy": settings.as_dict(), "objective": objective.__dict__,
                              "model": {**model.__dict__, "speed": model.speed.__dict__}, "runs": []}
    t_start = time.process_time()
    print(f"policy: long_prompt_tokens {settings.long_prompt_tokens}, saturation "
          f"{settings.saturation_enter}/{settings.saturation_exit}, acceptance bypass below "
          f"{settings.min_expected_speedup}x (gamma {settings.gamma}, c {settings.drafter_cost_ratio}); "
          f"'predict': pools carry the engines' true speed model")
    for n in (int(x) for x in args.engines.split(",") if x):
        for name in args.shapes.split(","):
            shape = get_shape(name, n)
            reqs = shape.requests(args.seed)
            results = []
            print(f"\n{name}, N={n}: {len(reqs)} requests over {shape.duration_s:.0f} s "
                  f"(long = prompt > {shape.long_prompt_tokens} tokens)")
            print(f"{'deployment':<16} {'mean s':>8} {'p90 s':>8} {'long s':>8} {'goodput/s':>10} "
                  f"{'good %':>7}  reasons")
            for k, dep in deployments_for(n, settings):
                res = simulate_day(reqs, dep, model, seed=args.seed)
                results.append(res)
                s = summarize(res, day_s=shape.duration_s, long_prompt_tokens=shape.long_prompt_tokens,
                              objective=objective)
                doc["runs"].append({"shape": name, "engines": n, "k": k, **s})  # type: ignore[union-attr]
                reasons = ", ".join(f"{a} {b}" for a, b in s["reasons"].items())
                print(f"{dep.name:<16} {_f(s['mean_s'])} {_f(s['p90_s'])} {_f(s['long_mean_s'])} "
                      f"{_f(s['goodput_rps'], 10)} {100 * s['goodput_share']:>6.1f}%  {reasons}")
                if args.logs:
                    write_request_log(res.records, out / f"{name}-n{n}-{dep.name.replace(' ', '_')}.jsonl")
            if not args.no_plots:
                plot_loads(results, out / f"{name}-n{n}.png", title=f"{name} day, N={n}")
    (out / "day.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"\nwrote {out / 'day.json'}" + ("" if args.no_plots else f" and the plots in {out}")
          + f"; CPU {time.process_time() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
