"""The Redis topology drills of :mod:`benchmarks.drills` (docs/reliability.md): real
``redis-server`` processes (the setups of tests/redis/test_topology.py), the router on them
under the drills' load.

==========  ===============================================================================
sentinel    ``state.topology: sentinel``: a primary, a replica, three sentinels; at 30% of the
            load a ``SENTINEL FAILOVER`` promotes the replica (the old primary stays up as a
            replica, so old connections answer ``READONLY``)
reshard     ``state.topology: cluster``: three cluster masters; at 30% of the load the
            deployment's slot is resharded to another node (IMPORTING/MIGRATING, MIGRATE,
            SETSLOT NODE: ``ASK`` then ``MOVED`` for the router)
==========  ===============================================================================

Notes per drill: ``redis_leases_left`` (in-flight members left in Redis once the load
settled, on the node that holds the data now: must be 0), ``degraded_entries`` and the failed
shared-state calls by kind (``sync_failures``; a failover may cost one READONLY call).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.drill_load import LoadPlan
    from benchmarks.drills import Drill

__all__ = ["TOPOLOGY_DRILLS", "setup_topology"]

TOPOLOGY_DRILLS = ("sentinel", "reshard")
_PREFIX = "t"   # tests.redis.cluster.PREFIX: the cluster fixture tracks this prefix's slot


def _state(url: str, topology: str) -> dict[str, Any]:
    return {"backend": "redis", "redis_url": url, "topology": topology, "key_prefix": _PREFIX,
            "op_timeout_s": 0.2, "lease_ttl_s": 2.0, "renew_interval_s": 0.5,
            "circuit_breaker": {"failure_threshold": 3, "reset_after_s": 0.5}}


def _router_notes(d: Drill) -> dict[str, Any]:
    assert d.router is not None
    m = d.router.metrics()
    failures = {k.split('result="')[1].rstrip('"}'): v for k, v in m.items()
                if k.startswith('specgate_shared_state_ops_total{op="sync"') and 'result="ok"' not in k and v}
    return {"degraded_entries": sum(v for k, v in m.items()
                                    if k.startswith("specgate_shared_state_degraded_entries_total")),
            "sync_failures": failures}


def _leases(client: Any) -> int:
    try:
        return sum(int(client.zcard(k)) for k in client.scan_iter("{" + _PREFIX + "}:inflight:*"))
    finally:
        client.close()


def setup_topology(d: Drill, plan: LoadPlan) -> tuple[Callable[[Drill, asyncio.Event], Awaitable[None]], LoadPlan]:
    """Build the ``sentinel`` or ``reshard`` drill's stack; returns its fault and load plan."""
    if d.name == "sentinel":
        from tests.redis.test_topology import SentinelSet

        sentinels = SentinelSet(d.work)
        d.cleanups.append(sentinels.close)

        async def failover(d: Drill, stop: asyncio.Event) -> None:
            await asyncio.sleep(d.args.duration * 0.3)
            t0 = time.monotonic()
            await asyncio.to_thread(sentinels.failover)
            d.notes["failover_s"] = round(time.monotonic() - t0, 2)

        def after() -> dict[str, Any]:
            primary = next(p for p in (sentinels.primary, sentinels.replica)
                           if sentinels.client(p).execute_command("ROLE")[0] == b"master")
            return {"redis_leases_left": _leases(sentinels.client(primary)),
                    "primary_moved": primary == sentinels.replica, **_router_notes(d)}

        d.after = after
        d.basic(state=_state(sentinels.url, "sentinel"))
        return failover, plan
    from tests.redis.test_topology import RedisCluster3

    nodes = RedisCluster3(d.work)
    d.cleanups.append(nodes.close)
    first = nodes.owner()

    async def reshard(d: Drill, stop: asyncio.Event) -> None:
        await asyncio.sleep(d.args.duration * 0.3)
        t0 = time.monotonic()
        await asyncio.to_thread(nodes.move_slot, nodes.other())
        d.notes["reshard_s"] = round(time.monotonic() - t0, 2)

    def after() -> dict[str, Any]:
        owner = nodes.owner()
        return {"redis_leases_left": _leases(nodes.node(owner)), "slot_moved": owner != first, **_router_notes(d)}

    d.after = after
    d.basic(state=_state(f"redis://127.0.0.1:{nodes.other()}/0", "cluster"))
    return reshard, plan
