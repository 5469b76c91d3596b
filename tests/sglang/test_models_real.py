"""Two models behind one router, each on its own real SGLang 0.5.23 CPU engine.

The tiny model is served under two names (``--served-model-name``): the router's ``models:``
list has one plain pool per name. Checked on real engines: the openai SDK's ``models.list`` /
``models.retrieve``, each name (and an alias) answered by its own engine with exact prompt
counts, an unknown name refused before any engine, and an endpoint whose engine serves the
other name kept out of routing (endpoint identity, read from the engine's ``/v1/models``).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
import yaml

from router.request.features import parse_chat
from tests.support import RouterServer, wait_until

pytestmark = pytest.mark.sglang

CONTEXT = 1024
MESSAGES = [{"role": "user", "content": "def fibonacci(n):"}]


def _model(name: str, tokenizer: Path, pool: str, url: str, aliases: tuple[str, ...] = ()) -> dict:
    return {"name": name, "tokenizer": str(tokenizer), "aliases": list(aliases),
            "limits": {"max_context_tokens": CONTEXT - 8, "default_max_tokens": 8},
            "pools": [{"name": pool, "speculative": False, "endpoints": [url]}],
            "routing": {"long_prompt_tokens": 512, "saturation": {"enter": 8, "exit": 6}}}


def _router(path: Path, models: list[dict]) -> RouterServer:
    path.write_text(yaml.safe_dump({
        "models": models,
        "scrape": {"interval_s": 0.25, "timeout_s": 5.0, "stale_after_s": 5.0, "models_interval_s": 1.0},
        "server": {"log_requests": False},
    }))
    return RouterServer(path, watch=False)


@pytest.fixture(scope="module")
def engines(cpu_server):
    args = ["--context-length", str(CONTEXT)]
    return (cpu_server(["--served-model-name", "tiny-a", *args]),
            cpu_server(["--served-model-name", "tiny-b", *args]))


@pytest.fixture(scope="module")
def two(engines, tiny_model_dir: Path, tmp_path_factory):
    a, b = engines
    router = _router(tmp_path_factory.mktemp("router") / "router.yaml", [
        _model("tiny-a", tiny_model_dir, "a-plain", a.base_url),
        _model("tiny-b", tiny_model_dir, "b-plain", b.base_url, aliases=("tiny:b",)),
    ]).start(ready=True, timeout=60)
    yield router
    router.stop()


def test_models_list_and_retrieve_through_the_sdk(two):
    client = two.openai_client()
    ids = [m.id for m in client.models.list()]
    assert ids[:3] == ["tiny-a", "tiny-b", "tiny:b"]
    assert client.models.retrieve("tiny-b").id == "tiny-b"
    assert client.models.retrieve("tiny:b").root == "tiny-b"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("tiny-c")
    assert err.value.body["code"] == "model_not_found"


@pytest.mark.parametrize(("model", "served", "pool"), [("tiny-a", "tiny-a", "a-plain"),
                                                       ("tiny-b", "tiny-b", "b-plain"),
                                                       ("tiny:b", "tiny-b", "b-plain")])
def test_each_name_is_answered_by_its_own_engine_with_exact_counts(two, model, served, pool):
    doc = {"model": model, "messages": MESSAGES, "max_tokens": 2, "temperature": 0}
    r = httpx.post(two.base_url + "/v1/chat/completions", json=doc, timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["x-specgate-pool"] == pool
    body = r.json()
    assert body["model"] == served  # the engine's own name: an alias was rewritten before forwarding
    runtime = two.state.fleet.runtime(served)
    assert runtime.counter.count(parse_chat(doc, max_n=8)) == body["usage"]["prompt_tokens"]
    assert two.settled_metric("specgate_requests_total", 1, model=served, pool=pool, reason="plain_only", status="200") >= 1


def test_an_unknown_model_is_refused_before_any_engine(two):
    r = httpx.post(two.base_url + "/v1/chat/completions",
                   json={"model": "tiny-c", "messages": MESSAGES, "max_tokens": 2}, timeout=30)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found" and r.json()["error"]["param"] == "model"


def test_an_endpoint_serving_the_other_model_is_not_routed_to(engines, tiny_model_dir: Path, tmp_path):
    _a, b = engines
    # model tiny-a's pool points at the engine serving tiny-b (a wrong Service, say)
    router = _router(tmp_path / "router.yaml", [_model("tiny-a", tiny_model_dir, "a-plain", b.base_url)]).start()
    try:
        wait_until(lambda: router.client.get("/ready").json()["pools"]["a-plain"].get("wrong_model"), 60,
                   "the identity check")
        ready = router.client.get("/ready").json()
        assert list(ready["pools"]["a-plain"]["wrong_model"]) == [b.base_url]
        r = router.client.post("/v1/chat/completions", json={"model": "tiny-a", "messages": MESSAGES,
                                                              "max_tokens": 2})
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "no_healthy_upstream"
    finally:
        router.stop()
