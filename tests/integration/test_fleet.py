"""Several models behind one router on real HTTP (``models:``, router/state/fleet.py): each model with
its own speculative and plain fake SGLang engines, the client picking the model by ``model``.

Model ``tiny-llama`` (alias ``tl``; adapter ``sql`` on its plain engine) and model ``other-model``
(alias ``om:7b``, a colon that SGLang would split) each have a spec and a plain pool; every fake
serves its own model's name, so a request that reached another model's engine would be refused
there (and the router's identity check would not admit an engine serving the wrong name).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import wait_until
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer
from tests.support.stack import spec_fake_config

CHAT = "/v1/chat/completions"
A, B, C = "tiny-llama", "other-model", "third-model"


def chat(model: str | None, **kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"max_tokens": 8, "temperature": 0, "messages": [{"role": "user", "content": "hi"}], **kw}
    if model is not None:
        doc["model"] = model
    return doc


def model_entry(doc: dict[str, Any], name: str, aliases: list[str], prefix: str, spec: str | None,
                plain: str) -> dict[str, Any]:
    """A ``models:`` entry from the tests' one-model document, its pools named ``<prefix>spec``
    and ``<prefix>plain``."""
    pools = []
    for pool in copy.deepcopy(doc["pools"]):
        url = spec if pool["name"] == "spec" else plain
        if url is None:
            continue
        pools.append({**pool, "name": prefix + pool["name"], "endpoints": [url]})
    return {**copy.deepcopy(doc["model"]), "name": name, "aliases": aliases, "limits": copy.deepcopy(doc["limits"]),
            "pools": pools, "routing": copy.deepcopy(doc["routing"])}


class FleetStack:
    """Two models, each with a spec and a plain fake, behind one router."""

    def __init__(self, tmp: Path, tokenizer: Path, **overrides: Any) -> None:
        self.tokenizer = tokenizer
        tok = str(tokenizer)
        self.fakes: dict[str, FakeServer] = {
            "spec": FakeServer(spec_fake_config(tokenizer)).start(),
            "plain": FakeServer(FakeConfig(model_name=A, context_length=4096, tokenizer_path=tok,
                                           enable_lora=True, lora_paths=("sql=/adapters/sql",))).start(),
            "b-spec": FakeServer(FakeConfig(model_name=B, context_length=2048, tokenizer_path=tok,
                                            speculative_algorithm="EAGLE3", speculative_num_steps=3,
                                            speculative_eagle_topk=1, speculative_num_draft_tokens=4,
                                            spec_accept_length=2.5)).start(),
            "b-plain": FakeServer(FakeConfig(model_name=B, context_length=4096, tokenizer_path=tok)).start(),
        }
        self.base = router_config(tokenizer, self.fakes["spec"].base_url, self.fakes["plain"].base_url, **overrides)
        self.doc = {k: v for k, v in self.base.items() if k not in ("model", "limits", "pools", "routing")}
        self.doc["models"] = [
            model_entry(self.base, A, ["tl"], "", self.fakes["spec"].base_url, self.fakes["plain"].base_url),
            model_entry(self.base, B, ["om:7b"], "b-", self.fakes["b-spec"].base_url, self.fakes["b-plain"].base_url)]
        self.path = write_router_yaml(tmp / "router.yaml", self.doc)
        self.router = RouterServer(self.path).start()
        self.client = self.router.client
        self.wait_healthy()

    def wait_healthy(self) -> None:
        wait_until(lambda: all(ep.healthy for ep in self.router.state.fleet.endpoints()), 15,
                   "every model's endpoints to become healthy")

    def sent(self, pool: str) -> list[dict[str, Any]]:
        """The generation requests the fake of ``pool`` received (the router's probes excluded)."""
        log = httpx.get(self.fakes[pool].base_url + "/_fake/requests").json()["requests"]
        return [r for r in log if r["path"] == CHAT]

    def script(self, pool: str, **behaviour: Any) -> None:
        r = httpx.post(self.fakes[pool].base_url + "/_fake/script", json=[behaviour])
        assert r.status_code == 200, r.text

    def rewrite(self, models: list[dict[str, Any]]) -> None:
        doc = {**self.doc, "models": models}
        write_router_yaml(self.path, doc)

    def close(self) -> None:
        self.router.stop()
        for fake in self.fakes.values():
            fake.stop()


@pytest.fixture
def fleet(tmp_path: Path, tokenizer_dir: Path) -> Iterator[FleetStack]:
    s = FleetStack(tmp_path, tokenizer_dir)
    try:
        yield s
    finally:
        s.close()



def test_models_list_and_retrieve_show_both_models(fleet):
    client = fleet.router.openai_client()
    cards = {m.id: m for m in client.models.list().data}
    assert list(cards) == [A, "tl", "sql", B, "om:7b"]
    assert (cards["tl"].root, cards["om:7b"].root) == (A, B)
    assert (cards["sql"].root, getattr(cards["sql"], "parent", None)) == ("/adapters/sql", A)
    for name in (A, "tl", "sql", f"{A}:sql", "tl:sql", B, "om:7b"):
        assert client.models.retrieve(name).id == name
    assert getattr(client.models.retrieve("tl:sql"), "parent", None) == A
    for missing in (f"{B}:sql", "gpt-4o"):
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve(missing)
    ready = fleet.client.get("/ready").json()
    assert ready["models"] == {A: {"ready": True, "pools": ["spec", "plain"]},
                               B: {"ready": True, "pools": ["b-spec", "b-plain"]}}
    # each endpoint is checked against its own model's name (B's engines serve other-model)
    assert {p: v["wrong_model"] for p, v in ready["pools"].items()} == {
        p: {} for p in ("spec", "plain", "b-spec", "b-plain")}


def test_chat_on_each_model_lands_on_its_own_pools_only(fleet):
    client = fleet.router.openai_client()
    for model, pools, forwarded in ((A, {"spec", "plain"}, A), ("tl", {"spec", "plain"}, A),
                                    (B, {"b-spec", "b-plain"}, B), ("om:7b", {"b-spec", "b-plain"}, B)):
        raw = client.chat.completions.with_raw_response.create(**chat(model))
        assert raw.headers["x-specgate-pool"] in pools, (model, raw.headers["x-specgate-pool"])
        assert raw.parse().choices[0].message.content
    a_bodies = [r["body"]["model"] for p in ("spec", "plain") for r in fleet.sent(p)]
    b_bodies = [r["body"]["model"] for p in ("b-spec", "b-plain") for r in fleet.sent(p)]
    assert a_bodies == [A, A] and b_bodies == [B, B]  # aliases rewritten to their model's name
    m = fleet.router.metric
    assert sum(m("specgate_requests_total", model=A, pool=p, reason=r, status="200")
               for p in ("spec", "plain") for r in ("speculative", "plain_only")) == 2
    assert sum(m("specgate_requests_total", model=B, pool=p, reason=r, status="200")
               for p in ("b-spec", "b-plain") for r in ("speculative", "plain_only")) == 2


def test_adapter_of_model_a_and_unknown_names(fleet):
    r = fleet.client.post(CHAT, json=chat(f"{A}:sql"))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "lora_adapter")
    assert [(e["body"]["model"], e["lora"]) for e in fleet.sent("plain")] == [(f"{A}:sql", "sql")]
    for model in ("gpt-4o", f"{B}:sql", "om:7b:x"):
        r = fleet.client.post(CHAT, json=chat(model))
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "model_not_found", "model")
    assert fleet.router.metric("specgate_requests_total", model="none", pool="none", reason="model_not_found",
                               status="404") == 3
    assert [p for p in fleet.fakes if fleet.sent(p) and p != "plain"] == []
    assert len(fleet.sent("plain")) == 1  # no engine call for the unknown names


