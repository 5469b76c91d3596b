"""The fake SGLang server driven by the SGLang-scheduler engine model (loadtests/sglang_sched.py)
over real HTTP: exact usage, the speculative details, the over-length refusal, and the
/metrics gauges following the engine while a request runs."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from loadtests.sglang_families import Roofline, SglangFamily
from loadtests.sglang_sched import SglangStepEngine, sglang_fake_config
from serving.fake_sglang import FakeServer
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"

#: 20 ms per target pass (weights only), 1 ms per drafter pass; KV 4,000 tokens plain.
FAMILY = SglangFamily(
    "http-test", "t", Roofline(hbm_bytes_per_s=1e12, peak_flops=1e30, weight_bytes=2e10, active_params=0.0,
                               kv_bytes_per_token=0.0, attn_flops_per_pair=0.0, launch_s=0.0,
                               draft_weight_bytes=1e9, draft_active_params=0.0),
    kv_tokens=4000, gamma=3, alpha_greedy=0.8, gauge_interval_steps=4)


@pytest.fixture(params=[False, True], ids=["plain", "spec"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    spec = bool(request.param)
    cfg = sglang_fake_config(FAMILY, spec, model_name="m", context_length=8192)
    server = FakeServer(cfg, step_engine=SglangStepEngine(FAMILY, spec, seed=3)).start()
    try:
        yield server
    finally:
        server.stop()


def _body(words: int, max_tokens: int, output: int, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": " ".join(["x"] * words)}],
            "fake_step": {"output_tokens": output}, **kw}


def _gauges(base_url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(base_url + "/metrics", timeout=5).text.splitlines():
        for name in ("num_running_reqs", "num_queue_reqs", "token_usage", "max_total_num_tokens"):
            if line.startswith(f"sglang:{name}{{"):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def _gauges_when(base_url: str, *, running: int, busy: bool) -> dict[str, float] | None:
    """The gauges once ``num_running_reqs`` is ``running`` (and, if ``busy``, KV is in use)."""
    g = _gauges(base_url)
    return g if g["num_running_reqs"] == running and (g["token_usage"] > 0 or not busy) else None


def test_a_request_gets_the_engines_tokens_and_the_gauges_follow_it(fake: FakeServer) -> None:
    spec = fake.config.speculative_algorithm is not None
    assert _gauges(fake.base_url)["max_total_num_tokens"] == (3000 if spec else 4000)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(httpx.post, fake.base_url + CHAT, json=_body(100, 200, 60, return_spec_tokens_details=True),
                          timeout=30)
        # while it decodes: one running request holding its prompt's KV and more
        g = wait_until(lambda: _gauges_when(fake.base_url, running=1, busy=True), 10,
                       "the gauges of a running request")
        prompt = 100 + 2  # the fake's simple count: 1 + words + 1
        assert g["num_queue_reqs"] == 0 and g["token_usage"] >= prompt / g["max_total_num_tokens"]
        r = fut.result()
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == 60 and body["usage"]["prompt_tokens"] == prompt
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"] == " ".join(f"tok{j}" for j in range(60))
    if spec:
        d = body["sglext"]["spec_tokens_details"]
        # 59 tokens after the prefill's first one, 1-4 per verify step
        steps = d["spec_verify_ct"]
        assert 15 <= steps <= 59 and 59 <= round(d["spec_accept_length"] * steps) <= 62
    # done: nothing running, and the finished request's KV is evictable cache, not in use
    g = wait_until(lambda: _gauges_when(fake.base_url, running=0, busy=False), 5, "idle gauges")
    assert g["token_usage"] == 0.0


def test_a_prompt_at_the_pools_edge_is_clipped_or_refused_as_its_decode_needs(fake: FakeServer) -> None:
    spec = fake.config.speculative_algorithm is not None
    words = 2990 if spec else 3990
    r = httpx.post(fake.base_url + CHAT, json=_body(words, 100, 5), timeout=10)
    if not spec:
        # the fake clips max_tokens to the pool (4000 - 3992 - 1 = 7): 3992 + 7 + 1 token fits
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 5
        return
    # clipped to 3000 - 2992 - 1 = 7, but a speculative decode step tops up 2 * (3 + 1) tokens
    assert r.status_code == 400
    assert "exceeds the maximum allowed length" in r.text
