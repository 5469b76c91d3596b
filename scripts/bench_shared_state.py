"""Extra latency the Redis shared state adds per request, measured end to end.

    .venv/bin/python scripts/bench_shared_state.py [--requests 1000] [--concurrency 1,16]
                                                   [--rounds 5] [--out bench-shared-state.json]

Starts, as separate processes on 127.0.0.1: two fake SGLang servers (spec, plain; no delays),
one ``redis-server`` (``--save '' --appendonly no``), and two routers on the same fakes, one
with ``state.backend: memory`` and one with ``state.backend: redis``. It sends short
non-streamed completions (``max_tokens: 2``) through both routers, alternating batches of
``requests / rounds`` so both see the same machine conditions, first with Redis up, then with
Redis blackholed (``SIGSTOP``: the router is degraded). The extra latency is the redis
router's percentile minus the memory router's, per phase and concurrency. Also reported: the
routers' own ``specgate_shared_state_op_duration_seconds`` (the background sync's round trip,
which no request waits for). Needs ``redis-server`` on PATH (``scripts/ensure-redis.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support import free_port, make_test_tokenizer


def _wait(url: str, proc: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode} (see its log)")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def _config(tok: Path, spec: str, plain: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {"name": "tiny-llama", "tokenizer": str(tok)},
        "limits": {"max_context_tokens": 4096, "default_max_tokens": 256},
        "pools": [{"name": "spec", "speculative": True, "endpoints": [spec], "max_context_tokens": 2048,
                   "draft_reserved_tokens": 4},
                  {"name": "plain", "speculative": False, "endpoints": [plain]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 10000, "exit": 9999}},
        "scrape": {"interval_s": 0.25, "timeout_s": 1.0, "stale_after_s": 2.0},
        "server": {"log_requests": False},
        "state": state,
    }


async def _batch(base: str, n: int, concurrency: int) -> list[float]:
    body = {"model": "tiny-llama", "prompt": "hi", "max_tokens": 2}
    out: list[float] = []
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one() -> None:
            async with sem:
                t = time.perf_counter()
                async with session.post(base + "/v1/completions", json=body) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status}")
                out.append(time.perf_counter() - t)
        await asyncio.gather(*(one() for _ in range(n)))
    return out


def _pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def _sync_rtt(base: str) -> dict[str, float]:
    text = httpx.get(base + "/metrics").text
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith('specgate_shared_state_op_duration_seconds_sum{op="sync"}'):
            total = float(line.split()[-1])
        if line.startswith('specgate_shared_state_op_duration_seconds_count{op="sync"}'):
            count = float(line.split()[-1])
    return {"sync_calls": count, "sync_mean_ms": round(1e3 * total / count, 3) if count else 0.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000, help="per router, phase and concurrency")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="bench-shared-state.json")
    args = ap.parse_args()
    if shutil.which("redis-server") is None:
        print("redis-server not found: run scripts/ensure-redis.sh", file=sys.stderr)
        return 2
    procs: list[subprocess.Popen[bytes]] = []
    redis_proc = None
    tmp = Path(tempfile.mkdtemp(prefix="specgate-bench-"))
    try:
        tok = make_test_tokenizer(tmp / "tok")
        ports = {k: free_port() for k in ("spec", "plain", "redis", "mem", "red")}
        fakes = {}
        for name, extra in (("spec", ["--speculative"]), ("plain", [])):
            procs.append(_spawn([sys.executable, "-m", "serving.fake_sglang", "--host", "127.0.0.1", "--port",
                                 str(ports[name]), "--model-name", "tiny-llama", "--tokenizer", str(tok), *extra],
                                tmp / f"{name}.log"))
            fakes[name] = f"http://127.0.0.1:{ports[name]}"
        redis_proc = subprocess.Popen(["redis-server", "--port", str(ports["redis"]), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
        routers = {}
        for name, state in (("mem", {"backend": "memory"}),
                            ("red", {"backend": "redis", "redis_url": f"redis://127.0.0.1:{ports['redis']}/0",
                                     "key_prefix": "bench"})):
            path = tmp / f"{name}.yaml"
            path.write_text(yaml.safe_dump(_config(tok, fakes["spec"], fakes["plain"], state)))
            procs.append(_spawn([sys.executable, "-m", "router.cli", "router", "--config", str(path),
                                 "--port", str(ports[name])], tmp / f"{name}.log"))
            routers[name] = f"http://127.0.0.1:{ports[name]}"
        names = [*fakes, *routers]
        for name, url, proc in zip(names, [*fakes.values(), *routers.values()], procs):
            try:
                _wait(url + ("/ready" if name in routers else "/health"), proc)
            except RuntimeError:
                print((tmp / f"{name}.log").read_text()[-3000:], file=sys.stderr)
                raise
        for base in routers.values():
            asyncio.run(_batch(base, 200, 8))   # warm-up
        report: dict[str, Any] = {"requests": args.requests, "rounds": args.rounds, "phases": {}}
        for phase in ("redis_up", "redis_blackholed"):
            if phase == "redis_blackholed":
                os.kill(redis_proc.pid, signal.SIGSTOP)
                time.sleep(2.0)
                status = httpx.get(routers["red"] + "/ready").json()["shared_state"]["status"]
                assert status == "degraded", status
            else:
                assert httpx.get(routers["red"] + "/ready").json()["shared_state"]["status"] == "ok"
            report["phases"][phase] = {}
            for conc in [int(c) for c in args.concurrency.split(",")]:
                lat: dict[str, list[float]] = {"mem": [], "red": []}
                per = max(1, args.requests // args.rounds)
                for i in range(args.rounds):   # alternate the order: no first-mover bias
                    for name in (("mem", "red") if i % 2 == 0 else ("red", "mem")):
                        lat[name] += asyncio.run(_batch(routers[name], per, conc))
                row: dict[str, Any] = {}
                for q in (50, 99):
                    m, r = _pct(lat["mem"], q), _pct(lat["red"], q)
                    row[f"memory_p{q}_ms"] = round(m * 1e3, 3)
                    row[f"redis_p{q}_ms"] = round(r * 1e3, 3)
                    row[f"extra_p{q}_ms"] = round((r - m) * 1e3, 3)
                row["redis_max_ms"] = round(max(lat["red"]) * 1e3, 3)
                report["phases"][phase][f"concurrency_{conc}"] = row
                print(phase, f"concurrency={conc}", json.dumps(row))
            if phase == "redis_blackholed":
                os.kill(redis_proc.pid, signal.SIGCONT)
        report["redis_router_sync"] = _sync_rtt(routers["red"])
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report["redis_router_sync"]))
        print(f"wrote {args.out}")
        return 0
    finally:
        if redis_proc is not None:
            os.kill(redis_proc.pid, signal.SIGCONT)
            redis_proc.terminate()
            redis_proc.wait(10)
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
