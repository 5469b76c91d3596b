"""Two models behind one router: does each keep what it gets alone? Simulated.

    .venv/bin/python benchmarks/two_models.py [--models default:mixed,moe_spec_pays:heavy]
                                              [--seeds 0,1] [--quick] [--out runs/two_models.json]

Each ``--models`` entry is ``FAMILY:SHAPE``: a model whose engines are the engine family
(:mod:`loadtests.dayfamilies`) and whose traffic is that family's day shape for two engines
(:mod:`loadtests.dayshapes`). Per model and seed, in the discrete-event simulator
(:mod:`loadtests.daysim`, virtual time):

- *alone*: the model's day on its own two engines: the static deployments ``all-plain``,
  ``all-spec`` and ``all-adaptive`` (client round robin; the lowest mean is the model's
  *better static deployment*) and the out-of-the-box router (``learned``: no speed blocks,
  ``routing.learning`` on; :class:`loadtests.dayrouter.PolicyRouter` around
  ``router.decision.policy.decide``) in front of 1 speculative + 1 plain engine;
- *fleet*: every model's day interleaved by arrival time in one run, each model on its own
  1 speculative + 1 plain engines (drawing as alone), one router in front of all of them
  (:class:`loadtests.dayfleet.FleetRouter`: the request's ``model`` picks its model's router,
  which sees that model's pools only). The fleet is a two-model router config (``models:``,
  each model its pools with the simulated engines' URLs) validated by the router's own loader
  (``router.config.tree.parse_config``), and its pools and names come from the parsed config.

Printed, one row per model and seed: the better static deployment and its mean end-to-end
latency (s), the router's mean as a ratio of it alone and in the fleet, and fleet / alone
(the target: within 5%). ``--quick`` shortens every day to a quarter (same rates). Written to
``--out``: every row as JSON. Everything is the simulator's: speed claims, not engine
measurements.
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

from loadtests.dayapi import Router
from loadtests.dayfamilies import get_family
from loadtests.dayfleet import (
    config_resolver,
    fleet_deployment,
    fleet_models,
    interleave,
    model_records,
)
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.dayshapes import EngineModel, Request
from loadtests.daysim import (
    RequestRecord,
    adaptive_max_batch,
    all_adaptive,
    all_plain,
    all_spec,
    routed,
    simulate_day,
)
from router import Config, parse_config

STATIC = ("all-plain", "all-spec", "all-adaptive")
#: a model's engines and a factory of its router.
Model = tuple[EngineModel, Callable[[], Router]]
QUICK_FACTOR = 0.25


def mean_e2e(records: list[RequestRecord]) -> float:
    """Mean end-to-end latency (s) of the finished requests (nan when none finished)."""
    e2e = [r.e2e_s for r in records if r.status == "ok" and r.e2e_s is not None]
    return statistics.fmean(e2e) if e2e else float("nan")


def _model(spec: str, seed: int, quick: bool) -> tuple[str, Model, list[Request], dict[str, float]]:
    """(name, (engine model, router factory), its day, {deployment: mean e2e alone})."""
    fam_name, _, shape_name = spec.partition(":")
    family = get_family(fam_name)
    shape = family.shape(shape_name or "mixed", 2)
    if quick:
        shape = shape.shortened(QUICK_FACTOR)
    reqs = shape.requests(seed)
    engine = family.model
    settings = settings_for(engine, long_prompt_tokens=family.scaled_tokens(32768),
                            context_tokens=family.scaled_tokens(12288))
    learned = replace(settings, predict=False, learn=True)
    name = f"{fam_name}-{shape.name}".replace("_", "-")  # a pool name is a DNS label
    alone = {"all-plain": all_plain(2), "all-spec": all_spec(2),
             "all-adaptive": all_adaptive(2, adaptive_max_batch(engine, family.scaled_tokens(12288))),
             "learned": routed(1, 2, lambda: PolicyRouter(learned), label="learned")}
    means = {label: mean_e2e(simulate_day(reqs, dep, engine, seed=seed).records) for label, dep in alone.items()}
    return name, (engine, lambda: PolicyRouter(learned)), reqs, means


def fleet_config(names: list[str]) -> Config:
    """The router config of the fleet: ``models:``, each with a speculative and a plain pool of
    one endpoint (the simulated engine's URL), through the router's own loader."""
    def pool(model: str, spec: bool) -> dict[str, Any]:
        name = f"{model}-{'spec' if spec else 'plain'}"
        engine = {"model_path": f"/models/{model}"} | (
            {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": f"/models/{model}-eagle3"}
            if spec else {})
        return {"name": name, "speculative": spec, "endpoints": [f"http://{name}-0"], "engine": engine}

    return parse_config({"models": [{"name": n, "tokenizer": f"/models/{n}", "limits": {"max_context_tokens": 262144},
                                     "routing": {"long_prompt_tokens": 32768, "saturation": {"enter": 8, "exit": 6}},
                                     "pools": [pool(n, True), pool(n, False)]} for n in names]})


def run(specs: list[str], seeds: list[int], quick: bool) -> list[dict[str, Any]]:
    """Every model's rows (module docstring), seed by seed."""
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        built = [_model(spec, seed, quick) for spec in specs]
        names = [b[0] for b in built]
        if len(set(names)) != len(names):
            raise SystemExit(f"two models share a name: {names}")
        config = fleet_config(names)
        models = fleet_models(config, {n: b[1][0] for n, b in zip(names, built, strict=True)},
                              {n: b[1][1] for n, b in zip(names, built, strict=True)})
        dep, pool_models, pool_seeds = fleet_deployment(models, resolve=config_resolver(config))
        merged, origin = interleave({name: reqs for name, _, reqs, _ in built})
        fleet = simulate_day(merged, dep, built[0][1][0], seed=seed, pool_models=pool_models,
                             pool_seeds=pool_seeds)
        for name, _, reqs, means in built:
            static = min(STATIC, key=lambda s: means[s])
            base = means[static]
            shared = mean_e2e(model_records(fleet.records, origin, name))
            rows.append({"model": name, "seed": seed, "requests": len(reqs), "static": static,
                         "static_mean_s": base, "alone_mean_s": means["learned"], "fleet_mean_s": shared,
                         "alone_ratio": means["learned"] / base, "fleet_ratio": shared / base,
                         "fleet_over_alone": shared / means["learned"]})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    head = ("| model (family-shape) | seed | requests | better static (mean s) | alone: router / static | "
            "fleet: router / static | fleet / alone |")
    out = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['seed']} | {r['requests']} | {r['static']} ({r['static_mean_s']:.2f}) | "
                   f"{r['alone_ratio']:.3f}x | {r['fleet_ratio']:.3f}x | {r['fleet_over_alone']:.3f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="default:mixed,moe_spec_pays:heavy", help="FAMILY:SHAPE,... (two or more)")
    ap.add_argument("--seeds", default="0", help="seeds, comma-separated (default 0)")
    ap.add_argument("--quick", action="store_true", help="every day a quarter as long (same rates)")
    ap.add_argument("--out", default="runs/two_models.json")
    args = ap.parse_args(argv)
    specs = args.models.split(",")
    if len(specs) < 2:
        ap.error("--models needs at least two FAMILY:SHAPE entries")
    rows = run(specs, [int(s) for s in args.seeds.split(",")], args.quick)
    print(table(rows))
    worst = max(abs(r["fleet_over_alone"] - 1) for r in rows)
    print(f"\nlargest |fleet / alone - 1|: {worst:.1%} (target: within 5%)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"models": specs, "quick": args.quick, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
