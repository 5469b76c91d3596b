"""The router's front door over real HTTP on 127.0.0.1: what a body must be before any engine
sees it (duplicate keys, content codings) and what the router reads back (framing)."""

from __future__ import annotations

import pytest

from tests.support.errors import assert_e400
from tests.support.stack import Stack
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"
MSG = '[{"role":"user","content":"hi"}]'
JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(("raw", "path"), [
    ('{"model":"tiny-llama","max_tokens":100000,"messages":' + MSG + ',"max_tokens":8}', "max_tokens"),
    ('{"model":"junk-model","max_tokens":8,"messages":' + MSG + ',"model":"tiny-llama"}', "model"),
    ('{"model":"tiny-llama","stream":false,"max_tokens":8,"messages":' + MSG + ',"stream":true}', "stream"),
    ('{"model":"tiny-llama","max_tokens":100000,"messages":' + MSG + ',"max_\\u0074okens":8}', "max_tokens"),
    ('{"model":"tiny-llama","max_tokens":8,"messages":[{"role":"user","content":"' + "fill " * 600
     + '","content":"hi"}]}', "messages[0].content"),
])
def test_duplicate_keys_are_refused_before_any_engine_call(stack: Stack, raw: str, path: str) -> None:
    r = stack.client.post(CHAT, content=raw.encode(), headers=JSON)
    err = assert_e400(r, 400, "duplicate_key", path)
    assert err["message"] == f"duplicate key `{path}` in the request body"
    raw_completion = raw.replace('"messages":' + MSG, '"prompt":"hi"')
    if "messages" not in raw_completion:  # the same rule on /v1/completions
        assert_e400(stack.client.post("/v1/completions", content=raw_completion.encode(), headers=JSON),
                    400, "duplicate_key", path)
    assert stack.backend_requests(stack.spec, None) == [] and stack.backend_requests(stack.plain, None) == []
    assert stack.router.metric("specgate_requests_total", pool="none", reason="invalid_request",
                               status="400") >= 1


def test_unique_keys_with_any_spacing_are_served(stack: Stack) -> None:
    raw = b'{ "model" : "tiny-llama" ,\n "messages" : [ { "role" : "user" , "content" : "a: b" } ] ,\t"max_tokens" : 3 }'
    r = stack.client.post(CHAT, content=raw, headers=JSON)
    assert r.status_code == 200, r.text
    sent = stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain)
    assert len(sent) == 1 and sent[0]["body"]["max_tokens"] == 3



# -- framing: the engine's answer read by its grammar ---------------------------------------------

ROLE = 'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
TOK = 'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok0"}}]}\n\n'
SPACED_ABORT = ('data: {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, '
                '"finish_reason": "abort"}]}\n\n')


def chat(**kw):
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **kw}


@pytest.mark.parametrize("abort", [SPACED_ABORT, SPACED_ABORT.replace("data: ", "data:"),
                                   SPACED_ABORT.replace('"abort"', '"\\u0061bort"')])
def test_a_spaced_abort_after_content_is_an_error_event_not_done(stack: Stack, abort: str) -> None:
    from router.upstream.proxy import ENGINE_ABORT_EVENT

    stack.script(stack.spec, {"sse_events": [ROLE, TOK, abort, "data: [DONE]\n\n"]})
    with stack.client.stream("POST", CHAT, json=chat(stream=True)) as r:
        assert r.status_code == 200 and r.headers["x-specgate-pool"] == "spec"
        raw = r.read()
    assert raw == (ROLE + TOK).encode() + ENGINE_ABORT_EVENT  # no [DONE], the abort chunk not relayed
    assert stack.backend_requests(stack.plain) == []  # content was sent: never retried
    assert wait_until(lambda: stack.router.metric(
        "specgate_upstream_failures_total", pool="spec", kind="engine_abort") == 1, 5, "the abort counted")


def test_a_spaced_abort_before_content_is_a_refusal_resent_to_the_other_pool(stack: Stack) -> None:
    stack.script(stack.spec, {"sse_events": [ROLE.replace("data: ", "data:"), SPACED_ABORT, "data: [DONE]\n\n"]})
    r = stack.client.post(CHAT, json=chat(stream=True))
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "plain"
    assert r.content.endswith(b"data: [DONE]\n\n") and b"abort" not in r.content
    # counted when the relay ends, which can be just after the client read the last byte
    assert wait_until(lambda: stack.router.metric(
        "specgate_engine_rejections_total", pool="spec", reason="stream_abort") == 1, 5, "the refusal counted")


