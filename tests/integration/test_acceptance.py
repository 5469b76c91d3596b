"""Acceptance signals that stay true: idle gauges, temperature classes, recovery of a bypassed pool.

The fake's ``decoding_gauges`` publish a value only while it generates, as SGLang 0.5.23 does
with ``sglang:spec_accept_length`` (it keeps the last value while idle).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support import wait_until
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"


@pytest.fixture()
def stack(tmp_path, tokenizer_dir):
    # gamma 3 (K = 4), c 0.05: S = tau / 1.15, bypass below 1.0, resume at >= 1.05
    s = Stack(tmp_path, tokenizer_dir, **{"routing.min_flip_interval_s": 0,
                                           "routing.acceptance": {"max_age_s": 1.5, "weight": 1.0}})
    yield s
    s.close()


def chat(stack, temperature=None):
    doc = {"model": "tiny-llama", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    if temperature is not None:
        doc["temperature"] = temperature
    r = stack.client.post(CHAT, json=doc)
    assert r.status_code == 200, r.text
    return r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]


def spec_pool(stack):
    return stack.router.state.runtime.pools[0]


def decoding(stack, tau):
    r = httpx.post(stack.spec.base_url + "/_fake/metrics", json={"decoding_gauges": {"spec_accept_length": tau}})
    assert r.status_code == 200, r.text


def rounds(stack, n=3):
    """Wait for ``n`` scrape rounds of the spec endpoint."""
    ep = stack.router.state.runtime.endpoint(stack.spec.base_url)
    for _ in range(n):
        seen = ep.scraped_at
        assert wait_until(lambda seen=seen: ep.scraped_at != seen)


def test_a_gauge_that_moves_while_the_engine_idles_is_not_a_measurement(stack):
    assert chat(stack, 0) == ("spec", "speculative")
    rounds(stack)
    httpx.post(stack.spec.base_url + "/_fake/metrics", json={"gauges": {"spec_accept_length": 1.0}})
    rounds(stack)
    assert spec_pool(stack).bypass.low_classes() == frozenset()
    assert chat(stack, 0) == ("spec", "speculative")


def test_low_acceptance_is_per_temperature_class_and_a_bypassed_pool_recovers(stack):
    decoding(stack, 1.0)                          # the drafter does badly on what it decodes now
    assert chat(stack) == ("spec", "speculative")  # sampled (no temperature): unknown, so measured
    assert wait_until(lambda: spec_pool(stack).bypass.low_classes() == {"sampled"})
    assert chat(stack) == ("plain", "low_acceptance")
    assert chat(stack, 0) == ("spec", "speculative")   # greedy traffic is judged on its own
    ready = stack.client.get("/ready").json()["pools"]["spec"]
    assert ready["low_acceptance_classes"] == ["sampled"]
    assert ready["accept_length_estimate"]["sampled"] == pytest.approx(1.0)
    assert ready["signal_age_s"]["acceptance_sampled"] >= 0
    # The engine accepts well again, but its gauge stays at 1.0 while no request reaches it.
    decoding(stack, 2.5)
    start = time.monotonic()
    seen = []
    while time.monotonic() - start < 6.0:
        seen.append(chat(stack))
        if seen[-3:] == [("spec", "speculative")] * 3:
            break
        time.sleep(0.05)
    recovered_after = time.monotonic() - start
    assert seen[-3:] == [("spec", "speculative")] * 3, seen
    assert seen[0] == ("plain", "low_acceptance")
    # back within max_age_s (1.5 s) plus a few scrape rounds of 0.05 s
    assert recovered_after < 1.5 + 1.0, recovered_after
    assert spec_pool(stack).bypass.low_classes() == frozenset()


@pytest.mark.parametrize(("default", "header", "forwarded"), [(256, "256", 256), (None, "engine", None)])
def test_the_default_output_budget_is_visible_and_can_be_the_engines(tmp_path, tokenizer_dir, default, header,
                                                                      forwarded):
    s = Stack(tmp_path, tokenizer_dir, **{"limits.default_max_tokens": default})
    try:
        doc = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}]}
        r = s.client.post(CHAT, json=doc)
        assert r.status_code == 200, r.text
        assert r.headers["x-specgate-max-tokens"] == header
        sent = s.backend_requests(s.plain if r.headers["x-specgate-pool"] == "plain" else s.spec)[-1]["body"]
        assert sent.get("max_tokens") == forwarded
        r = s.client.post(CHAT, json={**doc, "max_tokens": 3})
        assert "x-specgate-max-tokens" not in r.headers
    finally:
        s.close()
