"""Multi-turn conversations whose load crosses the speculative pool's saturation threshold.

    /work/main/.venv/bin/python benchmarks/multiturn_mixed.py [--phases 6:0.5,10:4,6:0.5,10:4,6:0.5]
        [--turns 6] [--enter 4] [--exit 2] [--seed 0] [--seeds 1] [--out bench-multiturn-mixed.json]

Setup (127.0.0.1, one run): two pools of two fake SGLang replicas each
(``serving/fake_sglang/`` with its radix-like prefix cache and cache reports): ``spec``
(``--speculative``, accept length ``--accept-length``) and ``plain``, behind specgate with
``routing.saturation`` ``--enter`` / ``--exit`` (a pool's load is that of its least-loaded
endpoint, requests) and ``routing.min_flip_interval_s`` ``--min-flip-s``. Targets, one after
the other on the same conversations (every fake's cache and log reset in between):

- ``perfect``: no router, one fake with an unbounded cache (the cache every turn could hit);
- ``before``: ``routing.prefix_cache.enabled: false``: least load inside a pool, and the
  saturation bypass moves a conversation to the plain pool whatever it has cached;
- ``after``: prefix-cache routing inside each pool (``router/decision/prefix.py``).

Workload (seeded): conversations arrive open loop, Poisson, at the rate of each phase of
``--phases`` (``seconds:conversations per second``, comma-separated), each playing
``--turns`` turns back to back (the conversations of :mod:`benchmarks.multiturn`: shared
120-word system prompt, answers of 16-48 tokens at ``--decode-step-s`` per token). A high
phase pushes the spec endpoints past ``enter``; the bypass then sends new turns to ``plain``
until the spec load falls below ``exit``.

Measured per target: prefill work (sum over turns after the first of ``prompt_tokens -
cached_tokens``) over the ``perfect`` one; pool changes (``x-specgate-pool`` of a turn differs
from the previous turn's), conversations with at least one and with at least two changes;
endpoint changes (from the fakes' request logs: which replica served each turn); turns per
pool. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.multiturn import Engines, conversations, play_one, prefill_work
from benchmarks.router_overhead import free_port, stop_processes, wait_http


def arrivals(phases: list[tuple[float, float]], seed: int) -> list[float]:
    """Start times (s) of a Poisson arrival process whose rate (per s) is piecewise constant:
    ``phases`` = ``[(duration_s, rate_per_s), ...]``, seeded."""
    rng = random.Random(seed)
    out: list[float] = []
    start = 0.0
    for duration, rate in phases:
        t = start
        while rate > 0:
            t += rng.expovariate(rate)
            if t >= start + duration:
                break
            out.append(t)
        start += duration
    return out


def parse_phases(text: str) -> list[tuple[float, float]]:
    """``"6:0.5,10:4"`` -> ``[(6.0, 0.5), (10.0, 4.0)]`` (seconds, conversations per second)."""
    out = []
    for part in text.split(","):
        duration, rate = part.split(":")
        out.append((float(duration), float(rate)))
    return out


async def play_open(url: str, convs: list[list[tuple[str, int]]], starts: list[float]) -> list[dict[str, Any]]:
    """Start conversation ``i`` at ``starts[i]`` s (open loop) against ``url``; returns the
    records of :func:`benchmarks.multiturn.play`."""
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    async def one(session: aiohttp.ClientSession, ci: int) -> None:
        await asyncio.sleep(max(0.0, starts[ci] - (time.perf_counter() - t0)))
        await play_one(session, url, ci, convs[ci], records, t0)

    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(one(session, i) for i in range(len(convs))))
    return records


def pool_changes(records: list[dict[str, Any]], key: str = "pool") -> dict[str, int]:
    """Changes of ``key`` between consecutive turns of a conversation: ``changes`` (turn
    transitions whose ``key`` differs), ``conversations_moved`` (at least one change),
    ``conversations_bounced`` (at least two), ``transitions`` (turns after the first)."""
    by_conv: dict[int, dict[int, Any]] = {}
    for r in records:
        by_conv.setdefault(r["conversation"], {})[r["turn"]] = r.get(key)
    changes = moved = bounced = transitions = 0
    for turns in by_conv.values():
        seq = [turns[t] for t in sorted(turns)]
        n = sum(1 for a, b in itertools.pairwise(seq) if a != b)
        transitions += len(seq) - 1
        changes += n
        moved += n >= 1
        bounced += n >= 2
    return {"changes": changes, "conversations_moved": moved, "conversations_bounced": bounced,
            "transitions": transitions}


def served_by(fakes: dict[str, str]) -> dict[tuple[str, int], str]:
    """``{(first user message, user messages): replica name}`` from the fakes' request logs."""
    out: dict[tuple[str, int], str] = {}
    for name, url in fakes.items():
        with urllib.request.urlopen(url + "/_fake/requests?path=/v1/chat/completions") as r:
            doc = json.load(r)
        for e in doc["requests"]:
            users = [m["content"] for m in (e.get("body") or {}).get("messages", []) if m.get("role") == "user"]
            if users:
                out[(users[0], len(users))] = name
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", default="6:0.5,10:4,6:0.5,10:4,6:0.5",
                    help="seconds:conversations per second, comma-separated")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--enter", type=int, default=4, help="routing.saturation.enter (requests)")
    ap.add_argument("--exit", type=int, default=2, help="routing.saturation.exit (requests)")
    ap.add_argument("--min-flip-s", type=float, default=1.0, help="routing.min_flip_interval_s (s)")
    ap.add_argument("--accept-length", type=float, default=3.0, help="the spec fakes' accept length (tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1, help="repeat with seeds seed..seed+seeds-1")
    ap.add_argument("--cache-tokens", type=int, default=1 << 20, help="prefix cache per fake replica (tokens)")
    ap.add_argument("--decode-step-s", type=float, default=0.01)
    ap.add_argument("--prefill-s-per-token", type=float, default=2e-5)
    ap.add_argument("--sticky-load-factor", type=float, default=None,
                    help="routing.prefix_cache.sticky_load_factor of the after target (ratio; default: the config's)")
    ap.add_argument("--targets", default="perfect,before,after")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--out", default="bench-multiturn-mixed.json")
    args = ap.parse_args()
    targets = args.targets.split(",")
    phases = parse_phases(args.phases)
    work = Path(tempfile.mkdtemp(prefix="specgate-multiturn-mixed-"))
    tokenizer = Path(args.tokenizer)
    if not (tokenizer / "tokenizer.json").exists():
        from tests.support import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], log: str) -> None:
        procs.append(subprocess.Popen(cmd, stdout=open(work / log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                      start_new_session=True, cwd=ROOT))

    def fake(name: str, cache_tokens: int, speculative: bool) -> str:
        port = free_port()
        spawn([sys.executable, "-m", "serving.fake_sglang", "--port", str(port), "--model-name", "bench",
               "--context-length", "65536", "--max-total-tokens", str(1 << 22),
               "--prefix-cache-tokens", str(cache_tokens), "--decode-step-s", str(args.decode_step_s),
               "--prefill-s-per-token", str(args.prefill_s_per_token),
               *(["--speculative", "--spec-accept-length", str(args.accept_length)] if speculative else [])],
              f"{name}.log")
        return f"http://127.0.0.1:{port}"

    def specgate(spec: list[str], plain: list[str], enabled: bool, name: str) -> str:
        port = free_port()
        sticky = {} if args.sticky_load_factor is None or not enabled else {
            "sticky_load_factor": args.sticky_load_factor}
        cfg = work / f"{name}.yaml"
        cfg.write_text(json.dumps({
            "model": {"name": "bench", "tokenizer": str(tokenizer)},
            "limits": {"max_context_tokens": 65536, "default_max_tokens": 64},
            "pools": [{"name": "spec", "speculative": True, "endpoints": spec, "draft_reserved_tokens": 4},
                      {"name": "plain", "speculative": False, "endpoints": plain}],
            "routing": {"long_prompt_tokens": 16384, "saturation": {"enter": args.enter, "exit": args.exit},
                        "min_flip_interval_s": args.min_flip_s, "prefix_cache": {"enabled": enabled, **sticky}},
            "scrape": {"interval_s": 0.1, "timeout_s": 1.0, "stale_after_s": 1.0},
            "server": {"log_requests": False}}))
        spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(port)],
              f"{name}.log")
        return f"http://127.0.0.1:{port}"

    try:
        fakes = {"spec-a": fake("spec-a", args.cache_tokens, True), "spec-b": fake("spec-b", args.cache_tokens, True),
                 "plain-a": fake("plain-a", args.cache_tokens, False),
                 "plain-b": fake("plain-b", args.cache_tokens, False)}
        perfect = fake("perfect", 1 << 30, False)
        fronts: dict[str, str] = {}
        if "perfect" in targets:
            fronts["perfect"] = perfect
        spec, plain = [fakes["spec-a"], fakes["spec-b"]], [fakes["plain-a"], fakes["plain-b"]]
        if "before" in targets:
            fronts["before"] = specgate(spec, plain, False, "before")
        if "after" in targets:
            fronts["after"] = specgate(spec, plain, True, "after")
        for url in [*fakes.values(), perfect]:
            wait_http(url + "/health")
        for name, url in fronts.items():
            wait_http(url + ("/health" if name == "perfect" else "/ready"))
        time.sleep(1.0)  # a few scrape rounds: every endpoint healthy
        engines = Engines("fake", [*fakes.values(), perfect])
        results: dict[str, list[dict[str, Any]]] = {}
        for seed in range(args.seed, args.seed + args.seeds):
            starts = arrivals(phases, seed)
            convs = conversations(len(starts), args.turns, seed)
            for name, url in fronts.items():
                for b in engines.urls:
                    engines.reset(b)
                time.sleep(args.min_flip_s + 0.5)  # the bypass settles idle before each run
                t0 = time.perf_counter()
                records = asyncio.run(play_open(url, convs, starts))
                wall = time.perf_counter() - t0
                where = served_by(fakes) if name != "perfect" else {}
                for r in records:
                    users = [convs[r["conversation"]][0][0]]
                    r["replica"] = where.get((users[0], r["turn"] + 1))
                pools: dict[str, int] = {}
                for r in records:
                    pools[str(r["pool"])] = pools.get(str(r["pool"]), 0) + 1
                res = {"seed": seed, "conversations": len(convs), "prefill_tokens": prefill_work(records),
                       "prompt_tokens": sum(r["prompt_tokens"] for r in records if r["turn"] > 0),
                       "pool": pool_changes(records), "replica": pool_changes(records, "replica"),
                       "turns_per_pool": pools, "wall_s": wall, "records": records}
                results.setdefault(name, []).append(res)
                print(f"seed {seed} {name:8} {len(convs)} conversations  prefill {res['prefill_tokens']:7d} "
                      f"(of {res['prompt_tokens']})  pool changes {res['pool']['changes']}  "
                      f"replica changes {res['replica']['changes']}  turns {pools}  {wall:.1f} s", flush=True)
        rows = summarise(results)
        print_table(rows)
        Path(args.out).write_text(json.dumps({"args": vars(args), "summary": rows, "results": results}, indent=1))
        print(f"JSON written to {args.out}")
        return 0
    finally:
        stop_processes(procs)


