"""Which requests the speculative pool serves: the router against fake SGLang pools on 127.0.0.1."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.bodies import TOOLS
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
          "required": ["name", "population"]}


def body(content="Give the largest city of France as JSON.", **kw):
    return {"model": "tiny-llama", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": content}], **kw}


CONSTRAINED = {
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}},
    "json_object": {"response_format": {"type": "json_object"}},
    "regex": {"regex": "(yes|no)"},
    "ebnf": {"ebnf": 'root ::= "yes" | "no"'},
    "tool_choice_required": {"tools": TOOLS, "tool_choice": "required"},
    "tool_choice_named": {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    "strict_tools": {"tools": [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("variant", sorted(CONSTRAINED))
def test_constrained_requests_go_to_the_plain_pool_unchanged(stack, variant, stream):
    extra = CONSTRAINED[variant]
    r = stack.client.post(CHAT, json=body(stream=stream, **extra))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "constrained_decoding")
    assert stack.backend_requests(stack.spec) == []
    sent = stack.backend_requests(stack.plain)
    assert len(sent) == 1
    assert {k: sent[0]["body"][k] for k in extra} == extra   # forwarded unchanged
    assert stack.router.settled_metric("specgate_requests_total", 1, pool="plain", reason="constrained_decoding",
                               status="200") == 1
    assert stack.settled_inflight() == 0


def test_constrained_and_plain_chats_concurrently(stack):
    constrained = [body(**CONSTRAINED[sorted(CONSTRAINED)[i % len(CONSTRAINED)]]) for i in range(20)]
    chats = [body("hi", max_tokens=4) for _ in range(20)]
    with ThreadPoolExecutor(5) as pool:   # below routing.saturation.enter (8)
        results = list(pool.map(lambda b: stack.client.post(CHAT, json=b), constrained + chats))
    assert [r.status_code for r in results] == [200] * 40
    assert {r.headers["x-specgate-pool"] for r in results[:20]} == {"plain"}
    assert {r.headers["x-specgate-pool"] for r in results[20:]} == {"spec"}
    assert len(stack.backend_requests(stack.spec)) == 20
    assert all(set(r["body"]) & {"response_format", "regex", "ebnf", "tools"} == set()
               for r in stack.backend_requests(stack.spec))
    assert stack.settled_inflight() == 0


def test_tool_calls_and_reasoning_go_to_the_plain_pool(stack):
    r = stack.client.post(CHAT, json=body("What is the weather in Paris and the time in Tokyo?", tools=TOOLS,
                                          tool_choice="auto", parallel_tool_calls=True,
                                          chat_template_kwargs={"enable_thinking": True}))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "tool_calls")
    r = stack.client.post(CHAT, json=body(chat_template_kwargs={"enable_thinking": True}))
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "reasoning")
    r = stack.client.post(CHAT, json=body(tools=TOOLS, tool_choice="none"))   # no tool call possible
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("spec", "speculative")
    assert stack.router.settled_metric("specgate_requests_total", 1, pool="plain", reason="tool_calls", status="200") == 1
    assert stack.router.settled_metric("specgate_requests_total", 1, pool="plain", reason="reasoning", status="200") == 1


@pytest.mark.parametrize("extra,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "city"}}}, "response_format"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"regex": 5}, "regex"),
    ({"ebnf": ["root"]}, "ebnf"),
])
def test_malformed_constraints_are_400_before_any_engine(stack, extra, param):
    r = stack.client.post(CHAT, json=body(**extra))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert stack.backend_requests(stack.spec) == [] and stack.backend_requests(stack.plain) == []


def test_validated_capability_lets_the_spec_pool_serve_it(stack):
    stack.reconfigure(lambda doc: doc["pools"][0].update(capabilities=["constrained_decoding"]))
    r = stack.client.post(CHAT, json=body(**CONSTRAINED["json_object"]))
    assert (r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
        200, "spec", "speculative")
    r = stack.client.post(CHAT, json=body(logprobs=True))
    assert (r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
        200, "plain", "logprobs")


def test_no_pool_serving_the_feature_is_a_400(stack):
    stack.reconfigure(lambda doc: doc["pools"].pop(1))
    r = stack.client.post(CHAT, json=body(regex="(yes|no)"))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["code"], err["param"]) == ("unsupported_feature", "regex")
    assert "constrained_decoding" in err["message"]
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("none", "constrained_decoding")
    assert stack.backend_requests(stack.spec) == []
    assert stack.router.metric("specgate_requests_total", pool="none", reason="constrained_decoding",
                               status="400") == 1


def test_speculation_hint_header_and_body_field(stack):
    r = stack.client.post(CHAT, json=body("hi"), headers={"x-specgate-speculation": "off"})
    assert (r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
        200, "plain", "client_opt_out")
    r = stack.client.post(CHAT, json=body("hi", specgate_speculation="off"))
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "client_opt_out")
    sent = stack.backend_requests(stack.plain)
    assert len(sent) == 2 and all("specgate_speculation" not in s["body"] for s in sent)
    long_prompt = "lorem ipsum dolor sit amet " * 300     # above routing.long_prompt_tokens, fits the pool
    r = stack.client.post(CHAT, json=body(long_prompt, max_tokens=4))
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "long_context")
    r = stack.client.post(CHAT, json=body(long_prompt, max_tokens=4), headers={"x-specgate-speculation": "on"})
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("spec", "speculative")
    r = stack.client.post(CHAT, json=body(regex="a+"), headers={"x-specgate-speculation": "on"})
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "constrained_decoding")
    r = stack.client.post(CHAT, json=body("hi"), headers={"x-specgate-speculation": "sometimes"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_header")
    r = stack.client.post(CHAT, json=body("hi", specgate_speculation=True))
    assert (r.status_code, r.json()["error"]["param"]) == (400, "specgate_speculation")


def test_speculation_default_per_api_key(tmp_path, tokenizer_dir):
    digest = hashlib.sha256(b"key-batch").hexdigest()
    s = Stack(tmp_path, tokenizer_dir, auth={"api_keys": ["key-batch", "key-chat"],
                                             "speculation_defaults": {digest: "off"}})
    try:
        def pool(key, **headers):
            r = s.client.post(CHAT, json=body("hi"), headers={"authorization": f"Bearer {key}", **headers})
            assert r.status_code == 200, r.text
            return r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]

        assert pool("key-batch") == ("plain", "client_opt_out")
        assert pool("key-chat") == ("spec", "speculative")
        assert pool("key-batch", **{"x-specgate-speculation": "auto"}) == ("spec", "speculative")
    finally:
        s.close()


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def test_non_text_parts_on_a_text_only_model_are_400_before_any_engine(stack):
    r = stack.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, IMAGE]}]})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == ("messages", "invalid_value")
    assert stack.backend_requests(stack.spec) == [] and stack.backend_requests(stack.plain) == []


def test_multimodal_parts_count_with_their_bound_against_the_cap(stack):
    stack.reconfigure(lambda doc: doc["model"].update(multimodal={"image_tokens": 1500}))

    def ask(images: int):
        return stack.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 4, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "what is this?"}] + [IMAGE] * images}]})

    r = ask(1)   # P >= 1500 > routing.long_prompt_tokens: counted, not zero
    assert (r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
        200, "plain", "long_context")
    r = ask(3)   # 4500 tokens of images alone exceed limits.max_context_tokens (4096)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["code"], err["param"]) == ("context_length_exceeded", "messages")
    assert "at least" in err["message"]
    assert len(stack.backend_requests(stack.plain)) == 1
