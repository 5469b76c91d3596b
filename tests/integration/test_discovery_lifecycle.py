"""Discovery through a rolling update: terminating, not-ready, dropped watches, lost events,
410 on reconnect, periodic resync, and a new pod whose port is closed.

EndpointSlice conditions as kubernetes/kubernetes#92968 defines them; the failure modes are
those of vllm-project/production-stack#1091 (a reconnect that never re-listed) and #601 (a
terminating pod kept getting requests).
"""

from __future__ import annotations

import threading
from typing import Any

import yaml

from tests.support import wait_until
from tests.support.k8s_cluster import CHAT, SELECTOR, Cluster, base_config

TERMINATING = {"serving": True, "terminating": True}


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **extra}


def configure(cluster: Cluster, **discovery: Any) -> None:
    """Rewrite the router config with extra keys in the spec pool's discovery block."""
    doc = base_config(cluster.tokenizer, cluster.plain.base_url, cluster.port)
    doc["pools"][0]["discovery"].update(discovery)
    cluster.config_path.write_text(yaml.safe_dump(doc))


def states(r: Any, pool: str = "spec") -> dict[str, float]:
    r.state.refresh_gauges()
    return {s: r.metric("specgate_endpoints", pool=pool, state=s)
            for s in ("healthy", "unknown", "unhealthy", "draining")}


def test_rolling_update_terminating_then_not_ready_then_empty(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True, 2: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(2)}, what="two healthy pods")
    assert states(r) == {"healthy": 2, "unknown": 0, "unhealthy": 0, "draining": 0}
    cluster.pod(1).script({"chunk_delay_s": 0.05})
    cluster.pod(2).script({"chunk_delay_s": 0.05})
    events: list[list[str]] = [[], []]
    started = [threading.Event(), threading.Event()]

    def stream(k: int) -> None:
        with r.client.stream("POST", CHAT, json=chat(max_tokens=40, stream=True)) as resp:
            assert resp.status_code == 200
            started[k].set()
            events[k].extend(line for line in resp.iter_lines() if line.startswith("data: "))

    # two long streams; the idle tie-break puts them on different pods: pin "busy" as the one
    # holding the first and send the second there too by making the other one look loaded
    threads = [threading.Thread(target=stream, args=(k,)) for k in (0, 1)]
    threads[0].start()
    started[0].wait(10)
    eps = r.pool("spec").endpoints
    busy = wait_until(lambda: next((i for i in (1, 2) if eps[cluster.url(i)].inflight == 1), None),
                      what="first stream in flight")
    other = 3 - busy
    cluster.pod(busy).script({"chunk_delay_s": 0.05})
    leases = [eps[cluster.url(other)].lease() for _ in range(2)]  # "other" looks busier
    threads[1].start()
    started[1].wait(10)
    for lease in leases:
        lease.release()
    assert eps[cluster.url(busy)].inflight == 2
    busy_ep = eps[cluster.url(busy)]

    # step 1: busy is terminating (still serving): no new request within one watch event
    cluster.api.apply(cluster.slice("spec-a", {busy: TERMINATING, other: True}))
    wait_until(lambda: busy_ep.draining, timeout=1.0, what="terminating pod drains within 1 s")
    before = cluster.generations(busy)
    for _ in range(5):
        resp = r.client.post(CHAT, json=chat())
        assert (resp.status_code, resp.headers["x-specgate-pool"]) == (200, "spec")
    assert cluster.generations(busy) == before
    assert states(r)["draining"] == 1
    for t in threads:
        t.join(30)
    assert all(ev[-1] == "data: [DONE]" and len(ev) > 40 for ev in events)  # both streams ran to the end
    wait_until(lambda: cluster.url(busy) not in r.pool("spec").endpoints, what="terminating pod dropped")

    # step 2: the other pod is neither ready nor serving: the pool is empty, traffic falls back
    cluster.api.apply(cluster.slice("spec-a", {busy: TERMINATING, other: False}))
    wait_until(lambda: not r.urls(), timeout=1.0, what="pool empty")
    resp = r.client.post(CHAT, json=chat())
    assert (resp.status_code, resp.headers["x-specgate-pool"], resp.headers["x-specgate-reason"]) == (
        200, "plain", "spec_unhealthy")
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="terminating") == 0  # off by default
    assert cluster.generations(busy) == before