def test_no_model_goes_to_the_first_model(fleet):
    r = fleet.client.post(CHAT, json=chat(None))
    assert r.status_code == 200 and r.headers["x-specgate-pool"] in {"spec", "plain"}, r.text


def _open_stream(client: httpx.Client, model: str) -> tuple[Any, Any, Iterator[str]]:
    cm = client.stream("POST", CHAT, json=chat(model, stream=True, max_tokens=24))
    resp = cm.__enter__()
    assert resp.status_code == 200
    lines = resp.iter_lines()
    assert next(line for line in lines if line.startswith("data: "))  # the stream is under way
    return cm, resp, lines


def test_reload_removes_a_model_while_streams_run_then_adds_one(fleet, tokenizer_dir):
    for pool in fleet.fakes:  # every stream takes ~24 x 0.05 s, past the reload
        fleet.script(pool, chunk_delay_s=0.05, count=1)
    state = fleet.router.state
    ep_a = state.fleet.runtime(A).endpoint(fleet.fakes["plain"].base_url)
    b_endpoints = list(state.fleet.runtime(B).all_endpoints())
    with httpx.Client(base_url=fleet.router.base_url, timeout=30) as client:
        streams = [_open_stream(client, A), _open_stream(client, B)]
        fleet.rewrite([fleet.doc["models"][0]])  # model B leaves
        fleet.router.wait_reloads(1)
        assert (state.reloads_ok, state.reloads_failed) == (1, 0)
        assert list(state.fleet.runtimes) == [A]
        assert sum(ep.inflight for ep in state.fleet.endpoints()) == 1  # A's stream, still running
        assert sum(ep.inflight for ep in b_endpoints) == 1  # B's, on the runtime the reload dropped
        for cm, resp, lines in streams:
            rest = [line for line in lines if line]
            assert rest[-1] == "data: [DONE]" and len(rest) >= 24  # both streams complete, B's on its retired runtime
            cm.__exit__(None, None, None)
    wait_until(lambda: sum(ep.inflight for ep in b_endpoints) == 0, 5, "B's stream to release its lease")
    assert state.fleet.runtime(A).endpoint(fleet.fakes["plain"].base_url) is ep_a  # A's endpoints kept
    r = fleet.client.post(CHAT, json=chat(B))
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert [m["id"] for m in fleet.client.get("/v1/models").json()["data"]] == [A, "tl", "sql"]
    # a new model C, with its own plain engine
    c_fake = FakeServer(FakeConfig(model_name=C, context_length=4096, tokenizer_path=str(tokenizer_dir))).start()
    fleet.fakes["c-plain"] = c_fake
    c = model_entry(fleet.base, C, [], "c-", None, c_fake.base_url)
    fleet.rewrite([fleet.doc["models"][0], c])
    fleet.router.wait_reloads(2)
    assert list(state.fleet.runtimes) == [A, C]
    fleet.wait_healthy()
    r = fleet.client.post(CHAT, json=chat(C))
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "c-plain", r.text
    assert [e["body"]["model"] for e in fleet.sent("c-plain")] == [C]
    r = fleet.client.post(CHAT, json=chat(A))
    assert r.status_code == 200 and r.headers["x-specgate-pool"] in {"spec", "plain"}
    assert yaml.safe_load(fleet.path.read_text())["models"][1]["name"] == C


