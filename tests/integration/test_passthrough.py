"""Non-chat endpoints through the router: embeddings and rerank passed through to the pool that
serves them, unserved kinds refused with 404 ``unsupported_endpoint``, never the spec pool."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from router.config.tree import ConfigError, parse_config
from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, router_config, wait_until, write_router_yaml

EMBED = "/v1/embeddings"


class EmbedStack:
    """spec + plain generation fakes, an embedding fake, and the router."""

    def __init__(self, tmp: Path, tokenizer: Path) -> None:
        self.spec = FakeServer(FakeConfig(model_name="tiny-llama", tokenizer_path=str(tokenizer),
                                          speculative_algorithm="EAGLE3", speculative_num_steps=3,
                                          speculative_eagle_topk=1, speculative_num_draft_tokens=4)).start()
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start()
        self.embed = FakeServer(FakeConfig(model_name="embed-model", is_embedding=True)).start()
        path = write_router_yaml(tmp / "router.yaml",
                                 router_config(tokenizer, self.spec.base_url, self.plain.base_url))
        doc = yaml.safe_load(path.read_text())
        doc["pools"][1]["serves"] = ["generate", "score"]
        doc["pools"].append({"name": "embed", "speculative": False, "endpoints": [self.embed.base_url],
                             "serves": ["embeddings", "rerank"]})
        path.write_text(yaml.safe_dump(doc))
        self.router = RouterServer(path).start()
        wait_until(lambda: all(ep.healthy for ep in self.router.state.runtime.all_endpoints()), 15,
                   "the fakes to become healthy")
        self.client = httpx.Client(base_url=self.router.base_url, timeout=30)

    def log(self, fake: FakeServer, path: str) -> list[dict[str, Any]]:
        return [r for r in fake.requests(path)["requests"]]

    def close(self) -> None:
        self.client.close()
        self.router.stop()
        for f in (self.spec, self.plain, self.embed):
            f.stop()


@pytest.fixture
def es(tmp_path: Path, tokenizer_dir: Path, caplog: pytest.LogCaptureFixture) -> Iterator[EmbedStack]:
    caplog.set_level(logging.INFO)
    s = EmbedStack(tmp_path, tokenizer_dir)
    try:
        yield s
    finally:
        s.close()
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert tracebacks == []


def _error(resp: httpx.Response) -> tuple[int, str | None, str | None, str]:
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return resp.status_code, err["param"], err["code"], err["type"]


@pytest.mark.parametrize("value", [
    "hello",
    ["a", "b", "lorem " * 30000],
    [[101, 2023], [101]],
    [101, 2023, 7],
])
def test_embedding_input_shapes_are_passed_through(es: EmbedStack, value: Any) -> None:
    body = {"model": "embed-model", "input": value}
    resp = es.client.post(EMBED, json=body)
    assert resp.status_code == 200, resp.text
    assert (resp.headers["x-specgate-pool"], resp.headers["x-specgate-reason"]) == ("embed", "embeddings")
    n = 1 if isinstance(value, str) or isinstance(value[0], int) else len(value)
    assert [d["index"] for d in resp.json()["data"]] == list(range(n))
    (got,) = es.log(es.embed, EMBED)
    assert got["body"] == body  # forwarded unchanged
    assert es.log(es.spec, EMBED) == [] and es.log(es.plain, EMBED) == []
    assert es.router.settled_metric("specgate_requests_total", 1, pool="embed", reason="embeddings", status="200") == 1


def test_truncation_fields_are_forwarded_not_judged(es: EmbedStack) -> None:
    body = b'{"model":"embed-model","input":"' + b"lorem " * 20000 + b'","truncate_prompt_tokens":512}'
    resp = es.client.post(EMBED, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 200
    (got,) = es.log(es.embed, EMBED)
    assert got["body"]["truncate_prompt_tokens"] == 512


def test_a_4mb_response_is_relayed_byte_for_byte(es: EmbedStack) -> None:
    body = {"model": "embed-model", "input": ["a", "b", "c"], "dimensions": 70000}
    direct = httpx.post(es.embed.base_url + EMBED, json=body, timeout=30)
    resp = es.client.post(EMBED, json=body)
    assert resp.status_code == 200
    assert len(resp.content) > 4_000_000
    assert resp.content == direct.content  # the same bytes, floats not re-serialised
    assert resp.headers["content-length"] == str(len(direct.content))


@pytest.mark.parametrize("body", [
    {"model": "embed-model"},
    {"model": "embed-model", "input": []},
    {"model": "embed-model", "input": ""},
    {"model": "embed-model", "input": [1, "a"]},
    {"model": "embed-model", "input": [[1], []]},
    {"model": "embed-model", "input": {"text": "x"}},
    {"model": "embed-model", "input": 5},
])
def test_invalid_embedding_input_is_a_400_naming_input(es: EmbedStack, body: dict[str, Any]) -> None:
    assert _error(es.client.post(EMBED, json=body)) == (400, "input", "invalid_value", "invalid_request_error")
    assert es.log(es.embed, EMBED) == []


def test_generation_model_on_embeddings_is_a_400_naming_model(es: EmbedStack) -> None:
    resp = es.client.post(EMBED, json={"model": "tiny-llama", "input": "hi"})
    assert _error(resp) == (400, "model", "model_not_supported", "invalid_request_error")
    assert "messages" not in resp.json()["error"]["message"]
    assert es.log(es.embed, EMBED) == [] and es.log(es.plain, EMBED) == []


def test_engine_errors_come_back_normalised(es: EmbedStack) -> None:
    # the plain pool is configured for `score` but this fake has no /v1/score: its 404 is relayed
    resp = es.client.post("/v1/score", json={"model": "tiny-llama", "query": "q", "items": ["a"]})
    assert resp.status_code == 404 and resp.json()["error"]["type"] == "invalid_request_error"
    assert resp.headers["x-specgate-pool"] == "none"


def test_rerank_is_passed_through(es: EmbedStack) -> None:
    body = {"model": "embed-model", "query": "q", "documents": ["d1", "d2"]}
    resp = es.client.post("/v1/rerank", json=body)
    assert resp.status_code == 200 and resp.headers["x-specgate-pool"] == "embed"
    assert [r["index"] for r in resp.json()] == [0, 1]
    assert _error(es.client.post("/v1/rerank", json={"query": "q", "documents": []}))[:2] == (400, "documents")


def test_an_endpoint_no_pool_serves_is_a_404_unsupported_endpoint(es: EmbedStack) -> None:
    resp = es.client.post("/v1/classify", json={"model": "embed-model", "input": "hi"})
    assert _error(resp) == (404, None, "unsupported_endpoint", "invalid_request_error")
    assert orjson.loads(resp.content)["error"]["message"].startswith("/v1/classify is not served")


def test_embedding_traffic_never_touches_the_spec_pool(es: EmbedStack) -> None:
    for i in range(5):
        assert es.client.post(EMBED, json={"model": "embed-model", "input": f"x{i}"}).status_code == 200
    chat = es.client.post("/v1/chat/completions", json={
        "model": "tiny-llama", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert chat.headers["x-specgate-pool"] in ("spec", "plain")  # never the embedding pool
    rt = es.router.state.runtime
    assert [p.name for p in rt.snapshots(0.0)] == ["spec", "plain"]
    assert len(es.log(es.embed, EMBED)) == 5
    assert es.log(es.spec, EMBED) == [] and es.log(es.embed, "/v1/chat/completions") == []
    # the client sees the last byte a moment before the router's ``finally`` releases the lease
    wait_until(lambda: sum(p.inflight() for p in rt.pools) == 0, 5, "the chat's lease released")
    es.router.state.refresh_gauges()
    assert es.router.metric("specgate_inflight_requests", pool="spec") == 0


def test_a_dead_embedding_engine_is_a_503_with_retry_after(es: EmbedStack) -> None:
    es.embed.kill()
    ep = es.router.state.runtime.endpoint(es.embed.base_url)
    # ejected by the scrape (or by the first refused pass-through call)
    wait_until(lambda: not ep.healthy, 10, "the dead engine's ejection")
    resp = es.client.post(EMBED, json={"model": "embed-model", "input": "hi"})
    assert _error(resp)[:3] == (503, None, "no_healthy_upstream")
    assert resp.headers["retry-after"] == "3"


def test_config_refuses_a_speculative_pool_serving_embeddings(tmp_path: Path) -> None:
    base = {"model": {"name": "m", "tokenizer": str(tmp_path)}, "limits": {"max_context_tokens": 4096},
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}}}
    with pytest.raises(ConfigError, match="speculative pool serves only `generate`"):
        parse_config({**base, "pools": [{"name": "s", "speculative": True, "endpoints": ["http://a:1"],
                                         "serves": ["generate", "embeddings"]}]})
    with pytest.raises(ConfigError, match="no pool serves `generate`"):
        parse_config({**base, "pools": [{"name": "e", "speculative": False, "endpoints": ["http://a:1"],
                                         "serves": ["embeddings"]}]})
    with pytest.raises(ConfigError):
        parse_config({**base, "pools": [{"name": "p", "speculative": False, "endpoints": ["http://a:1"],
                                         "serves": ["chat"]}]})
    with pytest.raises(ConfigError, match="needs `generate` too"):
        parse_config({**base, "pools": [{"name": "p", "speculative": False, "endpoints": ["http://a:1"],
                                         "serves": ["responses"]}]})
    two = [{"name": "s", "speculative": True, "endpoints": ["http://a:1"], "serves": ["generate", "responses"]},
           {"name": "p", "speculative": False, "endpoints": ["http://b:1"]}]
    with pytest.raises(ConfigError, match="every pool that serves `generate`, or of none"):
        parse_config({**base, "pools": two})
    two[1]["serves"] = ["responses", "generate", "score"]
    assert parse_config({**base, "pools": two}).pools[0].serves == ("generate", "responses")
