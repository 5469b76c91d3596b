"""Per-key limits under load: two keys of different limits through two router replicas sharing
one redis-server (docs/performance.md, "Per-key limits").

    .venv/bin/python benchmarks/key_limits.py [--duration 20] [--limits 20,50] [--offered 2.0]

Setup (127.0.0.1): one ``redis-server`` (``scripts/ensure-redis.sh``), one
``benchmarks/fast_backend.py`` as the only pool, two ``specgate router`` processes with
``state.backend: redis`` and ``auth.rate_limits`` giving key ``a`` and key ``b`` the
``requests_per_second`` of ``--limits`` (each key's burst is its default, one second's worth).
One open-loop client per key sends ``--offered`` times the key's limit, every request to the
next replica in turn (so each replica sees half of each key's traffic and none can hold the
limit alone).

Reported per key: its limit, the rate of 200s in the steady window (answers that arrived from
``--warmup`` s after the start to ``--duration``: an answer comes a few ms after its admission,
while a send time would shift with the client's own lag; the first second's burst is outside
the window), the ratio
of the two, and the other statuses (429 expected, anything else is an error). A key held to
its limit has a ratio near 1.0; the exit status is 1 when a ratio is off by more than
``--tolerance`` (default 5%) or a status other than 200/429 came back.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.router_overhead import CHAT_BODY, free_port, stop_processes, wait_http

KEYS = ("key-a", "key-b")


def router_config(backend_port: int, redis_port: int, limits: list[float], tokenizer: str) -> dict[str, object]:
    """The replicas' config: one plain pool, shared state in Redis, one limit per key."""
    return {
        "model": {"name": "bench", "tokenizer": tokenizer},
        "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
        "pools": [{"name": "plain", "speculative": False, "endpoints": [f"http://127.0.0.1:{backend_port}"]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
        "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
        "state": {"backend": "redis", "redis_url": f"redis://127.0.0.1:{redis_port}/0", "key_prefix": "bench-limits",
                  "op_timeout_s": 0.25},
        "auth": {"api_keys": list(KEYS), "rate_limits": {"keys": {
            hashlib.sha256(k.encode()).hexdigest(): {"requests_per_second": rps} for k, rps in zip(KEYS, limits)}}},
        "server": {"log_requests": False}}


async def drive(ports: list[int], key: str, rate: float, duration_s: float,
                out: list[tuple[float, int]]) -> None:
    """Open loop: ``rate`` requests/s of ``key`` for ``duration_s``, alternating replicas;
    (the time its answer arrived, relative to the start, status) appended to ``out``."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one(i: int) -> None:
            try:
                async with session.post(f"http://127.0.0.1:{ports[i % len(ports)]}/v1/chat/completions",
                                        data=CHAT_BODY, headers=headers) as r:
                    await r.read()
                    out.append((time.perf_counter() - t0, r.status))
            except aiohttp.ClientError:
                out.append((time.perf_counter() - t0, 0))

        tasks = []
        t0 = time.perf_counter()
        i = 0
        while time.perf_counter() - t0 < duration_s:
            tasks.append(asyncio.create_task(one(i)))
            i += 1
            await asyncio.sleep(max(0.0, i / rate - (time.perf_counter() - t0)))
        await asyncio.gather(*tasks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds left out of the measured window")
    ap.add_argument("--limits", default="20,50", help="requests_per_second of key a and key b")
    ap.add_argument("--offered", type=float, default=2.0, help="offered load as a multiple of each limit")
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    limits = [float(x) for x in args.limits.split(",")]
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure-redis.sh")], check=True, stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="specgate-key-limits-"))
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str]) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        return p

    try:
        redis_port, backend_port = free_port(), free_port()
        spawn(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)])
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        cfg = work / "router.yaml"
        cfg.write_text(json.dumps(router_config(backend_port, redis_port, limits, args.tokenizer)))
        ports = [free_port(), free_port()]
        for p in ports:
            spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(p)])
        for p in ports:
            wait_http(f"http://127.0.0.1:{p}/ready")
        results: list[list[tuple[float, int]]] = [[], []]

        async def run() -> None:
            await asyncio.gather(*(drive(ports, key, limit * args.offered, args.duration, res)
                                   for key, limit, res in zip(KEYS, limits, results)))

        asyncio.run(run())
        window = args.duration - args.warmup
        ok = True
        rows = []
        print(f"two replicas, one redis-server; offered {args.offered:g}x each limit for {args.duration:g} s, "
              f"measured over the last {window:g} s")
        print(f"{'key':6} {'limit req/s':>11} {'achieved req/s':>14} {'ratio':>6}  statuses")
        for key, limit, res in zip(KEYS, limits, results):
            admitted = sum(1 for t, s in res if s == 200 and args.warmup <= t < args.duration)
            achieved = admitted / window
            ratio = achieved / limit
            statuses = Counter(s for _, s in res)
            bad = sum(n for s, n in statuses.items() if s not in (200, 429))
            ok &= abs(ratio - 1) <= args.tolerance and bad == 0
            rows.append({"key": key, "limit_rps": limit, "achieved_rps": achieved, "ratio": ratio,
                         "statuses": dict(statuses)})
            print(f"{key:6} {limit:11.1f} {achieved:14.2f} {ratio:6.3f}  {dict(sorted(statuses.items()))}")
        if args.out:
            Path(args.out).write_text(json.dumps({"duration_s": args.duration, "window_s": window,
                                                  "offered_multiple": args.offered, "keys": rows}, indent=2))
        print("held within tolerance" if ok else f"NOT within {args.tolerance:.0%} (or errors)")
        return 0 if ok else 1
    finally:
        stop_processes(procs)


if __name__ == "__main__":
    sys.exit(main())
