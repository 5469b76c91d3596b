"""Client priority over real HTTP: only keys granted it (``auth.priority.keys``) set the engine's
``priority``, within their range; malformed values are 400 before any engine call; an engine
eviction (``finish_reason: "abort"``) of a non-streamed request never becomes a 200."""

from __future__ import annotations

import hashlib

import pytest

from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
TRUSTED, LOW, PLAIN_KEY = "key-trusted", "key-low", "key-plain"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def body(**extra: object) -> dict:
    return {"model": "tiny-llama", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.fixture
def keyed(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, auth={
        "api_keys": [TRUSTED, LOW, PLAIN_KEY],
        "priority": {"keys": {_digest(TRUSTED): {"min": 0, "max": 100, "default": 10},
                              _digest(LOW): {"min": 0, "max": 0, "default": 0}}}})
    try:
        yield s
    finally:
        s.close()


def sent(stack: Stack) -> list[object]:
    """The ``priority`` of every body the fakes received ("absent" when the field was not sent)."""
    reqs = stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain)
    return [r["body"].get("priority", "absent") for r in reqs]


def post(stack: Stack, key: str, doc: dict, **headers: str):
    return stack.client.post(CHAT, json=doc, headers={"authorization": f"Bearer {key}", **headers})


def test_only_granted_keys_set_priority_within_their_range(keyed):
    cases = [  # (key, body extra, headers) -> priority the engine receives
        (PLAIN_KEY, {"priority": 1_000_000}, {"x-specgate-priority": "9"}, "absent"),
        (PLAIN_KEY, {}, {"x-request-priority": "0"}, "absent"),
        (LOW, {"priority": 1_000_000}, {"x-request-priority": "0"}, 0),
        (LOW, {}, {}, 0),
        (TRUSTED, {"priority": 1_000_000}, {}, 100),
        (TRUSTED, {"priority": 42}, {}, 42),
        (TRUSTED, {}, {"x-specgate-priority": "55"}, 55),
        (TRUSTED, {}, {}, 10),
        (TRUSTED, {"priority": None}, {}, 10),
    ]
    for i, (key, extra, headers, expected) in enumerate(cases):
        r = post(keyed, key, body(**extra), **headers)
        assert r.status_code == 200, (i, r.text)
        assert sent(keyed)[-1] == expected, i
    for name, value in (("client", 2), ("clamped", 2), ("default", 3), ("ignored", 1), ("none", 1)):
        assert keyed.router.metric("specgate_priority_requests_total", source=name) == value, name


@pytest.mark.parametrize("key", [TRUSTED, PLAIN_KEY])
@pytest.mark.parametrize("extra,headers", [
    ({"priority": "high"}, {}), ({"priority": 1.5}, {}), ({"priority": True}, {}),
    ({"priority": 2**63}, {}), ({"priority": -(2**31) - 1}, {}), ({}, {"x-specgate-priority": "high"}),
    ({}, {"x-specgate-priority": "9223372036854775808"}),
])
def test_malformed_priority_is_400_with_param_and_no_engine_call(keyed, key, extra, headers):
    r = post(keyed, key, body(**extra), **headers)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", "priority", "invalid_priority")
    assert sent(keyed) == []


def test_priority_on_the_completions_route(keyed):
    r = keyed.client.post("/v1/completions", json={"model": "tiny-llama", "prompt": "hi", "max_tokens": 4,
                                                   "priority": 99},
                          headers={"authorization": f"Bearer {TRUSTED}"})
    assert r.status_code == 200, r.text
    got = keyed.backend_requests(keyed.spec, "/v1/completions") + keyed.backend_requests(keyed.plain, "/v1/completions")
    assert [g["body"]["priority"] for g in got] == [99]


@pytest.mark.parametrize("fault_plain", [False, True])
def test_nonstream_engine_abort_is_never_a_200(stack, fault_plain):
    stack.script(stack.spec, {"fault": "abort"})
    if fault_plain:
        stack.script(stack.plain, {"fault": "abort"})
    r = stack.client.post(CHAT, json=body())
    assert len(stack.backend_requests(stack.spec)) == 1 and len(stack.backend_requests(stack.plain)) == 1
    if not fault_plain:  # retried once on the other pool
        assert r.status_code == 200, r.text
        assert r.headers["x-specgate-pool"] == "plain"
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "length" and choice["message"]["content"]
    else:
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "3"
        assert r.json()["error"]["code"] == "engine_overloaded"
        assert stack.router.settled_metric("specgate_engine_rejections_total", 1, pool="plain", reason="body_abort") == 1
    assert stack.router.settled_metric("specgate_engine_rejections_total", 1, pool="spec", reason="body_abort") == 1
    assert stack.settled_inflight() == 0


def test_a_smaller_first_pool_receives_the_negated_priority(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, **{
        "pools.1.priority_order": "smaller_first",
        "auth": {"api_keys": [TRUSTED, LOW],
                 "priority": {"keys": {_digest(TRUSTED): {"min": 0, "max": 100},
                                       _digest(LOW): {"min": 0, "max": 0, "default": 0}}}}})
    try:
        for key, value in ((TRUSTED, 100), (LOW, 0)):
            assert post(s, key, body(priority=value)).status_code == 200
            assert post(s, key, body(priority=value), **{"x-specgate-speculation": "off"}).status_code == 200
        spec = [r["body"]["priority"] for r in s.backend_requests(s.spec)]
        plain = [r["body"]["priority"] for r in s.backend_requests(s.plain)]
        assert spec == [100, 0] and plain == [-100, 0]  # the trusted tier stays ahead on both
        s.script(s.spec, {"status": 500})  # a failover re-sends the plain pool's body
        assert post(s, TRUSTED, body(priority=7)).status_code == 200
        assert s.backend_requests(s.spec)[-1]["body"]["priority"] == 7
        assert s.backend_requests(s.plain)[-1]["body"]["priority"] == -7
    finally:
        s.close()
