"""Idle keep-alive connections between the router and the engine, over real HTTP on 127.0.0.1.

The engine (uvicorn, like SGLang: ``SGLANG_TIMEOUT_KEEP_ALIVE``, 5 s by default) closes an idle
connection after its keep-alive; a client pool that keeps it longer reuses sockets the engine
is closing (sgl-project/sglang#20851, aio-libs/aiohttp#9138, #7297), and aiohttp resends only
idempotent methods, never a POST (aio-libs/aiohttp#7363). The router keeps idle connections
``upstream.keepalive_timeout_s`` (below the engine's, checked at load) and resends a request
once on a fresh connection when a reused one broke before any response byte, after aborting
its engine request id.

The scraper shares the upstream pool, so these stacks scrape only at start (``interval_s``
30 s) and the tests alone decide which connection a request meets. Gaps between requests are
the tests' input (the race is about idle time), not waits for a condition.
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from router.config.tree import ConfigError, load_config
from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, router_config, wait_until, write_router_yaml

CHAT = "/v1/chat/completions"
CONNECTION_FAILED = (b'{"error":{"message":"upstream connection failed","type":"server_error",'
                     b'"param":null,"code":"upstream_connection_error"}}')


def body(stream: bool, **kw: Any) -> dict[str, Any]:
    return {"model": "tiny-llama", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "stream": stream, **kw}


class OnePool:
    """One fake engine (given keep-alive) behind the router: the router's pool reuses one
    connection when the client sends one request at a time."""

    def __init__(self, tmp: Path, tokenizer: Path, *, keep_alive_s: float = 30.0,
                 engine_keepalive_s: float = 5.0, **overrides: Any) -> None:
        self.fake = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                          tokenizer_path=str(tokenizer)), keep_alive_s=keep_alive_s).start()
        pool: dict[str, Any] = {"name": "plain", "speculative": False, "endpoints": [self.fake.base_url]}
        if engine_keepalive_s != 5.0:
            pool["engine_keepalive_s"] = engine_keepalive_s
        cfg = {"pools": [pool], "scrape.interval_s": 30.0, "scrape.stale_after_s": 60.0, **overrides}
        path = write_router_yaml(tmp / "router.yaml",
                                 router_config(tokenizer, self.fake.base_url, self.fake.base_url, **cfg))
        self.router = RouterServer(path).start()
        self.endpoint = self.router.state.runtime.endpoint(self.fake.base_url)
        wait_until(lambda: self.endpoint.healthy, 15, "the fake endpoint to become healthy")
        self.client = httpx.Client(base_url=self.router.base_url, timeout=30)

    def close(self) -> None:
        self.client.close()
        self.router.stop()
        self.fake.stop()

    def log(self, path: str = CHAT) -> list[dict[str, Any]]:
        return [e for e in self.fake.requests()["requests"] if e["path"] == path]

    def send(self, stream: bool) -> httpx.Response:
        r = self.client.post(CHAT, json=body(stream))
        assert r.status_code == 200, r.text
        if stream:
            assert r.content.endswith(b"data: [DONE]\n\n") and b'"error"' not in r.content, r.content
        else:
            assert r.json()["choices"][0]["message"]["content"] == " ".join(f"tok{i}" for i in range(8))
        return r

    def settled_metric(self, name: str, expected: float, timeout_s: float = 2.0, **labels: str) -> float:
        """:meth:`RouterServer.settled_metric` of the router."""
        return self.router.settled_metric(name, expected, timeout_s, **labels)

    def settled_inflight(self, timeout_s: float = 2.0) -> int:
        with contextlib.suppress(AssertionError):  # the caller asserts on the count it returns
            wait_until(lambda: self.endpoint.inflight == 0, timeout_s)
        return self.endpoint.inflight


@pytest.fixture
def one_pool(tmp_path, tokenizer_dir):
    s = OnePool(tmp_path, tokenizer_dir)
    try:
        yield s
    finally:
        s.close()


def test_keepalive_not_below_the_engines_is_refused_at_load(tmp_path, tokenizer_dir):
    path = write_router_yaml(tmp_path / "r.yaml", router_config(tokenizer_dir, "http://127.0.0.1:1", "http://127.0.0.1:2",
                                                                **{"upstream.keepalive_timeout_s": 5.0}))
    with pytest.raises(ConfigError, match=r"upstream.keepalive_timeout_s \(5.0\) must be below "
                                          r"pools\[spec\].engine_keepalive_s \(5.0\)"):
        load_config(path)
    cfg = load_config(write_router_yaml(tmp_path / "ok.yaml",
                                        router_config(tokenizer_dir, "http://127.0.0.1:1", "http://127.0.0.1:2")))
    assert cfg.upstream.keepalive_timeout_s == 4.0  # below SGLang's uvicorn default of 5 s
    assert [p.engine_keepalive_s for p in cfg.pools] == [5.0, 5.0]


def test_router_drops_idle_connections_before_the_engine_does(tmp_path, tokenizer_dir):
    """The engine keeps idle connections 1 s, the router 0.2 s: after an idle gap of 0.4 s the
    router opens a new connection (aiohttp's own 15 s would reuse it), after 0.05 s it reuses."""
    s = OnePool(tmp_path, tokenizer_dir, keep_alive_s=1.0, engine_keepalive_s=1.0,
                **{"upstream.keepalive_timeout_s": 0.2})
    try:
        reused = []
        for i in range(6):
            s.send(stream=i % 2 == 1)
            reused.append(s.log()[-1]["reused_connection"])
            time.sleep(0.4 if i < 3 else 0.05)  # the idle gap before the next request is the input
        # request 0 may reuse the start-up scrape's connection; 1-3 follow 0.4 s gaps, 4-5 0.05 s
        assert reused[1:] == [False, False, False, True, True]
        assert s.settled_inflight() == 0
    finally:
        s.close()


def test_gaps_at_the_engine_keepalive_have_no_errors(tmp_path, tokenizer_dir):
    """SGLang's default pairing scaled down (engine 0.3 s, router 0.2 s): requests alternate
    stream and not, each after an idle gap of 0.3 s +- 50 ms (seeded); none fails."""
    rng = random.Random(20851)
    s = OnePool(tmp_path, tokenizer_dir, keep_alive_s=0.3, engine_keepalive_s=0.3,
                **{"upstream.keepalive_timeout_s": 0.2})
    try:
        for i in range(16):
            s.send(stream=i % 2 == 1)
            time.sleep(0.3 + rng.uniform(-0.05, 0.05))
        completed = [e for e in s.log() if e["outcome"] == "completed"]
        assert len(completed) == len(s.log()) == 16
        assert s.endpoint.healthy and s.settled_inflight() == 0
    finally:
        s.close()


def test_engine_closing_after_each_keepalive_response_has_no_errors(one_pool):
    """Each response says ``Connection: keep-alive`` and the engine closes the socket right
    after it (aio-libs/aiohttp#7297): every request still succeeds, one generation each."""
    s = one_pool
    rng = random.Random(7297)
    s.fake.script({"fault": "close_after_response", "count": 30})
    for i in range(30):
        s.send(stream=i % 2 == 1)
        time.sleep(rng.uniform(0, 0.02))
    log = s.log()
    assert [e["fault"] for e in log] == ["close_after_response"] * 30
    assert all(e["outcome"] == "completed" for e in log)
    assert s.settled_metric("specgate_requests_total", 30, pool="plain", reason="plain_only", status="200") == 30
    assert s.endpoint.healthy and s.settled_inflight() == 0


def test_reset_on_a_reused_connection_is_resent_once_on_a_fresh_one(one_pool):
    """The engine resets every reused connection after reading the request (before any
    response byte): each such request is aborted by rid, then resent once on a new
    connection; the client sees 20 successes and the engine finished 20 generations."""
    s = one_pool
    s.fake.script({"fault": "reset", "reused_only": True, "count": 10})
    for i in range(20):
        s.send(stream=(i // 2) % 2 == 1)  # resets hit every other request: both kinds get them
    log = s.log()
    resets = [e for e in log if e["fault"] == "reset"]
    completed = [e for e in log if e["outcome"] == "completed"]
    assert len(resets) == 10 and all(e["reused_connection"] for e in resets)
    assert {e["stream"] for e in resets} == {True, False}
    assert len(completed) == 20 and len(log) == 30
    aborts = s.log("/abort_request")
    assert len(aborts) == 10
    for reset in resets:
        rid = reset["body"]["rid"]
        abort = next(a for a in aborts if a["body"] == {"rid": rid})
        resend = next(e for e in log if e["seq"] > reset["seq"] and e["body"]["rid"] == rid)
        assert reset["seq"] < abort["seq"] < resend["seq"]  # aborted before it is resent
        assert resend["outcome"] == "completed" and resend["reused_connection"] is False
    assert s.settled_metric("specgate_upstream_stale_connection_retries_total", 10, pool="plain") == 10
    assert s.settled_metric("specgate_requests_total", 20, pool="plain", reason="plain_only", status="200") == 20
    assert s.endpoint.healthy  # not a health signal
    assert s.settled_inflight() == 0


@pytest.mark.parametrize("stream", [False, True])
def test_second_connection_failure_is_502_upstream_connection_error(one_pool, stream):
    s = one_pool
    s.send(stream=False)  # leaves a pooled connection for the next request to reuse
    s.fake.script({"fault": "reset", "reused_only": True}, {"fault": "reset"})
    r = s.client.post(CHAT, json=body(stream))
    assert r.status_code == 502
    assert r.headers["content-type"] == "application/json"
    assert r.content == CONNECTION_FAILED
    log = s.log()
    assert [(e["fault"], e["reused_connection"]) for e in log[1:]] == [("reset", True), ("reset", False)]
    assert [a["body"]["rid"] for a in s.log("/abort_request")] == [log[1]["body"]["rid"]]
    assert s.settled_metric("specgate_upstream_stale_connection_retries_total", 1, pool="plain") == 1
    assert s.settled_metric("specgate_requests_total", 1, pool="plain", reason="plain_only", status="502") == 1
    assert not s.endpoint.healthy  # a fresh connection that breaks is a health signal
    assert s.settled_inflight() == 0
