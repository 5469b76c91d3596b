"""Redis blackholed (SIGSTOP) under load, then back; counts reconcile exactly."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

import aiohttp
import httpx

from tests.redis.cluster import Cluster, inflight_key
from tests.support import wait_until

OUTAGE_S = 10.0
RATE_HZ = 20.0


def _load(bases: list[str], duration_s: float, out: list[tuple[float, int, float]]) -> None:
    """Non-streamed completions at RATE_HZ, alternating replicas; (start, status, latency) to out."""

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            async def one(i: int) -> None:
                started = time.perf_counter()
                async with session.post(bases[i % len(bases)] + "/v1/completions",
                                        json={"model": "tiny-llama", "prompt": "hi", "max_tokens": 2}) as r:
                    await r.read()
                    out.append((started, r.status, time.perf_counter() - started))

            tasks = []
            t0 = time.perf_counter()
            i = 0
            while time.perf_counter() - t0 < duration_s:
                tasks.append(asyncio.create_task(one(i)))
                i += 1
                await asyncio.sleep(max(0.0, t0 + i / RATE_HZ - time.perf_counter()))
            await asyncio.gather(*tasks)

    asyncio.run(run())


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def test_sigstop_under_load_serves_degraded_and_reconciles_exactly(tmp_path, tokenizer_dir, redis_server):
    c = Cluster(tmp_path, tokenizer_dir, redis_server, **{"routing.saturation": {"enter": 100, "exit": 99}})
    try:
        _scenario(c, redis_server)
    finally:
        c.close()


def _scenario(c: Cluster, redis_server) -> None:
    a, b = c.routers
    bases = [a.base_url, b.base_url]
    h1, _h2 = c.open_stream(0), c.open_stream(0)
    c.open_stream(1)
    assert wait_until(lambda: c.zcard() == 3 and c.view(0) == 3 and c.view(1) == 3, timeout=2)

    baseline: list[tuple[float, int, float]] = []
    _load(bases, 2.0, baseline)
    assert {s for _, s, _ in baseline} == {200}

    # -- the outage: SIGSTOP (a blackhole: connects hang, nothing answers) ----------------
    during: list[tuple[float, int, float]] = []
    loader = threading.Thread(target=_load, args=(bases, OUTAGE_S, during))
    redis_server.pause()
    paused_at = time.perf_counter()
    loader.start()
    wait_until(lambda: all(
        r.metric("specgate_shared_state_degraded") == 1
        and r.metric("specgate_shared_state_ops_total", op="sync", result="timeout") >= 3
        and r.metric("specgate_shared_state_ops_total", op="sync", result="short_circuit") >= 1
        for r in c.routers), 10, "both replicas degraded, with timed-out and short-circuited syncs")
    for i, router in enumerate(c.routers):
        r = c.clients[i].get("/ready")
        assert r.status_code == 200
        doc = r.json()
        assert doc["ready"] is True
        shared = doc["shared_state"]
        assert (shared["status"], shared["last_error"]) == ("degraded", "timeout: TimeoutError")
        assert shared["breaker"] in ("open", "half_open")
        assert router.metric("specgate_shared_state_degraded") == 1
        assert router.metric("specgate_shared_state_degraded_entries_total") == 1
        assert router.metric("specgate_shared_state_ops_total", op="sync", result="timeout") >= 3
        assert router.metric("specgate_shared_state_ops_total", op="sync", result="short_circuit") >= 1
    # Lease changes while Redis is away: one released (h1), two taken (h4 on A, h5 on B).
    h1.close()
    c.open_stream(0)
    c.open_stream(1)
    assert wait_until(lambda: c.local(0) == 2 and c.local(1) == 2, timeout=2)
    assert (c.view(0), c.view(1)) == (2, 2)   # degraded: local counts only
    loader.join(OUTAGE_S + 30)
    assert not loader.is_alive()
    redis_server.resume()

    # -- no 5xx, bounded latency ----------------------------------------------------------
    statuses = [s for _, s, _ in during]
    assert len(statuses) >= int(OUTAGE_S * RATE_HZ * 0.9)
    assert set(statuses) == {200}
    lat = [x for _, _, x in during]
    base_lat = [x for _, _, x in baseline]
    p50, p90, p99, worst = _p(lat, 50), _p(lat, 90), _p(lat, 99), max(lat)
    print(f"\nbaseline p50={_p(base_lat, 50) * 1e3:.1f}ms p99={_p(base_lat, 99) * 1e3:.1f}ms; "
          f"blackholed p50={p50 * 1e3:.1f}ms p90={p90 * 1e3:.1f}ms p99={p99 * 1e3:.1f}ms "
          f"max={worst * 1e3:.1f}ms; slow (>0.1 s, s after SIGSTOP): "
          f"{[(round(t - paused_at, 2), round(x, 2)) for t, _, x in during if x > 0.1]}")
    # No request waits for Redis: a router that did would add op_timeout_s (0.2 s) to every
    # request while the breaker is closed and hang without timeouts. The tail is left to the
    # machine (a shared 2-core box stalls whole processes now and then), hence loose bounds;
    # the p50 bound is the one that tells a router waiting on Redis from one that does not.
    assert p50 < 0.05, p50
    assert p90 < 1.0, p90   # a loaded 2-core CI box stalls whole processes for ~0.2-1 s
    assert worst < 5.0, worst

    # -- recovery: leases reconciled exactly ----------------------------------------------
    assert wait_until(lambda: all(c.ready(i)["shared_state"]["status"] == "ok" for i in (0, 1)), timeout=5)
    for router in c.routers:
        assert router.metric("specgate_shared_state_degraded") == 0
    # open: h2, h4 on A; h3, h5 on B. h1 was released during the outage; the SYNCs that timed
    # out ran on SIGCONT and re-added it, and the re-sent tombstones removed it again.
    assert wait_until(lambda: (c.zcard(), c.view(0), c.view(1)) == (4, 4, 4), timeout=3, what=lambda: (
        c.zcard(), c.view(0), c.view(1), c.local(0), c.local(1),
        c.redis.client().zrange(inflight_key("spec", c.spec.base_url), 0, -1, withscores=True),
        a.state.shared.replica_id, b.state.shared.replica_id, c.ready(0), c.ready(1)))
    c.wait_syncs(12)   # a dozen rounds more: nothing comes back
    assert (c.zcard(), c.view(0), c.view(1), c.local(0), c.local(1)) == (4, 4, 4, 2, 2)
    members = c.redis.client().zrange(inflight_key("spec", c.spec.base_url), 0, -1)
    owners = sorted(m.decode().rsplit(":", 1)[0] for m in members)
    assert owners == sorted([a.state.shared.replica_id] * 2 + [b.state.shared.replica_id] * 2)
    for s in c.streams:
        s.close()
    assert wait_until(lambda: (c.zcard(), c.view(0), c.view(1), c.local(0), c.local(1)) == (0,) * 5, timeout=3)
    c.wait_syncs(12)
    assert (c.zcard(), c.view(0), c.view(1), c.local(0), c.local(1)) == (0,) * 5
    assert httpx.get(a.base_url + "/ready").json()["shared_state"]["pending_releases"] == 0
