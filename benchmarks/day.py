"""Does routing pay at equal hardware? Simulated days per engine family and shape, every deployment of N engines.

    /work/main/.venv/bin/python benchmarks/day.py [--families default,kv_limited] [--shapes light,mixed]
        [--engines 2,4] [--seed 0] [--out runs/day] [--quick]
    /work/main/.venv/bin/python benchmarks/day.py --real [--config examples/demo.yaml] [--out runs/day-real]

``--real`` runs a short day on real SGLang CPU pools instead, for correctness
(:mod:`loadtests.dayreal`); everything below is the simulator.

For each engine family (:mod:`loadtests.dayfamilies`: ``default``, ``kv_limited``,
``long_attention``, ``moe_spec_pays``; default all), each named day shape
(:mod:`loadtests.dayshapes`: ``light``, ``heavy``, ``mixed``, ``shift_long``,
``shift_sampled``, fitted to the family and rates scaled to N engines) and each N, the same
requests go through ``all-spec``, ``all-plain`` and ``all-adaptive`` (client round robin;
``all-adaptive``: every engine speculative with in-engine adaptive speculation, plain decode
above the batch where speculation stops paying for that family,
:func:`loadtests.daysim.adaptive_max_batch`), and for k = 1..N-1 ``routed ks+(N-k)p``
(``router.decision.policy.decide`` through :class:`loadtests.dayrouter.PolicyRouter` on its thresholds
alone, from :func:`loadtests.dayrouter.settings_for` on the family's model, learning off),
``learned ks+(N-k)p`` (out of the box: no speed blocks, the speed models learned from the
router's own traffic, ``routing.learning``) and ``predict ks+(N-k)p`` (every pool's true speed
model, no learning: a perfectly calibrated config) in the discrete-event simulator
(:mod:`loadtests.daysim`; virtual time, seeded). Then the split ``specgate calibrate-split``
advises on that day (:func:`loadtests.split.best_prediction` over the split rows, lowest mean;
ties to fewer speculative engines) is run with the out-of-the-box router in front (``specgate
ks+(N-k)p``, :func:`loadtests.split.specgate_at`, learned: at k = N the router fronts the
speculative engines alone).

Printed per family, shape and N, one row per deployment: mean / p90 end-to-end latency, mean
for long prompts, goodput under the objective of :mod:`loadtests.dayreport` (TTFT <= 5 s and
TPOT <= 35 ms), the mean as a ratio of *the better static deployment*'s (the lowest mean of
``all-plain``, ``all-spec`` and ``all-adaptive``: :func:`loadtests.split.better_static`, named
in the advice line), decisions by reason. On a day with a mid-day shift (``shift_at_s``), per
routed row the ratio of its mean to the better static deployment's in each ``--window-s``
window of arrivals after the shift, and how long after the shift the first window is back
within 5% (:func:`loadtests.dayreport.recovery_s`). At the end, one summary line per family,
shape and N: the ratios of the best ``routed`` and ``predict`` rows and of ``specgate``.

``--quick`` shortens every day to a quarter (same rates: :meth:`loadtests.dayshapes.DayShape.shortened`)
and, unless ``--engines`` is given, runs N = 2 only: a CI-sized run.

Written under ``--out``: ``day.json`` (per family its model, fitting and policy; every run's
summary with ``family``, ``shape``, ``engines``, ``k``, ``mean_ratio`` and, after a shift,
``windows``; and ``advice``: per family, shape and N the advised k, specgate's mean there,
the better static deployment and the ratios), ``<family>-<shape>-n<N>.png`` (pool loads and
accept-length gauges over the day) and ``<family>-<shape>-n<N>-<deployment>.jsonl`` request
logs (``--logs``; input to ``specgate calibrate-split``).
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

from loadtests.dayfamilies import FAMILIES, EngineFamily, get_family
from loadtests.dayreport import (
    Objective,
    plot_loads,
    recovery_s,
    summarize,
    windowed_means,
    write_request_log,
)
from loadtests.dayrouter import PolicySettings, settings_for
from loadtests.dayshapes import SHAPES, DayShape, Request
from loadtests.daysim import DayResult, Deployment, adaptive_max_batch, all_adaptive, simulate_day
from loadtests.split import best_prediction, better_static, deployments_for, specgate_at

#: the day's length under --quick, as a share of the named day.
QUICK_FACTOR = 0.25


def _f(v: object, w: int = 8) -> str:
    return f"{v:>{w}.2f}" if isinstance(v, float) else f"{'-':>{w}}"


def family_settings(family: EngineFamily) -> PolicySettings:
    """The policy for a family: :func:`loadtests.dayrouter.settings_for` on its model, the
    long-prompt cut (32,768 tokens) and the crossover's context (12,288) at its prompt scale."""
    return settings_for(family.model, long_prompt_tokens=family.scaled_tokens(32768),
                        context_tokens=family.scaled_tokens(12288))


