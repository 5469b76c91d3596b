"""The out-of-the-box router's speed-model rows over many seeded days, not one.

    .venv/bin/python benchmarks/outofbox_seeds.py [--families kv_limited] [--shapes mixed]
                                                  [--seeds 0-23] [--out runs/outofbox_seeds.json]

:mod:`benchmarks.outofbox` runs one seeded day per family and shape. On a day whose peak
fills the engines' KV (``kv_limited``), the 1 + 1 split sits near a tipping point: a decision
that one model predicts a few tenths of a percent faster on one pool and another on the other
(a close call) starts a different path, and some paths build an admission queue at the peak
that lasts until it ends, others do not. One day's mean then says which path that day took,
not how good the speed model is. This runs the same deployments as ``benchmarks/outofbox.py``
(``exact``, ``learned``, ``prior x1 / x0.5 / x2`` at 1 speculative + 1 plain engine, each
against the better static deployment of two engines) over every seed in ``--seeds`` (a
day's requests and the simulator's randomness, :meth:`loadtests.dayshapes.DayShape.requests`)
and prints, per mode, each seed's ratio, the mean, median and worst over the seeds, and on how
many seeds the mode ended more than 5% above ``exact``. Simulator only: speed claims.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.outofbox import STATIC, _modes, _stats
from loadtests.dayfamilies import FAMILIES, get_family
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.daysim import (
    adaptive_max_batch,
    all_adaptive,
    all_plain,
    all_spec,
    routed,
    simulate_day,
)

MODES = ("exact", "learned", "prior x1", "prior x0.5", "prior x2")


def _seeds(text: str) -> list[int]:
    """``"0-23"`` or ``"0,3,5"`` -> the seeds."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-", 1))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="kv_limited", help=f"engine families (of {', '.join(FAMILIES)})")
    ap.add_argument("--shapes", default="mixed", help="day shapes")
    ap.add_argument("--seeds", default="0-23", help="seeds: 'lo-hi' or a comma list (default 0-23)")
    ap.add_argument("--out", default="runs/outofbox_seeds.json")
    args = ap.parse_args(argv)
    seeds = _seeds(args.seeds)
    rows = []
    for fam_name in args.families.split(","):
        family = get_family(fam_name)
        model = family.model
        settings = settings_for(model, long_prompt_tokens=family.scaled_tokens(32768),
                                context_tokens=family.scaled_tokens(12288))
        modes = _modes(settings)
        amb = adaptive_max_batch(model, family.scaled_tokens(12288))
        for name in args.shapes.split(","):
            ratios: dict[str, list[float]] = {m: [] for m in MODES}
            print(f"\n{fam_name} / {name}, 1s+1p against the better static deployment of 2 engines:")
            for seed in seeds:
                reqs = family.shape(name, 2).requests(seed)
                statics = {"all-plain": all_plain(2), "all-spec": all_spec(2), "all-adaptive": all_adaptive(2, amb)}
                base = min(_stats(simulate_day(reqs, statics[s], model, seed=seed))["mean_s"] or float("inf")
                           for s in STATIC)
                for m in MODES:
                    res = simulate_day(reqs, routed(1, 2, lambda mode=modes[m]: PolicyRouter(mode), label=m),
                                       model, seed=seed)
                    ratios[m].append((_stats(res)["mean_s"] or float("nan")) / base)
                print(f"  seed {seed:3d}: " + "  ".join(f"{m} {ratios[m][-1]:.3f}" for m in MODES), flush=True)
            exact = ratios["exact"]
            for m in MODES:
                v = ratios[m]
                over = sum(r > 1.05 * e for r, e in zip(v, exact, strict=True))
                print(f"  {m:<10} mean {statistics.fmean(v):.3f}  median {statistics.median(v):.3f}  "
                      f"worst {max(v):.3f}  >5% above exact on {over}/{len(v)} seeds")
                rows.append({"family": fam_name, "shape": name, "mode": m, "seeds": seeds, "ratios": v,
                             "mean": statistics.fmean(v), "median": statistics.median(v), "worst": max(v),
                             "over_exact": over})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
