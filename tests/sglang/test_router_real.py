"""The router in front of the real SGLang 0.5.23 CPU server: counts, framing, errors, aborts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml

from router.request.features import parse_chat, parse_completions
from tests.support import RouterServer, wait_until

pytestmark = pytest.mark.sglang

CONTEXT = 1024


@pytest.fixture(scope="module")
def real(cpu_server, tiny_model_dir: Path, tmp_path_factory):
    engine = cpu_server(["--served-model-name", "tiny-llama", "--context-length", str(CONTEXT)])
    cfg = tmp_path_factory.mktemp("router") / "router.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"name": "tiny-llama", "tokenizer": str(tiny_model_dir)},
        "limits": {"max_context_tokens": CONTEXT - 8, "default_max_tokens": 16},
        "pools": [{"name": "plain", "speculative": False, "endpoints": [engine.base_url]}],
        "routing": {"long_prompt_tokens": 512, "saturation": {"enter": 8, "exit": 6}},
        "scrape": {"interval_s": 0.25, "timeout_s": 5.0, "stale_after_s": 5.0},
        "server": {"log_requests": False},
    }))
    router = RouterServer(cfg).start(ready=True, timeout=30)
    yield router, engine
    router.stop()


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "def fibonacci(n):"}],
    [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Reverse a list."}],
    [{"role": "user", "content": [{"type": "text", "text": "import os"}, {"type": "text", "text": "import sys"}]}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
     {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"},
     {"role": "assistant", "content": "It is 21 C.", "tool_calls": None},
     {"role": "user", "content": "Thanks"}],
]


@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("with_tools", [False, True])
def test_router_count_equals_sglang_usage(real, i, with_tools):
    router, _ = real
    doc = {"model": "tiny-llama", "messages": CONVERSATIONS[i], "max_tokens": 1, "temperature": 0}
    if with_tools:
        doc["tools"] = TOOLS
    r = httpx.post(router.base_url + "/v1/chat/completions", json=doc, timeout=120)
    assert r.status_code == 200, r.text
    counted = router.state.runtime.counter.count(parse_chat(doc, max_n=8))
    assert counted == r.json()["usage"]["prompt_tokens"]


@pytest.mark.parametrize("prompt", ["def main():", ["for i in range(3):", "class A:\n    pass"]])
def test_completion_count_equals_sglang_usage(real, prompt):
    router, _ = real
    doc = {"model": "tiny-llama", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    r = httpx.post(router.base_url + "/v1/completions", json=doc, timeout=120)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]["prompt_tokens"]
    counted = router.state.runtime.counter.count(parse_completions(doc, max_n=8))
    if isinstance(prompt, str):
        assert counted == usage
    else:  # a batch: usage sums the prompts, the router sizes by the longest
        assert counted <= usage


def test_stream_framing_and_headers(real):
    router, _ = real
    doc = {"model": "tiny-llama", "messages": CONVERSATIONS[0], "max_tokens": 12, "temperature": 0,
           "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", router.base_url + "/v1/chat/completions", json=doc, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["x-specgate-pool"] == "plain" and r.headers["x-specgate-reason"] == "plain_only"
        raw = r.read()
    events = raw.rstrip(b"\n").split(b"\n\n")
    assert events[-1] == b"data: [DONE]"
    usage = json.loads(events[-2][6:])["usage"]
    assert usage["completion_tokens"] <= 12
    assert all(e.startswith(b"data: ") for e in events)


def test_overlength_refused_by_router_not_engine(real):
    router, _engine = real
    doc = {"model": "tiny-llama", "messages": [{"role": "user", "content": "x " * 2000}], "max_tokens": 4,
           "stream": True}
    r = httpx.post(router.base_url + "/v1/chat/completions", json=doc, timeout=60)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert router.metric("specgate_requests_total", pool="none", reason="context_cap", status="400") >= 1


def test_client_disconnect_aborts_on_the_engine(real):
    router, _engine = real
    before = router.metric("specgate_upstream_aborts_total", pool="plain")
    doc = {"model": "tiny-llama", "messages": CONVERSATIONS[0], "max_tokens": 900, "temperature": 0,
           "stream": True, "ignore_eos": True}
    with httpx.stream("POST", router.base_url + "/v1/chat/completions", json=doc, timeout=120) as r:
        it = r.iter_raw()
        for _ in range(3):
            next(it)
    wait_until(lambda: router.metric("specgate_upstream_aborts_total", pool="plain") != before, 10, "the abort",
               interval=0.1)
    assert router.metric("specgate_upstream_aborts_total", pool="plain") == before + 1
    assert sum(ep.inflight for ep in router.state.runtime.all_endpoints()) == 0
    # the engine is free again: a short request completes promptly
    t0 = time.monotonic()
    r = httpx.post(router.base_url + "/v1/chat/completions", json={**doc, "stream": False, "max_tokens": 2,
                                                                    "ignore_eos": False}, timeout=120)
    assert r.status_code == 200
    assert time.monotonic() - t0 < 30