def test_events_without_the_space_after_data_relay_whole(stack: Stack) -> None:
    events = [ROLE.replace("data: ", "data:"), TOK.replace("data: ", "data:"),
              'data:{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', "data:[DONE]\n\n"]
    stack.script(stack.spec, {"sse_events": events})
    with stack.client.stream("POST", CHAT, json=chat(stream=True)) as r:
        assert r.status_code == 200
        raw = r.read()
    assert raw == "".join(events).encode()  # byte-identical, no error event appended
    assert stack.router.metric("specgate_upstream_failures_total", pool="spec", kind="upstream_truncated") == 0


def _whole(content: str) -> str:
    return ('{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", '
            f'"content": "{content}"}}, "finish_reason": "abort"}}], "usage": {{"prompt_tokens": 3, '
            '"completion_tokens": 1, "total_tokens": 4}}')


def test_a_non_streamed_abort_is_never_a_200(stack: Stack) -> None:
    answer = {"status": 200, "body_text": _whole("tok0"), "content_type": "application/json"}
    stack.script(stack.spec, answer)
    r = stack.client.post(CHAT, json=chat())
    assert_e400(r, 502, "engine_abort", None, type_="server_error")
    assert stack.backend_requests(stack.plain) == []
    stack.script(stack.spec, {**answer, "body_text": _whole("")})  # no output: a refusal, resent
    r = stack.client.post(CHAT, json=chat())
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "plain"
    assert r.json()["choices"][0]["finish_reason"] == "length"
    # counted when the response is finished (after its last byte reached the client)
    wait_until(lambda: stack.router.metric("specgate_engine_rejections_total", pool="spec", reason="body_abort") == 1,
               5, "the refusal counted")


def test_top_logprobs_follows_openai_limits(stack: Stack) -> None:
    for value in (21, 25, -1, 2.5, "5", True):
        r = stack.client.post(CHAT, json=chat(logprobs=True, top_logprobs=value))
        assert_e400(r, 400, "invalid_value", "top_logprobs")
    assert stack.backend_requests(stack.spec) == [] and stack.backend_requests(stack.plain) == []
    r = stack.client.post(CHAT, json=chat(logprobs=True, top_logprobs=20))
    assert r.status_code == 200, r.text
    sent = stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain)
    assert [s["body"]["top_logprobs"] for s in sent] == [20]


# -- compressed bodies ----------------------------------------------------------------------------

BODY = b'{"model":"tiny-llama","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'


@pytest.mark.parametrize(("coding", "encode"), [
    ("gzip", lambda b: __import__("gzip").compress(b)),
    ("deflate", lambda b: __import__("zlib").compress(b)),
    ("zstd", lambda b: __import__("zstandard").ZstdCompressor().compress(b)),
    ("identity", lambda b: b),
])
def test_compressed_bodies_are_decoded_and_forwarded_plain(stack: Stack, coding, encode) -> None:
    for path, stream in ((CHAT, False), (CHAT, True), ("/v1/completions", False)):
        body = BODY.replace(b'"messages":[{"role":"user","content":"hi"}]', b'"prompt":"hi"') \
            if path != CHAT else BODY
        if stream:
            body = body[:-1] + b',"stream":true}'
        r = stack.client.post(path, content=encode(body), headers={**JSON, "content-encoding": coding})
        assert r.status_code == 200, r.text
    sent = [s for f in (stack.spec, stack.plain) for s in stack.backend_requests(f, None)]
    assert len(sent) == 3
    for s in sent:
        assert "content-encoding" not in s["headers"] and isinstance(s["body"], dict)
        assert s["body"]["max_tokens"] == 8


def test_a_gzip_bomb_is_413_at_the_decoded_cap(stack: Stack) -> None:
    import gzip

    bomb = gzip.compress(b'{"model":"tiny-llama","messages":[{"role":"user","content":"' + b"a" * (48 << 20) + b'"}]}')
    assert len(bomb) < 100_000  # about 47 KiB on the wire, 48 MiB decoded; the cap is 1 MB
    r = stack.client.post(CHAT, content=bomb, headers={**JSON, "content-encoding": "gzip"})
    assert_e400(r, 413, "request_too_large", None)
    assert stack.backend_requests(stack.spec, None) == [] and stack.backend_requests(stack.plain, None) == []


def test_unknown_codings_are_415_and_corrupt_data_400_never_invalid_json(stack: Stack) -> None:
    r = stack.client.post(CHAT, content=BODY, headers={**JSON, "content-encoding": "br"})
    err = assert_e400(r, 415, "unsupported_content_encoding", None)
    assert err["message"] == "Content-Encoding br is not supported"
    assert r.headers["accept-encoding"] == "gzip, deflate, zstd, identity"
    r = stack.client.post(CHAT, content=BODY, headers={**JSON, "content-encoding": "gzip"})  # not gzip
    assert_e400(r, 400, "invalid_content_encoding", None)
    assert stack.backend_requests(stack.spec, None) == [] and stack.backend_requests(stack.plain, None) == []


