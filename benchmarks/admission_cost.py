"""In-process CPU cost of the admission checks per request (docs/performance.md).

    .venv/bin/python benchmarks/admission_cost.py [--number 200000] [--router [--requests 3000]]

Times, with ``timeit`` (best of 5 repeats), what ``router.front.api._generate`` adds per request for
priority and sampling controls: :func:`router.access.admission.resolve_priority`,
:func:`router.request.sampling.validate_sampling`, :func:`router.request.sampling.speculative_caveats` and
:func:`router.request.sampling.check_min_tokens`, for a plain chat body and for one that sets
``priority`` (from a key with a grant), ``seed``, ``logit_bias`` and ``min_p``; and the
proxy's scan of a non-streamed body for an engine abort (``b'"abort"' in body``). The key's
SHA-256 (one per request, only when ``auth.priority.keys`` is set) is timed apart.

Per-key limits (router/access/limits.py), in process: the check a request pays with
``auth.rate_limits`` unset (``enabled``, read once per request), and
:meth:`router.access.limits.KeyLimiter.check_request` + :meth:`~router.access.limits.KeyLimiter.finish` of a
limited key on local buckets (``state.backend: memory``); the same through a real
``redis-server`` is reported as this process's CPU time per check (``time.process_time``:
redis-py's encoding and parsing, not the server's work) and its wall time.

``--router``: the router process's own CPU per request, end to end: one ``specgate router``
per setting in front of ``benchmarks/fast_backend.py`` (non-streamed chat, 8 client
connections, ``--requests`` requests per round after 300 warm-up ones, ``--runs`` rounds
interleaved over the settings; the router's user + system time from ``/proc/<pid>/stat``
over the measured requests), for ``state.backend`` memory and redis,
each with limits off and on (a key limited far above the offered rate, so every request is
checked and none refused).
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
import timeit
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.router_overhead import CHAT_BODY, cpu_seconds, free_port, stop_processes, wait_http
from router import (
    KeyLimiter,
    KeyLimits,
    PriorityGrant,
    RateLimitConfig,
    RequestFeatures,
    RouterMetrics,
    StateConfig,
    check_min_tokens,
    resolve_priority,
    speculative_caveats,
    validate_sampling,
)

PLAIN = {"model": "tiny-llama", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
CONTROLLED = {**PLAIN, "priority": 5, "seed": 3, "logit_bias": {"5": -100}, "min_p": 0.1}
GRANT = PriorityGrant(min=0, max=10, default=1)
BODY = orjson.dumps({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok " * 64},
                                              "finish_reason": "length"}]})


def _checks(doc: dict, grant: PriorityGrant | None) -> None:
    resolve_priority(doc, None, grant, None)
    validate_sampling(doc)
    speculative_caveats(doc)
    check_min_tokens(doc, 64)


KEY = "sk-a-client-key-0123456789"
LIMITED = RateLimitConfig(keys={hashlib.sha256(KEY.encode()).hexdigest(): KeyLimits(
    requests_per_second=1e6, tokens_per_minute=10**12, concurrent_requests=10**6)})
FEATURES = RequestFeatures(prompt_tokens=20, max_new_tokens=64)


class _Direct:
    """router.shared.state.RedisState.run_script on a plain client (no breaker, no switch)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.scripts: dict[str, Any] = {}

    async def run_script(self, source: str, keys: list[str], args: list[Any]) -> Any:
        script = self.scripts.get(source) or self.scripts.setdefault(source, self.client.register_script(source))
        return await script(keys=keys, args=args)


async def _limit_loop(limiter: KeyLimiter, n: int) -> tuple[float, float]:
    """(CPU s, wall s) per check + finish of a limited key, over ``n``."""
    from router import Auth, KeyRing

    auth = Auth(KeyRing([KEY]), None)
    header = f"Bearer {KEY}"
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        ticket = await limiter.check_request(LIMITED, header, auth, FEATURES)
        limiter.finish(ticket, {"prompt_tokens": 20, "completion_tokens": 4})
    await asyncio.sleep(0)
    return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n


