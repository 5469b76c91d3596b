"""Multi-turn conversations through a pool of 2 replicas: how much prefill the routing saves.

    .venv/bin/python benchmarks/multiturn.py [--conversations 24] [--turns 8] [--concurrency 8]
        [--seed 0] [--seeds 1] [--cache-tokens 65536] [--out bench-multiturn.json]

Setup (all on 127.0.0.1, in one run): two fake SGLang replicas (``serving/fake_sglang/`` with
its radix-like prefix cache, ``--prefix-cache-tokens``, reporting
``usage.prompt_tokens_details.cached_tokens`` as SGLang does with ``--enable-cache-report``)
behind, in turn:

- ``perfect``: no router, one fake with an unbounded cache: the cache every turn could hit;
- ``specgate-least-load``: specgate with ``routing.prefix_cache.enabled: false`` (least load);
- ``specgate``: specgate with prefix-cache routing (``router/prefix.py``);
- ``specgate-2-replicas``: two specgate processes with the same config, turns sent to them
  round robin (each sees half the traffic, no shared state);
- ``rust-cache_aware`` and ``rust-round_robin``: SGLang's Rust router ``sglang-router==0.3.2``
  (installed into ``.bench/rust-venv`` as ``benchmarks/router_overhead.py`` does) with its
  default thresholds.

Workload (seeded): ``--conversations`` conversations of ``--turns`` turns, ``--concurrency``
clients each playing whole conversations one after the other. Every conversation shares one
system prompt (120 words); its first user message has 40-80 seeded words, later ones 10-40; each
answer asks 16-48 tokens (the fake's output is deterministic, so every target sees the same
conversations). Between targets both fakes' caches and logs are reset.

Measured per target: prefill work = sum over turns after the first of ``prompt_tokens -
cached_tokens`` (tokens, as the engines report them), divided by the same sum for ``perfect``
(1.00x = every turn found its whole previous turn cached); requests per replica and their
max/min ratio; wall time. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.router_overhead import ensure_rust_router, free_port, stop_processes, wait_http

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]


def conversations(n: int, turns: int, seed: int) -> list[list[tuple[str, int]]]:
    """``n`` conversations of ``turns`` (user message, max_tokens) pairs, seeded."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        conv = []
        for t in range(turns):
            words = rng.randint(40, 80) if t == 0 else rng.randint(10, 40)
            conv.append((" ".join(rng.choice(WORDS) for _ in range(words)), rng.randint(16, 48)))
        out.append(conv)
    return out


SYSTEM = " ".join(random.Random(12345).choice(WORDS) for _ in range(120))