def test_admin_overrides_apply_to_every_model(tmp_path, tokenizer_dir):
    s = FleetStack(tmp_path, tokenizer_dir, auth={"admin_api_key": "admin-key-1"})
    try:
        admin = {"authorization": "Bearer admin-key-1"}
        r = s.client.put("/admin/config", headers=admin, json={"routing": {"long_prompt_tokens": 5}})
        assert r.status_code == 200, r.text
        view = r.json()
        assert {name: m["effective"]["routing"]["long_prompt_tokens"] for name, m in view["models"].items()} == {
            A: 5, B: 5}
        assert view["overrides"] == {"routing": {"long_prompt_tokens": 5}}
        for model, plain in ((A, "plain"), (B, "b-plain")):  # every prompt is long now: the plain pools
            r = s.client.post(CHAT, json=chat(model))
            assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (plain, "long_context"), r.text
        # checked against each model's routing: B's saturation.enter is 8 too, so 9 breaks both; name it
        r = s.client.put("/admin/config", headers=admin, json={"routing": {"saturation": {"exit": 9}}})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(f"model {A}: "), r.text
        cleared = s.client.delete("/admin/config", headers=admin).json()["models"]
        assert {name: m["effective"]["routing"]["long_prompt_tokens"] for name, m in cleared.items()} == {
            A: 1024, B: 1024}
    finally:
        s.close()
