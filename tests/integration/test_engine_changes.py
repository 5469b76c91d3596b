"""Engines that change behind the same address, through the router on real HTTP (fake SGLang
engines relaunched on their port with ``/_fake/relaunch``, router/state/identity.py,
router/state/engine_limits.py): a smaller or bigger context, another model, an adapter loaded at run
time. Each change must be seen within one scrape round (:meth:`Engines.settle`); the fakes' access logs say what reached
which engine."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import wait_until
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer
from tests.support.stack import spec_fake_config

CHAT = "/v1/chat/completions"
MODEL = "tiny-llama"


class Engines:
    """``spec`` (one or two EAGLE-3 fakes, configured cap 2048) and ``plain`` (4096) behind the
    router; the long-prompt bypass is off (4096), so length alone decides between pools."""

    def __init__(self, tmp: Path, tokenizer: Path, *, specs: int = 1, lora: bool = False) -> None:
        self.specs = [FakeServer(spec_fake_config(tokenizer)).start() for _ in range(specs)]
        self.plain = FakeServer(FakeConfig(model_name=MODEL, context_length=4096, tokenizer_path=str(tokenizer),
                                           enable_lora=lora)).start()
        doc = router_config(tokenizer, self.specs[0].base_url, self.plain.base_url,
                            **{"routing.long_prompt_tokens": 4096})
        doc["pools"][0]["endpoints"] = [s.base_url for s in self.specs]
        self.router = RouterServer(write_router_yaml(tmp / "router.yaml", doc)).start()
        wait_until(lambda: all(e.healthy and e.served_models is not None for e in self.router.state.fleet.endpoints()),
                   15, "the endpoints healthy, their model lists read")
        self.client = self.router.client

    def settle(self) -> None:
        """Wait for the change to be seen: one scrape round, plus the one in flight at the
        relaunch, whose request may have met the reset connection (then the next good scrape
        re-reads the identity for the ``reconnect``)."""
        self.router.wait_scrape_rounds(2)

    def rechecks(self, trigger: str) -> float:
        """``specgate_engine_rechecks_total`` of the spec pool for ``trigger`` or ``reconnect``."""
        return sum(self.router.metric("specgate_engine_rechecks_total", pool="spec", trigger=t)
                   for t in (trigger, "reconnect"))

    def chats(self, fake: FakeServer) -> int:
        """Chat requests ``fake`` received since its (re)launch."""
        return len(fake.requests(CHAT)["requests"])

    def close(self) -> None:
        self.router.stop()
        for fake in (*self.specs, self.plain):
            fake.stop()


@pytest.fixture
def one_spec(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Engines]:
    e = Engines(tmp_path, tokenizer_dir)
    try:
        yield e
    finally:
        e.close()


def long_chat(tokenizer_dir: Path, target: int = 1341, **kw: Any) -> dict[str, Any]:
    """A chat whose prompt counts ``target`` tokens with the test tokenizer (as router and fakes count)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    words = target // 4
    for _ in range(200):
        messages = [{"role": "user", "content": " ".join(f"w{i % 97}" for i in range(words))}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        n = len(tok.encode(text, add_special_tokens=False))  # SGLang's render-then-encode
        if n == target:
            return {"model": MODEL, "max_tokens": 16, "messages": messages, **kw}
        if n < target - 3 or n > target + 3:
            words = max(1, words * target // n)
        else:
            words += 1 if n < target else -1
    raise AssertionError(f"no prompt of {target} tokens")


def test_an_engine_restarted_smaller_is_followed_down_and_back_up(one_spec, tokenizer_dir):
    e, spec = one_spec, one_spec.specs[0]
    body = long_chat(tokenizer_dir)
    r = e.client.post(CHAT, json=body)
    assert (r.status_code, r.headers["x-specgate-pool"], r.json()["usage"]["prompt_tokens"]) == (200, "spec", 1341)
    spec.relaunch(context_length=1024)  # the same port, a new process with --context-length 1024
    e.settle()
    assert e.router.pool("spec").limit == 1024
    assert e.router.metric("specgate_pool_context_limit_tokens", pool="spec") == 1024
    assert e.router.metric("specgate_pool_context_limit_changes_total", pool="spec", direction="down") == 1
    assert e.rechecks("context_length") == 1
    for stream in (False, True):
        r = e.client.post(CHAT, json={**body, "stream": stream})
        assert (r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
            200, "plain", "long_context"), r.text
    assert e.chats(spec) == 0  # the smaller engine got nothing it must refuse
    r = e.client.post(CHAT, json={"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "spec")
    ready = e.client.get("/ready").json()["pools"]["spec"]
    assert (ready["max_context_tokens"], ready["configured_max_context_tokens"],
            ready["engine_context_tokens"]) == (1024, 2048, {spec.base_url: 1024})
    spec.relaunch(context_length=8192)  # restarted bigger than the validated cap: back to the cap only
    e.settle()
    assert e.router.pool("spec").limit == 2048
    assert e.router.metric("specgate_pool_context_limit_changes_total", pool="spec", direction="up") == 1
    r = e.client.post(CHAT, json=body)
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "spec")


def test_when_no_engine_holds_it_any_more_the_router_refuses_cleanly(one_spec, tokenizer_dir):
    e = one_spec
    body = long_chat(tokenizer_dir)
    e.specs[0].relaunch(context_length=1024)
    e.plain.relaunch(context_length=1024, max_total_num_tokens=1 << 20)
    e.settle()
    for stream in (False, True):
        r = e.client.post(CHAT, json={**body, "stream": stream})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
        assert r.json()["error"]["message"].startswith("This model's maximum context length is 4096 tokens and "
                                                       "no pool can hold 1357 tokens")
    assert e.chats(e.specs[0]) == e.chats(e.plain) == 0


def test_a_kv_pool_shrunk_below_the_context_is_followed(one_spec, tokenizer_dir):
    e, spec = one_spec, one_spec.specs[0]
    spec.relaunch(max_total_num_tokens=1200)  # SGLang's scheduler would abort a 1341-token input
    e.settle()
    assert e.router.pool("spec").limit == 1200
    assert e.rechecks("kv_tokens") == 1
    r = e.client.post(CHAT, json=long_chat(tokenizer_dir))
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain")
    assert e.chats(spec) == 0


def test_an_address_reused_by_another_model_gets_no_request(tmp_path, tokenizer_dir):
    e = Engines(tmp_path, tokenizer_dir, specs=2)
    try:
        reused, good = e.specs
        short = [{"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": f"question {i}"}]}
                 for i in range(28)]
        for body in short[:16]:
            r = e.client.post(CHAT, json=body)
            assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "spec")
        assert e.chats(reused) > 0 and e.chats(good) > 0
        reused.relaunch(model_name="other-model")  # the pod IP now serves another model
        e.settle()
        ep = e.router.state.runtime.endpoint(reused.base_url)
        assert (ep.identity_error, ep.healthy) == ("serves other-model, not tiny-llama", False)
        for body in short[16:]:
            r = e.client.post(CHAT, json=body)
            assert (r.status_code, r.json()["model"]) == (200, MODEL)
        assert e.chats(reused) == 0
        ready = e.client.get("/ready").json()["pools"]["spec"]
        assert ready["unhealthy"] == {reused.base_url: {"reason": "identity_mismatch",
                                                        "detail": "serves other-model, not tiny-llama"}}
        assert ready["healthy_endpoints"] == 1
        assert e.router.metric("specgate_endpoints", pool="spec", state="identity_mismatch") == 1
        reused.relaunch(model_name=MODEL)  # the model changed back
        e.settle()
        assert ep.identity_error is None and ep.healthy
        assert e.rechecks("served_model") == 2
    finally:
        e.close()


