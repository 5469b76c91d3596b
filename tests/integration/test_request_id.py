"""The client's ``x-request-id``: adopted when it is a sane token (echoed, sent upstream, in
the access log), replaced by the router's own id otherwise; the engine rid stays the router's."""

from __future__ import annotations

import json
import logging

import pytest

from router.front.intake import client_request_id
from tests.support.stack import Stack


def chat(**extra):
    return {"model": "tiny-llama", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.parametrize(("value", "adopted"), [
    ("req-42", "req-42"),
    ("0f6c1a9e-2b3d-4c5e-8f70-1a2b3c4d5e6f", "0f6c1a9e-2b3d-4c5e-8f70-1a2b3c4d5e6f"),
    ("a" * 128, "a" * 128),
    ("a" * 129, None),
    ("has space", None),
    ("line\nbreak", None),
    ('quote"', None),
    ("", None),
    (None, None),
])
def test_client_request_id(value, adopted) -> None:
    assert client_request_id(value) == adopted


def test_client_request_id_is_echoed_logged_and_sent_upstream(tmp_path, tokenizer_dir, caplog) -> None:
    caplog.set_level(logging.INFO, logger="specgate.access")
    stack = Stack(tmp_path, tokenizer_dir, **{"server.log_requests": True})
    try:
        c = stack.client
        ok = c.post("/v1/chat/completions", json=chat(), headers={"x-request-id": "client-abc.1"})
        bad = c.post("/v1/chat/completions", json=chat(max_tokens="x"), headers={"x-request-id": "client-abc.2"})
        odd = c.post("/v1/chat/completions", json=chat(), headers={"x-request-id": "x" * 200})
        upstream = stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain)
    finally:
        stack.close()
    assert (ok.status_code, ok.headers["x-request-id"]) == (200, "client-abc.1")
    assert (bad.status_code, bad.headers["x-request-id"]) == (400, "client-abc.2")
    assert odd.status_code == 200 and odd.headers["x-request-id"] != "x" * 200
    own = odd.headers["x-request-id"]
    assert len(own) < 40
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "specgate.access"]
    assert [line["request_id"] for line in lines] == ["client-abc.1", "client-abc.2", own]
    assert [r["headers"]["x-request-id"] for r in upstream] == ["client-abc.1", own]
    rids = [r["body"]["rid"] for r in upstream]
    assert rids[1] == f"specgate-{own}"
    assert rids[0].startswith("specgate-") and "client-abc" not in rids[0]


def test_a_refused_request_is_logged_with_its_id_reason_and_prompt_size(tmp_path, tokenizer_dir, caplog) -> None:
    """The error path reads the request's context: the 400's access line names the adopted id,
    the refusal reason and the prompt size the policy refused (counted exactly: a small body)."""
    from router.request.features import parse_chat

    caplog.set_level(logging.INFO, logger="specgate.access")
    stack = Stack(tmp_path, tokenizer_dir, **{"server.log_requests": True})
    try:
        prompt = stack.router.state.runtime.counter.count(parse_chat(chat(), max_n=8))
        r = stack.client.post("/v1/chat/completions", json=chat(max_tokens=10**6),
                              headers={"x-request-id": "client-big"})
    finally:
        stack.close()
    assert (r.status_code, r.headers["x-request-id"], r.headers["x-specgate-reason"]) == (
        400, "client-big", "context_cap")
    lines = [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "specgate.access"]
    assert lines == [{"request_id": "client-big", "model": "tiny-llama", "pool": "none", "reason": "context_cap",
                      "status": 400, "code": "context_length_exceeded", "param": "messages", "prompt_tokens": prompt,
                      "prompt_tokens_exact": True}]
