"""Engine back-pressure through the router, against fake SGLang pools over 127.0.0.1.

SGLang refuses over ``--max-queued-requests`` with "The request queue is full." as HTTP 503,
or, for a stream whose status was already committed, as HTTP 200 plus one error event
(sgl-project/sglang#28175); other engines answer 429 (vllm-project/vllm#49330) or end a
stream with ``finish_reason: "abort"`` (vllm-project/vllm#57082). The router treats a refusal
before any content as a pre-first-byte failure: it resends once to another pool, never
ejects the refusing endpoint (it records back-pressure instead), and answers a real 503
``engine_overloaded`` with ``Retry-After`` when every pool refuses.
"""

from __future__ import annotations

import json

import pytest

from router.upstream.proxy import ENGINE_ABORT_EVENT
from tests.support import wait_until

CHAT = "/v1/chat/completions"
OVERLOADED = (b'{"error":{"message":"all pools are at capacity","type":"server_error","param":null,'
              b'"code":"engine_overloaded"}}')
QUEUE_FULL_EVENT = (b'data: {"error": {"object": "error", "message": "The request queue is full.", '
                    b'"type": "SERVICE_UNAVAILABLE", "param": null, "code": 503}}\n\n')


def body(stream: bool) -> dict:
    return {"model": "tiny-llama", "stream": stream, "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}]}


def events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n"), raw[-80:]
    return raw[:-2].split(b"\n\n")


def endpoints_idle(stack) -> bool:
    return wait_until(lambda: all(ep.inflight == 0 for ep in stack.router.state.runtime.all_endpoints()), 2,
                      "every endpoint idle")


def test_fake_sends_sglang_queue_full_shapes(stack):
    """The fake answers as SGLang 0.5.23 does (Scheduler._abort_on_queued_limit, then
    OpenAIServingBase: ``type`` is ``str(HTTPStatus)`` not streamed, the status name streamed)."""
    import httpx

    stack.script(stack.spec, {"fault": "queue_full"}, {"fault": "queue_full"})
    r = httpx.post(stack.spec.base_url + CHAT, json=body(False))
    assert r.status_code == 503
    assert r.content == (b'{"object":"error","message":"The request queue is full.","type":"503",'
                         b'"param":null,"code":503}')
    r = httpx.post(stack.spec.base_url + CHAT, json=body(True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.content == QUEUE_FULL_EVENT + b"data: [DONE]\n\n"


@pytest.mark.parametrize("behaviour,stream,reason", [
    ({"fault": "queue_full"}, False, "http_503"),                           # 503 queue full
    ({"fault": "queue_full"}, True, "stream_error"),                        # 200 + error event
    ({"status": 429, "headers": {"retry-after": "1"}, "message": "Too many requests"}, True, "http_429"),
    ({"status": 429, "headers": {"retry-after": "1"}, "message": "Too many requests"}, False, "http_429"),
    ({"fault": "abort"}, True, "stream_abort"),                             # abort before any content
])
def test_refusal_before_content_is_retried_once_on_the_plain_pool(stack, behaviour, stream, reason):
    stack.script(stack.spec, behaviour)
    r = stack.client.post(CHAT, json=body(stream))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "spec_unhealthy")
    if stream:
        evs = events(r.content)
        first = json.loads(evs[0][6:])
        assert "error" not in first and first["choices"][0]["delta"]["role"] == "assistant"
        assert evs[-1] == b"data: [DONE]" and b'"error"' not in r.content and b'"abort"' not in r.content
    else:
        assert r.json()["choices"][0]["finish_reason"] == "length"
    assert len(stack.backend_requests(stack.spec)) == 1 and len(stack.backend_requests(stack.plain)) == 1
    spec = stack.router.state.runtime.endpoint(stack.spec.base_url)
    assert spec.healthy  # busy is not dead: no ejection
    now = stack.router.state.clock()
    assert spec.backpressured(now) and spec.backpressure_count == 1
    enter = stack.router.state.runtime.routing.saturation.enter
    assert spec.backpressure_load(now, 1.0, enter) == enter  # a saturation signal for the policy
    assert stack.router.settled_metric("specgate_engine_rejections_total", 1, pool="spec", reason=reason) == 1
    assert stack.router.settled_metric("specgate_requests_total", 1, pool="plain", reason="spec_unhealthy", status="200") == 1
    assert endpoints_idle(stack)


def test_retry_after_sets_the_back_pressure_hold(stack):
    stack.script(stack.spec, {"status": 429, "headers": {"retry-after": "7"}})
    before = stack.router.state.clock()
    assert stack.client.post(CHAT, json=body(False)).status_code == 200
    spec = stack.router.state.runtime.endpoint(stack.spec.base_url)
    assert before + 7 <= spec.backpressure_until <= stack.router.state.clock() + 7
    stack.script(stack.spec, {"fault": "queue_full"})  # no Retry-After: upstream.backpressure_hold_s
    assert stack.client.post(CHAT, json=body(False)).status_code == 200
    assert spec.backpressure_until <= stack.router.state.clock() + 7  # an earlier, longer hold stays


def test_abort_after_content_forwards_content_then_one_engine_abort_event(stack):
    stack.script(stack.spec, {"fault": "abort", "after_chunks": 3})  # role, tok0, tok1, then abort
    with stack.client.stream("POST", CHAT, json=body(True)) as r:
        assert r.status_code == 200
        assert r.headers["x-specgate-pool"] == "spec"
        raw = r.read()
    direct = stack.backend_requests(stack.spec)[-1]
    assert direct["outcome"] == "aborted"
    evs = events(raw)
    assert [json.loads(e[6:])["choices"][0]["delta"].get("content") for e in evs[:3]] == ["", "tok0", " tok1"]
    assert evs[3:] == [ENGINE_ABORT_EVENT[:-2]]
    assert raw.endswith(ENGINE_ABORT_EVENT) and b"[DONE]" not in raw and b'"finish_reason":"abort"' not in raw
    assert stack.backend_requests(stack.plain) == []  # content was sent: never retried
    assert stack.router.settled_metric("specgate_upstream_failures_total", 1, pool="spec", kind="engine_abort") == 1
    assert stack.router.state.runtime.endpoint(stack.spec.base_url).healthy
    assert endpoints_idle(stack)


@pytest.mark.parametrize("stream", [False, True])
def test_all_pools_full_is_503_engine_overloaded_with_retry_after(stack, stream):
    stack.script(stack.spec, {"fault": "queue_full"})
    stack.script(stack.plain, {"fault": "queue_full"})
    r = stack.client.post(CHAT, json=body(stream))
    assert r.status_code == 503
    assert r.headers["content-type"] == "application/json"
    assert r.content == OVERLOADED
    assert r.headers["retry-after"] == "3"  # health.retry_after_s: no engine sent one
    assert len(stack.backend_requests(stack.spec)) == 1 and len(stack.backend_requests(stack.plain)) == 1
    kind = "stream_error" if stream else "http_503"
    for pool in ("spec", "plain"):
        assert stack.router.settled_metric("specgate_engine_rejections_total", 1, pool=pool, reason=kind) == 1
    assert all(ep.healthy for ep in stack.router.state.runtime.all_endpoints())
    assert endpoints_idle(stack)


def test_all_pools_full_takes_the_largest_engine_retry_after(stack):
    stack.script(stack.spec, {"status": 503, "message": "The request queue is full."})
    stack.script(stack.plain, {"status": 429, "headers": {"retry-after": "7"}})
    r = stack.client.post(CHAT, json=body(True))
    assert (r.status_code, r.content, r.headers["retry-after"]) == (503, OVERLOADED, "7")
    assert endpoints_idle(stack)