def test_a_plain_engine_restarted_with_speculation_gets_no_request_until_it_runs_plain(one_spec, tokenizer_dir):
    """The plain pool's engine comes back speculating (a pod restarted with the speculative
    Deployment's flags): it would take prompts beyond a draft model's positions, so it is held
    out like another model's engine; back to plain, it serves again."""
    e, plain = one_spec, one_spec.plain
    body = long_chat(tokenizer_dir, target=2500)  # over the spec pool's 2048: only plain holds it
    r = e.client.post(CHAT, json=body)
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain")
    e.router.wait_scrape_rounds(2)  # a scrape saw the request counted: its reset tells the restart
    plain.relaunch(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                   speculative_num_draft_tokens=4)
    ep = e.router.state.runtime.endpoint(plain.base_url)
    wait_until(lambda: ep.identity_error is not None, 5, "the restart's /server_info read")
    # the counter that went back, then the new startup_time the re-read found
    assert e.router.metric("specgate_engine_rechecks_total", pool="plain", trigger="restart") == 2
    assert (ep.identity_error, ep.healthy) == ("runs speculative decoding (EAGLE3), but its pool is plain", False)
    ready = e.client.get("/ready").json()["pools"]["plain"]
    assert ready["unhealthy"] == {plain.base_url: {
        "reason": "identity_mismatch", "detail": "runs speculative decoding (EAGLE3), but its pool is plain"}}
    assert e.router.metric("specgate_endpoints", pool="plain", state="identity_mismatch") == 1
    r = e.client.post(CHAT, json=body)
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_healthy_upstream", r.text
    short = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    r = e.client.post(CHAT, json=short)
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "spec")
    assert e.chats(plain) == 0
    plain.relaunch(speculative_algorithm=None)
    wait_until(lambda: ep.healthy, 5, "the plain engine back in service")
    assert ep.identity_error is None
    r = e.client.post(CHAT, json=body)
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain")


