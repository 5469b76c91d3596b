"""Why does ``specgate plan --once`` on a young router advise what it does? Replays beside what was measured.

    /work/main/.venv/bin/python benchmarks/plan_once_probe.py [--family default] [--shape steady_heavy]
        [--engines 4] [--every 150] [--at 300] [--window-s 600] [--window-requests 2048] [--seed 0]

In the in-process day simulator (:mod:`loadtests.daysim`, analytic engine model, virtual time,
seeded; no HTTP): the out-of-the-box router (learning live) in front of N/2 speculative + N/2
plain engines of the family (:mod:`loadtests.dayfamilies`) through the slow day
(:data:`loadtests.dayshapes.SLOW_SHAPES`), the planner observing only
(:mod:`loadtests.planday`, ``act=False``) every ``--every`` simulated seconds. Printed per round:
each split's predicted mean (:func:`loadtests.plan.advise`, every split), the window's measured
mean at the N/2 split (:func:`loadtests.plan.measured`), trust, and the router's learned speed
models as the plan read them. Then, on the window of the round at ``--at`` s, the same replay with
the family's own engine model in place of the learned ones (:func:`loadtests.plan.predict_splits`
with :class:`loadtests.plan.PlanModels` of the true model): whether a wrong advice comes from
the simulator and the window or from the router's learned models.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.day import family_settings
from loadtests.dayfamilies import get_family
from loadtests.dayrouter import PolicyRouter
from loadtests.daysim import Deployment, simulate_day
from loadtests.plan import PlanModels, advise, day_from_window, engine_models, predict_splits
from loadtests.planday import PLAIN, SPEC, PlanDaySettings, PlannedRouter

_KEYS = ("t0_s", "batch_knee", "attn_s_per_token", "alpha_short", "alpha_sampled_short")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="default")
    ap.add_argument("--shape", default="steady_heavy")
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--every", type=float, default=150.0, help="simulated s between observe-only rounds")
    ap.add_argument("--at", type=float, default=300.0, help="the round whose window is replayed with the true model")
    ap.add_argument("--window-s", type=float, default=600.0)
    ap.add_argument("--window-requests", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    fam, n = get_family(a.family), a.engines
    shape = fam.shape(a.shape, n)
    learned = replace(family_settings(fam), predict=False, learn=True)
    kv = {"spec": fam.model.kv_capacity(True), "plain": fam.model.kv_capacity(False)}
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def adv(doc: dict[str, Any], *args: Any, **kw: Any) -> dict[str, Any]:
        out = advise(doc, *args, **kw)
        seen.append((doc, out))
        return out

    st = PlanDaySettings(interval_s=a.every, first_round_s=a.every, window_s=a.window_s,
                         window_requests=a.window_requests, act=False, reach=None, seed=a.seed)
    dep = Deployment("probe", ((SPEC, True, n), (PLAIN, False, n)),
                     lambda: PlannedRouter(PolicyRouter(learned), n, n // 2, st, kv, advise_fn=adv))
    simulate_day(shape.requests(a.seed), dep, fam.model, seed=a.seed)
    print(f"{a.family} / {a.shape}, N={n}, router at {n // 2}s+{n - n // 2}p, observe only every {a.every:.0f} s")
    at = None
    for i, (doc, out) in enumerate(seen):
        t = (i + 1) * a.every
        preds = {s["speculative"]: round(s["predicted_mean_s"], 2) if s["predicted_mean_s"] else None
                 for s in out["splits"]}
        m = out["model"]
        print(f"t={t:6.0f} window {out['window']['requests']} requests / {out['window']['seconds']:.0f} s, measured "
              f"mean {out['measured']['mean_s']:.2f} s, trusted {out['trusted']}: predicted {preds} -> advised "
              f"{out['advised']['speculative']}")
        print("         learned spec", {k: round(m["speculative"][k], 9) for k in _KEYS},
              "plain", {k: round(m["plain"][k], 9) for k in _KEYS[:3]})
        if at is None and t >= a.at:
            at = doc
    if at is not None:
        rq, _ = day_from_window(at)
        true = PlanModels(fam.model, fam.model, {"speculative": "family", "plain": "family"})
        for name, models in (("the family's own engine model", true), ("the router's learned models", engine_models(at))):
            preds = {p["k"]: round(p["mean_s"], 2) for p in predict_splits(rq, n, models, seed=a.seed)}
            print(f"window of t={a.at:.0f} s replayed with {name}: {preds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