async def play(urls: list[str], convs: list[list[tuple[str, int]]], concurrency: int) -> list[dict[str, Any]]:
    """Run every conversation; each turn is sent to ``urls[i % len(urls)]`` (i: a global counter).

    Returns one record per turn: conversation, turn, prompt_tokens, cached_tokens.
    """
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(convs)):
        queue.put_nowait(i)
    counter = iter(range(10**9))
    records: list[dict[str, Any]] = []

    async def client(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            ci = queue.get_nowait()
            messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
            for t, (text, max_tokens) in enumerate(convs[ci]):
                messages.append({"role": "user", "content": text})
                url = urls[next(counter) % len(urls)]
                body = {"model": "bench", "messages": messages, "max_tokens": max_tokens}
                async with session.post(url + "/v1/chat/completions", json=body) as r:
                    doc = await r.json(content_type=None)
                    if r.status != 200:
                        raise RuntimeError(f"{url}: HTTP {r.status}: {doc}")
                usage = doc["usage"]
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                records.append({"conversation": ci, "turn": t, "prompt_tokens": usage["prompt_tokens"],
                                "cached_tokens": cached})
                messages.append({"role": "assistant", "content": doc["choices"][0]["message"]["content"]})

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return records


def prefill_work(records: list[dict[str, Any]]) -> int:
    """Tokens prefilled over the turns after the first (prompt - cached)."""
    return sum(r["prompt_tokens"] - r["cached_tokens"] for r in records if r["turn"] > 0)


def fake_requests(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url + "/_fake/requests") as r:
        doc = json.load(r)
    return sum(1 for e in doc["requests"] if e["path"] == "/v1/chat/completions")


def reset(url: str) -> None:
    import urllib.request

    for path in ("/_fake/reset", "/flush_cache"):
        urllib.request.urlopen(urllib.request.Request(url + path, method="POST", data=b"")).close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=24)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1, help="repeat with seeds seed..seed+seeds-1")
    ap.add_argument("--cache-tokens", type=int, default=65536, help="prefix cache per replica (tokens)")
    ap.add_argument("--decode-step-s", type=float, default=0.002)
    ap.add_argument("--prefill-s-per-token", type=float, default=2e-5)
    ap.add_argument("--targets", default="perfect,specgate-least-load,specgate,specgate-2-replicas,"
                                         "rust-cache_aware,rust-round_robin")
    ap.add_argument("--hash-load-factor", type=float, default=None,
                    help="routing.prefix_cache.hash_load_factor for specgate (default: the config default)")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--out", default="bench-multiturn.json")
    args = ap.parse_args()
    targets = args.targets.split(",")
    work = Path(tempfile.mkdtemp(prefix="specgate-multiturn-"))
    tokenizer = Path(args.tokenizer)
    if not (tokenizer / "tokenizer.json").exists():
        from tests.helpers import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], log: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(cmd, stdout=open(work / log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                             start_new_session=True, cwd=ROOT)
        procs.append(p)
        return p

    def fake(cache_tokens: int, name: str) -> str:
        port = free_port()
        spawn([sys.executable, "-m", "serving.fake_sglang", "--port", str(port), "--model-name", "bench",
               "--context-length", "65536", "--max-total-tokens", str(1 << 22),
               "--prefix-cache-tokens", str(cache_tokens), "--decode-step-s", str(args.decode_step_s),
               "--prefill-s-per-token", str(args.prefill_s_per_token)], f"{name}.log")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health")
        return url

    def specgate(fakes: list[str], enabled: bool, name: str) -> str:
        port = free_port()
        cfg = work / f"{name}.yaml"
        cfg.write_text(json.dumps({
            "model": {"name": "bench", "tokenizer": str(tokenizer)},
            "limits": {"max_context_tokens": 65536, "default_max_tokens": 64},
            "pools": [{"name": "plain", "speculative": False, "endpoints": fakes}],
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999},
                        "prefix_cache": {"enabled": enabled, **({"hash_load_factor": args.hash_load_factor}
                                                                if args.hash_load_factor else {})}},
            "scrape": {"interval_s": 0.2, "timeout_s": 1.0, "stale_after_s": 1.0},
            "server": {"log_requests": False}}))
        spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(port)],
              f"{name}.log")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/ready")
        return url

    def rust(fakes: list[str], policy: str) -> str:
        port = free_port()
        spawn([str(rust_py), "-m", "sglang_router.launch_router", "--worker-urls", *fakes, "--policy", policy,
               "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port())],
              f"rust-{policy}.log")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health")
        return url

    try:
        rust_py = ensure_rust_router() if any(t.startswith("rust") for t in targets) else None
        fakes = [fake(args.cache_tokens, "fake-a"), fake(args.cache_tokens, "fake-b")]
        fronts: dict[str, list[str]] = {}
        if "perfect" in targets:
            fronts["perfect"] = [fake(1 << 30, "fake-perfect")]
        if "specgate-least-load" in targets:
            fronts["specgate-least-load"] = [specgate(fakes, False, "specgate-least-load")]
        if "specgate" in targets:
            fronts["specgate"] = [specgate(fakes, True, "specgate")]
        if "specgate-2-replicas" in targets:
            fronts["specgate-2-replicas"] = [specgate(fakes, True, "specgate-r1"), specgate(fakes, True, "specgate-r2")]
        for policy in ("cache_aware", "round_robin"):
            if f"rust-{policy}" in targets:
                fronts[f"rust-{policy}"] = [rust(fakes, policy)]
        time.sleep(1.0)  # a few scrape rounds: every specgate endpoint healthy
        results: dict[str, list[dict[str, Any]]] = {}
        for seed in range(args.seed, args.seed + args.seeds):
            convs = conversations(args.conversations, args.turns, seed)
            for name, urls in fronts.items():
                backends = urls if name == "perfect" else fakes
                for b in backends:
                    reset(b)
                t0 = time.perf_counter()
                records = asyncio.run(play(urls, convs, args.concurrency))
                wall = time.perf_counter() - t0
                per = [fake_requests(b) for b in backends]
                res = {"seed": seed, "prefill_tokens": prefill_work(records), "requests_per_replica": per,
                       "wall_s": wall, "turns": len(records)}
                results.setdefault(name, []).append(res)
                print(f"seed {seed} {name:22} prefill {res['prefill_tokens']:7d} tokens  "
                      f"requests {per}  {wall:.1f} s", flush=True)
        summary = summarise(results)
        print_table(summary)
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results, "summary": summary}, indent=2))
        print(f"JSON written to {args.out}")
        return 0
    finally:
        stop_processes(procs)


def summarise(results: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    perfect = {r["seed"]: r["prefill_tokens"] for r in results.get("perfect", [])}
    rows = []
    for name, runs in results.items():
        ratios = [r["prefill_tokens"] / perfect[r["seed"]] for r in runs if perfect.get(r["seed"])]
        balance = [max(r["requests_per_replica"]) / max(min(r["requests_per_replica"]), 1) for r in runs]
        rows.append({"target": name, "prefill_vs_perfect": statistics.median(ratios) if ratios else None,
                     "prefill_vs_perfect_max": max(ratios) if ratios else None,
                     "requests_max_over_min": statistics.median(balance), "requests_per_replica":
                     runs[0]["requests_per_replica"], "wall_s": statistics.median(r["wall_s"] for r in runs)})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'target':22} {'prefill/perfect':>15} {'worst seed':>10} {'req max/min':>11} {'requests (seed 0)':>18} "
          f"{'wall s':>7}")
    for r in rows:
        ratio = "-" if r["prefill_vs_perfect"] is None else f"{r['prefill_vs_perfect']:.2f}x"
        worst = "-" if r["prefill_vs_perfect_max"] is None else f"{r['prefill_vs_perfect_max']:.2f}x"
        print(f"{r['target']:22} {ratio:>15} {worst:>10} {r['requests_max_over_min']:11.2f} "
              f"{r['requests_per_replica']!s:>18} {r['wall_s']:7.1f}")


if __name__ == "__main__":
    sys.exit(main())
