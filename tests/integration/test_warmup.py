"""Servable before routable, over real HTTP: a new endpoint whose ``/metrics`` is green while its
generation is still blocked (SGLang's warm-up) gets no client request until one-token probes
succeed on it; a stream stuck before its first byte fails over and its endpoint is proven again."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import httpx
import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer
from tests.support.stack import spec_fake_config
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"
WARMUP = {"enabled": True, "successes": 3, "timeout_s": 0.5, "interval_s": 0.1}
HOLD = {"path": CHAT, "delay_s": 30.0, "count": 100000}  # every chat request waits 30 s (warm-up)


class TwoSpecEndpoints:
    """Spec pool [w1, w2] and a plain pool; w2 is scripted before the router starts."""

    def __init__(self, tmp, tokenizer, w2_script: list[dict] | None = None, *, with_w2: bool = True,
                 **overrides) -> None:
        self.w1 = FakeServer(spec_fake_config(tokenizer)).start()
        self.w2 = FakeServer(spec_fake_config(tokenizer)).start()
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start()
        if w2_script:
            assert httpx.post(self.w2.base_url + "/_fake/script", json=w2_script).status_code == 200
        doc = router_config(tokenizer, self.w1.base_url, self.plain.base_url, **{
            "health.warmup": WARMUP, "pools.0.endpoints": [self.w1.base_url] + [self.w2.base_url] * with_w2,
            **overrides})
        self.router = RouterServer(write_router_yaml(tmp / "router.yaml", doc)).start()
        self.client = self.router.client

    def ep(self, fake: FakeServer):
        return self.router.state.runtime.endpoint(fake.base_url)

    def client_requests(self, fake: FakeServer) -> list[dict]:
        log = httpx.get(fake.base_url + "/_fake/requests").json()["requests"]
        return [r for r in log if r["path"] == CHAT and "x-specgate-probe" not in r["headers"]]

    def probes(self, fake: FakeServer) -> list[dict]:
        log = httpx.get(fake.base_url + "/_fake/requests").json()["requests"]
        return [r for r in log if r["headers"].get("x-specgate-probe") == "warmup"]

    def close(self) -> None:
        self.router.stop()
        for f in (self.w1, self.w2, self.plain):
            f.stop()


@pytest.fixture
def warming(tmp_path, tokenizer_dir) -> Iterator[TwoSpecEndpoints]:
    s = TwoSpecEndpoints(tmp_path, tokenizer_dir, [HOLD])
    try:
        yield s
    finally:
        s.close()


def test_a_warming_endpoint_gets_no_client_request_until_probes_succeed(warming):
    s = warming
    wait_until(lambda: s.ep(s.w1).healthy and s.ep(s.plain).healthy, 15, "w1 and plain warm")
    wait_until(lambda: s.ep(s.w2).state == "healthy" and s.router.metric(
        "specgate_warmup_probes_total", pool="spec", result="timeout") >= 2, 15, "two w2 probes timed out")
    w2 = s.ep(s.w2)
    assert not w2.healthy and w2.warming and w2.warm_detail == "probe failed: no answer within 0.5 s"
    ready = s.client.get("/ready").json()
    assert ready["pools"]["spec"]["warming"] == {s.w2.base_url: w2.warm_detail}
    assert ready["pools"]["spec"]["healthy_endpoints"] == 1
    s.client.get("/metrics")
    assert s.router.metric("specgate_endpoints", pool="spec", state="warming") == 1

    def one(i: int) -> tuple[int, str]:
        r = s.client.post(CHAT, json={"model": "tiny-llama", "stream": True, "max_tokens": 16,
                                      "messages": [{"role": "user", "content": f"hi {i}"}]}, timeout=10)
        return r.status_code, r.headers["x-specgate-pool"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(20)))
    assert results == [(200, "spec")] * 20
    assert s.client_requests(s.w2) == [] and len(s.client_requests(s.w1)) == 20
    # warm-up ends: three probes in a row, then w2 is routable
    assert httpx.post(s.w2.base_url + "/_fake/reset").status_code == 200
    wait_until(lambda: w2.healthy, 10, "w2 warm")
    assert w2.warm_successes == 3 and not s.client.get("/ready").json()["pools"]["spec"]["warming"]
    assert s.router.metric("specgate_warmup_probes_total", pool="spec", result="ok") >= 3 + 3  # w1 and w2


def test_an_ejected_endpoint_is_proven_again(tmp_path, tokenizer_dir):
    s = TwoSpecEndpoints(tmp_path, tokenizer_dir)
    try:
        wait_until(lambda: s.ep(s.w2).healthy, 15, "w2 warm")
        before = len(s.probes(s.w2))
        s.ep(s.w2).mark_down()
        assert not s.ep(s.w2).warm
        wait_until(lambda: s.ep(s.w2).healthy, 15, "w2 re-admitted and warm again")
        assert len(s.probes(s.w2)) == before + 3
    finally:
        s.close()


def test_a_stream_stuck_before_its_first_byte_fails_over(tmp_path, tokenizer_dir):
    s = TwoSpecEndpoints(tmp_path, tokenizer_dir, with_w2=False, **{"upstream.first_byte_timeout_s": 1.0})
    try:
        w1 = s.ep(s.w1)
        wait_until(lambda: w1.healthy and s.ep(s.plain).healthy, 15, "w1 and plain warm")
        assert httpx.post(s.w1.base_url + "/_fake/script", json={"path": CHAT, "fault": "hang"}).status_code == 200
        probes = len(s.probes(s.w1))
        r = s.client.post(CHAT, json={"model": "tiny-llama", "stream": True, "max_tokens": 8,
                                      "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.headers["x-specgate-pool"] == "plain", r.text
        assert r.content.endswith(b"data: [DONE]\n\n")
        assert len(s.client_requests(s.w1)) == 1
        # the last routable endpoint of its pool stays warm (busy is not dead): no new probes
        assert w1.healthy and w1.warm and len(s.probes(s.w1)) == probes
        wait_until(lambda: httpx.get(s.w1.base_url + "/_fake/requests").json()["aborts"], 3, "the abort")
    finally:
        s.close()


def test_a_discovered_endpoint_waits_for_its_probes_too(tmp_path, tokenizer_dir):
    from tests.support.k8s_cluster import Cluster, base_config

    c = Cluster(tmp_path, tokenizer_dir)
    try:
        write_router_yaml(c.config_path, base_config(tokenizer_dir, c.plain.base_url, c.port, health={
            "failure_threshold": 3, "success_threshold": 2, "retry_after_s": 3, "warmup": WARMUP}))
        pod = c.pod(1)
        assert httpx.post(pod.base_url + "/_fake/script", json=[HOLD]).status_code == 200
        c.api.apply(c.slice("spec-a", {1: True}))
        r = c.start_router()
        wait_until(lambda: r.metric("specgate_warmup_probes_total", pool="spec", result="timeout") >= 1, 15,
                   "a timed-out probe of the discovered pod")
        ep = r.state.runtime.endpoint(c.url(1))
        assert ep.warming and not ep.healthy
        for i in range(5):
            resp = r.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 3,
                                             "messages": [{"role": "user", "content": f"hello {i}"}]})
            assert (resp.status_code, resp.headers["x-specgate-pool"]) == (200, "plain")
        clients = [q for q in pod.requests(CHAT)["requests"] if "x-specgate-probe" not in q["headers"]]
        assert clients == []
        assert httpx.post(pod.base_url + "/_fake/reset").status_code == 200
        wait_until(lambda: ep.healthy, 10, "the discovered pod warm")
        resp = r.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 3,
                                         "messages": [{"role": "user", "content": "hello"}]})
        assert resp.headers["x-specgate-pool"] == "spec"
    finally:
        c.close()
