"""Discovery end to end: the router watches a fake API server and routes to fake SGLang pods."""

from __future__ import annotations

import threading
from typing import Any

from tests.support import wait_until
from tests.support.k8s_cluster import CHAT, Cluster


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "hello world"}],
            "max_tokens": 3, **extra}


def test_ready_pod_is_added_and_routed(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True, 3: False}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="pod 1 healthy")
    assert set(r.pool("spec").endpoints) == {cluster.url(1)}  # the not-ready pod 3 never appears
    resp = r.client.post("/v1/chat/completions", json=chat())
    assert resp.status_code == 200 and resp.headers["x-specgate-pool"] == "spec"
    assert (cluster.generations(1), cluster.generations(3)) == (1, 0)

    # pod 2 becomes ready in a second slice; pod 3 turns ready in the first
    cluster.api.apply(cluster.slice("spec-b", {2: True}))
    cluster.api.apply(cluster.slice("spec-a", {1: True, 3: True}))
    wait_until(lambda: r.healthy() == {cluster.url(i) for i in (1, 2, 3)}, what="three healthy pods")
    for _ in range(3):  # idle pods tie; the tie-break walks them in URL order
        assert r.client.post(CHAT, json=chat()).headers["x-specgate-pool"] == "spec"
    assert [cluster.generations(i) for i in (1, 2, 3)] == [2, 1, 1]
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="ready") == 3
    assert r.metric("specgate_discovery_lists_total", pool="spec") == 1
    assert r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="expired") == 0
    # the static pool is untouched
    assert set(r.pool("plain").endpoints) == {cluster.plain.base_url}


def test_readiness_false_drains_and_inflight_stream_finishes(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True, 2: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(2)}, what="two healthy pods")
    pod1 = r.pool("spec").endpoints[cluster.url(1)]
    cluster.pod(1).script({"chunk_delay_s": 0.1})
    cluster.pod(2).script({"chunk_delay_s": 0.1})
    events: list[str] = []
    started = threading.Event()

    def stream() -> None:
        with r.client.stream("POST", CHAT, json=chat(max_tokens=12, stream=True)) as resp:
            assert resp.status_code == 200
            started.set()
            events.extend(line for line in resp.iter_lines() if line.startswith("data: "))

    # one stream in flight on whichever pod the tie-break chose ("busy"), then that pod turns not ready
    t = threading.Thread(target=stream)
    t.start()
    started.wait(10)
    wait_until(lambda: pod1.inflight == 1 or r.pool("spec").endpoints[cluster.url(2)].inflight == 1,
               what="stream in flight")
    busy = 1 if pod1.inflight == 1 else 2
    other = 3 - busy
    busy_ep = r.pool("spec").endpoints[cluster.url(busy)]

    cluster.api.apply(cluster.slice("spec-a", {busy: False, other: True}))
    wait_until(lambda: busy_ep.draining, what="draining")
    assert r.urls() == {cluster.url(other)}
    assert cluster.url(busy) in r.pool("spec").endpoints  # still there: one stream in flight
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="draining") == 1
    before = cluster.generations(busy)
    for _ in range(3):
        resp = r.client.post(CHAT, json=chat())
        assert resp.status_code == 200 and resp.headers["x-specgate-pool"] == "spec"
    assert cluster.generations(busy) == before  # no new request reached the draining pod
    t.join(20)
    assert events[-1] == "data: [DONE]" and len(events) >= 12  # the stream ran to its end
    wait_until(lambda: cluster.url(busy) not in r.pool("spec").endpoints, what="drained endpoint dropped")
    assert busy_ep.inflight == 0
    r.state.refresh_gauges()
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="draining") == 0
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="ready") == 1

    # ready again: a new endpoint, unknown until scraped, then routable
    cluster.api.apply(cluster.slice("spec-a", {busy: True, other: True}))
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(2)}, what="back")
    assert r.pool("spec").endpoints[cluster.url(busy)] is not busy_ep


def test_deleted_slice_removes_endpoints_and_traffic_falls_back(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="pod 1 healthy")
    cluster.api.delete("spec-a")
    wait_until(lambda: not r.pool("spec").endpoints, what="endpoint gone")
    resp = r.client.post(CHAT, json=chat())
    assert (resp.status_code, resp.headers["x-specgate-pool"], resp.headers["x-specgate-reason"]) == (
        200, "plain", "spec_unhealthy")
    assert cluster.generations(1) == 0


def test_watch_expiry_relists_without_lost_or_duplicated_endpoints(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True, 2: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(2)}, what="two healthy pods")
    kept = r.pool("spec").endpoints[cluster.url(1)]
    # while no watch is open: slice a loses pod 2, a new slice b brings pod 3 and pod 1 again
    # (the same address in two slices, as during a slice split), then the history is compacted
    cluster.api.expire(cluster.slice("spec-a", {1: True}), cluster.slice("spec-b", {3: True, 1: True}))
    # the ended watch is followed by a full list (never a resume that could meet the 410)
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(3)}, what="relisted set")
    assert r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="expired") == 0
    assert sorted(r.pool("spec").endpoints) == [cluster.url(1), cluster.url(3)]
    assert r.pool("spec").endpoints[cluster.url(1)] is kept  # health and in-flight carried
    assert r.state.discovery.known() == {"spec": frozenset({cluster.url(1), cluster.url(3)})}
    assert r.metric("specgate_discovery_lists_total", pool="spec") == 2
    assert cluster.api.lists == 2

    # the watch resumed from the relisted version: later events still arrive, once
    cluster.api.delete("spec-b")
    wait_until(lambda: set(r.pool("spec").endpoints) == {cluster.url(1)}, what="pod 3 gone")
    assert r.metric("specgate_discovery_lists_total", pool="spec") == 2


def test_bookmark_advances_the_resource_version(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True}))
    cluster.api.apply(cluster.slice("other", {2: True}, **{"app.kubernetes.io/component": "pool-x"}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="pod 1 healthy")
    cluster.api.apply(cluster.slice("other", {2: False}, **{"app.kubernetes.io/component": "pool-x"}))
    cluster.api.bookmark()
    watch = r.state.discovery.watches["spec"]
    wait_until(lambda: watch._rv == str(cluster.api.rv), what="bookmark applied")
    assert set(r.pool("spec").endpoints) == {cluster.url(1)}


def test_api_server_restart_recovers(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="pod 1 healthy")
    cluster.api.stop()  # the API server goes away; its watch cache is lost
    wait_until(lambda: r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="error") >= 2,
               what="failed reconnects")
    # known endpoints keep serving while the API server is down
    resp = r.client.post(CHAT, json=chat())
    assert resp.headers["x-specgate-pool"] == "spec" and cluster.generations(1) == 1
    # changes while it is down: pod 1 not ready, pod 2 ready
    cluster.api.apply(cluster.slice("spec-a", {1: False, 2: True}))
    cluster.api.start()
    wait_until(lambda: r.healthy() == {cluster.url(2)} and set(r.pool("spec").endpoints) == {cluster.url(2)},
               what="recovered")
    # the reconnect lists first: nothing is resumed from the lost history, so no 410
    assert r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="expired") == 0
    assert r.metric("specgate_discovery_lists_total", pool="spec") == 2
    resp = r.client.post(CHAT, json=chat())
    assert resp.headers["x-specgate-pool"] == "spec"
    assert (cluster.generations(1), cluster.generations(2)) == (1, 1)
