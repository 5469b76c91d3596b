"""Model names, aliases and LoRA adapters through the router on real HTTP (fake SGLang engines).

The speculative fake runs without LoRA; the plain fake has adapter ``sql`` (``--lora-paths
sql=/adapters/sql``) and lists it in ``/v1/models``; both parse ``model`` by SGLang 0.5.23's
rules (``serving/fake_sglang/lora.py``), so an adapter request on the speculative engine, or an
alias with a colon forwarded as is, would get SGLang's 400.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import wait_until
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer
from tests.support.stack import spec_fake_config

CHAT = "/v1/chat/completions"


def chat(model: str | None = "tiny-llama", **kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **kw}
    if model is not None:
        doc["model"] = model
    return doc


class LoraStack:
    """spec (no LoRA), plain (adapter ``sql``) and, with ``wrong``, a second plain endpoint whose
    engine serves another model; the router has alias ``tl:8b``."""

    def __init__(self, tmp: Path, tokenizer: Path, *, wrong: bool = False, spec_lora: bool = False) -> None:
        lora = {"enable_lora": True, "lora_paths": ("sql=/adapters/sql",)} if spec_lora else {}
        self.spec = FakeServer(spec_fake_config(tokenizer, **lora)).start()
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096, tokenizer_path=str(tokenizer),
                                           enable_lora=True, lora_paths=("sql=/adapters/sql",))).start()
        self.wrong = FakeServer(FakeConfig(model_name="other-model", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start() if wrong else None
        doc = router_config(tokenizer, self.spec.base_url, self.plain.base_url, **{"model.aliases": ["tl:8b"]})
        if self.wrong is not None:
            doc["pools"][1]["endpoints"].append(self.wrong.base_url)
        self.router = RouterServer(write_router_yaml(tmp / "router.yaml", doc)).start()
        good = [self.spec.base_url, self.plain.base_url]
        wait_until(lambda: all(self.router.state.runtime.endpoint(u).healthy for u in good), 15,
                   "the fake endpoints to become healthy")
        if self.wrong is not None:
            wait_until(lambda: self.router.state.runtime.endpoint(self.wrong.base_url).identity_error is not None, 15,
                       "the wrong engine's model list to be read")
        self.client = self.router.client

    def requests(self, fake: FakeServer, prefix: str = "/v1/") -> list[dict[str, Any]]:
        """What ``fake`` received on paths under ``prefix`` other than the router's ``/v1/models`` reads."""
        log = httpx.get(fake.base_url + "/_fake/requests").json()["requests"]
        return [r for r in log if r["path"].startswith(prefix) and r["path"] != "/v1/models"]

    def close(self) -> None:
        self.router.stop()
        for fake in (self.spec, self.plain, self.wrong):
            if fake is not None:
                fake.stop()


@pytest.fixture
def lora(tmp_path: Path, tokenizer_dir: Path) -> Iterator[LoraStack]:
    s = LoraStack(tmp_path, tokenizer_dir)
    try:
        yield s
    finally:
        s.close()



def test_models_list_and_retrieve_with_the_sdk(lora):
    client = lora.router.openai_client()
    cards = {m.id: m for m in client.models.list().data}
    assert list(cards) == ["tiny-llama", "tl:8b", "sql"]
    assert (cards["tl:8b"].root, getattr(cards["tl:8b"], "parent", None)) == ("tiny-llama", None)
    assert (cards["sql"].root, getattr(cards["sql"], "parent", None)) == ("/adapters/sql", "tiny-llama")
    for name in ("tiny-llama", "tl:8b", "sql", "tiny-llama:sql"):
        card = client.models.retrieve(name)
        assert (card.id, card.object) == (name, "model")
    assert client.models.retrieve("tiny-llama").model_dump() == cards["tiny-llama"].model_dump()
    junk = f"junk-{uuid.uuid4()}"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve(junk)
    r = lora.client.get(f"/v1/models/{junk}")
    assert r.status_code == 404
    assert r.json() == {"error": {"message": f"The model '{junk}' does not exist", "type": "invalid_request_error",
                                  "param": "model", "code": "model_not_found"}}
    assert lora.client.get("/v1/models/tiny-llama:nope").status_code == 404
    assert lora.requests(lora.spec) == [] and lora.requests(lora.plain) == []  # answered by the router


@pytest.mark.parametrize("stream", [False, True])
def test_adapter_requests_go_only_to_the_engine_with_the_adapter(lora, stream):
    for doc in (chat("tiny-llama:sql", stream=stream), chat(lora_path="sql", stream=stream)):
        r = lora.client.post(CHAT, json=doc)
        assert r.status_code == 200, r.text
        assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "lora_adapter")
    sent = [(e["body"]["model"], e["body"].get("lora_path"), e["lora"]) for e in lora.requests(lora.plain)]
    assert sent == [("tiny-llama:sql", None, "sql"), ("tiny-llama", "sql", "sql")]
    assert lora.requests(lora.spec) == []


