"""Does the router pay out of the box over real HTTP? The real router process before step-model fakes.

    /work/main/.venv/bin/python benchmarks/outofbox_http.py [--family kv_limited] [--shape mixed]
        [--duration-s 180] [--seed 0] [--deployments all-plain,all-spec,learned,coin,jsq,length,learned-nocheck]
        [--engines 2] [--spec-engines 1] [--out runs/outofbox_http.json] [--workdir runs/outofbox_http]
        [--engine-model day|sglang]

The simulator's claim (:mod:`benchmarks.outofbox`, docs/performance.md "Out of the box: learned
speed models") checked with the router's real path: HTTP parsing, prompt counting, the
scraper reading each engine's ``/metrics`` (KV capacity, usage, accept-length gauge), the
``return_spec_tokens_details`` round trip, and learning from proxied responses. The engines
are fake SGLang servers (:mod:`serving.fake_sglang`, contract-tested against SGLang 0.5.23)
whose generation is driven by the day simulator's engine (:class:`loadtests.dayhttp.DayStepEngine`:
continuous batching, admission by KV reservation against ``max_total_num_tokens``, acceptance
draws; a step of ``dt`` simulated seconds sleeps ``dt`` real seconds). ``--engine-model sglang``
drives them by the second engine model instead, SGLang 0.5.23's scheduler
(:class:`loadtests.sglang_sched.SglangStepEngine`, the family of ``--family``'s name in
:mod:`loadtests.sglang_families`); the router's thresholds and the simulator's rows stay the
day model's (the router is not told which engine it runs on).

For one engine family (:mod:`loadtests.dayfamilies`) and day shape (:mod:`loadtests.dayshapes`,
fitted to the family, for two engines), the same seeded requests go, one deployment after
the other, through

- ``all-plain``: ``--engines`` N plain fakes (default 2), client round robin (request ``i`` to
  engine ``i mod N``);
- ``all-spec``: N speculative fakes, client round robin;
- ``learned``: ``specgate router`` as a process (``python -m router.cli router --config``),
  a speculative pool of k fakes + a plain pool of N - k, no ``speed`` blocks,
  ``routing.learning`` at its defaults (on), thresholds as ``benchmarks/outofbox.py`` gives the
  simulated router (``long_prompt_tokens`` the family's 32K-equivalent, ``saturation`` from the
  engine's crossover batch, :func:`loadtests.dayrouter.settings_for`), everything else default
  (scrape every 0.25 s, acceptance ``max_age_s`` 10 s, warm-up probes on);
- the simplest rules at the same split (``--spec-engines`` k speculative + N - k plain fakes,
  default k = N // 2; with the defaults 1 + 1; the client choosing:
  :data:`RULES`): ``coin``, ``jsq`` (join the shorter queue by the client's own in-flight
  count), ``length`` (the long-prompt rule); ``learned-nocheck``, the learned router with its
  prediction fallback off (``routing.learning.check.enabled: false``); and ``learned-nomarginal``,
  with ``routing.learning.marginal_cost: false``. Each prints its mean as
  a ratio of the better static deployment's, and the learned rows also over the best rule's.

Requests are sent open loop at their arrival times (one ``httpx.AsyncClient``, not streamed);
a request's latency is from its scheduled arrival to the end of its response body.

Day length: the day is *shortened* (:meth:`loadtests.dayshapes.DayShape.shortened`: every
segment, burst and shift ``duration_s / day length`` times as long, arrival rates unchanged),
not time-compressed. Compressing time (engines ``k`` times faster, arrivals ``k`` times denser)
would leave the router's own real-second settings (scrape interval 0.25 s, acceptance max age
10 s, ``min_flip_interval_s`` 1 s, the acceptance memory 30 s, HTTP and scheduling overheads of
a few ms) ``k`` times too slow against the engines; shortening keeps every engine time and
router setting at its real scale, and only the phases of the day are shorter (the mixed day's
idle gap becomes 15 s at 180 s, still longer than the acceptance max age).

Printed per deployment: requests, errors, mean and p90 latency, the learned router's mean and
p90 as ratios of the better static deployment's; the router's decisions by
``x-specgate-reason``; what it learned (``GET /ready``: each pool's ``speed_model``). And the
simulator's rows for the same requests and seed (:func:`loadtests.daysim.simulate_day`: all-plain,
all-spec, and the routed 1s+1p deployment through :class:`loadtests.dayrouter.PolicyRouter` in
learned mode), side by side. JSON to ``--out``; the router's log (access log on) and YAML under
``--workdir``. Every process started is stopped on the way out (SIGTERM to its process group,
SIGKILL after 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx
import yaml

from benchmarks.router_overhead import stop_processes
from loadtests.dayfamilies import get_family
from loadtests.dayhttp import DayStepEngine, chat_body, fake_config
from loadtests.dayrouter import PolicyRouter, PolicySettings, settings_for
from loadtests.dayshapes import EngineModel, Request
from loadtests.daysim import DayResult, all_plain, all_spec, routed, simulate_day
from loadtests.sglang_families import SglangFamily, get_sglang_family
from loadtests.sglang_sched import SglangStepEngine, sglang_fake_config
from serving.fake_sglang import FakeServer
from serving.ports import free_port

MODEL = "day-model"
TOKENIZER = ROOT / "examples" / "fake-tokenizer"
DEPLOYMENTS = ("all-plain", "all-spec", "learned")
#: The simplest rules at the learned router's split (k speculative + N - k plain engines), applied by
#: the client itself: ``coin`` (seeded 50% to the speculative engine), ``jsq`` (join the shorter
#: queue: the engine with fewer of the client's own requests in flight, the speculative one on
#: ties), ``length`` (prompts above ``routing.long_prompt_tokens`` to plain, the rest to spec).
RULES = ("coin", "jsq", "length")
#: ``learned-nocheck``: the learned router with ``routing.learning.check.enabled: false`` (the
#: prediction never falls back: the router before its predictions were checked);
#: ``learned-nomarginal``: with ``routing.learning.marginal_cost: false`` (each request to the pool
#: predicted fastest for itself, not counting what it costs the requests beside it);
#: ``learned-noaffinity``: with ``routing.prefix_cache.pool_affinity_ratio`` and
#: ``new_affinity_ratio`` at 1.0 (no conversation affinity across pools: always the predicted fastest).
VARIANTS = ("learned-nocheck", "learned-nomarginal", "learned-noaffinity")
#: The router settings each variant changes (dotted path -> value), over ``--router-arg``'s.
VARIANT_ARGS: dict[str, dict[str, Any]] = {
    "learned-nocheck": {"routing.learning.check.enabled": False},
    "learned-nomarginal": {"routing.learning.marginal_cost": False},
    "learned-noaffinity": {"routing.prefix_cache.pool_affinity_ratio": 1.0,
                           "routing.prefix_cache.new_affinity_ratio": 1.0},
}


@dataclass
class Result:
    """One request over HTTP (seconds from its scheduled arrival; tokens)."""

    rid: int
    status: int = 0
    e2e_s: float | None = None
    reason: str | None = None
    pool: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None


def _seed(seed: int, pool_index: int, i: int) -> int:
    """The acceptance-draw seed of engine ``i`` of pool ``pool_index`` (as :func:`simulate_day`)."""
    return seed * 1_000_003 + pool_index * 997 + i


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    node = doc
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def router_yaml(settings: PolicySettings, spec_urls: list[str], plain_urls: list[str], port: int,
                overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The router config of the ``learned`` deployment (module docstring), with ``overrides``
    (dotted path -> value: a variant's :data:`VARIANT_ARGS` and ``--router-arg``) set in it."""
    doc = {
        "model": {"name": MODEL, "tokenizer": str(TOKENIZER)},
        "limits": {"max_context_tokens": settings.max_context_tokens, "max_request_bytes": 8 << 20},
        "pools": [
            {"name": "spec", "speculative": True, "endpoints": spec_urls,
             "draft_reserved_tokens": settings.reserved_tokens, "drafter_cost_ratio": settings.drafter_cost_ratio},
            {"name": "plain", "speculative": False, "endpoints": plain_urls},
        ],
        "routing": {"long_prompt_tokens": settings.long_prompt_tokens,
                    "saturation": {"enter": settings.saturation_enter, "exit": settings.saturation_exit}},
        "server": {"host": "127.0.0.1", "port": port, "log_requests": True},
    }
    for dotted, value in (overrides or {}).items():
        _set(doc, dotted, value)
    return doc


