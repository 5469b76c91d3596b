"""Does the router pay out of the box? Learned speed models against static deployments, simulated.

    .venv/bin/python benchmarks/outofbox.py [--families default,kv_limited,...] [--engines 2]
                                            [--shapes light,heavy,mixed] [--seed 0] [--bound] [--window-s 30]
                                            [--out runs/outofbox.json]

For each engine family (:mod:`loadtests.dayfamilies`), day shape (:mod:`loadtests.dayshapes`,
fitted to the family) and engine count N, the same requests go through, in one run of the
discrete-event simulator (:mod:`loadtests.daysim`, virtual time, seeded): ``all-plain``,
``all-spec`` and ``all-adaptive`` (client round robin: the static deployments), and for
every split k = 1..N-1 (and ``learned`` also at k = N, the router in front of speculative
engines alone) the router (``router.policy.decide`` through
:class:`loadtests.dayrouter.PolicyRouter`) in four configurations:

- ``guards``: no speed models, learning off (the thresholds alone, ``plain_busier`` included);
- ``learned``: what a new deployment runs: no ``speed`` blocks, ``routing.learning`` on (the fit
  starts from ``router.learn.DEFAULT_PRIOR`` and learns from the router's own finished requests);
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
the learning is from it. Everything is the simulator's: speed claims, not engine measurements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadtests.dayapi import FixedShare
from loadtests.dayfamilies import FAMILIES, get_family
from loadtests.dayreport import recovery_s, settled_s, windowed_means
from loadtests.dayrouter import PolicyRouter, PolicySettings, settings_for
from loadtests.dayshapes import SHAPES
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
        "exact": replace(settings, predict=True, learn=False),
        "prior x1": replace(settings, predict=True, learn=True, prior_scale=1.0),
        "prior x0.5": replace(settings, predict=True, learn=True, prior_scale=0.5),
        "prior x2": replace(settings, predict=True, learn=True, prior_scale=2.0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="engine families (default all)")
    ap.add_argument("--engines", default="2", help="engine counts N, comma-separated (default 2)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="day shapes (default all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bound", action="store_true", help="add the fixed-share splits and the best split reference")
    ap.add_argument("--window-s", type=float, default=30.0, help="windows after a shift (s, default 30)")
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
            deps: list[tuple[str, Deployment]] = [("all-plain", all_plain(n)), ("all-spec", all_spec(n)),
                                                  ("all-adaptive", all_adaptive(n, amb))]
            for k in range(1, n):
                for label, mode in _modes(settings).items():
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