def test_alias_with_a_colon_is_rewritten_and_served(lora):
    r = lora.client.post(CHAT, json=chat("tl:8b", temperature=0))
    assert r.status_code == 200, r.text
    assert r.headers["x-specgate-pool"] == "spec"
    assert [e["body"]["model"] for e in lora.requests(lora.spec)] == ["tiny-llama"]


def test_unknown_names_and_adapters_are_404_with_no_engine_call(lora):
    for doc, param in ((chat("tiny-llama:nope"), "model"), (chat("gpt-4o"), "model"), (chat("tl:8b:nope"), "model"),
                       (chat(lora_path="nope"), "lora_path")):
        r = lora.client.post(CHAT, json=doc)
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "model_not_found", param)
        assert r.headers["x-specgate-reason"] == "model_not_found"
    for path, doc in (("/v1/completions", {"model": "tiny-llama:nope", "prompt": "hi", "max_tokens": 2}),
                      ("/v1/completions", {"model": "gpt-4o", "prompt": "hi", "max_tokens": 2})):
        assert lora.client.post(path, json=doc).status_code == 404
    assert lora.requests(lora.spec) == [] and lora.requests(lora.plain) == []


def test_sdk_chat_on_the_model_and_the_adapter(lora):
    client = lora.router.openai_client()
    base = client.chat.completions.create(model="tiny-llama", max_tokens=4, temperature=0,
                                          messages=[{"role": "user", "content": "hi"}])
    adapted = client.chat.completions.create(model="tiny-llama:sql", max_tokens=4,
                                             messages=[{"role": "user", "content": "hi"}])
    assert base.choices[0].message.content and adapted.choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="sql", max_tokens=4, stream=True, messages=[{"role": "user", "content": "hi"}]) if c.choices)
    assert streamed == adapted.choices[0].message.content
    assert [e["body"]["model"] for e in lora.requests(lora.plain)] == ["tiny-llama:sql", "tiny-llama:sql"]
    ready = lora.client.get("/ready").json()["pools"]
    assert (ready["plain"]["lora_adapters"], ready["spec"]["lora_adapters"]) == (["sql"], [])


def test_a_speculative_pool_with_the_adapter_takes_adapter_requests(tmp_path, tokenizer_dir):
    s = LoraStack(tmp_path, tokenizer_dir, spec_lora=True)
    try:
        r = s.client.post(CHAT, json=chat("tiny-llama:sql", temperature=0))
        assert r.status_code == 200 and (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
            "spec", "speculative"), r.text
        assert [e["lora"] for e in s.requests(s.spec)] == ["sql"]
    finally:
        s.close()


def test_endpoint_serving_another_model_is_not_routed_to(tmp_path, tokenizer_dir):
    s = LoraStack(tmp_path, tokenizer_dir, wrong=True)
    try:
        assert s.wrong is not None
        for _ in range(6):
            r = s.client.post(CHAT, json=chat(), headers={"x-specgate-speculation": "off"})
            assert r.status_code == 200 and r.headers["x-specgate-pool"] == "plain", r.text
        assert len(s.requests(s.plain)) == 6 and s.requests(s.wrong) == []
        ready = s.client.get("/ready").json()["pools"]["plain"]
        assert ready["wrong_model"] == {s.wrong.base_url: "serves other-model, not tiny-llama"}
        assert ready["healthy_endpoints"] == 1
    finally:
        s.close()


def test_pass_through_names_are_the_engines_own(tmp_path, tokenizer_dir):
    plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096, tokenizer_path=str(tokenizer_dir))).start()
    embed = FakeServer(FakeConfig(model_name="bge", is_embedding=True, tokenizer_path=str(tokenizer_dir))).start()
    doc = router_config(tokenizer_dir, None, plain.base_url)
    doc["pools"].append({"name": "embed", "speculative": False, "endpoints": [embed.base_url], "serves": ["embeddings"]})
    router = RouterServer(write_router_yaml(tmp_path / "router.yaml", doc)).start()
    try:
        wait_until(lambda: router.state.runtime.endpoint(embed.base_url).served_models == frozenset({"bge"}), 15,
                   "the embedding engine's model list")
        assert [m["id"] for m in router.client.get("/v1/models").json()["data"]] == ["tiny-llama", "bge"]
        assert router.client.get("/v1/models/bge").json()["id"] == "bge"
        assert router.client.post("/v1/embeddings", json={"model": "bge", "input": "hi"}).status_code == 200
        r = router.client.post("/v1/embeddings", json={"model": "junk", "input": "hi"})
        assert r.status_code == 404 and (r.json()["error"]["code"], r.json()["error"]["param"]) == (
            "model_not_found", "model")
        r = router.client.post("/v1/embeddings", json={"model": "tiny-llama", "input": "hi"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "model_not_supported"
        log = httpx.get(embed.base_url + "/_fake/requests").json()["requests"]
        assert [e["body"]["model"] for e in log if e["path"] == "/v1/embeddings"] == ["bge"]
    finally:
        router.stop()
        plain.stop()
        embed.stop()
