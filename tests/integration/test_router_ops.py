"""Operational behaviour: config reload, busy vs dead endpoints, connection ceilings."""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
import yaml

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import wait_until, write_router_yaml
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"


def body(**kw):
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], **kw}


def test_reload_applies_valid_changes_and_keeps_last_good(stack):
    doc = yaml.safe_load(stack.config_path.read_text())
    doc["routing"]["long_prompt_tokens"] = 5
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(1)
    assert stack.router.state.runtime.config.routing.long_prompt_tokens == 5
    r = stack.client.post(CHAT, json=body(max_tokens=2))
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "long_context")
    assert stack.router.metric("specgate_config_reloads_total", result="success") == 1
    # an invalid file is refused, counted, and the last good config stays
    doc["routing"]["saturation"]["exit"] = 99
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(2)
    assert stack.router.metric("specgate_config_reloads_total", result="failure") == 1
    assert stack.router.state.runtime.config.routing.saturation.exit == 6
    r = stack.client.post(CHAT, json=body(max_tokens=2))
    assert r.headers["x-specgate-reason"] == "long_context"


def test_reload_keeps_endpoint_state_and_inflight(stack):
    old = stack.router.state.runtime.endpoint(stack.spec.base_url)
    lease = old.lease()
    doc = yaml.safe_load(stack.config_path.read_text())
    doc["routing"]["saturation"] = {"enter": 1, "exit": 0}
    write_router_yaml(stack.config_path, doc)
    stack.router.wait_reloads(1)
    assert stack.router.state.runtime.config.routing.saturation.enter == 1
    assert stack.router.state.runtime.endpoint(stack.spec.base_url) is old
    r = stack.client.post(CHAT, json=body(max_tokens=2))
    assert r.headers["x-specgate-reason"] == "saturated"   # the held lease counts as load 1
    lease.release()
    lease.release()   # idempotent
    assert old.inflight == 0


def test_slow_metrics_do_not_eject_the_last_healthy_endpoint(stack):  # sgl-project/sglang#22511
    httpx.post(stack.plain.base_url + "/_fake/metrics", json={"delay_s": 1.0})  # > scrape timeout 0.5 s
    ep = stack.router.state.runtime.endpoint(stack.plain.base_url)
    assert wait_until(lambda: ep.consecutive_failures >= 5, timeout=15)   # many timed-out scrapes
    assert ep.healthy
    r = stack.client.post(CHAT, json=body(max_tokens=2, messages=[{"role": "user", "content": "x " * 1100}]))
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain"), (r.text, ep)
    assert stack.router.metric("specgate_scrape_failures_total", pool="plain", endpoint=stack.plain.base_url) >= 3


def test_dead_pool_recovers_after_restart(stack):  # sgl-project/sglang#7028
    port = stack.spec.port
    stack.spec.kill()
    assert wait_until(lambda: not stack.router.state.runtime.endpoint(stack.spec.base_url).healthy, timeout=5)
    r = stack.client.post(CHAT, json=body(max_tokens=2))
    assert (r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
        200, "plain", "spec_unhealthy")
    stack.spec = FakeServer(FakeConfig(model_name="tiny-llama", context_length=2048), port=port).start()
    assert wait_until(lambda: stack.router.state.runtime.endpoint(stack.spec.base_url).healthy, timeout=5)
    r = stack.client.post(CHAT, json=body(max_tokens=2))
    assert r.headers["x-specgate-pool"] == "spec"


def test_three_hundred_concurrent_streams_reach_the_engine(tmp_path, tokenizer_dir):  # vllm-project/production-stack#767
    stack = Stack(tmp_path, tokenizer_dir, **{"routing.saturation": {"enter": 1000, "exit": 999}})
    try:
        _three_hundred(stack)
    finally:
        stack.close()


def _three_hundred(stack):
    httpx.post(stack.spec.base_url + "/_fake/script", json={"chunk_delay_s": 2.0, "count": 300, "max_tokens": 6})
    peak = {"running": 0}

    async def run():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async def one():
                async with s.post(stack.router.base_url + CHAT, json=body(max_tokens=6, stream=True)) as r:
                    assert r.status == 200
                    return await r.read()

            async def watch():
                for _ in range(200):
                    async with s.get(stack.spec.base_url + "/_fake/state") as r:
                        st = await r.json()
                    peak["running"] = max(peak["running"], len(st["running"]))
                    await asyncio.sleep(0.1)

            w = asyncio.create_task(watch())
            results = await asyncio.gather(*(one() for _ in range(300)))
            w.cancel()
            return results

    results = asyncio.run(run())
    assert all(r.endswith(b"data: [DONE]\n\n") for r in results)
    assert peak["running"] >= 290, peak   # not a plateau at 100 (aiohttp/httpx default pools)
    assert stack.settled_inflight() == 0