def _run(reqs: list[Request], shape: DayShape, k: int, dep: Deployment, family: EngineFamily,
         args: argparse.Namespace, objective: Objective, results: list[DayResult], out: Path, *,
         advised: bool = False) -> dict[str, Any]:
    """Simulate one deployment; returns its summary (``family``, ``shape``, ``engines``, ``k``,
    ``advised`` added; ``windows`` after a shift)."""
    res = simulate_day(reqs, dep, family.model, seed=args.seed)
    results.append(res)
    s = summarize(res, day_s=shape.duration_s, long_prompt_tokens=shape.long_prompt_tokens, objective=objective)
    if args.logs:
        write_request_log(res.records, out / f"{family.name}-{shape.name}-n{dep.engines}-"
                          f"{dep.name.replace(' ', '_')}.jsonl")
    row = {"family": family.name, "shape": shape.name, "engines": dep.engines, "k": k, "advised": advised, **s}
    if shape.shift_at_s is not None:
        row["windows"] = windowed_means(res.records, start_s=shape.shift_at_s, end_s=shape.duration_s,
                                        window_s=args.window_s)
    return row


def _print_row(r: dict[str, Any]) -> None:
    reasons = ", ".join(f"{a} {b}" for a, b in r["reasons"].items())
    refused = f", refused {r['refused']}" if r["refused"] else ""
    ratio = f"{r['mean_ratio']:>6.3f}x" if r.get("mean_ratio") is not None else f"{'-':>7}"
    print(f"{r['deployment']:<16} {_f(r['mean_s'])} {_f(r['p90_s'])} {_f(r['long_mean_s'])} "
          f"{_f(r['goodput_rps'], 10)} {100 * (r['goodput_share'] or 0):>6.1f}% {ratio}  {reasons}{refused}")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _day(family: EngineFamily, name: str, n: int, settings: PolicySettings, args: argparse.Namespace,
         objective: Objective, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One family, shape and N: every deployment, printed; returns (rows, advice)."""
    shape = family.shape(name, n)
    if args.quick:
        shape = shape.shortened(QUICK_FACTOR)
    reqs = shape.requests(args.seed)
    results: list[DayResult] = []
    shift = "" if shape.shift_at_s is None else f", mix shifts at {shape.shift_at_s:.0f} s"
    print(f"\n{family.name} / {name}, N={n}: {len(reqs)} requests over {shape.duration_s:.0f} s "
          f"(long = prompt > {shape.long_prompt_tokens} tokens{shift})")
    print(f"{'deployment':<16} {'mean s':>8} {'p90 s':>8} {'long s':>8} {'goodput/s':>10} "
          f"{'good %':>7} {'/static':>7}  reasons")
    rows = [_run(reqs, shape, k, dep, family, args, objective, results, out)
            for k, dep in deployments_for(n, settings)]
    amb = adaptive_max_batch(family.model, family.scaled_tokens(12288))
    adaptive = _run(reqs, shape, n, all_adaptive(n, amb), family, args, objective, results, out)
    best = best_prediction(rows)
    k = int(best["k"])
    sg = _run(reqs, shape, k, specgate_at(k, n, settings), family, args, objective, results, out, advised=True)
    every = [*rows, adaptive, sg]
    static = better_static(every)
    for r in every:
        r["mean_ratio"] = _ratio(r["mean_s"], static["mean_s"])
        _print_row(r)
    p90 = _ratio(sg["p90_s"], static["p90_s"])
    advice: dict[str, Any] = {
        "family": family.name, "shape": name, "engines": n, "k": k, "advised": best["deployment"],
        "specgate": sg["deployment"], "specgate_mean_s": sg["mean_s"], "static": static["deployment"],
        "static_mean_s": static["mean_s"], "mean_ratio": sg["mean_ratio"], "p90_ratio": p90,
        "routed_ratio": min((r["mean_ratio"] for r in rows if r["deployment"].startswith("routed ")
                             and r["mean_ratio"] is not None), default=None),
        "predict_ratio": min((r["mean_ratio"] for r in rows if r["deployment"].startswith("predict ")
                              and r["mean_ratio"] is not None), default=None),
        "learned_ratio": min((r["mean_ratio"] for r in rows if r["deployment"].startswith("learned ")
                              and r["mean_ratio"] is not None), default=None)}
    print(f"advice {k} spec + {n - k} plain ({best['deployment']}); {sg['deployment']}: mean "
          f"{sg['mean_ratio']:.3f}x, p90 {p90:.3f}x the better static deployment ({static['deployment']})")
    if shape.shift_at_s is not None:
        ref = static["windows"]
        advice["recovery_s"] = {}
        print(f"after the shift, per {args.window_s:.0f} s of arrivals, mean / {static['deployment']}'s:")
        for r in every:
            if r["deployment"] in ("all-plain", "all-spec", "all-adaptive"):
                continue
            rec = recovery_s(r["windows"], ref, start_s=shape.shift_at_s)
            r["recovery_s"] = advice["recovery_s"][r["deployment"]] = rec
            ratios = " ".join(f"{x:.2f}" if x is not None else "-"
                              for x in (_ratio(w["mean_s"], v["mean_s"]) for w, v in zip(r["windows"], ref, strict=True)))
            back = "never" if rec is None else f"+{rec:.0f} s"
            print(f"  {r['deployment']:<16} {ratios}  back within 5%: {back}")
    if not args.no_plots:
        plot_loads(results, out / f"{family.name}-{name}-n{n}.png", title=f"{family.name}, {name} day, N={n}")
    return every, advice


def _summary(advice: list[dict[str, Any]]) -> None:
    print("\nmean / the better static deployment's (routed, learned, predict: the best split):")
    print(f"{'family':<15} {'shape':<14} {'N':>2} {'static':<13} {'routed':>7} {'learned':>7} {'predict':>7} "
          f"{'specgate':>9}  recovery (specgate)")
    for a in advice:
        rec = (a.get("recovery_s") or {}).get(a["specgate"], "")
        rec_s = "" if rec == "" else ("never" if rec is None else f"+{rec:.0f} s")
        print(f"{a['family']:<15} {a['shape']:<14} {a['engines']:>2} {a['static']:<13} "
              f"{_f(a['routed_ratio'], 7)} {_f(a['learned_ratio'], 7)} {_f(a['predict_ratio'], 7)} "
              f"{_f(a['mean_ratio'], 9)}  {rec_s}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="engine families (default all)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="day shapes (default all)")
    ap.add_argument("--engines", default=None, help="engine counts N, comma-separated (default 2,4; --quick: 2)")
    ap.add_argument("--quick", action="store_true", help=f"days shortened to {QUICK_FACTOR:g} of their length "
                    "(same rates), N = 2 unless --engines: a CI-sized run")
    ap.add_argument("--window-s", type=float, default=30.0, help="recovery windows after a shift (s, default 30)")
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
    if args.window_s <= 0:
        ap.error("--window-s must be > 0")
    try:
        families = [get_family(f) for f in args.families.split(",") if f]
        shapes = [x for x in args.shapes.split(",") if x]
        for x in shapes:
            if x not in SHAPES:
                raise KeyError(f"unknown day shape {x!r}; known: {', '.join(SHAPES)}")
        engines = [int(x) for x in (args.engines or ("2" if args.quick else "2,4")).split(",") if x]
    except (KeyError, ValueError) as e:
        ap.error(str(e))
    objective = Objective()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"seed": args.seed, "quick": args.quick, "window_s": args.window_s,
                           "objective": objective.__dict__, "families": {}}
    runs: list[dict[str, Any]] = []
    advice: list[dict[str, Any]] = []
    t_start = time.process_time()
    for family in families:
        settings = family_settings(family)
        m = family.model
        amb = adaptive_max_batch(m, family.scaled_tokens(12288))
        doc["families"][family.name] = {
            "summary": family.summary, "prompt_scale": family.prompt_scale, "output_scale": family.output_scale,
            "rate_scale": family.rate_scale, "adaptive_max_batch": amb, "policy": settings.as_dict(),
            "model": {**m.__dict__, "speed": m.speed.__dict__}}
        print(f"\n== family {family.name}: {family.summary}\npolicy: long_prompt_tokens {settings.long_prompt_tokens}, "
              f"saturation {settings.saturation_enter}/{settings.saturation_exit}, acceptance bypass below "
              f"{settings.min_expected_speedup}x (gamma {settings.gamma}, c {settings.drafter_cost_ratio}); "
              f"'predict': pools carry the engines' true speed model; all-adaptive: plain decode above batch {amb}")
        for n in engines:
            for name in shapes:
                rows, adv = _day(family, name, n, settings, args, objective, out)
                runs.extend(rows)
                advice.append(adv)
    _summary(advice)
    doc.update(runs=runs, advice=advice)
    (out / "day.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"\nwrote {out / 'day.json'}" + ("" if args.no_plots else f" and the plots in {out}")
          + f"; CPU {time.process_time() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
