"""``/v1/responses`` through the router: counted and routed like chat, relayed to the engine's
own endpoint (SGLang 0.5.23 serves it), ``max_output_tokens`` treated like ``max_tokens``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import wait_until
from tests.support.stack import Stack

RESP = "/v1/responses"


@pytest.fixture
def stack(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Stack]:
    """The two-pool stack with ``serves: [generate, responses]`` on both pools (a reload)."""
    s = Stack(tmp_path, tokenizer_dir)
    try:
        doc = yaml.safe_load(s.config_path.read_text())
        for pool in doc["pools"]:
            pool["serves"] = ["generate", "responses"]
        s.config_path.write_text(yaml.safe_dump(doc))
        wait_until(lambda: all("responses" in p.config.serves for p in s.router.state.runtime.pools), 10,
                   "the config reload")
        yield s
    finally:
        s.close()


def _log(stack: Stack, fake: Any) -> list[dict[str, Any]]:
    return stack.backend_requests(fake, RESP)


def test_responses_is_routed_like_chat_and_relayed(stack: Stack) -> None:
    resp = stack.client.post(RESP, json={"model": "tiny-llama", "input": "hi", "max_output_tokens": 16})
    assert resp.status_code == 200, resp.text
    assert (resp.headers["x-specgate-pool"], resp.headers["x-specgate-reason"]) == ("spec", "speculative")
    doc = resp.json()
    assert doc["object"] == "response" and doc["usage"]["output_tokens"] == 16
    (got,) = _log(stack, stack.spec)
    rid = got["body"]["request_id"]
    assert got["body"] == {"model": "tiny-llama", "input": "hi", "max_output_tokens": 16, "request_id": rid}
    assert rid == doc["id"] and rid.startswith("resp_specgate-")
    assert stack.settled_inflight() == 0


def test_default_budget_is_forwarded_as_max_output_tokens(stack: Stack) -> None:
    resp = stack.client.post(RESP, json={"input": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 200
    (got,) = _log(stack, stack.spec)
    assert got["body"]["max_output_tokens"] == 256 and got["body"]["model"] == "tiny-llama"
    assert "max_tokens" not in got["body"]


def test_max_output_tokens_decides_the_pool_and_the_cap(stack: Stack) -> None:
    # over the spec pool's 2048-token limit: the plain pool (4096) takes it
    resp = stack.client.post(RESP, json={"model": "tiny-llama", "input": "hi", "max_output_tokens": 3000})
    assert (resp.status_code, resp.headers["x-specgate-pool"]) == (200, "plain")
    # over the global cap: refused before any engine, naming `input`
    resp = stack.client.post(RESP, json={"model": "tiny-llama", "input": "hi", "max_output_tokens": 5000})
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert (err["code"], err["param"], err["type"]) == ("context_length_exceeded", "input", "invalid_request_error")
    assert len(_log(stack, stack.spec)) + len(_log(stack, stack.plain)) == 1


def test_streamed_responses_end_with_response_completed_and_no_error_event(stack: Stack) -> None:
    body = {"model": "tiny-llama", "input": "hi", "max_output_tokens": 5, "stream": True,
            "request_id": "resp_client-1"}
    direct = httpx.post(stack.spec.base_url + RESP, json=body).content
    with stack.client.stream("POST", RESP, json=body) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        relayed = b"".join(resp.iter_raw())
    assert relayed == direct  # byte for byte; no [DONE] invented, no error event appended
    assert relayed.rstrip().split(b"\n\n")[-1].startswith(b"event: response.completed")
    assert stack.router.metric("specgate_upstream_failures_total", pool="spec", kind="upstream_truncated") == 0


def test_invalid_responses_fields_are_400s_naming_the_field(stack: Stack) -> None:
    for body, param in [({"input": 5}, "input"), ({"input": []}, "input"), ({"model": "tiny-llama"}, "input"),
                        ({"input": "hi", "max_output_tokens": "16"}, "max_output_tokens"),
                        ({"input": "hi", "instructions": 3}, "instructions"),
                        ({"input": [{"type": "frobnicate"}]}, "input"),
                        ({"input": [{"role": "root", "content": "x"}]}, "input")]:
        resp = stack.client.post(RESP, json=body)
        assert resp.status_code == 400, body
        assert resp.json()["error"]["param"] == param, body
    assert _log(stack, stack.spec) == [] and _log(stack, stack.plain) == []


def test_responses_is_a_404_unless_the_pools_list_it(tmp_path: Path, tokenizer_dir: Path) -> None:
    s = Stack(tmp_path, tokenizer_dir)
    try:
        resp = s.client.post(RESP, json={"model": "tiny-llama", "input": "hi"})
        assert resp.status_code == 404
        assert resp.json()["error"] == {
            "message": "/v1/responses is not served by this router: no pool lists `responses` in `serves`",
            "type": "invalid_request_error", "param": None, "code": "unsupported_endpoint"}
        assert _log(s, s.spec) == [] and _log(s, s.plain) == []
    finally:
        s.close()
