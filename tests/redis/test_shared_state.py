"""Two router replicas sharing one Redis: load, bypass, crashed replicas, overrides."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.redis.cluster import CHAT, Cluster, inflight_key
from tests.support import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


def chat(content: str = "hi", **kw):
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": content}], "max_tokens": 2, **kw}


def route(client: httpx.Client) -> tuple[int, str, str]:
    r = client.post(CHAT, json=chat())
    return r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]


def test_replicas_share_load_and_enter_and_leave_bypass_together(cluster: Cluster):
    spec = cluster.spec.base_url
    # saturation enter=3, exit=1; engine gauges pinned at 0: only leases count.
    streams = [cluster.open_stream(0) for _ in range(3)]
    assert [cluster.local(0), cluster.local(1)] == [3, 0]
    assert wait_until(lambda: cluster.view(1) == 3, timeout=2)
    assert cluster.zcard() == 3
    # B holds no lease itself, yet it saw A's three and entered bypass with A.
    assert wait_until(lambda: cluster.saturated(0) and cluster.saturated(1), timeout=2)
    assert cluster.redis.client().hget("{t}:bypass", "spec:saturated") == b"1"
    assert route(cluster.clients[1]) == (200, "plain", "saturated")
    assert route(cluster.clients[0]) == (200, "plain", "saturated")
    assert cluster.ready(1)["pools"]["spec"]["saturated"] is True
    # Two released: load 1 is not below exit=1, so both stay in bypass (hysteresis).
    streams[0].close()
    streams[1].close()
    assert wait_until(lambda: cluster.view(0) == 1 and cluster.view(1) == 1 and cluster.zcard() == 1, timeout=2)
    cluster.wait_syncs(6)
    for router in cluster.routers:
        router.wait_scrape_rounds(2)
    assert (cluster.saturated(0), cluster.saturated(1)) == (True, True)
    assert route(cluster.clients[1]) == (200, "plain", "saturated")
    # The last one released: both leave together.
    streams[2].close()
    assert wait_until(lambda: not cluster.saturated(0) and not cluster.saturated(1), timeout=2)
    assert cluster.redis.client().hget("{t}:bypass", "spec:saturated") == b"0"
    assert route(cluster.clients[1]) == (200, "spec", "speculative")
    assert route(cluster.clients[0]) == (200, "spec", "speculative")
    assert wait_until(lambda: cluster.local(0) == 0 and cluster.local(1) == 0, timeout=1)
    cluster.wait_syncs(4)
    assert [cluster.local(0), cluster.local(1), cluster.view(0), cluster.view(1), cluster.zcard()] == [0] * 5
    for router in cluster.routers:
        assert router.metric("specgate_shared_state_degraded") == 0
        assert router.metric("specgate_shared_state_degraded_entries_total") == 0
        assert router.state.runtime.endpoint(spec).inflight == 0


def test_bypass_follows_within_one_sync_round(cluster: Cluster):
    """B flips at its first sync after A's flag reached Redis (rounds: scrape.interval_s)."""
    b = cluster.routers[1].state.shared
    r = cluster.redis.client()
    streams = [cluster.open_stream(0) for _ in range(2)]
    assert wait_until(lambda: cluster.view(1) == 2, timeout=5)
    assert not cluster.saturated(0) and not cluster.saturated(1)
    streams.append(cluster.open_stream(0))
    assert wait_until(lambda: cluster.saturated(0), timeout=5)   # at its next sync or scrape
    assert wait_until(lambda: r.hget("{t}:bypass", "spec:saturated") == b"1", timeout=5, interval=0.002)
    written_seq, t0 = b._seq, time.monotonic()
    assert wait_until(lambda: cluster.saturated(1), timeout=5, interval=0.002)
    assert b._seq - written_seq <= 2 and time.monotonic() - t0 < 2.0, (b._seq - written_seq)
    for s in streams:
        s.close()
    assert wait_until(lambda: r.hget("{t}:bypass", "spec:saturated") == b"0", timeout=5, interval=0.002)
    written_seq = b._seq
    assert wait_until(lambda: not cluster.saturated(0) and not cluster.saturated(1), timeout=5, interval=0.002)
    assert b._seq - written_seq <= 2


