"""Per-key limits shared by two router replicas through one real redis-server; the Lua script
and the local buckets decide alike; Redis blackholed: each replica falls back to its share."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio

from router.access.limit_rules import LocalBuckets, headers, plan_for
from router.access.limits_redis import SharedBuckets, bucket_keys
from router.config.limits import KeyLimits
from tests.redis.cluster import CHAT, PREFIX, Cluster, RedisServer
from tests.support import wait_until

A, B = "key-a", "key-b"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _chat(**kw: Any) -> dict[str, Any]:
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **kw}


def _auth(**limits: Any) -> dict[str, Any]:
    return {"api_keys": [A, B], "rate_limits": {"keys": {_digest(A): {"requests_per_minute": 6},
                                                          _digest(B): {"concurrent_requests": 1}}, **limits}}


@pytest.fixture
def limited(tmp_path: Path, tokenizer_dir: Path, redis_server: RedisServer):
    c = Cluster(tmp_path, tokenizer_dir, redis_server, auth=_auth(local_fraction=0.5))
    try:
        yield c
    finally:
        c.close()


def post(c: Cluster, replica: int, key: str, **kw: Any) -> httpx.Response:
    return c.clients[replica].post(CHAT, json=_chat(**kw), headers={"authorization": f"Bearer {key}"})


class _Direct:
    """A stand-in for router.shared.state.RedisState.run_script on a plain client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def run_script(self, source: str, keys: list[str], args: list[Any]) -> Any:
        return await self.client.register_script(source)(keys=keys, args=args)


def test_bucket_keys_share_one_hash_tag():
    from redis.crc import key_slot

    h, z = bucket_keys(PREFIX, _digest(A))
    assert h.startswith("{t:rl:") and key_slot(h.encode()) == key_slot(z.encode())
    assert key_slot(h.encode()) != key_slot(bucket_keys(PREFIX, _digest(B))[0].encode())   # keys spread


def test_the_script_and_the_local_buckets_decide_alike(redis_server: RedisServer):
    plan = plan_for(KeyLimits(requests_per_minute=5, tokens_per_minute=600, concurrent_requests=3))
    costs = [200, 300, 200, 50, 700, 10, 10, 10]

    async def shared() -> list[tuple[str | None, int, tuple[tuple[bytes, bytes], ...]]]:
        client = redis.asyncio.Redis.from_url(redis_server.url)
        try:
            buckets = SharedBuckets(_Direct(client), PREFIX)
            out = []
            for i, cost in enumerate(costs):
                v = await buckets.admit("k", plan, cost, f"m{i}", 10.0)
                out.append((v.denied, v.active, headers(plan, v)))
            h, z = bucket_keys(PREFIX, "k")
            assert await client.zcard(z) == 3 and await client.hexists(h, "r")
            await buckets.finish("k", ["m0"], 150, plan.token_interval_ms)
            assert await client.zcard(z) == 2
            return out
        finally:
            await client.aclose()

    local = LocalBuckets()
    expected = []
    for cost in costs:
        v = local.admit("k", plan, cost, 0.0)
        expected.append((v.denied, v.active, headers(plan, v)))
    got = asyncio.run(shared())
    assert [g[:2] for g in got] == [e[:2] for e in expected] == [
        (None, 1), (None, 2), ("tokens", 2), (None, 3), ("tokens_max", 3), ("concurrent", 3), ("concurrent", 3),
        ("concurrent", 3)]
    # remaining counts agree (reset times differ by the microseconds between the calls)
    def remaining(h: tuple[tuple[bytes, bytes], ...]) -> list[bytes]:
        return [v for k, v in h if b"remaining" in k]

    assert [remaining(g[2]) for g in got] == [remaining(e[2]) for e in expected]


def test_two_replicas_share_one_limit_per_key(limited: Cluster):
    statuses = [post(limited, i % 2, A).status_code for i in range(8)]
    assert statuses == [200] * 6 + [429] * 2
    r = post(limited, 1, A)
    assert r.status_code == 429 and r.headers["x-ratelimit-remaining-requests"] == "0"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert len(limited.redis.client().keys("{" + PREFIX + ":rl:*")) >= 1
    for router in limited.routers:
        assert router.metric("specgate_rate_limit_checks_total", mode="shared", result="admitted") == 3
    # a stream held through replica 0 takes key B's one concurrent slot for every replica
    limited.hang_next()
    req = limited.clients[0].build_request("POST", CHAT, json=_chat(stream=True, max_tokens=50),
                                           headers={"authorization": f"Bearer {B}"})
    held = limited.hold(limited.clients[0].send(req, stream=True))
    r = post(limited, 1, B)
    assert r.status_code == 429 and "concurrent requests" in r.json()["error"]["message"]
    held.close()
    limited.streams.remove(held)
    _, z = bucket_keys(PREFIX, _digest(B))
    assert wait_until(lambda: limited.redis.client().zcard(z) == 0, 3, "the lease to leave Redis")
    assert post(limited, 1, B).status_code == 200


def test_redis_blackholed_each_replica_enforces_its_share(limited: Cluster):
    assert post(limited, 0, A).status_code == 200   # reached Redis once
    limited.redis.pause()
    try:
        # local_fraction 0.5 of 6 per minute: each replica admits 3 on its own, then 429; never a 5xx
        statuses = [post(limited, 0, A).status_code for _ in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
        assert [post(limited, 1, A).status_code for _ in range(4)] == [200, 200, 200, 429]
        for router in limited.routers:
            assert router.metric("specgate_rate_limit_checks_total", mode="fallback", result="admitted") == 3
        assert limited.routers[0].metric("specgate_shared_state_ops_total", op="rate_limit", result="timeout") >= 1
    finally:
        limited.redis.resume()


def test_limits_hold_on_a_redis_cluster(tmp_path: Path, tokenizer_dir: Path, redis_cluster: Any):
    """Each key's entries share one hash tag: the scripts run on a three-node Redis Cluster,
    whichever node owns the key's slot, and both replicas share the limit (no fallback)."""
    from tests.redis.cluster import state_section

    url = f"redis://127.0.0.1:{redis_cluster.other()}/0"
    c = Cluster(tmp_path, tokenizer_dir, None, replicas=2, state=state_section(url, topology="cluster"),
                auth=_auth())
    try:
        statuses = [post(c, i % 2, A).status_code for i in range(8)]
        assert statuses == [200] * 6 + [429] * 2
        for router in c.routers:
            assert router.metric("specgate_rate_limit_checks_total", mode="shared", result="admitted") == 3
            assert router.metric("specgate_rate_limit_checks_total", mode="fallback", result="admitted") == 0
            assert router.metric("specgate_shared_state_ops_total", op="rate_limit", result="error") == 0
        h, _ = bucket_keys(PREFIX, _digest(A))
        from redis.crc import key_slot

        slot = key_slot(h.encode())
        owner = next(master for lo, hi, master, *_ in redis_cluster.node(redis_cluster.ports[0]).execute_command(
            "CLUSTER", "SLOTS") if lo <= slot <= hi)
        assert redis_cluster.node(int(owner[1])).hexists(h, "r")
    finally:
        c.close()