Chooser = Callable[[Request, list[int]], int]


def rule_chooser(rule: str, settings: PolicySettings, seed: int, k: int, n: int) -> Chooser:
    """The client-side rule of :data:`RULES` at ``k`` speculative + ``n - k`` plain engines:
    ``(request, in flight per target) -> target index`` (targets ``0 .. k-1`` speculative, the
    rest plain). ``coin``: a speculative engine with probability ``k / n`` (seeded), the least
    busy of the chosen kind; ``jsq``: the least busy engine, the first (speculative) on ties;
    ``length``: the least busy plain engine for a prompt above ``routing.long_prompt_tokens``,
    else the least busy speculative one."""
    spec, plain = list(range(k)), list(range(k, n))

    def least(idx: list[int], inflight: list[int]) -> int:
        return min(idx, key=lambda i: (inflight[i], i))

    if rule == "coin":
        rng = random.Random(seed)
        return lambda req, inflight: least(spec if rng.random() < k / n else plain, inflight)
    if rule == "jsq":
        return lambda req, inflight: least(spec + plain, inflight)
    if rule == "length":
        return lambda req, inflight: least(plain if req.prompt_tokens > settings.long_prompt_tokens else spec,
                                           inflight)
    raise ValueError(f"unknown rule {rule!r}")


