"""Sampling controls over real HTTP: malformed values are 400 with their ``param`` and no engine
call; controls the speculative path applies differently reach only the plain pool; a seeded or
biased request served by a speculative pool says so in its response headers."""

from __future__ import annotations

import pytest

from tests.support.wait import wait_until

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


def chat(**extra: object) -> dict:
    return {"model": "tiny-llama", "max_tokens": 32, "temperature": 0,
            "messages": [{"role": "user", "content": "Say OK."}], **extra}


def engine_calls(stack) -> int:
    return len(stack.backend_requests(stack.spec, None)) + len(stack.backend_requests(stack.plain, None))


@pytest.mark.parametrize("path,doc,param,code", [
    (COMPLETIONS, {"model": "tiny-llama", "prompt": "the the the the", "max_tokens": 15, "logit_bias": {"1": 101}},
     "logit_bias", "invalid_logit_bias"),
    (CHAT, chat(logit_bias={"1": -101}), "logit_bias", "invalid_logit_bias"),
    (CHAT, chat(logit_bias={"the": -100}), "logit_bias", "invalid_logit_bias"),
    (CHAT, chat(min_tokens=40), "min_tokens", "min_tokens_exceeds_budget"),
    (CHAT, chat(max_tokens=None, max_completion_tokens=8, min_tokens=9), "min_tokens", "min_tokens_exceeds_budget"),
    (CHAT, chat(min_p=1.5), "min_p", "invalid_value"),
    (CHAT, chat(seed="1234"), "seed", "invalid_value"),
])
def test_malformed_sampling_controls_are_400_before_any_engine(stack, path, doc, param, code):
    r = stack.client.post(path, json={k: v for k, v in doc.items() if v is not None})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", param, code)
    assert engine_calls(stack) == 0


def test_min_tokens_above_the_routers_default_budget_is_400(stack):
    r = stack.client.post(CHAT, json={k: v for k, v in chat(min_tokens=300).items() if k != "max_tokens"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens"  # limits.default_max_tokens: 256


@pytest.mark.parametrize("extra,field", [({"min_tokens": 20}, "min_tokens"), ({"min_p": 0.3}, "min_p"),
                                         ({"repetition_penalty": 1.2}, "repetition_penalty")])
def test_controls_the_spec_path_changes_reach_only_the_plain_pool_unchanged(stack, extra, field):
    r = stack.client.post(CHAT, json=chat(**extra))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "sampling_controls")
    assert "x-specgate-degraded" not in r.headers
    assert stack.backend_requests(stack.spec) == []
    assert stack.backend_requests(stack.plain)[0]["body"][field] == extra[field]


def test_seed_and_logit_bias_prefer_the_plain_pool_and_are_marked_on_spec(stack):
    r = stack.client.post(CHAT, json=chat(seed=1234, logit_bias={"5": -100}))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "sampling_guarantee")
    assert "x-specgate-degraded" not in r.headers
    assert stack.backend_requests(stack.plain)[0]["body"]["logit_bias"] == {"5": -100}  # keys stay strings
    assert stack.backend_requests(stack.spec) == []
    # the client's on hint keeps it on the speculative pool, marked
    r = stack.client.post(CHAT, json=chat(seed=1234, stream=True), headers={"x-specgate-speculation": "on"})
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "spec"
    assert (r.headers["x-specgate-degraded"], r.headers["x-specgate-sampling-fields"]) == ("sampling", "seed")
    r = stack.client.post(CHAT, json=chat(logit_bias={"5": -100}), headers={"x-specgate-speculation": "on"})
    assert r.headers["x-specgate-sampling-fields"] == "logit_bias"
    assert stack.backend_requests(stack.spec)[-1]["body"]["logit_bias"] == {"5": -100}
    r = stack.client.post(CHAT, json=chat())
    assert r.headers["x-specgate-pool"] == "spec" and "x-specgate-degraded" not in r.headers


def test_plain_pool_down(stack):
    stack.plain.kill()
    runtime = stack.router.state.runtime
    wait_until(lambda: not runtime.endpoint(stack.plain.base_url).healthy, 10, "the plain pool to be marked down")
    r = stack.client.post(CHAT, json=chat(seed=1234, temperature=0.8))  # served on spec, marked
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-degraded"]) == ("spec", "sampling")
    r = stack.client.post(CHAT, json=chat(seed=1234), headers={"x-specgate-speculation": "off"})
    assert r.status_code == 200 and r.headers["x-specgate-degraded"] == "sampling"  # the hint yields, marked
    r = stack.client.post(CHAT, json=chat(min_tokens=20))  # only plain honours it: never silently on spec
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "no_healthy_upstream" and "retry-after" in r.headers
    assert all("min_tokens" not in q["body"] for q in stack.backend_requests(stack.spec))


def test_responses_route_checks_min_p(tmp_path, tokenizer_dir):
    from tests.support.stack import Stack

    s = Stack(tmp_path, tokenizer_dir, **{"pools.0.serves": ["generate", "responses"],
                                          "pools.1.serves": ["generate", "responses"]})
    try:
        r = s.client.post("/v1/responses", json={"model": "tiny-llama", "input": "hi", "min_p": 2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "min_p", r.text
        assert engine_calls(s) == 0 and s.backend_requests(s.spec, "/v1/responses") == []
    finally:
        s.close()