def test_terminating_endpoints_are_the_last_resort_when_enabled(cluster: Cluster) -> None:
    configure(cluster, serve_terminating_when_empty=True)
    cluster.api.apply(cluster.slice("spec-a", {1: TERMINATING, 2: {"serving": False, "terminating": True}}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="terminating pod 1 used")
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="terminating") == 1
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="ready") == 0
    assert r.client.post(CHAT, json=chat()).headers["x-specgate-pool"] == "spec"
    assert (cluster.generations(1), cluster.generations(2)) == (1, 0)
    # a ready pod appears: the terminating one leaves rotation
    cluster.api.apply(cluster.slice("spec-a", {1: TERMINATING, 3: True}))
    wait_until(lambda: r.healthy() == {cluster.url(3)} and cluster.url(1) not in r.pool("spec").endpoints,
               what="ready pod replaces the terminating one")
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="terminating") == 0
    assert r.metric("specgate_discovered_endpoints", pool="spec", state="ready") == 1
    r.client.post(CHAT, json=chat())
    assert (cluster.generations(1), cluster.generations(3)) == (1, 1)


def test_dropped_watch_relists_and_sees_changes_no_event_reported(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True, 2: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(2)}, what="two healthy pods")
    lists = cluster.api.lists
    # the stream drops; while it is down pod 2 leaves the slice and no event records it
    cluster.api.drop()
    cluster.api.apply_unseen(cluster.slice("spec-a", {1: True}))
    wait_until(lambda: set(r.pool("spec").endpoints) == {cluster.url(1)}, what="pod 2 dropped after reconnect")
    assert cluster.api.lists > lists
    assert r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="error") >= 1
    before = cluster.generations(2)
    for _ in range(3):
        assert r.client.post(CHAT, json=chat()).status_code == 200
    assert cluster.generations(2) == before


def test_gone_on_reconnect_relists_and_drops_the_deleted_pod(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True}))
    cluster.api.apply(cluster.slice("spec-b", {2: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(2)}, what="two healthy pods")
    cluster.api.gone_next(1)
    cluster.api.drop(("default", "spec-b"))  # closed abruptly; B deleted while it is closed
    wait_until(lambda: r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="expired") == 1,
               what="410 seen")
    wait_until(lambda: set(r.pool("spec").endpoints) == {cluster.url(1)}, what="B dropped")
    assert r.state.discovery.known() == {"spec": frozenset({cluster.url(1)})}
    # the watch after the 410's re-list still delivers events
    cluster.api.apply(cluster.slice("spec-b", {3: True}))
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(3)}, what="pod 3 added")


def test_periodic_resync_bounds_a_lost_event(cluster: Cluster) -> None:
    configure(cluster, resync_s=0.5)
    cluster.api.apply(cluster.slice("spec-a", {1: True, 2: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1), cluster.url(2)}, what="two healthy pods")
    cluster.api.apply_unseen(cluster.slice("spec-a", {1: True}))  # the watch stays open, silent
    wait_until(lambda: set(r.pool("spec").endpoints) == {cluster.url(1)}, timeout=3.0,
               what="pod 2 dropped within one resync")
    assert r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="resync") >= 1
    assert r.metric("specgate_discovery_watch_restarts_total", pool="spec", reason="error") == 0


def test_new_pod_is_not_used_until_its_probe_succeeds(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="pod 1 healthy")
    # pod 5 is ready in the slice but nothing listens on its port (connection refused)
    slice_ = cluster.slice("spec-a", {1: True})
    slice_["endpoints"].append({"addresses": ["127.0.0.6"],
                                "conditions": {"ready": True, "serving": True, "terminating": False}})
    cluster.api.apply(slice_)
    closed = f"http://127.0.0.6:{cluster.port}"
    wait_until(lambda: closed in r.pool("spec").endpoints, what="pod 5 discovered")
    wait_until(lambda: r.pool("spec").endpoints[closed].scrape_failures >= 3, what="pod 5 probed")
    for _ in range(10):
        resp = r.client.post(CHAT, json=chat())
        assert (resp.status_code, resp.headers["x-specgate-pool"]) == (200, "spec")
    assert cluster.generations(1) == 10
    assert r.pool("spec").endpoints[closed].state in ("unknown", "unhealthy")
    got = states(r)
    assert got["healthy"] == 1 and got["unknown"] + got["unhealthy"] == 1
    # the port opens: the first successful probe admits it
    cluster.pod(5)
    wait_until(lambda: r.pool("spec").endpoints[closed].healthy, what="pod 5 admitted after its probe")
    assert states(r) == {"healthy": 2, "unknown": 0, "unhealthy": 0, "draining": 0}


def test_selector_change_removes_the_pod(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="pod 1 healthy")
    relabelled = cluster.slice("spec-a", {1: True}, **{"app.kubernetes.io/component": "pool-x"})
    assert relabelled["metadata"]["labels"] != SELECTOR
    cluster.api.apply(relabelled)  # the slice no longer matches: a watch sees no DELETED
    wait_until(lambda: not r.pool("spec").endpoints, timeout=3.0, what="pod 1 gone")
    resp = r.client.post(CHAT, json=chat())
    assert resp.headers["x-specgate-pool"] == "plain"