async def _send(client: httpx.AsyncClient, url: str, req: Request, t0: float, out: Result,
                chooser: tuple[Chooser, list[str], list[int]] | None = None) -> None:
    await asyncio.sleep(max(0.0, t0 + req.arrival_s - time.monotonic()))
    slot = None
    if chooser is not None:  # a client-side rule picks the engine at the request's arrival
        choose, targets, inflight = chooser
        slot = choose(req, inflight)
        inflight[slot] += 1
        url = targets[slot] + "/v1/chat/completions"
        out.pool = f"engine{slot}"
    try:
        r = await client.post(url, json=chat_body(req, MODEL))
        out.status = r.status_code
        out.reason = r.headers.get("x-specgate-reason")
        out.pool = r.headers.get("x-specgate-pool") or out.pool
        doc = r.json()
        if r.status_code == 200:
            usage = doc.get("usage") or {}
            out.prompt_tokens, out.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
            out.finish_reason = doc["choices"][0].get("finish_reason")
            if "sglext" in doc:
                out.error = "sglext relayed to a client that did not ask for it"
        else:
            out.error = json.dumps(doc)[:300]
    except (httpx.HTTPError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    out.e2e_s = time.monotonic() - (t0 + req.arrival_s)
    if slot is not None and chooser is not None:
        chooser[2][slot] -= 1


async def _day(targets: list[str], reqs: list[Request], choose: Chooser | None = None) -> list[Result]:
    results = [Result(r.rid) for r in reqs]
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=1024)
    chooser = None if choose is None else (choose, targets, [0] * len(targets))
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0), limits=limits) as client:
        t0 = time.monotonic() + 0.5
        await asyncio.gather(*(_send(client, targets[i % len(targets)] + "/v1/chat/completions", r, t0, results[i],
                                     chooser)
                               for i, r in enumerate(reqs)))
    return results


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the router exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the router did not become ready")


