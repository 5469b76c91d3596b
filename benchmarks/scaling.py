"""Scaling out: N router replicas sharing state through one Redis (docs/performance.md).

    .venv/bin/python benchmarks/scaling.py [--replicas 1,2] [--duration 6] [--out scaling.json]

Setup (127.0.0.1): one ``redis-server`` (``scripts/ensure-redis.sh`` installs it) and one
``benchmarks/fast_backend.py``; for each N, N ``specgate router`` processes (uvloop,
httptools, ``state.backend: redis`` with one key prefix per N), each pinned to its own core
like a Kubernetes replica, each driven by its own ``wrk`` (non-streaming chat, concurrency
``--concurrency`` per replica) at the same time. The load generators and the backend run on
the cores no router uses; with fewer than N + 1 cores the routers share cores with them and
the figure says so (``shared_cores: true``).

Reported per N: total req/s (sum over replicas), per-replica req/s, p50/p99, and the shared
state's view in the middle of the run: every replica's ``specgate_shared_inflight_requests``
(its view of all replicas' in-flight requests on the pool, from Redis) next to the sum of the
replicas' own ``specgate_inflight_requests``; sharing works when each view is close to the
sum, not to the replica's own count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.router_overhead import (
    CHAT_BODY,
    ensure_wrk,
    free_port,
    parse_wrk,
    stop_processes,
    wait_http,
)


def metric(port: int, name: str, pool: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf'^{name}{{pool="{pool}"}} (\S+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", default="1,2", help="comma-separated replica counts")
    ap.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    ap.add_argument("--concurrency", type=int, default=16, help="connections per replica")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--out", default="bench-scaling.json")
    args = ap.parse_args()
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure-redis.sh")], check=True)
    wrk = ensure_wrk()
    ncpu = os.cpu_count() or 2
    work = Path(tempfile.mkdtemp(prefix="specgate-scaling-"))
    lua = work / "chat.lua"
    lua.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(CHAT_BODY)}\n'
                   'wrk.headers["Content-Type"] = "application/json"\n')
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], cores: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(["taskset", "-c", cores, *cmd], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        return p

    results = []
    try:
        redis_port, backend_port = free_port(), free_port()
        load_cores = str(ncpu - 1)
        spawn(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
              load_cores)
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)], load_cores)
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        for n in (int(x) for x in args.replicas.split(",")):
            cfg = work / f"router-{n}.yaml"
            cfg.write_text(json.dumps({
                "model": {"name": "bench", "tokenizer": args.tokenizer},
                "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
                "pools": [{"name": "plain", "speculative": False, "endpoints": [f"http://127.0.0.1:{backend_port}"]}],
                "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
                "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
                "state": {"backend": "redis", "redis_url": f"redis://127.0.0.1:{redis_port}/0",
                          "key_prefix": f"bench-{n}-{os.getpid()}"},
                "server": {"log_requests": False}}))
            ports = [free_port() for _ in range(n)]
            routers = [spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(p)],
                             str(i % max(ncpu - 1, 1)) if ncpu - 1 >= n else str(i % ncpu))
                       for i, p in enumerate(ports)]
            for p in ports:
                wait_http(f"http://127.0.0.1:{p}/ready")
            outs: list[str] = [""] * n

            def drive(i: int, port: int, outs: list[str] = outs) -> None:
                outs[i] = subprocess.run(
                    ["taskset", "-c", load_cores, wrk, "-t1", f"-c{args.concurrency}", f"-d{args.duration}s",
                     "--latency", "-s", str(lua), f"http://127.0.0.1:{port}/v1/chat/completions"],
                    capture_output=True, text=True, check=True).stdout

            threads = [threading.Thread(target=drive, args=(i, p)) for i, p in enumerate(ports)]
            for t in threads:
                t.start()
            time.sleep(args.duration / 2)
            own = [metric(p, "specgate_inflight_requests", "plain") for p in ports]
            shared = [metric(p, "specgate_shared_inflight_requests", "plain") for p in ports]
            for t in threads:
                t.join()
            runs = [parse_wrk(o) for o in outs]
            row = {"replicas": n, "shared_cores": ncpu - 1 < n,
                   "total_rps": sum(r["rps"] for r in runs), "replica_rps": [r["rps"] for r in runs],
                   "p50_ms": [r["p50_ms"] for r in runs], "p99_ms": [r["p99_ms"] for r in runs],
                   "errors": sum(r["errors"] for r in runs),
                   "mid_run_own_inflight": own, "mid_run_shared_inflight": shared}
            results.append(row)
            print(f"N={n}{' (routers share cores with the load)' if row['shared_cores'] else ''}: "
                  f"{row['total_rps']:.0f} req/s total ({', '.join(f'{r:.0f}' for r in row['replica_rps'])}), "
                  f"errors {row['errors']}; mid-run in-flight: own {own} (sum {sum(own):.0f}), "
                  f"shared view per replica {shared}", flush=True)
            stop_processes(routers)
            for r in routers:
                procs.remove(r)
        base = results[0]["total_rps"]
        for row in results:
            row["speedup_vs_first"] = row["total_rps"] / base
        Path(args.out).write_text(json.dumps({"cpus": ncpu, "concurrency_per_replica": args.concurrency,
                                              "results": results}, indent=2))
        print("replicas  total req/s  vs first")
        for row in results:
            print(f"{row['replicas']:>8}  {row['total_rps']:11.0f}  {row['speedup_vs_first']:8.2f}")
        print(f"JSON written to {args.out}")
        return 0
    finally:
        stop_processes(procs)


if __name__ == "__main__":
    sys.exit(main())
