"""Per-key limits over real HTTP (one replica, ``state.backend: memory``): 429
``rate_limit_exceeded`` with ``Retry-After`` and ``x-ratelimit-*`` before any engine call; the
token reservation corrected by the response's usage; a concurrency lease released however the
request ends (completed, client disconnect, engine error, stream abort)."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from tests.support.stack import Stack
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"
GOLD, SILVER, TOKENS_A, TOKENS_B, FREE = "key-gold", "key-silver", "key-tok-a", "key-tok-b", "key-free"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def body(**extra: object) -> dict:
    return {"model": "tiny-llama", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.fixture
def limited(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, auth={
        "api_keys": [GOLD, SILVER, TOKENS_A, TOKENS_B, FREE],
        "rate_limits": {"keys": {
            _digest(GOLD): {"requests_per_minute": 3},
            _digest(SILVER): {"requests_per_minute": 600, "concurrent_requests": 1},
            _digest(TOKENS_A): {"tokens_per_minute": 1000},
            _digest(TOKENS_B): {"tokens_per_minute": 1000}}}})
    try:
        yield s
    finally:
        s.close()


def post(stack: Stack, key: str, doc: dict) -> httpx.Response:
    return stack.client.post(CHAT, json=doc, headers={"authorization": f"Bearer {key}"})


def engine_calls(stack: Stack) -> int:
    return len(stack.backend_requests(stack.spec)) + len(stack.backend_requests(stack.plain))


def test_requests_limit_is_429_with_openai_headers_and_no_engine_call(limited):
    remaining = []
    for _ in range(3):
        r = post(limited, GOLD, body())
        assert r.status_code == 200, r.text
        assert r.headers["x-ratelimit-limit-requests"] == "3"
        remaining.append(r.headers["x-ratelimit-remaining-requests"])
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    assert remaining == ["2", "1", "0"]
    assert engine_calls(limited) == 3
    r = post(limited, GOLD, body())
    assert r.status_code == 429, r.text
    err = r.json()["error"]
    assert (err["type"], err["code"], err["param"]) == ("requests", "rate_limit_exceeded", None)
    assert err["message"].startswith("Rate limit reached for requests: Limit 3 / min.")
    assert 1 <= int(r.headers["retry-after"]) <= 20   # one request refills in 20 s
    assert r.headers["x-ratelimit-remaining-requests"] == "0" and r.headers["x-ratelimit-limit-requests"] == "3"
    assert "x-should-retry" not in r.headers
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("none", "rate_limited")
    assert engine_calls(limited) == 3
    # another key is not affected, and an unlisted key (no default) carries no headers
    free = post(limited, FREE, body())
    assert free.status_code == 200 and "x-ratelimit-limit-requests" not in free.headers
    m = limited.router.metric
    assert m("specgate_rate_limited_total", limit="requests") == 1
    assert m("specgate_rate_limit_checks_total", mode="local", result="admitted") == 3
    assert m("specgate_rate_limit_checks_total", mode="local", result="limited") == 1
    assert m("specgate_requests_total", pool="none", reason="rate_limited", status="429") == 1


def test_token_reservation_is_corrected_by_the_usage(limited):
    # 1,000 tokens per minute; each request reserves its prompt + 500 and generates 2 tokens.
    for fake in (limited.spec, limited.plain):
        limited.script(fake, {"max_tokens": 2, "count": 4})
    big = body(max_tokens=500)
    # Streamed without include_usage: no usage, the reservation stands and the next one does not fit.
    with limited.client.stream("POST", CHAT, json={**big, "stream": True},
                               headers={"authorization": f"Bearer {TOKENS_A}"}) as s:
        assert s.status_code == 200
        s.read()
    first = int(s.headers["x-ratelimit-remaining-tokens"])
    assert 400 < first < 500 and s.headers["x-ratelimit-limit-tokens"] == "1000"
    refused = post(limited, TOKENS_A, big)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "tokens"
    assert refused.json()["error"]["message"].startswith("Rate limit reached for tokens per min (TPM): Limit 1000")
    # Not streamed: the usage (prompt + 2) replaces the reservation, so a second one fits.
    assert post(limited, TOKENS_B, big).status_code == 200
    assert wait_until(lambda: limited.router.state.limiter.open_leases(_digest(TOKENS_B)) == 0, 2)
    second = post(limited, TOKENS_B, big)
    assert second.status_code == 200, second.text
    assert int(second.headers["x-ratelimit-remaining-tokens"]) > 400
    # A request larger than a minute's tokens never fits: 429 that says so, not to be retried.
    huge = post(limited, TOKENS_B, body(max_tokens=1200))
    assert huge.status_code == 429 and huge.headers["x-should-retry"] == "false"
    assert "retry-after" not in huge.headers
    assert huge.json()["error"]["message"].startswith("Request too large for tokens per min (TPM): Limit 1000")
    assert limited.router.metric("specgate_rate_limited_total", limit="tokens") == 2


def _concurrency_free(stack: Stack) -> None:
    limiter = stack.router.state.limiter
    assert wait_until(lambda: limiter.open_leases(_digest(SILVER)) == 0, 3, "the key's lease to be released")
    r = post(stack, SILVER, body())
    assert r.status_code == 200, r.text
    assert wait_until(lambda: limiter.open_leases(_digest(SILVER)) == 0, 3)


def _hold_stream(stack: Stack) -> httpx.Response:
    for fake in (stack.spec, stack.plain):
        stack.script(fake, {"path": CHAT, "fault": "hang", "after_chunks": 2})
    req = stack.client.build_request("POST", CHAT, json=body(stream=True, max_tokens=50),
                                     headers={"authorization": f"Bearer {SILVER}"})
    resp = stack.client.send(req, stream=True)
    assert resp.status_code == 200
    events = resp.iter_raw()
    next(events)
    resp.extensions["held_events"] = events   # dropping the iterator would close the stream
    return resp


def test_concurrency_limit_and_release_on_client_disconnect(limited):
    held = _hold_stream(limited)
    r = post(limited, SILVER, body())
    assert r.status_code == 429, r.text
    assert r.json()["error"]["type"] == "requests"
    assert r.json()["error"]["message"].startswith("Rate limit reached for concurrent requests: Limit 1")
    assert r.headers["retry-after"] == "1"
    assert limited.router.metric("specgate_rate_limited_total", limit="concurrent") == 1
    held.close()   # the client goes away mid-stream
    _concurrency_free(limited)


def test_concurrency_released_after_an_engine_error(limited):
    for fake in (limited.spec, limited.plain):
        limited.script(fake, {"status": 500})   # the first try and its failover
    r = post(limited, SILVER, body())
    assert r.status_code == 502, r.text
    assert r.headers["x-ratelimit-limit-requests"] == "600"   # every response of a limited key
    _concurrency_free(limited)


def test_concurrency_released_after_a_stream_abort(limited):
    for fake in (limited.spec, limited.plain):
        limited.script(fake, {"fault": "abort", "after_chunks": 2})
    with limited.client.stream("POST", CHAT, json=body(stream=True, max_tokens=20),
                               headers={"authorization": f"Bearer {SILVER}"}) as s:
        assert s.status_code == 200
        assert b'"code":"engine_abort"' in s.read()   # the router's terminal event
    _concurrency_free(limited)


def test_concurrency_released_after_an_upstream_reset_midstream(limited):
    for fake in (limited.spec, limited.plain):
        limited.script(fake, {"fault": "reset", "after_chunks": 2})
    with limited.client.stream("POST", CHAT, json=body(stream=True, max_tokens=20),
                               headers={"authorization": f"Bearer {SILVER}"}) as s:
        assert s.status_code == 200
        s.read()
    # the other fake's reset is still queued, and the reset endpoint may be marked down: clear
    # both and let the scraper readmit, so the follow-up request tests the key, not the faults
    for fake in (limited.spec, limited.plain):
        assert httpx.post(fake.base_url + "/_fake/reset").status_code == 200
    limited.wait_scrapes(2)
    _concurrency_free(limited)


def test_a_request_the_decision_refuses_gives_its_concurrency_back(limited):
    """The limit is checked before the decision, so a request refused after it (over the
    context) must release what it took: the key's next request is served."""
    r = post(limited, SILVER, body(max_tokens=10**7))
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert engine_calls(limited) == 0
    _concurrency_free(limited)


def test_a_refused_key_is_not_routed(limited):
    """A 429 comes before the decision: nothing is decided (or recorded in the prefix index) for it."""
    runtime = limited.router.state.runtime
    decided = []
    decide = runtime.decide
    runtime.decide = lambda *a, **k: decided.append(1) or decide(*a, **k)
    for _ in range(3):
        assert post(limited, GOLD, body()).status_code == 200
    assert len(decided) == 3
    assert post(limited, GOLD, body()).status_code == 429
    assert len(decided) == 3