def summarise(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per target, summed over seeds."""
    perfect = sum(r["prefill_tokens"] for r in results.get("perfect", []))
    rows = []
    for name, runs in results.items():
        def total(part: str, key: str, runs: list[dict[str, Any]] = runs) -> int:
            return sum(r[part][key] for r in runs)
        prefill = sum(r["prefill_tokens"] for r in runs)
        pools: dict[str, int] = {}
        for r in runs:
            for k, v in r["turns_per_pool"].items():
                pools[k] = pools.get(k, 0) + v
        rows.append({"target": name, "prefill_tokens": prefill,
                     "prefill_vs_perfect": prefill / perfect if perfect else None,
                     "conversations": sum(r["conversations"] for r in runs),
                     "transitions": total("pool", "transitions"), "pool_changes": total("pool", "changes"),
                     "moved": total("pool", "conversations_moved"), "bounced": total("pool", "conversations_bounced"),
                     "replica_changes": total("replica", "changes"), "turns_per_pool": pools})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'target':8} {'prefill/perfect':>15} {'pool changes':>14} {'moved':>6} {'bounced':>8} "
          f"{'replica changes':>16}  turns per pool")
    for r in rows:
        ratio = "-" if r["prefill_vs_perfect"] is None else f"{r['prefill_vs_perfect']:.2f}x"
        print(f"{r['target']:8} {ratio:>15} {r['pool_changes']:>6} / {r['transitions']:<5} {r['moved']:>6} "
              f"{r['bounced']:>8} {r['replica_changes']:>16}  {r['turns_per_pool']}")


if __name__ == "__main__":
    sys.exit(main())