def run_http(name: str, model: EngineModel, settings: PolicySettings, reqs: list[Request], seed: int,
             workdir: Path, n: int = 2, k: int = 1, engine_family: SglangFamily | None = None,
             router_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """One deployment over HTTP; its results, the engines' step counts and (learned) the router's view.

    ``engine_family``: run the fakes on the SGLang-scheduler engine model of this family
    (:mod:`loadtests.sglang_sched`) instead of the day simulator's engine. ``router_args``:
    router settings (dotted path -> value) set in every routed deployment, under the variant's own.
    """
    routed_here = name.startswith("learned")
    if routed_here or name in RULES:  # k speculative + n - k plain engines
        layout = [(True, _seed(seed, 0, i)) for i in range(k)] + [(False, _seed(seed, 1, i)) for i in range(n - k)]
    else:
        spec = name == "all-spec"
        layout = [(spec, _seed(seed, 0, i)) for i in range(n)]
    if engine_family is None:
        engines: list[Any] = [DayStepEngine(model, spec, s) for spec, s in layout]
        configs = [fake_config(model, spec, model_name=MODEL) for spec, _ in layout]
    else:
        engines = [SglangStepEngine(engine_family, spec, s) for spec, s in layout]
        configs = [sglang_fake_config(engine_family, spec, model_name=MODEL) for spec, _ in layout]
    fakes = [FakeServer(c, step_engine=e, keep_alive_s=120.0) for c, e in zip(configs, engines, strict=True)]
    procs: list[subprocess.Popen[bytes]] = []
    extra: dict[str, Any] = {}
    try:
        for f in fakes:
            f.start()
        targets = [f.base_url for f in fakes]
        if routed_here:
            port = free_port()
            cfg = workdir / f"{name}.yaml"
            cfg.write_text(yaml.safe_dump(router_yaml(settings, [f.base_url for f in fakes[:k]],
                                                      [f.base_url for f in fakes[k:]], port,
                                                      {**(router_args or {}), **VARIANT_ARGS.get(name, {})})))
            log = (workdir / f"{name}-router.log").open("wb")
            procs.append(subprocess.Popen([sys.executable, "-m", "router.cli", "router", "--config", str(cfg)],
                                          cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                          env={**os.environ, "PYTHONPATH": str(ROOT)}))
            targets = [f"http://127.0.0.1:{port}"]
            _wait_ready(targets[0], procs[0])
        load0 = os.getloadavg()[0]
        t = time.monotonic()
        results = asyncio.run(_day(targets, reqs, rule_chooser(name, settings, seed, k, n) if name in RULES else None))
        wall = time.monotonic() - t
        if routed_here:
            extra["ready"] = httpx.get(targets[0] + "/ready", timeout=10).json()
            extra["router_metrics"] = [ln for ln in httpx.get(targets[0] + "/metrics", timeout=10).text.splitlines()
                                       if ln.startswith(("specgate_learn", "specgate_decisions", "specgate_bypass",
                                                         "specgate_prediction"))]
        extra.update(wall_s=wall, load_avg_start=load0, load_avg_end=os.getloadavg()[0],
                     engine_steps=[e.engine.steps for e in engines], engine_busy_s=[e.engine.busy_s for e in engines])
    finally:
        stop_processes(procs)
        for f in fakes:
            f.stop()
    return {"results": results, **extra}


def _stats(e2e: list[float]) -> dict[str, float | None]:
    if not e2e:
        return {"mean_s": None, "p90_s": None}
    e2e = sorted(e2e)
    return {"mean_s": statistics.fmean(e2e), "p90_s": e2e[int(0.9 * (len(e2e) - 1))]}


def _sim_stats(res: DayResult) -> dict[str, Any]:
    ok = [r.e2e_s for r in res.records if r.status == "ok" and r.e2e_s is not None]
    return {"requests": len(res.records), "errors": len(res.records) - len(ok), **_stats(ok),
            "reasons": dict(res.reasons)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="kv_limited")
    ap.add_argument("--shape", default="mixed")
    ap.add_argument("--duration-s", type=float, default=180.0, help="the shortened day's length (s, default 180)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", type=int, default=2, help="N engines in every deployment (default 2)")
    ap.add_argument("--spec-engines", type=int, default=None,
                    help="k speculative engines of the routed split and the rules (default N // 2)")
    ap.add_argument("--deployments", default=",".join(DEPLOYMENTS))
    ap.add_argument("--out", default="runs/outofbox_http.json")
    ap.add_argument("--workdir", default="runs/outofbox_http")
    ap.add_argument("--engine-model", choices=("day", "sglang"), default="day",
                    help="the fakes' engine model: the day simulator's (default) or SGLang's scheduler "
                         "(loadtests/sglang_sched.py, the family of the same name)")
    ap.add_argument("--router-arg", action="append", default=[], metavar="DOTTED=YAML",
                    help="a router setting for every routed deployment, e.g. "
                         "routing.prefix_cache.new_affinity_ratio=1.0 (repeatable)")
    args = ap.parse_args(argv)
    router_args: dict[str, Any] = {}
    for item in args.router_arg:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--router-arg {item!r}: expected DOTTED=YAML")
        router_args[key] = yaml.safe_load(value)
    engine_family = get_sglang_family(args.family) if args.engine_model == "sglang" else None
    family = get_family(args.family)
    model = family.model
    n, k = args.engines, args.spec_engines if args.spec_engines is not None else args.engines // 2
    if not 0 < k < n:
        ap.error("--spec-engines must be between 1 and --engines - 1")
    full = family.shape(args.shape, n)
    shape = full.shortened(min(1.0, args.duration_s / full.duration_s))
    reqs = shape.requests(args.seed)
    settings = settings_for(model, long_prompt_tokens=family.scaled_tokens(32768),
                            context_tokens=family.scaled_tokens(12288))
    learned = replace(settings, predict=False, learn=True)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"{args.family} / {args.shape} shortened to {shape.duration_s:.0f} s: {len(reqs)} requests, seed {args.seed}; "
          f"routing.long_prompt_tokens {settings.long_prompt_tokens}, saturation {settings.saturation_enter}/"
          f"{settings.saturation_exit}")
    sim = {"all-plain": simulate_day(reqs, all_plain(n), model, seed=args.seed),
           "all-spec": simulate_day(reqs, all_spec(n), model, seed=args.seed),
           "learned": simulate_day(reqs, routed(k, n, lambda: PolicyRouter(learned), label="learned"), model,
                                   seed=args.seed)}
    rows: dict[str, Any] = {}
    for name in args.deployments.split(","):
        print(f"  running {name} over HTTP ...", flush=True)
        run = run_http(name, model, settings, reqs, args.seed, workdir, n, k, engine_family, router_args)
        res: list[Result] = run.pop("results")
        ok = [r for r in res if r.status == 200 and r.error is None and r.e2e_s is not None]
        wrong = [r for r in ok if r.completion_tokens != reqs[r.rid].output_tokens]
        rows[name] = {"requests": len(res), "errors": len(res) - len(ok), "wrong_usage": len(wrong),
                      **_stats([r.e2e_s for r in ok if r.e2e_s is not None]),
                      "reasons": dict(Counter(r.reason for r in ok if r.reason)),
                      "pools": dict(Counter(r.pool for r in ok if r.pool)),
                      "first_errors": [r.error for r in res if r.error][:5], **run}
    static = [n for n in ("all-plain", "all-spec") if n in rows]
    sim_rows = {n: _sim_stats(r) for n, r in sim.items()}
    best_http = min(static, key=lambda n: rows[n]["mean_s"] or float("inf")) if static else None
    best_sim = min(("all-plain", "all-spec"), key=lambda n: sim_rows[n]["mean_s"] or float("inf"))
    print(f"\n{'deployment':<10} {'HTTP: n':>7} {'err':>4} {'mean s':>7} {'p90 s':>7} {'ratio':>11} | "
          f"{'sim: mean s':>11} {'p90 s':>7} {'ratio':>11}")
    def http_cells(name: str) -> str:
        """The HTTP columns of ``name``'s row, its ratios to the better static deployment noted in it."""
        h = rows[name]
        hm, hp = h["mean_s"] or float("nan"), h["p90_s"] or float("nan")
        ratio = "-"
        if best_http is not None:
            b = rows[best_http]
            ratio = f"{hm / b['mean_s']:.2f}/{hp / b['p90_s']:.2f}"
            h.update(ratio_mean=hm / b["mean_s"], ratio_p90=hp / b["p90_s"], better_static=best_http)
        return f"{h['requests']:>7} {h['errors']:>4} {hm:7.2f} {hp:7.2f} {ratio:>11}"

    for name in [*DEPLOYMENTS, *(n for n in rows if n not in DEPLOYMENTS)]:
        if name not in sim_rows:  # a client-side rule or a router variant: HTTP only
            print(f"{name:<10} {http_cells(name)} | {'-':>11}")
            continue
        s = sim_rows[name]
        sm, sp = s["mean_s"] or float("nan"), s["p90_s"] or float("nan")
        bs = sim_rows[best_sim]
        sim_ratio = f"{sm / bs['mean_s']:.2f}/{sp / bs['p90_s']:.2f}"
        http = http_cells(name) if name in rows else f"{'-':>7} {'-':>4} {'-':>7} {'-':>7} {'-':>11}"
        print(f"{name:<10} {http} | {sm:11.2f} {sp:7.2f} {sim_ratio:>11}")
        s.update(ratio_mean=sm / sim_rows[best_sim]["mean_s"], ratio_p90=sp / sim_rows[best_sim]["p90_s"],
                 better_static=best_sim)
    print(f"(ratio: mean/p90 over the better static deployment: HTTP {best_http}, simulator {best_sim})")
    for name, h in rows.items():
        print(f"{name}: wall {h['wall_s']:.0f} s, load average {h['load_avg_start']:.1f} -> {h['load_avg_end']:.1f}, "
              f"engine steps {h['engine_steps']}, wrong usage {h['wrong_usage']}, errors {h['first_errors'][:2]}")
    rules = [n for n in RULES if n in rows and rows[n]["mean_s"] is not None]
    if rules:
        best_rule = min(rules, key=lambda n: rows[n]["mean_s"])
        for name in ("learned", *VARIANTS):
            if name in rows and rows[name]["mean_s"] is not None:
                rows[name]["vs_best_rule"] = rows[name]["mean_s"] / rows[best_rule]["mean_s"]
                print(f"{name} / the best simple rule at {k} + {n - k} ({best_rule}): mean "
                      f"{rows[name]['vs_best_rule']:.3f}x")
        for name in rules:
            print(f"{name}: pools {rows[name]['pools']}")
    for name in [n for n in ("learned", *VARIANTS) if n in rows]:
        h = rows[name]
        print(f"{name}, HTTP decisions:", dict(sorted(h["reasons"].items(), key=lambda kv: -kv[1])),
              "pools:", h["pools"])
        print("learned, simulated decisions:", dict(sorted(sim_rows["learned"]["reasons"].items(),
                                                         key=lambda kv: -kv[1])))
        for pname, p in h.get("ready", {}).get("pools", {}).items():
            pred = p.get("prediction") or {}
            print(f"  /ready {pname}: speed_model {json.dumps(p.get('speed_model'))}, accept_length_estimate "
                  f"{json.dumps(p.get('accept_length_estimate'))}; prediction: median relative error "
                  f"{pred.get('median_relative_error')} over {pred.get('checks')} (bias "
                  f"{(pred.get('completion') or {}).get('bias')}), fallback {pred.get('fallback')} "
                  f"(turned on {pred.get('fallbacks')}x)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"family": args.family, "shape": args.shape, "duration_s": shape.duration_s,
                               "engines": n, "spec_engines": k,
                               "seed": args.seed, "requests": len(reqs), "settings": learned.as_dict(),
                               "http": rows, "sim": sim_rows}, indent=1, default=str) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
