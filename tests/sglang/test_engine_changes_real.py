"""The router in front of the real SGLang 0.5.23 CPU server, where the engine is part of the case:
per-chunk usage (``stream_options.continuous_usage_stats``) counted once, as JSON, and an engine
restarted with a smaller ``--context-length`` behind the same address followed down within a
scrape round (router/state/engine_limits.py) instead of forwarding what it must refuse.

One engine process at a time on one port: started with ``--context-length 2048``, stopped, and
started again on the same port with 1024. Each start takes 25-120 s on 2 cores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from serving.local import SGLangProcess, cpu_env, cpu_launch_args
from tests.support import RouterServer, free_port, wait_until

pytestmark = pytest.mark.sglang

CHAT = "/v1/chat/completions"
BIG, SMALL = 2048, 1024  # the engine's --context-length before and after its restart (tokens)


class RealStack:
    """One SGLang CPU engine on a fixed port behind the router (one plain pool, cap ``BIG``)."""

    def __init__(self, model_dir: Path, tmp: Path) -> None:
        self.model_dir, self.tmp, self.port = model_dir, tmp, free_port()
        self.engine = self.start_engine(BIG)
        try:
            self.router = self._start_router()
        except BaseException:
            self.engine.stop()
            raise

    def _start_router(self) -> RouterServer:
        cfg = self.tmp / "router.yaml"
        cfg.write_text(yaml.safe_dump({
            "model": {"name": "tiny-llama", "tokenizer": str(self.model_dir)},
            "limits": {"max_context_tokens": 4096, "default_max_tokens": 16},
            "pools": [{"name": "plain", "speculative": False, "max_context_tokens": BIG,
                       "endpoints": [self.engine.base_url]}],
            "routing": {"long_prompt_tokens": 512, "saturation": {"enter": 8, "exit": 6},
                        "learning": {"enabled": False}},
            "scrape": {"interval_s": 0.25, "timeout_s": 5.0, "stale_after_s": 5.0},
            "server": {"log_requests": False},
        }))
        return RouterServer(cfg).start(ready=True, timeout=60)

    def start_engine(self, context_length: int) -> SGLangProcess:
        args = ["--served-model-name", "tiny-llama", "--context-length", str(context_length)]
        engine = SGLangProcess(cpu_launch_args(self.model_dir, port=self.port, extra_args=args), port=self.port,
                               env=cpu_env(), log_path=self.tmp / f"sglang-{context_length}.log")
        engine.start(ready_timeout_s=300.0)
        return engine

    def close(self) -> None:
        self.router.stop()
        self.engine.stop()


@pytest.fixture(scope="module")
def real(sglang_installed: None, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    stack = RealStack(tiny_model_dir, tmp_path_factory.mktemp("engine-changes"))
    try:
        yield stack
    finally:
        stack.close()


def chat_of(model_dir: Path, target: int) -> dict[str, Any]:
    """A chat whose rendered prompt is ``target`` +- 2 tokens with the model's own tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    words = target // 2
    for _ in range(100):
        messages = [{"role": "user", "content": " ".join(f"w{i % 97}" for i in range(words))}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        n = len(tok.encode(text, add_special_tokens=False))  # SGLang's render-then-encode
        if abs(n - target) <= 2:
            return {"model": "tiny-llama", "messages": messages, "max_tokens": 8, "temperature": 0}
        words = max(1, words * target // n) if abs(n - target) > 20 else words + (1 if n < target else -1)
    raise AssertionError(f"no prompt of {target} tokens")


def events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON ``data:`` events of an SSE body (``[DONE]`` left out)."""
    out = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                out.append(json.loads(line[5:]))
    return out


@pytest.mark.parametrize("include_usage", [True, False])
def test_per_chunk_usage_counts_the_engines_last_value(real: RealStack, include_usage: bool) -> None:
    router = real.router
    before = router.metric("specgate_completion_tokens_total", pool="plain")
    options = {"continuous_usage_stats": True, **({"include_usage": True} if include_usage else {})}
    doc = {"model": "tiny-llama", "messages": [{"role": "user", "content": "def fibonacci(n):"}], "max_tokens": 12,
           "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": options}
    r = httpx.post(router.base_url + CHAT, json=doc, timeout=120)
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "plain"
    usages = [e["usage"] for e in events(r.content) if e.get("usage")]
    # SGLang writes usage on every chunk: more than one, the last one the request's 12 tokens
    assert len(usages) > 1 and usages[-1]["completion_tokens"] == 12
    assert sum(u["completion_tokens"] for u in usages) > 12
    assert wait_until(lambda: router.metric("specgate_completion_tokens_total", pool="plain") - before == 12, 10,
                      "12 tokens counted")
    router.wait_scrape_rounds(2)
    assert router.metric("specgate_completion_tokens_total", pool="plain") - before == 12  # the last, not the sum


def test_an_engine_restarted_smaller_is_followed_down(real: RealStack, tiny_model_dir: Path) -> None:
    router = real.router
    body = chat_of(tiny_model_dir, 1341)
    wait_until(lambda: router.pool("plain").limit == BIG, 10, "the engine's context read")
    r = httpx.post(router.base_url + CHAT, json=body, timeout=120)
    assert r.status_code == 200, r.text
    prompt = r.json()["usage"]["prompt_tokens"]
    assert SMALL < prompt < BIG
    real.engine.stop()
    real.engine = real.start_engine(SMALL)  # the same address, a new process with a smaller context
    assert wait_until(lambda: router.pool("plain").limit == SMALL, 30, "the smaller context noticed")
    assert router.metric("specgate_pool_context_limit_tokens", pool="plain") == SMALL
    assert router.metric("specgate_pool_context_limit_changes_total", pool="plain", direction="down") == 1
    ready = httpx.get(router.base_url + "/ready", timeout=10).json()["pools"]["plain"]
    assert (ready["max_context_tokens"], ready["configured_max_context_tokens"],
            ready["engine_context_tokens"]) == (SMALL, BIG, {real.engine.base_url: SMALL})
    for stream in (False, True):
        r = httpx.post(router.base_url + CHAT, json={**body, "stream": stream}, timeout=120)
        # the router's own refusal, before the engine: not SGLang's "The input (N tokens) is longer ..."
        assert r.status_code == 400, r.text
        assert r.headers["content-type"].startswith("application/json")
        assert r.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.post(router.base_url + CHAT, json={**body, "messages": [{"role": "user", "content": "hi"}]}, timeout=120)
    assert r.status_code == 200, r.text
