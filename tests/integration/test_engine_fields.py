"""Engine-internal fields and headers sent by clients, over real HTTP against the fake pools on
127.0.0.1: placement directives never reach an engine, execution controls are 400
``unsupported_parameter`` with no engine call, a trusted key sends its own through."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
TRUSTED, OTHER = "key-trusted", "key-other"
PLACEMENT = ("bootstrap_host", "bootstrap_port", "bootstrap_room", "routed_dp_rank", "data_parallel_rank",
             "disagg_prefill_dp_rank")


def body(**extra: object) -> dict:
    return {"model": "tiny-llama", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], **extra}


def sent(stack: Stack, path: str = CHAT) -> list[dict]:
    return stack.backend_requests(stack.spec, path) + stack.backend_requests(stack.plain, path)


@pytest.mark.parametrize("extra", [
    {"bootstrap_host": "10.0.0.66", "bootstrap_port": 8998, "bootstrap_room": 4242},
    {"routed_dp_rank": 0}, {"data_parallel_rank": 0}, {"disagg_prefill_dp_rank": 0},
])
@pytest.mark.parametrize("path", [CHAT, "/v1/completions"])
def test_placement_directives_never_reach_the_engine(stack, extra, path):
    doc = body(**extra) if path == CHAT else {"model": "tiny-llama", "max_tokens": 4, "prompt": "hi", **extra}
    r = stack.client.post(path, json=doc)
    assert r.status_code == 200, r.text
    (req,) = sent(stack, path)
    assert not set(PLACEMENT) & set(req["body"])
    for name in extra:
        assert stack.router.metric("specgate_engine_fields_total", field=name, action="stripped") == 1


def test_two_requests_with_one_room_both_succeed_without_it(stack):
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: stack.client.post(CHAT, json=body(bootstrap_room=4242, stream=True)),
                                range(2)))
    assert [r.status_code for r in answers] == [200, 200]
    assert all(r.text.rstrip().endswith("data: [DONE]") for r in answers)
    assert [("bootstrap_room" in req["body"]) for req in sent(stack)] == [False, False]


@pytest.mark.parametrize(("extra", "param"), [
    ({"custom_logit_processor": '{"callable": "80049"}', "custom_params": {"x": 1}}, "custom_logit_processor"),
    ({"return_hidden_states": True}, "return_hidden_states"),
    ({"return_routed_experts": True}, "return_routed_experts"),
    ({"session_params": {"id": "s-1", "offset": 0}}, "session_params"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_execution_controls_are_400_without_an_engine_call(stack, extra, param, stream):
    r = stack.client.post(CHAT, json=body(stream=stream, **extra))
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {
        "message": f"`{param}` is an engine-internal field that this router does not forward "
                   "(docs/operator-guide.md, \"Engine-internal fields\")",
        "type": "invalid_request_error", "param": param, "code": "unsupported_parameter"}
    assert sent(stack) == []
    assert stack.router.metric("specgate_engine_fields_total", field=param, action="refused") == 1
    assert stack.settled_inflight() == 0


def test_a_client_may_not_take_the_routers_own_request_ids(stack):
    """The router names a request without a ``rid`` ``specgate-<request id>`` (its response's
    ``id``); a client that sends the next such id would collide with another client's request
    on the engine (SGLang refuses a duplicate in-flight id), so it is refused, uncalled."""
    own = stack.client.post(CHAT, json=body()).json()["id"]
    assert own.startswith("specgate-")
    taken = own.rsplit("-", 1)[0] + "-" + str(int(own.rsplit("-", 1)[1]) + 2)
    r = stack.client.post(CHAT, json=body(rid=taken))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "invalid_value", "rid")
    r = stack.client.post("/v1/completions", json={"model": "tiny-llama", "max_tokens": 4, "prompt": ["a", "b"],
                                                   "rid": ["mine", taken]})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "rid")
    assert len(sent(stack)) + len(sent(stack, "/v1/completions")) == 1  # only the first request
    assert stack.router.metric("specgate_engine_fields_total", field="rid", action="refused") == 2
    mine = stack.client.post(CHAT, json=body(rid="client-chosen-1"))
    assert (mine.status_code, mine.json()["id"]) == (200, "client-chosen-1")
    assert sent(stack)[-1]["body"]["rid"] == "client-chosen-1"
    assert stack.settled_inflight() == 0


def test_engine_internal_headers_are_not_forwarded(stack):
    r = stack.client.post(CHAT, json=body(), headers={"X-Data-Parallel-Rank": "0", "x-smg-routing-key": "tenant-b",
                                                      "x-specgate-speculation": "auto"})
    assert r.status_code == 200, r.text
    (req,) = sent(stack)
    assert {k.lower() for k in req["headers"]} & {"x-data-parallel-rank", "x-smg-routing-key"} == set()


def test_a_trusted_key_sends_its_fields_through(tmp_path, tokenizer_dir):
    digest = hashlib.sha256(TRUSTED.encode()).hexdigest()
    s = Stack(tmp_path, tokenizer_dir, auth={"api_keys": [TRUSTED, OTHER], "engine_fields": {
        "keys": {digest: ["bootstrap_room", "return_hidden_states"]}}})
    try:
        doc = body(bootstrap_room=4242, return_hidden_states=True, routed_dp_rank=1)
        r = s.client.post(CHAT, json=doc, headers={"authorization": f"Bearer {TRUSTED}"})
        assert r.status_code == 200, r.text
        (req,) = sent(s)
        assert (req["body"]["bootstrap_room"], req["body"]["return_hidden_states"]) == (4242, True)
        assert "routed_dp_rank" not in req["body"]
        assert s.router.metric("specgate_engine_fields_total", field="bootstrap_room", action="forwarded") == 1
        r = s.client.post(CHAT, json=doc, headers={"authorization": f"Bearer {OTHER}"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "return_hidden_states"
        assert len(sent(s)) == 1
    finally:
        s.close()
