"""The learned router against the simplest rules at the same split, every family, day and engine model, simulated.

    .venv/bin/python benchmarks/outofbox_matrix.py [--engine-models day,sglang] [--families ...]
        [--shapes ...] [--engines 2,4] [--seed 0] [--deployments learned,coin,jsq,length]
        [--jobs 1] [--out runs/outofbox_matrix.json]

For each engine model (``day``: the day simulator's engine, :mod:`loadtests.daysim`; ``sglang``:
SGLang 0.5.23's scheduler, :mod:`loadtests.sglang_day`, only for the families
:mod:`loadtests.sglang_families` defines), engine family (:mod:`loadtests.dayfamilies`), day
shape (:mod:`loadtests.dayshapes`, fitted to the family) and engine count N, the same seeded
requests go, in one run of the discrete-event simulator each (virtual time), through k = N // 2
speculative + N - k plain engines behind

- ``learned``: the router's policy as a new deployment runs it (no ``speed`` blocks,
  ``routing.learning`` on, prediction checks and fallback on; :class:`loadtests.dayrouter.PolicyRouter`
  with the thresholds ``benchmarks/outofbox.py`` gives it);
- ``learned-nocheck``: the same without the prediction fallback (``routing.learning.check.enabled``
  false);
- ``learned-marginal``, ``learned-nomarginal``: ``learned`` with ``routing.learning.marginal_cost``
  on (ranking the candidates by the request's completion plus what it costs the requests decoding
  beside it; the router's default, so the same as ``learned``) or off;
- ``coin``, ``jsq``, ``length``: the client-side rules of ``benchmarks/outofbox_http.py``
  (:class:`loadtests.dayapi.ClientRule`);
- ``all-plain``, ``all-spec``: N plain or N speculative engines, client round robin.

Printed per row: each deployment's mean end-to-end latency (s), the best rule among the rules
run, ``learned / best rule`` (<= 1.0: the learned router at least as good as every simple rule
at its split), the learned router's share of requests to the speculative pool, its top
decision reasons and, per pool, the median relative error of its checked completion-time
predictions over the day (in parentheses the median signed error: < 0 predicted too fast).
Simulated: speed claims, not engine measurements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadtests.dayapi import ClientRule
from loadtests.dayfamilies import FAMILIES, get_family
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.dayshapes import SHAPES
from loadtests.daysim import DayResult, Deployment, all_plain, all_spec, routed, simulate_day
from loadtests.sglang_day import sglang_engines
from loadtests.sglang_families import FAMILIES as SGLANG_FAMILIES
from loadtests.sglang_families import get_sglang_family

RULES = ClientRule.RULES
DEPLOYMENTS = ("learned", *RULES)


def _mean(res: DayResult) -> float | None:
    e2e = [r.e2e_s for r in res.records if r.status == "ok" and r.e2e_s is not None]
    return statistics.fmean(e2e) if e2e else None


def run_row(engine_model: str, family_name: str, shape_name: str, n: int, seed: int,
            deployments: tuple[str, ...]) -> dict[str, Any]:
    """One row of the table (module docstring): per deployment its mean (s), refusals, spec share
    and top reasons; ``best_rule``, ``learned_over_best_rule``."""
    family = get_family(family_name)
    model = family.model
    k = n // 2
    settings = settings_for(model, long_prompt_tokens=family.scaled_tokens(32768),
                            context_tokens=family.scaled_tokens(12288))
    learned = replace(settings, predict=False, learn=True)
    nocheck = replace(learned, check=False)
    marginal = replace(learned, marginal_cost=True)
    selfish = replace(learned, marginal_cost=False)
    make_engine = sglang_engines(get_sglang_family(family_name)) if engine_model == "sglang" else None
    reqs = family.shape(shape_name, n).requests(seed)
    builders: dict[str, Deployment] = {
        "learned": routed(k, n, lambda: PolicyRouter(learned), label="learned"),
        "learned-nocheck": routed(k, n, lambda: PolicyRouter(nocheck), label="learned-nocheck"),
        "learned-marginal": routed(k, n, lambda: PolicyRouter(marginal), label="learned-marginal"),
        "learned-nomarginal": routed(k, n, lambda: PolicyRouter(selfish), label="learned-nomarginal"),
        **{r: routed(k, n, lambda r=r: ClientRule(r, settings.long_prompt_tokens, seed), label=r) for r in RULES},
        "all-plain": all_plain(n), "all-spec": all_spec(n)}
    row: dict[str, Any] = {"engine_model": engine_model, "family": family_name, "shape": shape_name, "engines": n,
                           "k": k, "requests": len(reqs), "seed": seed, "deployments": {}}
    for name in deployments:
        res = simulate_day(reqs, builders[name], model, seed=seed, make_engine=make_engine)
        ok = [r for r in res.records if r.status == "ok"]
        row["deployments"][name] = {
            "mean_s": _mean(res), "refused": len(res.records) - len(ok),
            "spec_share": sum(r.speculative for r in ok) / len(ok) if ok else None,
            "reasons": dict(Counter(res.reasons).most_common(4)),
            "prediction_error": {pool: {"median_abs": statistics.median(abs(e) for e in errs),
                                        "median_signed": statistics.median(errs), "checks": len(errs)}
                                 for pool, errs in sorted(res.prediction_errors.items()) if errs}}
    means = {d: row["deployments"][d]["mean_s"] for d in deployments if d in RULES}
    if means and "learned" in deployments:
        best = min(means, key=lambda d: means[d] or float("inf"))
        row["best_rule"] = best
        lm, bm = row["deployments"]["learned"]["mean_s"], means[best]
        row["learned_over_best_rule"] = None if lm is None or bm is None else lm / bm
    return row


def row_text(row: dict[str, Any]) -> str:
    """One printed line of a :func:`run_row` row."""
    d = row["deployments"]
    cells = " ".join(f"{name} {v['mean_s'] or float('nan'):.2f}" for name, v in d.items())
    out = f"{row['engine_model']:<6} {row['family']:<14} {row['shape']:<13} N={row['engines']} k={row['k']}: {cells}"
    if "learned_over_best_rule" in row:
        ratio = row["learned_over_best_rule"] or float("nan")
        lr = d["learned"]
        reasons = ", ".join(f"{k} {v}" for k, v in lr["reasons"].items())
        errors = ", ".join(f"{p} {e['median_abs']:.2f} ({e['median_signed']:+.2f})"
                           for p, e in lr.get("prediction_error", {}).items())
        out += (f" | best rule {row['best_rule']}; learned/best {ratio:.3f}x{' WORSE' if ratio > 1.0 else ''}"
                f" | learned spec share {lr['spec_share'] or 0:.2f} [{reasons}]"
                f" | prediction error {errors or '-'}")
    return out


def _cells(args: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    out = []
    for em in args.engine_models.split(","):
        for fam in args.families.split(","):
            if em == "sglang" and fam not in SGLANG_FAMILIES:
                continue
            for n in (int(x) for x in args.engines.split(",")):
                out += [(em, fam, sh, n) for sh in args.shapes.split(",")]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine-models", default="day,sglang")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--engines", default="2,4")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deployments", default=",".join(DEPLOYMENTS),
                    help="of learned, learned-nocheck, learned-marginal, learned-nomarginal, coin, jsq, length, all-plain, all-spec")
    ap.add_argument("--jobs", type=int, default=1, help="rows simulated in parallel (processes)")
    ap.add_argument("--out", default="runs/outofbox_matrix.json")
    args = ap.parse_args(argv)
    deps = tuple(args.deployments.split(","))
    cells = _cells(args)
    rows: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        futs = [pool.submit(run_row, em, fam, sh, n, args.seed, deps) for em, fam, sh, n in cells]
        for f in futs:
            rows.append(f.result())
            print(row_text(rows[-1]), flush=True)
    worse = [r for r in rows if (r.get("learned_over_best_rule") or 0) > 1.0]
    print(f"\n{len(rows)} rows; learned worse than the best rule (> 1.0x) in {len(worse)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seed": args.seed, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