def _limits_in_process(n: int) -> None:
    from prometheus_client import CollectorRegistry

    off = RateLimitConfig()
    best = min(timeit.repeat(lambda: off.enabled, number=n, repeat=5))
    print(f"rate limits off (auth.rate_limits unset): {best / n * 1e6:.2f} us")
    metrics = RouterMetrics(CollectorRegistry())
    local = KeyLimiter(StateConfig(), None, metrics)
    cpu, _ = min(asyncio.run(_limit_loop(local, n // 4)) for _ in range(3))
    print(f"rate limits on, local buckets (check + finish): {cpu * 1e6:.2f} us CPU")
    import redis.asyncio

    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)

        async def shared() -> tuple[float, float]:
            client = redis.asyncio.Redis(host="127.0.0.1", port=port)
            limiter = KeyLimiter(StateConfig(), _Direct(client), metrics)
            try:
                await _limit_loop(limiter, 200)
                result = await _limit_loop(limiter, max(n // 40, 500))
                await limiter.stop()
                return result
            finally:
                await client.aclose()

        cpu, wall = asyncio.run(shared())
        print(f"rate limits on, redis-server (check + finish): {cpu * 1e6:.1f} us CPU of this process, "
              f"{wall * 1e6:.0f} us wall")
    finally:
        server.terminate()
        server.wait(10)


def _router_config(backend_port: int, redis_port: int | None, limited: bool, tokenizer: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "model": {"name": "bench", "tokenizer": tokenizer},
        "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
        "pools": [{"name": "plain", "speculative": False, "endpoints": [f"http://127.0.0.1:{backend_port}"]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
        "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
        "auth": {"api_keys": [KEY]},
        "server": {"log_requests": False}}
    if redis_port is not None:
        cfg["state"] = {"backend": "redis", "redis_url": f"redis://127.0.0.1:{redis_port}/0",
                        "key_prefix": f"cost-{int(limited)}", "op_timeout_s": 0.25}
    if limited:
        cfg["auth"]["rate_limits"] = LIMITED.model_dump(mode="json", exclude_none=True)
    return cfg


async def _drive(port: int, n: int, concurrency: int = 8) -> int:
    import aiohttp

    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    done = 0
    async with aiohttp.ClientSession() as session:
        async def worker(count: int) -> None:
            nonlocal done
            for _ in range(count):
                async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=CHAT_BODY,
                                        headers=headers) as r:
                    await r.read()
                    done += r.status == 200

        await asyncio.gather(*(worker(n // concurrency) for _ in range(concurrency)))
    return done


def _router_cpu(requests: int, runs: int, tokenizer: str) -> None:
    import statistics

    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str]) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        return p

    work = Path(tempfile.mkdtemp(prefix="specgate-admission-cost-"))
    try:
        redis_port, backend_port = free_port(), free_port()
        spawn(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)])
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        routers: dict[str, tuple[int, int]] = {}   # setting -> (port, pid)
        for backend, rport in (("memory", None), ("redis", redis_port)):
            for limited in (False, True):
                cfg = work / f"router-{backend}-{int(limited)}.yaml"
                cfg.write_text(json.dumps(_router_config(backend_port, rport, limited, tokenizer)))
                port = free_port()
                router = spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port",
                                str(port)])
                routers[f"state.backend {backend:6}, limits {'on ' if limited else 'off'}"] = (port, router.pid)
        for port, _ in routers.values():
            wait_http(f"http://127.0.0.1:{port}/ready", timeout_s=300)   # four start at once
            asyncio.run(_drive(port, 300))
        cpu: dict[str, list[float]] = {name: [] for name in routers}
        rate: dict[str, list[float]] = {name: [] for name in routers}
        for _ in range(runs):   # interleaved rounds: a load change on the machine hits every setting
            for name, (port, pid) in routers.items():
                before, t0 = cpu_seconds(pid), time.perf_counter()
                ok = asyncio.run(_drive(port, requests))
                cpu[name].append((cpu_seconds(pid) - before) / requests * 1e6)
                rate[name].append(requests / (time.perf_counter() - t0))
                assert ok == requests, f"{name}: {ok}/{requests} answered 200"
        print(f"router CPU per request (us; {requests} non-streamed chat requests, 8 connections, "
              f"{runs} interleaved rounds):")
        for name in routers:
            print(f"  {name}: median {statistics.median(cpu[name]):5.0f}  rounds "
                  f"{' / '.join(f'{v:.0f}' for v in cpu[name])}  ({statistics.median(rate[name]):.0f} req/s)")
    finally:
        stop_processes(procs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000)
    parser.add_argument("--router", action="store_true", help="measure the router process end to end")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3, help="interleaved rounds (--router)")
    parser.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    args = parser.parse_args()
    if args.router:
        _router_cpu(args.requests, args.runs, args.tokenizer)
        return
    n = args.number
    cases = {
        "plain body, key without a grant": lambda: _checks(PLAIN, None),
        "priority+seed+logit_bias+min_p, granted key": lambda: _checks(CONTROLLED, GRANT),
        "key digest (sha256, with auth.priority.keys)": lambda: hashlib.sha256(b"sk-a-client-key-0123456789").digest(),
        "non-stream abort scan, 300-byte body": lambda: b'"abort"' in BODY,
    }
    for name, fn in cases.items():
        best = min(timeit.repeat(fn, number=n, repeat=5))
        print(f"{name}: {best / n * 1e6:.2f} us")
    _limits_in_process(n)


if __name__ == "__main__":
    main()