def test_an_adapter_loaded_after_start_is_found_without_a_404(tmp_path, tokenizer_dir):
    e = Engines(tmp_path, tokenizer_dir, lora=True)
    try:
        def list_reads() -> int:
            return len(e.plain.requests("/v1/models")["requests"])

        r = e.client.post(CHAT, json={"model": f"{MODEL}:sql", "max_tokens": 4,
                                      "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        e.plain.relaunch(restart=False, lora_paths=("sql=/adapters/sql",))  # /load_lora_adapter
        reads = list_reads()
        # within a second of the refresh that answered the 404: the router waits for the rate
        # limit's window (engine_reads.MIN_REFRESH_S), reads again and finds it
        started = time.monotonic()
        r = e.client.post(CHAT, json={"model": f"{MODEL}:sql", "max_tokens": 4,
                                      "messages": [{"role": "user", "content": "hi"}]})
        assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain"), r.text
        assert e.plain.requests(CHAT)["requests"][-1]["lora"] == "sql"
        assert list_reads() == reads + 1
        assert time.monotonic() - started < 1.0 + 2.0  # the window, then one read (scrape.timeout_s)
        # unknown names sent together: one read for all of them, at most one a second
        bodies = [{"model": MODEL, "lora_path": name, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
                  for name in ("nope", "nope2", "nope3")]
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda b: e.client.post(CHAT, json=b), bodies))
        assert [(a.status_code, a.json()["error"]["param"]) for a in answers] == [(404, "lora_path")] * 3
        assert list_reads() == reads + 2
    finally:
        e.close()


def test_an_adapter_unloaded_after_the_router_read_it_is_404_model_not_found(tmp_path, tokenizer_dir):
    e = Engines(tmp_path, tokenizer_dir, lora=True)
    try:
        e.plain.relaunch(restart=False, lora_paths=("sql=/adapters/sql", "law=/adapters/law"))
        body = {"model": f"{MODEL}:law", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        assert e.client.post(CHAT, json=body).status_code == 200  # read on the unknown name: law is loaded
        e.plain.relaunch(restart=False, lora_paths=("sql=/adapters/sql",))  # /unload_lora_adapter law
        for stream in (False, True):
            r = e.client.post(CHAT, json={**body, "stream": stream})
            assert r.status_code == 404, r.text
            error = r.json()["error"]
            assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "model", "model_not_found")
            assert error["message"].startswith("The following requested LoRA adapters are not loaded: law")
    finally:
        e.close()
