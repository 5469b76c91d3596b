"""Does the router pay out of the box? Learned speed models against static deployments, simulated.

    .venv/bin/python benchmarks/outofbox.py [--families default,kv_limited,...] [--engines 2]
                                            [--shapes light,heavy,mixed] [--seed 0] [--bound] [--window-s 30]
                                            [--advised] [--out runs/outofbox.json]

For each engine family (:mod:`loadtests.dayfamilies`), day shape (:mod:`loadtests.dayshapes`,
fitted to the family) and engine count N, the same requests go through, in one run of the
discrete-event simulator (:mod:`loadtests.daysim`, virtual time, seeded): ``all-plain``,
``all-spec`` and ``all-adaptive`` (client round robin: the static deployments), and for
every split k = 1..N-1 (and ``learned`` also at k = N, the router in front of speculative
engines alone) the router (``router.decision.policy.decide`` through
:class:`loadtests.dayrouter.PolicyRouter`) in four configurations:

- ``guards``: no speed models, learning off (the thresholds alone, ``plain_busier`` included);
- ``learned``: what a new deployment runs: no ``speed`` blocks, ``routing.learning`` on (the fit
  starts from ``router.decision.learn.DEFAULT_PRIOR`` and learns from the router's own finished requests);
- ``learned+marginal``: ``learned`` ranking the candidates by the request's completion plus what
  it costs the requests already on the endpoint (``routing.learning.marginal_cost``, now the
  router's default: the same as ``learned``); ``learned-nomarginal``: ``learned`` with it off (each
  request to the pool predicted fastest for itself);
- ``exact``: the engines' true speed model as ``speed`` blocks, no learning;
- ``prior x1`` / ``prior x0.5`` / ``prior x2``: learning from the true model as the prior, exact
  or with every time scaled by 0.5 / 2 (a calibration wrong by 2x either way).

Printed per shape and N: mean / p90 end-to-end latency (s) of each deployment and its mean
ratio to the better static deployment (the lowest mean of all-plain, all-spec and
all-adaptive); the
``learned`` rows also give the ratio over the requests after the first 200 (the warm-up) and
the warm-up's own mean. On a day with a mid-day shift (``shift_at_s``) every routed row also
gives its mean per ``--window-s`` window of arrivals after the shift as a ratio of the better
static deployment's in the same window, and how long after the shift it is back within 5%
(``back``: the first such window, :func:`loadtests.dayreport.recovery_s`; ``stays``: from
which window on every later one is, :func:`loadtests.dayreport.settled_s`).

``--bound`` adds, per split, the load-blind fixed shares (:class:`loadtests.dayapi.FixedShare`,
10%..90% of the requests to the speculative pool) and prints the *best split reference*: the
lowest mean of those shares and of the ``exact`` router, over the day and after the shift. A
split cannot reach a static deployment that uses every engine the same way (two plain engines
when speculation loses all day); the reference is what the split itself reached with the
strategies tried (not a proof of optimality), and the learned row's ratio to it says how far
the learning is from it.

``--advised`` replaces the table above: per family, shape and N it runs
:func:`loadtests.split.advise_split` (what ``specgate calibrate-split`` runs: every split
k = 0..N replayed with its own router modes, the best by mean_s, ties to fewer speculative
engines) on the day with the family's engine model, the script's policy settings and ``--seed``,
then the ``learned`` router (no speed blocks, learning on) at the advised k through
:func:`loadtests.daysim.fronted` (at k = 0 or N it fronts one pool). Printed per row
(:func:`advised_row`): the advised split (``ks+(N-k)p``), advise_split's predicted mean (s) for
its advised deployment, the learned router's mean and p90 (s) at that split and their ratios to
the better static deployment's mean and p90, and whether the mean ratio is <= 1.0.

Everything is the simulator's: speed claims, not engine measurements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadtests.dayapi import FixedShare
from loadtests.dayfamilies import FAMILIES, get_family
from loadtests.dayreport import recovery_s, settled_s, windowed_means
from loadtests.dayrouter import PolicyRouter, PolicySettings, settings_for
from loadtests.dayshapes import SHAPES, EngineModel, Request
from loadtests.daysim import (
    DayResult,
    Deployment,
    adaptive_max_batch,
    all_adaptive,
    all_plain,
    all_spec,
    fronted,
    routed,
    simulate_day,
)
from loadtests.split import SplitAdvice, advise_split

STATIC = ("all-plain", "all-spec", "all-adaptive")

WARMUP = 200  # requests

SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _after(res: DayResult, start_s: float) -> float | None:
    e2e = [r.e2e_s for r in res.records if r.status == "ok" and r.e2e_s is not None and r.arrival_s >= start_s]
    return statistics.fmean(e2e) if e2e else None


def _fmt_s(v: float | None) -> str:
    return "never" if v is None else f"+{v:.0f} s"


def _stats(res: DayResult, skip: int = 0) -> dict[str, float | None]:
    ok = sorted((r for r in res.records if r.status == "ok" and r.e2e_s is not None), key=lambda r: r.arrival_s)
    e2e = [r.e2e_s for r in ok[skip:] if r.e2e_s is not None]
    if not e2e:
        return {"mean_s": None, "p90_s": None, "n": 0}
    e2e.sort()
    return {"mean_s": statistics.fmean(e2e), "p90_s": e2e[int(0.9 * (len(e2e) - 1))], "n": len(e2e)}


def _modes(settings: PolicySettings) -> dict[str, PolicySettings]:
    return {
        "guards": replace(settings, predict=False, learn=False),
        "learned": replace(settings, predict=False, learn=True),
        "learned+marginal": replace(settings, predict=False, learn=True, marginal_cost=True),
        "learned-nomarginal": replace(settings, predict=False, learn=True, marginal_cost=False),
        "exact": replace(settings, predict=True, learn=False),
        "prior x1": replace(settings, predict=True, learn=True, prior_scale=1.0),
        "prior x0.5": replace(settings, predict=True, learn=True, prior_scale=0.5),
        "prior x2": replace(settings, predict=True, learn=True, prior_scale=2.0),
    }


def advised_row(advice: SplitAdvice, stats: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """The ``--advised`` row from the advice and ``_stats`` of the three static deployments and
    of ``learned ks+(N-k)p`` at the advised k: ``split``, ``k``, ``advised`` (advise_split's
    deployment), ``predicted_mean_s`` (its mean, s), the learned router's ``mean_s`` / ``p90_s``
    (s), ``static`` (the better static deployment: lowest mean), ``ratio`` / ``p90_ratio`` (the
    learned router's over the static's) and ``ok`` (ratio <= 1.0)."""
    k, n = advice.best_k, advice.engines
    split = f"{k}s+{n - k}p"
    predicted = next(p["mean_s"] for p in advice.predictions if p["deployment"] == advice.best)
    static = min(STATIC, key=lambda s: stats[s]["mean_s"] or float("inf"))
    mine = stats[f"learned {split}"]
    ratio = (mine["mean_s"] or float("nan")) / (stats[static]["mean_s"] or float("nan"))
    p90_ratio = (mine["p90_s"] or float("nan")) / (stats[static]["p90_s"] or float("nan"))
    return {"split": split, "k": k, "advised": advice.best, "predicted_mean_s": predicted,
            "mean_s": mine["mean_s"], "p90_s": mine["p90_s"], "static": static,
            "static_mean_s": stats[static]["mean_s"], "ratio": ratio, "p90_ratio": p90_ratio, "ok": ratio <= 1.0}


def advised_text(row: dict[str, Any]) -> str:
    """One printed line of an :func:`advised_row` row."""
    nan = float("nan")
    return (f"advised {row['split']} ({row['advised']}, predicted mean {row['predicted_mean_s'] or nan:.2f} s); "
            f"learned {row['split']} mean {row['mean_s'] or nan:.2f} s p90 {row['p90_s'] or nan:.2f} s: "
            f"{row['ratio']:.3f}x {row['static']} {row['static_mean_s'] or nan:.2f} s (p90 {row['p90_ratio']:.3f}x), "
            f"<= 1.0 {'yes' if row['ok'] else 'no'}")


def run_advised(reqs: list[Request], n: int, model: EngineModel, settings: PolicySettings, *, seed: int,
                adaptive_batch: int, advise: Callable[..., SplitAdvice] = advise_split) -> dict[str, Any]:
    """``advise(reqs, n, model, settings=, seed=)`` (default :func:`advise_split`), then the
    static deployments and the ``learned`` router at the advised split, simulated; the row of
    :func:`advised_row`."""
    advice = advise(reqs, n, model, settings=settings, seed=seed)
    k = advice.best_k
    learned = _modes(settings)["learned"]
    deps = [("all-plain", all_plain(n)), ("all-spec", all_spec(n)), ("all-adaptive", all_adaptive(n, adaptive_batch)),
            (f"learned {k}s+{n - k}p", fronted(k, n, lambda: PolicyRouter(learned), label="learned"))]
    stats = {label: _stats(simulate_day(reqs, dep, model, seed=seed)) for label, dep in deps}
    return advised_row(advice, stats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="engine families (default all)")
    ap.add_argument("--engines", default="2", help="engine counts N, comma-separated (default 2)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="day shapes (default all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default=None,
                    help="router modes to run, comma-separated (default all: guards, learned, learned+marginal, "
                         "learned-nomarginal, exact, prior x1, prior x0.5, prior x2)")
    ap.add_argument("--bound", action="store_true", help="add the fixed-share splits and the best split reference")
    ap.add_argument("--window-s", type=float, default=30.0, help="windows after a shift (s, default 30)")
    ap.add_argument("--advised", action="store_true",
                    help="only the learned router at the split advise_split advises, against the static deployments")
    ap.add_argument("--out", default="runs/outofbox.json")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for fam_name, n, name in ((f, int(x), sh) for f in args.families.split(",") for x in args.engines.split(",")
                              for sh in args.shapes.split(",")):
        family = get_family(fam_name)
        model = family.model
        settings = settings_for(model, long_prompt_tokens=family.scaled_tokens(32768),
                                context_tokens=family.scaled_tokens(12288))
        if True:
            shape = family.shape(name, n)
            reqs = shape.requests(args.seed)
            amb = adaptive_max_batch(model, family.scaled_tokens(12288))
            if args.advised:
                adv = run_advised(reqs, n, model, settings, seed=args.seed, adaptive_batch=amb)
                print(f"{fam_name} / {name}, N={n}: {advised_text(adv)}", flush=True)
                rows.append({"advised": {"family": fam_name, "shape": name, "engines": n, **adv}})
                continue
            deps: list[tuple[str, Deployment]] = [("all-plain", all_plain(n)), ("all-spec", all_spec(n)),
                                                  ("all-adaptive", all_adaptive(n, amb))]
            for k in range(1, n):
                for label, mode in _modes(settings).items():
                    if args.modes and label not in args.modes.split(","):
                        continue
                    deps.append((f"{label} {k}s+{n - k}p", routed(k, n, lambda m=mode: PolicyRouter(m), label=label)))
                if args.bound:
                    deps += [(f"share {q:.1f} {k}s+{n - k}p", routed(k, n, lambda q=q: FixedShare(q, args.seed),
                                                                     label=f"share {q:.1f}")) for q in SHARES]
            learned = _modes(settings)["learned"]
            deps.append((f"learned {n}s+0p", fronted(n, n, lambda m=learned: PolicyRouter(m), label="learned")))
            print(f"\n{fam_name} / {name}, N={n}: {len(reqs)} requests over {shape.duration_s:.0f} s")
            results = {label: simulate_day(reqs, dep, model, seed=args.seed) for label, dep in deps}
            stats = {label: _stats(res) for label, res in results.items()}
            static = min(STATIC, key=lambda s: stats[s]["mean_s"] or float("inf"))
            base = stats[static]["mean_s"] or float("nan")
            base_after = _stats(results[static], WARMUP)["mean_s"] or float("nan")
            for label, res in results.items():
                s = stats[label]
                mean, p90 = s["mean_s"], s["p90_s"]
                line = f"{label:<18} mean {mean or float('nan'):7.2f} s  p90 {p90 or float('nan'):7.2f} s  " \
                       f"{(mean or float('nan')) / base:6.3f}x {static}"
                row: dict[str, Any] = {"family": fam_name, "shape": name, "engines": n, "deployment": label, **s,
                                       "ratio": (mean or float("nan")) / base, "static": static}
                if label.startswith("learned"):
                    after = _stats(res, WARMUP)["mean_s"] or float("nan")
                    warm = _stats(replace(res, records=sorted(res.records, key=lambda r: r.arrival_s)[:WARMUP]))
                    row.update(after_warmup_ratio=after / base_after, warmup_mean_s=warm["mean_s"])
                    line += f"; after {WARMUP} requests {after / base_after:6.3f}x, warm-up mean " \
                            f"{warm['mean_s'] or float('nan'):.2f} s"
                reasons = ", ".join(f"{k} {v}" for k, v in sorted(res.reasons.items(), key=lambda kv: -kv[1])[:4])
                print(f"{line}  [{reasons}]")
                rows.append(row)
            shift = shape.shift_at_s
            if args.bound:
                for k in range(1, n):
                    tag = f"{k}s+{n - k}p"
                    cands = [lbl for lbl in results if lbl.endswith(tag) and (lbl.startswith(("share ", "exact ")))]
                    best = min(cands, key=lambda lbl: stats[lbl]["mean_s"] or float("inf"))
                    learned_mean = stats[f"learned {tag}"]["mean_s"] or float("nan")
                    ref_mean = stats[best]["mean_s"] or float("nan")
                    line = f"best split reference {tag}: {best} {ref_mean:.2f} s ({ref_mean / base:.3f}x {static}); " \
                           f"learned {learned_mean / ref_mean:.3f}x it"
                    bound: dict[str, Any] = {"family": fam_name, "shape": name, "engines": n, "k": k,
                                             "reference": best, "reference_ratio": ref_mean / base,
                                             "learned_over_reference": learned_mean / ref_mean}
                    if shift is not None:
                        after = {lbl: _after(results[lbl], shift) for lbl in cands}
                        best_after = min(cands, key=lambda lbl: after[lbl] or float("inf"))
                        st_after = _after(results[static], shift) or float("nan")
                        la = _after(results[f"learned {tag}"], shift) or float("nan")
                        ra = after[best_after] or float("nan")
                        line += f"; after the shift {best_after} {ra / st_after:.3f}x {static}, learned {la / ra:.3f}x it"
                        bound.update(reference_after=best_after, reference_after_ratio=ra / st_after,
                                     learned_over_reference_after=la / ra)
                    print(line)
                    rows.append({"bound": bound})
            if shift is not None:
                win = {lbl: windowed_means(res.records, start_s=shift, end_s=shape.duration_s, window_s=args.window_s)
                       for lbl, res in results.items()}
                print(f"after the shift at {shift:.0f} s, per {args.window_s:.0f} s of arrivals, mean / {static}'s:")
                for lbl in results:
                    if lbl in STATIC or lbl.startswith("share "):
                        continue
                    ratios = " ".join("-" if w["mean_s"] is None or v["mean_s"] is None else f"{w['mean_s'] / v['mean_s']:.2f}"
                                      for w, v in zip(win[lbl], win[static], strict=True))
                    back = recovery_s(win[lbl], win[static], start_s=shift)
                    stays = settled_s(win[lbl], win[static], start_s=shift)
                    print(f"  {lbl:<18} {ratios}  back {_fmt_s(back)}, stays {_fmt_s(stays)}")
                    rows.append({"recovery": {"family": fam_name, "shape": name, "engines": n, "deployment": lbl,
                                              "static": static, "back_s": back, "stays_s": stays,
                                              "windows": [w["mean_s"] for w in win[lbl]],
                                              "static_windows": [w["mean_s"] for w in win[static]]}})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seed": args.seed, "rows": rows}, indent=1) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