def test_killed_replica_leases_expire_after_ttl(tmp_path, tokenizer_dir, redis_server):
    """A replica SIGKILLed with open streams: its leases count until their TTL, then vanish."""
    c = Cluster(tmp_path, tokenizer_dir, redis_server, replicas=1,
                **{"routing.saturation": {"enter": 100, "exit": 99}})
    proc = None
    try:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "router.cli", "router", "--config", str(c.config_path),
                                 "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _up(base), timeout=60, what="replica B to start", interval=0.2)
        b = httpx.Client(base_url=base, timeout=30)
        c.clients.append(b)
        c.hang_next(2)
        for _ in range(2):
            c.hold(b.send(b.build_request("POST", CHAT, json=chat(stream=True, max_tokens=50)), stream=True))
        assert wait_until(lambda: c.view(0) == 2 and c.zcard() == 2, timeout=3)
        assert c.local(0) == 0
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        killed_at = time.monotonic()
        c.wait_syncs(3, replicas=[0])
        assert c.view(0) == 2   # still counted after syncs that followed the kill: the TTL (2 s) has not passed
        assert wait_until(lambda: c.view(0) == 0 and c.zcard() == 0, timeout=4)
        gone = time.monotonic() - killed_at
        assert 1.0 <= gone <= 3.5, gone   # last renewal (<= 0.5 s before the kill) + TTL 2 s
        assert route(c.clients[0]) == (200, "spec", "speculative")
        assert wait_until(lambda: c.local(0) == 0, timeout=1)   # released just after the last byte
        c.wait_syncs(4, replicas=[0])
        assert (c.view(0), c.zcard()) == (0, 0)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        c.close()


def _up(base: str) -> bool:
    try:
        return httpx.get(base + "/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("outage", ["refused", "blackholed"])
def test_replica_starts_while_redis_is_down_and_reconciles(tmp_path, tokenizer_dir, redis_server, outage):
    if outage == "refused":
        redis_server.stop()
    else:
        redis_server.pause()
    t0 = time.monotonic()
    c = Cluster(tmp_path, tokenizer_dir, redis_server, replicas=1,
                **{"routing.saturation": {"enter": 100, "exit": 99}})
    try:
        ready = c.ready(0)
        assert time.monotonic() - t0 < 30
        assert ready["ready"] is True
        assert ready["shared_state"]["status"] == "degraded"
        assert ready["shared_state"]["last_error"].startswith("timeout" if outage == "blackholed" else "connection_error")
        assert c.routers[0].metric("specgate_shared_state_degraded") == 1
        assert c.routers[0].metric("specgate_shared_state_degraded_entries_total") == 1
        started = time.perf_counter()
        assert route(c.clients[0]) == (200, "spec", "speculative")
        assert time.perf_counter() - started < 1.0
        held = c.open_stream(0)
        assert c.local(0) == 1 and c.view(0) == 1
        # Redis comes back: the open lease is added, and nothing else.
        if outage == "refused":
            redis_server.start()
        else:
            redis_server.resume()
        assert wait_until(lambda: c.ready(0)["shared_state"]["status"] == "ok", timeout=5)
        assert wait_until(lambda: c.zcard() == 1, timeout=2)
        assert c.view(0) == 1 and c.local(0) == 1
        assert c.routers[0].metric("specgate_shared_state_degraded") == 0
        held.close()
        assert wait_until(lambda: c.zcard() == 0 and c.local(0) == 0, timeout=2)
        c.wait_syncs(6)
        assert (c.zcard(), c.view(0), c.local(0)) == (0, 0, 0)
    finally:
        c.close()


def test_lease_ttl_renewal_keeps_long_streams_counted(cluster: Cluster):
    """A stream open for longer than the TTL (2 s) stays counted: it is renewed."""
    cluster.open_stream(0)
    assert wait_until(lambda: cluster.zcard() == 1, timeout=2)
    time.sleep(3.0)   # the duration under test (> the 2 s TTL), not a wait for an event
    assert cluster.zcard() == 1 and cluster.view(1) == 1
    score = cluster.redis.client().zrange(inflight_key("spec", cluster.spec.base_url), 0, -1, withscores=True)
    assert len(score) == 1
