"""The router against fake SGLang pools over real HTTP on 127.0.0.1 (failure cases from public issues)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import openai
import pytest

from router.upstream.proxy import UPSTREAM_FAILED_EVENT
from tests.support import wait_until
from tests.support.errors import assert_e400
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"


def body(content="hi", **kw):
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": content}], **kw}


def events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n"), raw[-80:]
    return raw[:-2].split(b"\n\n")


def test_short_request_goes_speculative_with_headers(stack):
    r = stack.client.post(CHAT, json=body(max_tokens=5))
    assert r.status_code == 200
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("spec", "speculative")
    doc = r.json()
    assert doc["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4"
    assert doc["usage"]["completion_tokens"] == 5
    # The router's count equals the engine's usage.prompt_tokens (same tokenizer and template).
    sent = stack.backend_requests(stack.spec)
    assert len(sent) == 1 and sent[0]["body"]["max_tokens"] == 5
    assert sent[0]["headers"]["accept-encoding"] == "identity"  # SSE must never come back compressed
    assert doc["id"] == sent[0]["body"]["rid"]
    assert stack.router.settled_metric("specgate_requests_total", 1, pool="spec", reason="speculative", status="200") == 1
    assert stack.settled_inflight() == 0


def test_prompt_count_matches_engine_usage(stack):
    for content in ["hi", "lorem ipsum dolor sit amet " * 30, "def f(x):\n    return x"]:
        r = stack.client.post(CHAT, json=body(content, max_tokens=1))
        counted = stack.router.state  # the router logs P; compare via the engine's view
        assert r.status_code == 200
        usage = r.json()["usage"]["prompt_tokens"]
        from router.request.features import parse_chat

        assert counted.runtime.counter.count(parse_chat(body(content), max_n=8)) == usage


def test_streaming_is_byte_identical_to_the_backend(stack):
    req = body("Count from 1 to 20.", max_tokens=20, stream=True, rid="fixed-rid-1")
    with stack.client.stream("POST", CHAT, json=req) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        assert r.headers["x-accel-buffering"] == "no"
        assert "content-encoding" not in r.headers
        via_router = r.read()
    req["rid"] = "fixed-rid-2"
    direct = httpx.post(stack.spec.base_url + CHAT, json=req).content
    norm = lambda raw: [json.loads(e[6:]) | {"created": 0, "id": ""} if e != b"data: [DONE]" else e
                        for e in events(raw)]
    assert norm(via_router) == norm(direct)
    evs = events(via_router)
    assert evs[-1] == b"data: [DONE]"
    assert json.loads(evs[-2][6:])["choices"][0]["finish_reason"] == "length"
    assert len(evs) == 1 + 20 + 1 + 1  # role, 20 tokens, finish, [DONE]


def test_stream_is_not_buffered(stack):  # BerriAI/litellm#26102
    stack.script(stack.spec, {"chunk_delay_s": 0.1})
    arrivals = []
    t0 = time.monotonic()
    with stack.client.stream("POST", CHAT, json=body(max_tokens=10, stream=True),
                             headers={"accept-encoding": "gzip"}) as r:
        assert "content-encoding" not in r.headers
        for chunk in r.iter_raw():
            arrivals.append(time.monotonic() - t0)
    # 13 events 0.1 s apart: the first bytes arrive >= 1 s before the last.
    assert arrivals[-1] - arrivals[0] >= 0.9
    assert arrivals[0] < 0.5


def test_overlength_is_400_before_any_backend_call(stack):  # sgl-project/sglang#6779, #4048, #17516
    long_text = "lorem ipsum " * 3000
    for req in (body(long_text, max_tokens=10), body(long_text, max_tokens=10, stream=True),
                body(long_text), body(max_tokens=10**12), body(max_completion_tokens=100_000_000),
                body(max_tokens=16, max_completion_tokens=100_000_000)):
        r = stack.client.post(CHAT, json=req)
        err = assert_e400(r, 400, "context_length_exceeded", "messages")
        assert "4096" in err["message"]
        assert r.headers["x-should-retry"] == "false"
    r = stack.client.post("/v1/completions", json={"model": "tiny-llama", "prompt": long_text, "max_tokens": 5})
    assert_e400(r, 400, "context_length_exceeded", "prompt")
    assert stack.backend_requests(stack.spec, None) == [] and stack.backend_requests(stack.plain, None) == []
    # max_completion_tokens wins (sgl-project/sglang#17516) and is what the engine receives.
    r = stack.client.post(CHAT, json=body(max_tokens=100_000_000, max_completion_tokens=16))
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 16


def test_exact_boundary(stack):  # sgl-project/sglang#6779, #33814
    from router.request.features import parse_chat

    text = "lorem ipsum " * 200
    p = stack.router.state.runtime.counter.count(parse_chat(body(text), max_n=8))
    r = stack.client.post(CHAT, json=body(text, max_tokens=4096 - p))
    assert r.status_code == 200, r.text
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "long_context")
    r = stack.client.post(CHAT, json=body(text, max_tokens=4096 - p + 1))
    assert_e400(r, 400, "context_length_exceeded", "messages")


def test_reported_prompt_tokens_are_true_statements(stack):
    """A prompt far over the cap is bounded, not counted: the 400 states "at least lo" with
    lo <= the exact count; the metric says which prompts were counted and which bounded."""
    import re

    from router.request.features import parse_chat

    long_text = "lorem ipsum " * 20000  # 240 kB: even its byte lower bound is over the cap
    exact = stack.router.state.runtime.counter.count(parse_chat(body(long_text), max_n=8))
    r = stack.client.post(CHAT, json=body(long_text, max_tokens=10))
    err = assert_e400(r, 400, "context_length_exceeded", "messages")
    m = re.fullmatch(r"This model's maximum context length is 4096 tokens\. However, your messages "
                     r"resulted in at least (\d+) tokens\. Please reduce the length of the messages\.",
                     err["message"])
    assert m is not None, err["message"]
    assert 4096 <= int(m.group(1)) <= exact
    bounded = stack.router.metric("specgate_prompt_tokens_count", kind="upper_bound")
    counted = stack.router.metric("specgate_prompt_tokens_count", kind="exact")
    stack.client.post(CHAT, json=body("hi", max_tokens=2))  # far below every threshold: bounded
    assert stack.router.metric("specgate_prompt_tokens_count", kind="upper_bound") == bounded + 1
    text = "lorem ipsum " * 200  # the cap minus max_tokens lies inside its bounds: counted
    p = stack.router.state.runtime.counter.count(parse_chat(body(text), max_n=8))
    r = stack.client.post(CHAT, json=body(text, max_tokens=4096 - p))
    assert r.status_code == 200, r.text
    assert stack.router.metric("specgate_prompt_tokens_count", kind="exact") == counted + 1


def test_small_prompt_refused_on_its_bound_is_counted_for_the_message(stack):
    """A small prompt refused because of its budget was sized by its byte bound (the decision
    needed nothing more); the 400 then states its exact count, not a bound like "at least 1"."""
    from router.request.features import parse_chat

    p = stack.router.state.runtime.counter.count(parse_chat(body("hi"), max_n=8))
    bounded = stack.router.metric("specgate_prompt_tokens_count", kind="upper_bound")
    r = stack.client.post(CHAT, json=body("hi", max_completion_tokens=100000))
    err = assert_e400(r, 400, "context_length_exceeded", "messages")
    assert err["message"] == (
        f"This model's maximum context length is 4096 tokens. However, you requested {p + 100000} "
        f"tokens ({p} in the messages, 100000 in the completion). Please reduce the length of the "
        f"messages or completion.")
    assert stack.router.metric("specgate_prompt_tokens_count", kind="upper_bound") == bounded + 1


def test_unknown_model_is_404_and_reaches_no_engine(stack):
    r = stack.client.post(CHAT, json={**body(max_tokens=4), "model": "gpt-4o"})
    err = assert_e400(r, 404, "model_not_found", "model")
    assert err["message"] == "The model `gpt-4o` does not exist."
    assert r.headers["x-specgate-reason"] == "model_not_found"
    r = stack.client.post("/v1/completions", json={"model": "tiny-llama-2", "prompt": "hi", "max_tokens": 2})
    assert_e400(r, 404, "model_not_found", "model")
    assert stack.backend_requests(stack.spec, None) == [] and stack.backend_requests(stack.plain, None) == []
    assert stack.router.metric("specgate_requests_total", pool="none", reason="model_not_found", status="404") == 2
    assert stack.settled_inflight() == 0


def test_missing_or_null_model_is_served_as_the_configured_model(stack):
    for doc in ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
                {"model": None, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}):
        r = stack.client.post(CHAT, json=doc)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "tiny-llama"
        assert stack.backend_requests(stack.spec)[-1]["body"]["model"] == "tiny-llama"


def test_adapter_no_engine_has_is_404_and_reaches_no_engine(stack):
    """SGLang picks a LoRA adapter with ``"<model>:<adapter>"``; neither fake has one (both
    listed in /v1/models at admission), so the router answers for the engine."""
    for model in ("tiny-llama:sql", "tiny-llama:"):
        assert_e400(stack.client.post(CHAT, json={**body(max_tokens=3), "model": model}),
                    404, "model_not_found", "model")
    assert_e400(stack.client.post(CHAT, json={**body(max_tokens=3), "lora_path": "sql"}),
                404, "model_not_found", "lora_path")
    assert stack.backend_requests(stack.spec, None) == [] and stack.backend_requests(stack.plain, None) == []


def test_model_aliases_are_accepted_and_listed(tmp_path, tokenizer_dir):
    stack = Stack(tmp_path, tokenizer_dir, **{"model.aliases": ["gpt-4o-mini"]})
    try:
        models = stack.client.get("/v1/models").json()
        assert [(m["id"], m["root"]) for m in models["data"]] == [("tiny-llama", "tiny-llama"),
                                                                  ("gpt-4o-mini", "tiny-llama")]
        r = stack.client.post(CHAT, json={**body(max_tokens=3), "model": "gpt-4o-mini"})
        assert r.status_code == 200, r.text
        # rewritten to the served name (an alias with a colon would read as an adapter there)
        assert stack.backend_requests(stack.spec)[-1]["body"]["model"] == "tiny-llama"
    finally:
        stack.close()


def test_spec_eligibility_boundary_uses_reserved_tokens(stack):  # sgl-project/sglang#3574
    from router.request.features import parse_chat

    p = stack.router.state.runtime.counter.count(parse_chat(body("hi"), max_n=8))
    L, K = 2048, 4
    expect = {L - K - 1: "spec", L - K: "spec", L - K + 1: "plain", L: "plain", L + 1: "plain"}
    for total, pool in expect.items():
        r = stack.client.post(CHAT, json=body(max_tokens=total - p))
        assert r.status_code == 200, (total, r.text)
        assert r.headers["x-specgate-pool"] == pool, total


def test_missing_max_tokens_is_forwarded_explicitly(stack):  # sgl-project/sglang#360, #4048
    r = stack.client.post(CHAT, json=body())
    assert r.status_code == 200
    assert stack.backend_requests(stack.spec)[0]["body"]["max_tokens"] == 256


@pytest.mark.parametrize("raw,ctype", [
    (b'{"model":"m","messages":[', "application/json"), (b"[]", "application/json"),
    (b"null", "application/json"), (b'"str"', "application/json"), (b"123", "application/json"),
    (b"{}", "application/json"),
    (json.dumps(body()).encode(), "text/plain"),
])
def test_malformed_bodies_are_400(stack, raw, ctype):  # vllm-project/vllm#42961
    r = stack.client.post(CHAT, content=raw, headers={"content-type": ctype})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert len(r.content) < 8192
    assert stack.backend_requests(stack.spec, None) == []


def test_validation_error_is_small_and_not_echoed(stack):  # vllm-project/vllm#49239
    doc = {"model": "m", "messages": [{"role": "user", "content": 123}] * 10_000}
    r = stack.client.post(CHAT, json=doc)
    assert_e400(r, 400, "invalid_value", "messages")
    assert len(r.content) < 8192


def test_huge_body_is_413_from_content_length(stack):  # sgl-project/sglang#38714
    # 1 MB cap in this config; declare 40 MB and send nothing more: rejected before reading.
    with socket.create_connection(("127.0.0.1", stack.router.port)) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: 40000000\r\n\r\n")
        s.settimeout(5)
        data = b""
        while b'"code"' not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 413")
    assert b'"code":"request_too_large"' in data


def test_chunked_body_stops_at_cap(stack):  # yhirose/cpp-httplib#144
    def gen():
        for _ in range(30):
            yield b"x" * 65536
    r = stack.client.post(CHAT, content=gen(), headers={"content-type": "application/json"})
    assert_e400(r, 413, "request_too_large", None)


def test_unknown_path_and_method_are_openai_errors(stack):
    r = stack.client.get("/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = stack.client.get(CHAT)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_upstream_400_normalised_and_not_retried(stack):  # NVIDIA-NeMo/Switchyard#426
    stack.script(stack.spec, {"status": 400, "message": "The input (5000 tokens) is longer than the model's context length (2048 tokens)."})
    r = stack.client.post(CHAT, json=body(max_tokens=5, stream=True))
    err = assert_e400(r, 400, "context_length_exceeded", "messages")
    assert "longer than the model's context length" in err["message"]
    assert len(stack.backend_requests(stack.spec)) == 1 and stack.backend_requests(stack.plain) == []
    stack.script(stack.spec, {"status": 400, "message": "bad sampling param"})
    r = stack.client.post(CHAT, json=body(max_tokens=5))
    assert_e400(r, 400, None, None)
    assert stack.settled_inflight() == 0


def test_upstream_500_before_first_byte_fails_over(stack):  # sgl-project/sglang#28569
    stack.script(stack.spec, {"status": 500})
    r = stack.client.post(CHAT, json=body(max_tokens=5, stream=True))
    assert r.status_code == 200
    assert r.headers["x-specgate-pool"] == "plain"
    assert events(r.content)[-1] == b"data: [DONE]"
    assert len(stack.backend_requests(stack.spec)) == 1 and len(stack.backend_requests(stack.plain)) == 1


def test_upstream_500_everywhere_is_502(stack):
    stack.script(stack.spec, {"status": 500})
    stack.script(stack.plain, {"status": 503})
    r = stack.client.post(CHAT, json=body(max_tokens=5, stream=True))
    assert_e400(r, 502, "upstream_error", None, type_="server_error")
    assert stack.settled_inflight() == 0


@pytest.mark.parametrize("fault", ["reset", "close", "truncate", "omit_done", "raw_text"])
def test_midstream_failure_sends_one_error_event_and_no_done(stack, fault):  # vllm-project/guidellm#743, BerriAI/litellm#1255
    stack.script(stack.spec, {"fault": fault, "after_chunks": 3})
    with stack.client.stream("POST", CHAT, json=body(max_tokens=50, stream=True)) as r:
        assert r.status_code == 200
        raw = r.read()
    assert raw.endswith(UPSTREAM_FAILED_EVENT)
    assert b"[DONE]" not in raw
    assert raw.count(b'"error"') == 1
    assert b'"finish_reason":"stop"' not in raw
    assert stack.settled_inflight() == 0
    assert len(stack.backend_requests(stack.spec)) == 1  # never retried after the first byte


def test_dead_spec_pool_fails_over_and_is_marked_down(stack):  # sgl-project/sglang#28569
    stack.spec.kill()
    for _ in range(5):
        r = stack.client.post(CHAT, json=body(max_tokens=5))
        assert r.status_code == 200
        assert r.headers["x-specgate-pool"] == "plain"
        assert r.headers["x-specgate-reason"] in ("speculative", "spec_unhealthy")
    ep = stack.router.state.runtime.endpoint(stack.spec.base_url)
    assert not ep.healthy
    assert stack.settled_inflight() == 0


def test_all_pools_down_is_503_with_retry_after_and_not_ready(stack):  # sgl-project/sglang#12248
    stack.spec.kill()
    stack.plain.kill()
    wait_until(lambda: not any(ep.healthy for ep in stack.router.state.runtime.all_endpoints()), 5,
               "both pools to be ejected")
    r = stack.client.post(CHAT, json=body(max_tokens=5))
    assert_e400(r, 503, "no_healthy_upstream", None, type_="server_error")
    assert r.headers["retry-after"] == "3"
    assert stack.client.get("/health").status_code == 200
    assert stack.client.get("/ready").status_code == 503


def test_saturation_bypass_with_hysteresis(stack):  # docs/operator-guide.md, "Tune the thresholds"
    reasons = []
    for running in (3, 8, 7, 6, 5, 7):
        stack.set_gauges(stack.spec, num_running_reqs=running)
        stack.wait_scrapes()
        r = stack.client.post(CHAT, json=body(max_tokens=2))
        reasons.append((r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]))
    assert reasons == [("spec", "speculative"), ("plain", "saturated"), ("plain", "saturated"),
                       ("plain", "saturated"), ("spec", "speculative"), ("spec", "speculative")]
    assert stack.router.metric("specgate_bypass_active", pool="spec", kind="saturated") == 0


def test_inflight_counts_drive_saturation(stack):
    stack.script(stack.spec, {"delay_s": 1.0, "count": 8})
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(12) as ex:
        futs = [ex.submit(stack.client.post, CHAT, json=body(max_tokens=2)) for _ in range(8)]
        wait_until(lambda: stack.inflight() == 8, 5, "8 requests in flight")
        r = stack.client.post(CHAT, json=body(max_tokens=2))
        assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "saturated")
        assert all(f.result().status_code == 200 for f in futs)
    assert stack.settled_inflight() == 0


def test_client_disconnect_aborts_upstream(stack):  # sgl-project/sglang#37833, #11399
    stack.script(stack.spec, {"chunk_delay_s": 0.05, "ignore_disconnect": True})
    with httpx.Client(base_url=stack.router.base_url, timeout=10) as c, \
            c.stream("POST", CHAT, json=body(max_tokens=400, stream=True)) as r:
        it = r.iter_raw()
        for _ in range(5):
            next(it)
    wait_until(lambda: stack.fake_log(stack.spec)["aborts"] and stack.inflight() == 0, 3, "the abort")
    log = stack.fake_log(stack.spec)
    assert len(log["aborts"]) == 1 and log["aborts"][0]["matched"] is True
    assert log["aborts"][0]["rid"] == stack.backend_requests(stack.spec)[0]["body"]["rid"]
    assert stack.settled_inflight() == 0
    assert stack.router.settled_metric("specgate_upstream_aborts_total", 1, pool="spec") == 1


def test_client_disconnect_aborts_every_prompt_of_a_batch(stack):
    """A batch of prompts runs as one engine request per prompt, ``<rid>_<i>`` (SGLang's
    ``_normalize_rid``): a disconnect aborts each of them."""
    for fake in (stack.spec, stack.plain):
        stack.script(fake, {"chunk_delay_s": 0.05, "ignore_disconnect": True})
    doc = {"model": "tiny-llama", "prompt": ["one", "two", "three"], "max_tokens": 400, "stream": True}
    with httpx.Client(base_url=stack.router.base_url, timeout=10) as c, \
            c.stream("POST", "/v1/completions", json=doc) as r:
        pool = r.headers["x-specgate-pool"]
        it = r.iter_raw()
        for _ in range(5):
            next(it)
    fake = stack.spec if pool == "spec" else stack.plain
    wait_until(lambda: len(stack.fake_log(fake)["aborts"]) >= 3, 3, "three aborts")
    rid = stack.backend_requests(fake, "/v1/completions")[0]["body"]["rid"]
    assert rid.startswith("specgate-")
    aborts = stack.fake_log(fake)["aborts"]
    assert sorted(a["rid"] for a in aborts) == [f"{rid}_0", f"{rid}_1", f"{rid}_2"]
    assert all(a["matched"] for a in aborts)
    assert stack.settled_inflight() == 0
    assert stack.router.settled_metric("specgate_upstream_aborts_total", 1, pool=pool) == 1


def test_n_greater_than_one_sends_no_rid(stack):
    """With ``n > 1`` SGLang replaces the body's ``rid`` with a fresh id per sample, so the
    router adds none (it could abort nothing with it)."""
    r = stack.client.post(CHAT, json=body(max_tokens=3, n=2))
    assert r.status_code == 200, r.text
    assert "rid" not in stack.backend_requests(stack.spec)[-1]["body"]


def test_client_disconnect_during_prefill_aborts(stack):  # lemonade-sdk/lemonade#3133
    stack.script(stack.spec, {"delay_s": 3.0, "ignore_disconnect": True})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(stack.router.base_url + CHAT, json=body(max_tokens=5, stream=True), timeout=0.5)
    wait_until(lambda: stack.fake_log(stack.spec)["aborts"], 3, "the abort")
    assert len(stack.fake_log(stack.spec)["aborts"]) == 1
    assert stack.settled_inflight() == 0


def test_first_byte_timeout_aborts_and_fails_over(stack):  # BerriAI/litellm#34819, radixark/miles#1334
    stack.script(stack.spec, {"fault": "hang"})
    r = stack.client.post(CHAT, json=body(max_tokens=5, stream=True))
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "plain"  # nothing had reached the client
    assert events(r.content)[-1] == b"data: [DONE]"
    assert len(stack.backend_requests(stack.spec)) == 1 and len(stack.backend_requests(stack.plain)) == 1
    wait_until(lambda: len(stack.fake_log(stack.spec)["aborts"]) == 1, 3, "the abort")


def test_first_byte_timeout_everywhere_is_504_and_aborts(stack):
    stack.script(stack.spec, {"fault": "hang"})
    stack.script(stack.plain, {"fault": "hang"})
    r = stack.client.post(CHAT, json=body(max_tokens=5, stream=True))
    assert_e400(r, 504, "upstream_timeout", None, type_="server_error")
    assert len(stack.backend_requests(stack.spec)) == 1 and len(stack.backend_requests(stack.plain)) == 1
    wait_until(lambda: len(stack.fake_log(stack.spec)["aborts"]) == 1 and len(stack.fake_log(stack.plain)["aborts"]) == 1,
               3, "both aborts")


def test_n_greater_than_one_streams_all_choices(stack):  # sgl-project/sglang#1134, ai-dynamo/dynamo#8745
    with stack.client.stream("POST", CHAT, json=body("Name a color.", n=4, temperature=0.8,
                                                     max_tokens=10, stream=True)) as r:
        raw = r.read()
    evs = events(raw)
    finishes = [json.loads(e[6:])["choices"][0]["index"] for e in evs[:-1]
                if json.loads(e[6:])["choices"] and json.loads(e[6:])["choices"][0]["finish_reason"]]
    assert sorted(finishes) == [0, 1, 2, 3]
    assert evs.count(b"data: [DONE]") == 1
    for n in (0, -1, 9223372036854775807):
        assert_e400(stack.client.post(CHAT, json=body(n=n)), 400, "invalid_value", "n")


def test_tool_call_conversation_forwarded_unchanged(stack):  # vllm-project/vllm#16774
    msgs = [
        {"role": "user", "content": "Weather in CITY?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\":\"CITY\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\":21}"},
        {"role": "assistant", "content": "It is 21 C.", "tool_calls": None},
        {"role": "user", "content": "Thanks"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    r = stack.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 64, "tools": tools, "messages": msgs})
    assert r.status_code == 200
    assert r.headers["x-specgate-reason"] == "tool_calls"   # a tools request goes to the plain pool
    assert stack.backend_requests(stack.plain)[0]["body"]["messages"] == msgs
    big_tools = tools * 400
    r = stack.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 64, "tools": big_tools, "messages": msgs})
    assert_e400(r, 400, "context_length_exceeded", "messages")


def test_openai_client_stream_and_not(stack):
    client = stack.router.openai_client()
    resp = client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert resp.choices[0].message.content == "tok0 tok1 tok2 tok3"
    parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True) if c.choices]
    assert "".join(parts) == "tok0 tok1 tok2 tok3"
    comp = client.completions.create(model="tiny-llama", prompt="def f(x):", max_tokens=3)
    assert comp.choices[0].text == "tok0 tok1 tok2"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="tiny-llama", messages=[{"role": "user", "content": "x " * 5000}],
                                       max_tokens=5, stream=True)
    assert exc.value.code == "context_length_exceeded"
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny-llama"]


def test_metrics_endpoint_uses_own_prefix(stack):
    stack.client.post(CHAT, json=body(max_tokens=2))
    text = stack.client.get("/metrics").text
    assert 'specgate_requests_total{model="tiny-llama",pool="spec",reason="speculative",status="200"} 1.0' in text
    assert "specgate_pool_healthy_endpoints" in text
    assert "\nsglang" not in text


def test_in_stream_engine_error_becomes_a_real_400(stack):
    # SGLang 0.5.23 refuses P >= context - 6 in the scheduler; streamed, that is HTTP 200 plus
    # one `data: {"error": ...}` event. The router has sent nothing yet, so it answers 400.
    doc = {"model": "tiny-llama", "prompt": [5] * 4093, "max_tokens": 1, "stream": True}
    r = stack.client.post("/v1/completions", json=doc)
    err = assert_e400(r, 400, "context_length_exceeded", "prompt")
    assert "exceeds the maximum allowed length" in err["message"]
    assert r.headers["x-specgate-pool"] == "plain"
    assert len(stack.backend_requests(stack.plain, "/v1/completions")) == 1
    assert stack.settled_inflight() == 0


def test_stream_idle_midstream_sends_timeout_event_and_aborts(tmp_path, tokenizer_dir):
    """An engine that goes silent mid-stream: after upstream.idle_timeout_s the client gets one
    upstream_timeout error event (no [DONE]), the engine an abort_request, the lease is freed;
    chunks arriving faster than the idle timeout never trip it, however long the stream."""
    from router.upstream.proxy import UPSTREAM_TIMEOUT_EVENT
    stack = Stack(tmp_path, tokenizer_dir, **{"upstream.idle_timeout_s": 0.6})
    try:
        stack.script(stack.spec, {"chunk_delay_s": 0.2, "max_tokens": 12})  # 2.6 s of stream, gaps < 0.6 s
        with stack.client.stream("POST", CHAT, json=body(max_tokens=12, stream=True)) as r:
            raw = r.read()
        assert raw.rstrip().endswith(b"data: [DONE]") and b'"error"' not in raw
        stack.script(stack.spec, {"fault": "hang", "after_chunks": 2})
        t0 = time.monotonic()
        with stack.client.stream("POST", CHAT, json=body(max_tokens=50, stream=True)) as r:
            assert r.status_code == 200
            raw = r.read()
        waited = time.monotonic() - t0
        assert raw.endswith(UPSTREAM_TIMEOUT_EVENT)
        assert b"[DONE]" not in raw and raw.count(b'"error"') == 1
        assert 0.6 <= waited < 3.0
        assert stack.settled_inflight() == 0
        wait_until(lambda: stack.router.metric("specgate_upstream_aborts_total", pool="spec") >= 1, 3, "the abort")
        assert stack.router.metric("specgate_upstream_aborts_total", pool="spec") == 1
        assert stack.router.metric("specgate_upstream_failures_total", pool="spec", kind="upstream_idle_timeout") == 1
    finally:
        stack.close()


def test_a_non_streamed_disconnect_is_seen_by_the_protocol_without_a_watcher_task(stack, monkeypatch):
    """Under the router's own HTTP protocol the proxy starts no task to watch ``receive``: the
    protocol's ``connection_lost`` calls the proxy back (router.front.context.CONNECTION_KEY), and
    the engine is asked to abort as with the task (which an ASGI server without the protocol
    still gets)."""
    import asyncio

    started: list[str] = []
    real = asyncio.create_task

    def counting(coro, **kwargs):
        started.append(getattr(coro, "__qualname__", ""))
        return real(coro, **kwargs)

    monkeypatch.setattr(asyncio, "create_task", counting)
    stack.script(stack.spec, {"delay_s": 3.0, "ignore_disconnect": True})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(stack.router.base_url + CHAT, json=body(max_tokens=5), timeout=0.5)
    wait_until(lambda: stack.fake_log(stack.spec)["aborts"] and stack.inflight() == 0, 3, "the abort")
    assert len(stack.fake_log(stack.spec)["aborts"]) == 1
    assert "ProxyResponse.__call__.<locals>.watch" not in started
    assert stack.settled_inflight() == 0


def test_the_aiohttp_client_relays_the_same_answers_and_streams(tmp_path, tokenizer_dir):
    from router.upstream.transport_aiohttp import AiohttpTransport

    s = Stack(tmp_path, tokenizer_dir, **{"upstream.client": "aiohttp"})
    try:
        assert type(s.router.state.transport) is AiohttpTransport
        r = s.client.post(CHAT, json=body(max_tokens=5))
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4"
        with s.client.stream("POST", CHAT, json=body(max_tokens=3, stream=True)) as streamed:
            evs = events(streamed.read())
        assert evs[-1] == b"data: [DONE]" and len(evs) == 1 + 3 + 1 + 1  # role, 3 tokens, finish, [DONE]
        assert s.settled_inflight() == 0
    finally:
        s.close()


def test_generation_requests_go_through_the_httptools_client_by_default(stack):
    from router.upstream.transport_h1 import H1Transport

    transport = stack.router.state.transport
    assert type(transport) is H1Transport
    assert stack.client.post(CHAT, json=body(max_tokens=2)).status_code == 200
    assert transport.open_connections == 1  # its own engine connection, kept alive (scrapes use aiohttp)
