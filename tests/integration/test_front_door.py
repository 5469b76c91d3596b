"""The router's front door over real HTTP on 127.0.0.1: what a body must be before any engine
sees it (duplicate keys, content codings) and what the router reads back (framing)."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.test_router_proxy import assert_e400
from tests.support.stack import Stack

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