# -- trace context --------------------------------------------------------------------------------

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("stream", [False, True])
def test_trace_context_reaches_the_engine_on_every_attempt(stack: Stack, stream: bool) -> None:
    stack.script(stack.spec, {"status": 500})  # the first attempt fails: failover to plain
    rid = "trace-req-0f3a"
    r = stack.client.post(CHAT, json=chat(stream=stream), headers={
        "traceparent": TRACEPARENT, "tracestate": "vendora=x,vendorb=y", "x-request-id": rid,
        "baggage": "user=alice"})
    assert r.status_code == 200 and r.headers["x-specgate-pool"] == "plain"
    assert r.headers["x-request-id"] == rid
    attempts = stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain)
    assert len(attempts) == 2
    for sent in attempts:
        h = sent["headers"]
        assert (h["traceparent"], h["tracestate"], h["x-request-id"]) == (TRACEPARENT, "vendora=x,vendorb=y", rid)
        assert "baggage" not in h
        assert sent["body"]["rid"] not in (rid, "4bf92f3577b34da6a3ce929d0e0e4736")  # the router's own id


def test_malformed_trace_context_is_dropped_and_the_request_served(stack: Stack) -> None:
    r = stack.client.post(CHAT, json=chat(), headers={"traceparent": "zz-" + "g" * 297, "tracestate": "=" * 600})
    assert r.status_code == 200
    sent = (stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain))[0]["headers"]
    assert "traceparent" not in sent and "tracestate" not in sent
    r = stack.client.post(CHAT, json=chat(), headers={"traceparent": TRACEPARENT, "tracestate": "=" * 600})
    assert r.status_code == 200
    sent = (stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain))[-1]["headers"]
    assert sent["traceparent"] == TRACEPARENT and "tracestate" not in sent


def test_the_stale_connection_resend_carries_the_trace_context_too(stack: Stack) -> None:
    headers = {"traceparent": TRACEPARENT, "tracestate": "vendora=x"}
    assert stack.client.post(CHAT, json=chat(), headers=headers).status_code == 200  # pools a connection
    pool = "spec" if stack.backend_requests(stack.spec) else "plain"
    fake = stack.spec if pool == "spec" else stack.plain
    stack.script(fake, {"fault": "reset", "reused_only": True})
    assert stack.client.post(CHAT, json=chat(), headers=headers).status_code == 200
    log = stack.backend_requests(fake)
    assert [e["fault"] for e in log[1:]] == ["reset", None]  # the reused connection broke, then the resend
    assert all((e["headers"]["traceparent"], e["headers"]["tracestate"]) == (TRACEPARENT, "vendora=x") for e in log)
    assert stack.router.settled_metric("specgate_upstream_stale_connection_retries_total", 1, pool=pool) == 1


def test_crlf_framed_streams_relay_whole_and_aborts_are_found(stack: Stack) -> None:
    from router.upstream.proxy import ENGINE_ABORT_EVENT

    stop = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    crlf = [e.replace("\n\n", "\r\n\r\n") for e in (ROLE, TOK, stop, "data: [DONE]\n\n")]
    stack.script(stack.spec, {"sse_events": crlf})
    with stack.client.stream("POST", CHAT, json=chat(stream=True)) as r:
        raw = r.read()
    assert raw == "".join(crlf).encode()  # byte-identical, nothing appended
    stack.script(stack.spec, {"sse_events": [crlf[0], crlf[1], SPACED_ABORT.replace("\n\n", "\r\n\r\n"), crlf[3]]})
    with stack.client.stream("POST", CHAT, json=chat(stream=True)) as r:
        raw = r.read()
    assert raw == (crlf[0] + crlf[1]).encode() + ENGINE_ABORT_EVENT


def test_admin_overrides_follow_the_same_body_rules(tmp_path, tokenizer_dir) -> None:
    import gzip

    s = Stack(tmp_path, tokenizer_dir, auth={"admin_api_key": "adm-key-1"})
    try:
        auth = {"authorization": "Bearer adm-key-1", **JSON}
        dup = b'{"routing":{"long_prompt_tokens":900,"long_prompt_tokens":5}}'
        assert_e400(s.client.put("/admin/config", content=dup, headers=auth), 400, "duplicate_key",
                    "routing.long_prompt_tokens")
        r = s.client.put("/admin/config", content=gzip.compress(b'{"routing":{"long_prompt_tokens":900}}'),
                         headers={**auth, "content-encoding": "gzip"})
        assert r.status_code == 200, r.text
        assert s.router.state.runtime.routing.long_prompt_tokens == 900
        assert_e400(s.client.put("/admin/config", content=b"{}", headers={**auth, "content-encoding": "br"}),
                    415, "unsupported_content_encoding", None)
    finally:
        s.close()
