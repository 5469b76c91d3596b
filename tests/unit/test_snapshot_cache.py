"""``Runtime.snapshots`` reuses a pool snapshot only when every value it holds is unchanged."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from router.config.tree import parse_config
from router.decision.policy import PoolSnapshot
from router.loops.scraper import EngineLoad
from router.state.runtime import Runtime

A, B = "http://10.0.0.1:30000", "http://10.0.0.2:30000"
LOAD = EngineLoad(0, 0, 0.0, None, None)


def runtime(tmp: Path) -> Runtime:
    rt = Runtime(parse_config({
        "model": {"name": "m", "tokenizer": str(tmp)},
        "limits": {"max_context_tokens": 4096},
        "pools": [{"name": "spec", "speculative": True, "endpoints": [A], "draft_reserved_tokens": 8,
                   "capabilities": ["tool_calls"]},
                  {"name": "plain", "speculative": False, "endpoints": [B]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 4, "exit": 2}},
    }), counter=None)
    for ep in rt.all_endpoints():
        ep.record_success(LOAD, now=0.0)
    return rt


def fresh(snap: PoolSnapshot) -> PoolSnapshot:
    return dataclasses.replace(snap)  # a new object with the same values


def test_unchanged_pools_give_the_same_objects_and_equal_values(tmp_path):
    rt = runtime(tmp_path)
    first = rt.snapshots(1.0)
    second = rt.snapshots(1.0)
    assert all(a is b for a, b in zip(first, second))
    assert list(second) == [fresh(s) for s in first]
    assert [(s.name, s.speculative, s.reserved, s.capabilities) for s in second] == [
        ("spec", True, 8, frozenset({"tool_calls"})), ("plain", False, 0, None)]


def test_a_lease_a_match_a_health_change_or_the_canary_give_a_new_snapshot(tmp_path):
    rt = runtime(tmp_path)
    spec = rt.pools[0]
    before = rt.snapshots(1.0)
    lease = rt.endpoint(A).lease("greedy")
    leased = rt.snapshots(1.0)
    assert leased[0] is not before[0] and leased[0].endpoints[0].load == 1
    assert leased[1] is before[1]
    lease.release()
    assert rt.snapshots(1.0)[0] == before[0]
    matched = rt.snapshots(1.0, {"plain": {B: 40}})
    assert matched[1].endpoints[0].cached_tokens == 40 and rt.snapshots(1.0)[1].endpoints[0].cached_tokens == 0
    rt.endpoint(B).mark_down()
    assert rt.snapshots(1.0)[1].endpoints[0].healthy is False
    spec.canary_mismatch, spec.canary_revoked = True, frozenset({"tool_calls"})
    after = rt.snapshots(1.0)[0]
    assert (after.canary_mismatch, after.capabilities) == (True, frozenset())
    for _ in range(3):  # the saturation guard reads the load (4 in flight >= enter)
        rt.endpoint(A).lease("greedy")
    spec.canary_mismatch, spec.canary_revoked = False, frozenset()
    assert rt.snapshots(1.0)[0].capabilities == frozenset({"tool_calls"}) == spec.capabilities  # served again
    rt.endpoint(A).lease("greedy")
    assert rt.snapshots(1.0)[0].saturated is True
