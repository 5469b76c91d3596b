"""Pure parts of Kubernetes discovery: slice -> URLs, and the runtime's add/drain/drop of endpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from router.config.tree import DiscoveryConfig, parse_config
from router.loops.discovery import (
    SliceEndpoints,
    endpoint_states,
    ready_urls,
    routable_urls,
    slice_endpoints,
)
from router.loops.scraper import EngineLoad
from router.state.runtime import Runtime

D = DiscoveryConfig(namespace="ns", label_selector="a=b", port=30000)


@pytest.mark.parametrize(("endpoints", "want"), [
    ([{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}], {"http://10.0.0.1:30000"}),
    ([{"addresses": ["10.0.0.1"], "conditions": {"ready": False}}], set()),
    ([{"addresses": ["10.0.0.1"], "conditions": {}}], {"http://10.0.0.1:30000"}),  # nil means ready
    ([{"addresses": ["10.0.0.1"]}], {"http://10.0.0.1:30000"}),
    ([{"addresses": ["fd00::1"], "conditions": {"ready": True}}], {"http://[fd00::1]:30000"}),
    ([{"addresses": ["10.0.0.1", "10.0.0.2"], "conditions": {"ready": True, "terminating": False}},
      {"addresses": ["10.0.0.3"], "conditions": {"ready": False, "serving": True, "terminating": True}}],
     {"http://10.0.0.1:30000", "http://10.0.0.2:30000"}),
    (None, set()),
])
def test_ready_urls(endpoints: Any, want: set[str]) -> None:
    assert ready_urls({"endpoints": endpoints}, D) == want


def test_ready_urls_https() -> None:
    d = DiscoveryConfig(label_selector="a=b", port=8443, scheme="https")
    assert ready_urls({"endpoints": [{"addresses": ["10.1.2.3"]}]}, d) == {"https://10.1.2.3:8443"}


def _config(tmp: Path, *, selector: str = "a=b", static: list[str] | None = None,
            health: dict[str, int] | None = None) -> Any:
    pool: dict[str, Any] = {"name": "spec", "speculative": False,
                            "discovery": {"label_selector": selector, "port": 30000}}
    if static:
        pool["endpoints"] = static
    return parse_config({
        "model": {"name": "m", "tokenizer": str(tmp)},
        "limits": {"max_context_tokens": 4096},
        "pools": [pool, {"name": "plain", "speculative": False, "endpoints": ["http://10.9.9.9:1"]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
        **({"health": health} if health else {}),
    })


A, B, C = "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"


def test_set_discovered_adds_drains_and_drops_on_last_release(tmp_path: Path) -> None:
    rt = Runtime(_config(tmp_path), counter=None)
    assert rt.set_discovered("spec", [A, B]) == ([A, B], [])
    pool = rt.pools[0]
    a, b = pool.endpoints[A], pool.endpoints[B]
    assert (a.state, a.healthy) == ("unknown", False)  # routable only after its first scrape
    a.state = b.state = "healthy"
    lease = a.lease()
    snap_before = rt.snapshots(0.0)
    assert rt.set_discovered("spec", [B, C]) == ([C], [A])
    assert a.draining and not a.healthy and A in pool.endpoints and rt.endpoint(A) is a
    assert [e.url for e in rt.snapshots(0.0)[0].endpoints if e.healthy] == [B]
    assert [e.url for e in snap_before[0].endpoints if e.healthy] == [A, B]  # snapshots are values
    lease.release()
    assert A not in pool.endpoints and sorted(pool.endpoints) == [B, C]
    with pytest.raises(KeyError):
        rt.endpoint(A)
    # an idle endpoint that leaves is dropped at once; one that returns while draining is kept
    assert rt.set_discovered("spec", [B]) == ([], [C])
    assert sorted(pool.endpoints) == [B]
    lease = b.lease()
    rt.set_discovered("spec", [])
    assert b.draining
    rt.set_discovered("spec", [B])
    assert pool.endpoints[B] is b and not b.draining and b.healthy
    lease.release()
    assert pool.endpoints[B] is b


def test_static_endpoints_never_drain_and_foreign_urls_are_ignored(tmp_path: Path) -> None:
    rt = Runtime(_config(tmp_path, static=["http://10.5.5.5:30000"]), counter=None)
    assert rt.set_discovered("spec", ["http://10.9.9.9:1", A]) == ([A], [])  # plain's URL ignored
    assert sorted(rt.pools[0].endpoints) == [A, "http://10.5.5.5:30000"]
    rt.set_discovered("spec", [])
    assert sorted(rt.pools[0].endpoints) == ["http://10.5.5.5:30000"]
    assert rt.endpoint("http://10.9.9.9:1").pool == "plain"
    with pytest.raises(KeyError):
        rt.set_discovered("nope", [A])


def test_reload_carries_discovered_endpoints_unless_the_block_changed(tmp_path: Path) -> None:
    old = Runtime(_config(tmp_path), counter=None)
    old.set_discovered("spec", [A])
    a = old.pools[0].endpoints[A]
    same = Runtime(_config(tmp_path), counter=None, previous=old)
    assert same.pools[0].endpoints[A] is a and same.endpoint(A) is a
    other = Runtime(_config(tmp_path, selector="a=c"), counter=None, previous=old)
    assert other.pools[0].endpoints == {}


def test_reload_gives_discovered_endpoints_the_new_health_thresholds(tmp_path: Path) -> None:
    old = Runtime(_config(tmp_path, health={"failure_threshold": 2, "success_threshold": 1}), counter=None)
    old.set_discovered("spec", [A])
    a = old.pools[0].endpoints[A]
    a.state = "healthy"
    new = Runtime(_config(tmp_path, health={"failure_threshold": 4, "success_threshold": 3}), counter=None,
                  previous=old)
    assert new.pools[0].endpoints[A] is a
    assert (a.failure_threshold, a.success_threshold) == (4, 3)
    for _ in range(3):
        a.record_failure(slow=False, now=0.0)
    assert a.state == "healthy"   # 3 dead scrapes: the old threshold (2) would have ejected it
    a.record_failure(slow=False, now=0.0)
    assert a.state == "unhealthy"
    for _ in range(2):
        a.record_success(EngineLoad(), now=0.0)
    assert a.state == "unhealthy"
    a.record_success(EngineLoad(), now=0.0)
    assert a.state == "healthy"


def test_an_endpoint_draining_across_a_reload_is_dropped_from_the_new_runtime(tmp_path: Path) -> None:
    old = Runtime(_config(tmp_path), counter=None)
    old.set_discovered("spec", [A, B])
    lease = old.pools[0].endpoints[B].lease()
    old.set_discovered("spec", [A])
    new = Runtime(_config(tmp_path), counter=None, previous=old)
    assert sorted(new.pools[0].endpoints) == [A, B] and new.pools[0].endpoints[B].draining
    lease.release()
    assert sorted(new.pools[0].endpoints) == [A]
    with pytest.raises(KeyError):
        new.endpoint(B)


T = "http://10.0.0.9:30000"


@pytest.mark.parametrize(("conditions", "ready", "terminating"), [
    ({"ready": True, "serving": True, "terminating": False}, True, False),
    ({"ready": False, "serving": True, "terminating": True}, False, True),   # draining, still serving
    ({"ready": False, "serving": False, "terminating": True}, False, False),
    ({"ready": True, "terminating": True}, False, True),   # ready is never trusted while terminating
    ({"terminating": True}, False, True),                  # serving nil: unknown, read as serving
    ({"ready": False, "serving": False, "terminating": False}, False, False),
])
def test_slice_endpoints_by_condition(conditions: dict[str, bool], ready: bool, terminating: bool) -> None:
    got = slice_endpoints({"endpoints": [{"addresses": ["10.0.0.9"], "conditions": conditions}]}, D)
    assert (got.ready, got.terminating) == (frozenset({T} if ready else ()), frozenset({T} if terminating else ()))


def test_routable_urls_use_terminating_endpoints_only_as_a_last_resort() -> None:
    a = SliceEndpoints(ready=frozenset({A}), terminating=frozenset({B}))
    t = SliceEndpoints(terminating=frozenset({B, C}))
    on = DiscoveryConfig(label_selector="a=b", port=30000, serve_terminating_when_empty=True)
    assert routable_urls([a, t], D) == (frozenset({A}), False)
    assert routable_urls([a, t], on) == (frozenset({A}), False)
    assert routable_urls([t], D) == (frozenset(), False)
    assert routable_urls([t], on) == (frozenset({B, C}), True)
    assert routable_urls([], on) == (frozenset(), False)


def test_endpoint_states_count_draining_first(tmp_path: Path) -> None:
    rt = Runtime(_config(tmp_path), counter=None)
    rt.set_discovered("spec", [A, B, C])
    a, b = (rt.pools[0].endpoints[u] for u in (A, B))
    a.state, b.state = "healthy", "unhealthy"
    lease = a.lease()
    rt.set_discovered("spec", [B, C])
    assert endpoint_states(rt.pools[0].endpoints.values()) == {
        "healthy": 0, "unknown": 1, "unhealthy": 1, "draining": 1, "warming": 0,
        "identity_mismatch": 0}
    lease.release()
    assert endpoint_states(rt.pools[0].endpoints.values()) == {
        "healthy": 0, "unknown": 1, "unhealthy": 1, "draining": 0, "warming": 0,
        "identity_mismatch": 0}
