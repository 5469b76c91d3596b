"""``Endpoint.snapshot_values`` (one call per endpoint per decision) gives exactly what
``Endpoint.healthy`` and ``Endpoint.backpressure_load`` and the scrape's KV fields give, in
every state: health, draining, warm-up, identity, shared in-flight (fresh or stale), scrape
(fresh, stale, none, KV exported or not), back-pressure (held or expired)."""

from __future__ import annotations

import itertools
import random

from router.endpoint import Endpoint
from router.engine_metrics import EngineLoad

STALE = 5.0


def reference(e: Endpoint, now: float, floor: int, cached: int) -> tuple[object, ...]:
    """What ``router.pools`` composed from the endpoint's methods before the one-call form."""
    load = e.backpressure_load(now, STALE, floor)
    engine = e.engine
    if engine is None or e.scraped_at is None or now - e.scraped_at > STALE:
        return e.url, e.healthy, load, cached, 0, None, 0
    cap = engine.max_total_num_tokens
    used = engine.kv_used
    return e.url, e.healthy, load, cached, engine.num_queue_reqs, None if cap is None else max(0, cap - used), used


def states(rng: random.Random) -> Endpoint:
    e = Endpoint(url="http://10.0.0.1:30000", pool="p")
    e.state = rng.choice(["unknown", "healthy", "unhealthy"])
    e.draining = rng.random() < 0.2
    e.warmup_required, e.warm = rng.random() < 0.3, rng.random() < 0.5
    e.identity_error = "serves x" if rng.random() < 0.1 else None
    e.inflight = rng.randrange(0, 12)
    if rng.random() < 0.5:
        e.shared_inflight, e.shared_base = rng.randrange(0, 30), rng.randrange(0, 12)
        e.shared_at = rng.choice([None, 9.0, 5.0, 1.0])  # 5.0: exactly stale at now 10
    if rng.random() < 0.8:
        cap = rng.choice([None, 1000, 50])
        e.engine = EngineLoad(num_running_reqs=rng.randrange(0, 20), num_queue_reqs=rng.randrange(0, 5),
                              token_usage=rng.random(), max_total_num_tokens=cap,
                              kv_used_tokens=rng.choice([None, 10, 400, 2000]))
        e.scraped_at = rng.choice([None, 9.5, 1.0, 5.0])
        e.finished_since_scrape = rng.randrange(0, 25)
    if rng.random() < 0.5:
        e.backpressure_until = rng.choice([8.0, 10.0, 12.0])
    return e


def test_snapshot_values_equal_the_composed_methods_in_every_state():
    rng = random.Random(7)
    for _, now, floor, cached in itertools.product(range(400), (10.0, 14.5), (0, 6, 40), (0, 17)):
        e = states(rng)
        assert e.snapshot_values(now, STALE, floor, cached) == reference(e, now, floor, cached)


def test_snapshot_values_follow_a_lease_a_scrape_and_a_refusal():
    e = Endpoint(url="http://10.0.0.1:30000", pool="p")
    assert e.snapshot_values(1.0, STALE, 4, 0) == (e.url, False, 0, 0, 0, None, 0)
    e.record_success(EngineLoad(num_running_reqs=2, num_queue_reqs=1, max_total_num_tokens=100,
                                kv_used_tokens=30), now=1.0)
    assert e.snapshot_values(2.0, STALE, 4, 9) == (e.url, True, 3, 9, 1, 70, 30)
    lease = e.lease()
    assert e.snapshot_values(2.0, STALE, 4, 0)[2] == 3  # the scrape's load still above in-flight
    e.record_backpressure(2.0, hold_s=1.0)
    assert e.snapshot_values(2.5, STALE, 4, 0)[2] == 4 and e.snapshot_values(3.5, STALE, 4, 0)[2] == 3
    assert e.snapshot_values(7.0, STALE, 4, 0) == (e.url, True, 1, 0, 0, None, 0)  # stale: in-flight only
    lease.release()
    assert e.snapshot_values(7.0, STALE, 4, 0)[2] == 0
