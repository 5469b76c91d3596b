"""Does the planner pay? Slow days per engine family, both engine models, N engines: static, fixed splits, planner-driven.

    /work/main/.venv/bin/python benchmarks/plan_day.py [--families default,kv_limited]
        [--engine-models analytic,sglang] [--engines 4,8] [--shapes diurnal,steady_light]
        [--sweep steady|all|none] [--interval-s 300] [--convert-s 180] [--reach 2] [--seed 0]
        [--retreat-ratio 1.5] [--retreat-rounds 2] [--hedge 0.5] [--floor-speculative 0] [--floor-plain 0]
        [--out runs/plan-day]

Everything runs in the in-process day simulator (:mod:`loadtests.daysim`, virtual time, seeded;
no HTTP). For each engine model (``analytic``: :class:`loadtests.daysim.Engine` with the
families of :mod:`loadtests.dayfamilies`; ``sglang``: SGLang 0.5.23's scheduler rules,
:mod:`loadtests.sglang_day`, with the families of :mod:`loadtests.sglang_families`, whose days
are the same family's of :mod:`loadtests.dayfamilies`), each family, N and slow day
(:data:`loadtests.dayshapes.SLOW_SHAPES`, fitted to the family and scaled to N), the same requests
go through:

- the static deployments ``all-plain``, ``all-spec`` and (analytic model only: the SGLang
  scheduler model has no adaptive mode) ``all-adaptive``, client round robin;
- with ``--sweep``, every fixed split ``specgate ks+(N-k)p`` (k = 0..N, the out-of-the-box
  router learning live, :func:`loadtests.split.specgate_at`); by default on the steady days only
  (``--sweep steady``: the changing days' sweep is what the run's CPU budget cuts);
- the planner-driven deployment (:func:`loadtests.planday.planned`): the same router,
  ``specgate plan``'s loop every ``--interval-s`` of simulated time on the router's window,
  moving one engine at a time, each change costed (the engine drains, then is out of service
  ``--convert-s`` more: restarted in the other mode and warmed). With ``--start yesterday``
  (default) the router and the planner have run through the previous day (the same day shape
  drawn with seed + 1, from N/2 speculative engines, back to back with the measured day in one
  run: what the router learned and the split it reached carry over); only the measured day's
  requests count. ``--start half``: the day alone, from N/2 and a fresh router.

On a steady day the N/2 split's run is also the ``specgate plan --once`` check: the advice on the
router's window after the first fifth of the day (observe only), against the best measured fixed
split: ``once_ratio`` is the measured mean at the advised split over the best one (within 3%:
<= 1.03).

Printed per family, N and day: each deployment's mean / p90 (s) and its mean over the better
static deployment's (the lowest mean of the static ones); the planner's changes (time, from ->
to) and engine-seconds out of service. At the end one line per cell: the better static
deployment, the best fixed split's ratio, the planner's ratio and changes, and on a steady day
the ``--once`` advice. Written to ``--out``/plan_day.json: every row and the planner's rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.day import family_settings
from loadtests.dayfamilies import FAMILIES, EngineFamily, get_family
from loadtests.dayreport import summarize
from loadtests.dayrouter import PolicyRouter
from loadtests.dayshapes import CHANGING, SLOW_SHAPES, Request
from loadtests.daysim import (
    Deployment,
    adaptive_max_batch,
    all_adaptive,
    all_plain,
    all_spec,
    simulate_day,
)
from loadtests.plan import HEDGE
from loadtests.planday import PlanDaySettings, PlannedRouter, out_of_service_s, planned
from loadtests.planloop import LOOP_DEFAULTS, Hysteresis
from loadtests.sglang_day import sglang_engines
from loadtests.sglang_families import FAMILIES as SGLANG_FAMILIES
from loadtests.sglang_families import get_sglang_family
from loadtests.split import better_static, specgate_at

#: The ``--once`` check's tolerance: the advised split's measured mean over the best one.
ONCE_TOLERANCE = 1.03


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _f(v: object, w: int = 7) -> str:
    return f"{v:>{w}.3f}" if isinstance(v, float) else f"{'-':>{w}}"


class Cell:
    """One family, engine model, N and day: its runs (the benchmark's unit)."""

    def __init__(self, family: EngineFamily, engine_model: str, n: int, shape_name: str,
                 args: argparse.Namespace) -> None:
        self.family, self.engine_model, self.n, self.args = family, engine_model, n, args
        self.shape = family.shape(shape_name, n)
        self.reqs: list[Request] = self.shape.requests(args.seed)
        self.sglang = get_sglang_family(family.name) if engine_model == "sglang" else None
        self.make_engine = sglang_engines(self.sglang) if self.sglang is not None else None
        m = self.sglang if self.sglang is not None else family.model
        self.kv = {"spec": m.kv_capacity(True), "plain": m.kv_capacity(False)}
        self.learned = replace(family_settings(family), predict=False, learn=True)
        self.rows: list[dict[str, Any]] = []

    def run(self, dep: Deployment, **extra: Any) -> dict[str, Any]:
        res = simulate_day(self.reqs, dep, self.family.model, seed=self.args.seed, make_engine=self.make_engine)
        s = summarize(res, day_s=self.shape.duration_s, long_prompt_tokens=self.shape.long_prompt_tokens)
        row = {"deployment": dep.name, "mean_s": s["mean_s"], "p90_s": s["p90_s"], "ok": s["ok"],
               "refused": s["refused"], "end_s": res.end_s, **extra}
        self.rows.append(row)
        return row

    def plan_settings(self, **kw: Any) -> PlanDaySettings:
        a = self.args
        h = Hysteresis(dwell_s=a.dwell_s, step_s=a.interval_s, change_cost_s=a.convert_s + 30.0,
                       min_gain=a.min_gain, reverse_gain=a.reverse_gain, sustained_gain=a.sustained_gain,
                       sustained_rounds=a.sustained_rounds, smooth_rounds=a.smooth_rounds,
                       retreat_ratio=a.retreat_ratio, retreat_rounds=a.retreat_rounds,
                       floor_speculative=a.floor_speculative, floor_plain=a.floor_plain)
        return PlanDaySettings(interval_s=a.interval_s, window_s=a.window_s, window_requests=a.window_requests,
                               convert_s=a.convert_s, hysteresis=h, reach=a.reach, seed=a.seed,
                               max_replay_error=a.max_replay_error, hedge=a.hedge, **kw)

    def measure(self) -> dict[str, Any]:
        """Every run of the cell; returns its summary line's values."""
        n, name, steady = self.n, self.shape.name, self.shape.name not in CHANGING
        self.run(all_plain(n), k=0)
        self.run(all_spec(n), k=n)
        if self.sglang is None:
            amb = adaptive_max_batch(self.family.model, self.family.scaled_tokens(12288))
            self.run(all_adaptive(n, amb), k=n)
        start = n // 2
        sweep = self.args.sweep == "all" or (self.args.sweep == "steady" and steady)
        once: dict[str, Any] | None = None
        if sweep:
            for k in range(n + 1):
                if k == start and steady:
                    once = self._once(start)
                else:
                    self.run(specgate_at(k, n, self.learned), k=k, fixed=True)
        t0 = time.process_time()
        prow, pr, start_k, offset = self._planned(start)
        changes = [c for c in pr.changes if c["t"] >= offset]
        prow.update(changes=[(round(c["t"] - offset), "->" + c["to"]) for c in changes],
                    out_of_service_s=round(out_of_service_s(changes, prow["end_s"]), 1),
                    cpu_s=round(time.process_time() - t0, 1),
                    rounds=[{k: v for k, v in r.items() if k != "predicted"} | {
                        "predicted": {str(k): v for k, v in (r.get("predicted") or {}).items()}} for r in pr.rounds])
        static = better_static(self.rows)
        for r in self.rows:
            r["mean_ratio"] = _ratio(r["mean_s"], static["mean_s"])
        fixed = [r for r in self.rows if r.get("fixed")]
        best = min(fixed, key=lambda r: r["mean_s"] or float("inf")) if fixed else None
        out: dict[str, Any] = {
            "engine_model": self.engine_model, "family": self.family.name, "shape": name, "engines": n,
            "changing": not steady, "requests": len(self.reqs), "start_k": start_k, "static": static["deployment"],
            "static_mean_s": static["mean_s"], "planner_ratio": prow["mean_ratio"],
            "planner_p90_ratio": _ratio(prow["p90_s"], static["p90_s"]), "changes": len(changes),
            "out_of_service_s": prow["out_of_service_s"],
            "best_fixed": None if best is None else best["deployment"],
            "best_fixed_ratio": None if best is None else best["mean_ratio"]}
        if once is not None and best is not None:
            at = next(r for r in fixed if r["k"] == once["advised"])
            out.update(once_advised=once["advised"], once_ratio=_ratio(at["mean_s"], best["mean_s"]))
        return out

    def _planned(self, start: int) -> tuple[dict[str, Any], PlannedRouter, int, float]:
        """The planner-driven run: its row (the measured day's requests only), the planner, the
        split the measured day starts at and the day's offset in the run (s; module docstring)."""
        dep, get = planned(self.n, start, lambda: PolicyRouter(self.learned), self.plan_settings(), self.kv)
        if self.args.start == "half":
            return self.run(dep, k=None, planner=True), get(), start, 0.0
        offset = self.shape.duration_s
        before = self.shape.requests(self.args.seed + 1)
        reqs = before + [replace(r, rid=len(before) + r.rid, arrival_s=r.arrival_s + offset) for r in self.reqs]
        res = simulate_day(reqs, dep, self.family.model, seed=self.args.seed, make_engine=self.make_engine)
        today = replace(res, records=res.records[len(before):])
        s = summarize(today, day_s=self.shape.duration_s, long_prompt_tokens=self.shape.long_prompt_tokens)
        row = {"deployment": f"{dep.name.split(' from ')[0]} (after the previous day)", "mean_s": s["mean_s"],
               "p90_s": s["p90_s"], "ok": s["ok"], "refused": s["refused"], "end_s": res.end_s, "k": None,
               "planner": True}
        self.rows.append(row)
        pr = get()
        moved = sum(1 if c["to"] == "spec" else -1 for c in pr.changes if c["t"] < offset)
        return row, pr, start + moved, offset

    def _once(self, start: int) -> dict[str, Any]:
        """The N/2 split's run with ``specgate plan --once`` after the first fifth (observe only)."""
        st = self.plan_settings(first_round_s=self.shape.duration_s / 5, act=False)
        st = replace(st, interval_s=10 * self.shape.duration_s, reach=None)
        dep, get = planned(self.n, start, lambda: PolicyRouter(self.learned), st, self.kv, label="specgate")
        row = self.run(dep, k=start, fixed=True)
        row["deployment"] = f"specgate {start}s+{self.n - start}p"
        r = get().rounds[0]
        return {"advised": r.get("advised", start), "t": r["t"], "trusted": r.get("trusted")}

    def print(self, summary: dict[str, Any]) -> None:
        print(f"\n{self.engine_model} / {self.family.name} / {self.shape.name}, N={self.n}: {len(self.reqs)} requests "
              f"over {self.shape.duration_s:.0f} s")
        for r in self.rows:
            extra = ""
            if r.get("planner"):
                extra = f"  start {summary['start_k']}s, changes {r['changes']}, out of service " \
                        f"{r['out_of_service_s']:.0f} engine-s"
            print(f"  {r['deployment']:<26} mean {_f(r['mean_s'], 8)} p90 {_f(r['p90_s'], 8)}  "
                  f"{_f(r['mean_ratio'])}x{extra}")
        if "once_advised" in summary:
            print(f"  plan --once at {self.shape.duration_s / 5:.0f} s advises {summary['once_advised']} spec: "
                  f"measured {summary['once_ratio']:.3f}x the best fixed split ({summary['best_fixed']})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--engine-models", default="analytic,sglang",
                    help="analytic (loadtests/daysim.py), sglang (loadtests/sglang_sched.py; its families only)")
    ap.add_argument("--engines", default="4,8")
    ap.add_argument("--shapes", default=",".join(SLOW_SHAPES))
    ap.add_argument("--sweep", choices=("steady", "all", "none"), default="steady",
                    help="which days run every fixed split (default steady: the --once check needs them)")
    ap.add_argument("--start", choices=("yesterday", "half"), default="yesterday",
                    help="the planner's first split: where it left the previous day (default), or N/2")
    ap.add_argument("--interval-s", type=float, default=300.0, help="planner rounds (simulated s, default 300)")
    ap.add_argument("--convert-s", type=float, default=180.0,
                    help="an engine's time out of service after its drain (s, default 180)")
    ap.add_argument("--dwell-s", type=float, default=LOOP_DEFAULTS.dwell_s)
    ap.add_argument("--min-gain", type=float, default=LOOP_DEFAULTS.min_gain)
    ap.add_argument("--sustained-gain", type=float, default=LOOP_DEFAULTS.sustained_gain)
    ap.add_argument("--sustained-rounds", type=int, default=LOOP_DEFAULTS.sustained_rounds)
    ap.add_argument("--smooth-rounds", type=int, default=LOOP_DEFAULTS.smooth_rounds)
    ap.add_argument("--reverse-gain", type=float, default=LOOP_DEFAULTS.reverse_gain)
    ap.add_argument("--retreat-ratio", type=float, default=LOOP_DEFAULTS.retreat_ratio, help="inf: no retreat (the loop before it)")
    ap.add_argument("--retreat-rounds", type=int, default=LOOP_DEFAULTS.retreat_rounds)
    ap.add_argument("--max-replay-error", type=float, default=0.5, help="inf: no replay check (before it)")
    ap.add_argument("--hedge", type=float, default=HEDGE,
                    help=f"the advice's bound under stress (every request sampled; default {HEDGE}; inf: no hedge, before it)")
    ap.add_argument("--floor-speculative", type=int, default=LOOP_DEFAULTS.floor_speculative, help="engines the speculative pool keeps")
    ap.add_argument("--floor-plain", type=int, default=LOOP_DEFAULTS.floor_plain, help="engines the plain pool keeps")
    ap.add_argument("--window-s", type=float, default=600.0, help="the router's window (s, default 600)")
    ap.add_argument("--window-requests", type=int, default=2048, help="the router's window (default 2048)")
    ap.add_argument("--reach", type=int, default=2, help="splits a round predicts around the current one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/plan-day")
    args = ap.parse_args(argv)
    try:
        families = [get_family(f) for f in args.families.split(",") if f]
        models = [m for m in args.engine_models.split(",") if m]
        engines = [int(x) for x in args.engines.split(",") if x]
        shapes = [s for s in args.shapes.split(",") if s]
        for s in shapes:
            if s not in SLOW_SHAPES:
                raise KeyError(f"unknown slow day {s!r}; known: {', '.join(SLOW_SHAPES)}")
        if any(m not in ("analytic", "sglang") for m in models):
            raise KeyError("--engine-models: analytic, sglang")
    except (KeyError, ValueError) as e:
        ap.error(str(e))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"args": vars(args), "cells": cells}
    t_start = time.process_time()
    for model in models:
        for family in families:
            if model == "sglang" and family.name not in SGLANG_FAMILIES:
                continue
            for n in engines:
                for name in shapes:
                    cell = Cell(family, model, n, name, args)
                    summary = cell.measure()
                    cell.print(summary)
                    cells.append({**summary, "rows": cell.rows})
                    (out / "plan_day.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print("\nmean / the better static deployment's (in-process simulator; planner: changes costed):")
    print(f"{'model':<9} {'family':<15} {'day':<13} {'N':>2} {'static':<13} {'best fixed':>10} {'planner':>8} "
          f"{'p90':>6} {'start':>5} {'changes':>7}  --once")
    for c in cells:
        once = "" if "once_advised" not in c else f"{c['once_advised']} spec, {c['once_ratio']:.3f}x best"
        print(f"{c['engine_model']:<9} {c['family']:<15} {c['shape']:<13} {c['engines']:>2} {c['static']:<13} "
              f"{_f(c['best_fixed_ratio'], 10)} {_f(c['planner_ratio'], 8)} {_f(c['planner_p90_ratio'], 6)} "
              f"{c['start_k']:>5} {c['changes']:>7}  {once}")
    print(f"\nwrote {out / 'plan_day.json'}; CPU {time.process_time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
