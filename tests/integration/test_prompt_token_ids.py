"""A chat whose prompt is ``input_ids`` (SGLang 0.5.23 runs those ids, not the rendered
``messages``): counted for the context cap, the pool's limit, the key's token budget and the
prefix index, over real HTTP against the fake pools on 127.0.0.1."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
KEY = "key-ids"
#: A conversation several prefix blocks long (the control that the index records a rendered one).
LONG = [{"role": "user", "content": "the quick brown fox jumps over the lazy dog " * 8}]


def body(ids: object, **extra: object) -> dict:
    return {"model": "tiny-llama", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "input_ids": ids, **extra}


def ids(n: int) -> list[int]:
    return [10 + i % 300 for i in range(n)]  # inside the test tokenizer's vocabulary (344 ids)


def engine_calls(stack: Stack) -> int:
    return len(stack.backend_requests(stack.spec)) + len(stack.backend_requests(stack.plain))


@pytest.mark.parametrize("stream", [False, True])
def test_ids_over_the_spec_limit_go_to_the_plain_pool_unchanged(stack, stream):
    sent_ids = ids(3000)
    r = stack.client.post(CHAT, json=body(sent_ids, stream=stream))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "long_context")
    assert stack.backend_requests(stack.spec) == []
    (sent,) = stack.backend_requests(stack.plain)
    assert sent["body"]["input_ids"] == sent_ids
    assert stack.router.metric("specgate_prompt_tokens_sum", kind="exact") == 3000
    if not stream:
        assert r.json()["usage"]["prompt_tokens"] == 3000


def test_short_ids_stay_eligible_for_the_spec_pool(stack):
    r = stack.client.post(CHAT, json=body(ids(40)))
    assert r.status_code == 200, r.text
    assert r.headers["x-specgate-pool"] == "spec"
    assert r.json()["usage"]["prompt_tokens"] == 40


def test_ids_over_the_context_cap_are_400_without_an_engine_call(stack):
    r = stack.client.post(CHAT, json=body(ids(5000)))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "context_length_exceeded", "input_ids")
    assert "5000" in err["message"]
    assert engine_calls(stack) == 0


@pytest.mark.parametrize(("value", "needle"), [
    ([-1, 5, 999_999], "token ids"),
    ([5, 999_999], "vocabulary"),
    ([], "non-empty"),
    ("12 34", "token ids"),
])
def test_invalid_ids_are_400_naming_the_field_without_an_engine_call(stack, value, needle):
    r = stack.client.post(CHAT, json=body(value))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "invalid_value", "input_ids")
    assert needle in err["message"]
    assert engine_calls(stack) == 0


def test_the_key_token_budget_is_charged_the_ids(tmp_path, tokenizer_dir):
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    s = Stack(tmp_path, tokenizer_dir, auth={"api_keys": [KEY],
                                             "rate_limits": {"keys": {digest: {"tokens_per_minute": 1000}}}})
    try:
        auth = {"authorization": f"Bearer {KEY}"}
        first = s.client.post(CHAT, json=body(ids(600), max_tokens=4), headers=auth)
        assert first.status_code == 200, first.text
        second = s.client.post(CHAT, json=body(ids(600), max_tokens=4), headers=auth)
        assert second.status_code == 429, second.text
        assert second.json()["error"]["type"] == "tokens"
        assert engine_calls(s) == 1
    finally:
        s.close()


def test_ids_are_not_recorded_in_the_prefix_index(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, **{"routing.prefix_cache": {"enabled": True}})
    try:
        for _ in range(2):
            r = s.client.post(CHAT, json=body(ids(40), messages=LONG))
            assert r.status_code == 200, r.text
        runtime = s.router.state.runtime
        assert all(not index._lru for index in runtime.prefix.values())
        plain = {k: v for k, v in body(None, messages=LONG).items() if k != "input_ids"}
        assert s.client.post(CHAT, json=plain).status_code == 200  # the control: a conversation is recorded
        assert any(index._lru for index in runtime.prefix.values())
    finally:
        s.close()
