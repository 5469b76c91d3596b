"""Per-request acceptance from the real SGLang 0.5.23 CPU EAGLE-3 server through the router.

The router asks the speculative engine for ``sglext.spec_tokens_details`` (SGLang's
``return_spec_tokens_details``) and cuts it out of the response again (router.upstream.specstats); a
client that did not ask gets what SGLang sends without the field. The router's live speed model
(router.decision.learn) takes each request's own accept length per temperature class and context bucket.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from router.decision.learn import MIN_BUCKET_OBSERVATIONS, bucket_label, context_bucket
from tests.support import RouterServer, wait_until

pytestmark = pytest.mark.sglang

CHAT = "/v1/chat/completions"
PROMPT = [{"role": "user", "content": "def fibonacci(n):"}]


@pytest.fixture(scope="module")
def stack(cpu_server, eagle3_draft_dir, tiny_model_dir: Path, tmp_path_factory):
    engine = cpu_server(["--served-model-name", "tiny-llama", "--context-length", "1024",
                         "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(eagle3_draft_dir),
                         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", "4"])
    cfg = tmp_path_factory.mktemp("router") / "router.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"name": "tiny-llama", "tokenizer": str(tiny_model_dir)},
        "limits": {"max_context_tokens": 1000, "default_max_tokens": 16},
        "pools": [{"name": "spec", "speculative": True, "endpoints": [engine.base_url],
                   "draft_reserved_tokens": 4}],
        "routing": {"long_prompt_tokens": 512, "saturation": {"enter": 8, "exit": 6},
                    "learning": {"enabled": True, "explore_every": 0}},
        "scrape": {"interval_s": 0.25, "timeout_s": 5.0, "stale_after_s": 5.0},
        "server": {"log_requests": False},
    }))
    router = RouterServer(cfg).start(ready=True, timeout=120)
    yield router, engine
    router.stop()


def _masked(body: bytes) -> dict:
    doc = orjson.loads(body)
    doc.pop("id", None)
    doc.pop("created", None)
    return doc


def test_the_client_gets_what_sglang_sends_without_the_field(stack):
    router, engine = stack
    doc = {"model": "tiny-llama", "messages": PROMPT, "max_tokens": 12, "temperature": 0}
    via = httpx.post(router.base_url + CHAT, json=doc, timeout=120)
    direct = httpx.post(engine.base_url + CHAT, json=doc, timeout=120)
    asked = httpx.post(engine.base_url + CHAT, json={**doc, "return_spec_tokens_details": True}, timeout=120)
    assert via.status_code == direct.status_code == asked.status_code == 200
    assert via.headers["x-specgate-pool"] == "spec"
    assert b"sglext" not in via.content and b"sglext" not in direct.content
    details = asked.json()["sglext"]["spec_tokens_details"]
    assert details["spec_accept_length"] >= 1.0 and details["spec_verify_ct"] >= 1
    assert _masked(via.content) == _masked(direct.content)  # same fields, order and values (greedy)
    assert list(orjson.loads(via.content)) == list(orjson.loads(direct.content))
    # streamed: no sglext event, the same content
    with httpx.stream("POST", router.base_url + CHAT, json={**doc, "stream": True}, timeout=120) as s:
        raw = b"".join(s.iter_bytes())
    assert b"sglext" not in raw and raw.endswith(b"data: [DONE]\n\n")
    text = "".join(orjson.loads(e[6:])["choices"][0]["delta"].get("content") or ""
                   for e in raw.split(b"\n\n") if e.startswith(b"data: {") and orjson.loads(e[6:])["choices"])
    assert text == direct.json()["choices"][0]["message"]["content"]


def test_the_fit_learns_the_requests_own_acceptance(stack):
    router, _ = stack
    fit = router.state.runtime.pools[0].fit
    before = fit.count
    doc = {"model": "tiny-llama", "messages": PROMPT, "max_tokens": 12, "temperature": 0}
    for _ in range(MIN_BUCKET_OBSERVATIONS):
        assert httpx.post(router.base_url + CHAT, json=doc, timeout=120).status_code == 200
    wait_until(lambda: fit.count >= before + MIN_BUCKET_OBSERVATIONS, 10, "the fit's observations")
    table = fit.accept_table()
    cell = ("greedy", context_bucket(12))
    assert cell in table and 1.0 <= table[cell] <= 4.0
    ready = httpx.get(router.base_url + "/ready").json()
    assert f"greedy/{bucket_label(cell[1])}" in ready["pools"]["spec"]["speed_model"]["accept_length"]
