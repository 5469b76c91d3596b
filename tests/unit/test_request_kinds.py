"""The generation kinds' hooks (router.front.request_kinds): what differs between chat, completions
and responses, and nothing else."""

from __future__ import annotations

import pytest

from router.config.tree import parse_config
from router.errors import InvalidRequest
from router.front.api import GENERATE_ROUTES
from router.front.request_kinds import KINDS, Chat, Completions, Responses, abort_rids
from router.front.responses import RESPONSES_END_EVENTS
from router.request.features import RequestFeatures

CONFIG = parse_config({
    "model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096, "max_n": 4},
    "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
    "pools": [{"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:1"]}]})
ONE = RequestFeatures(prompt_tokens=10, max_new_tokens=64, budget_defaulted=True)


def test_each_route_has_its_kind():
    assert {p: type(k) for p, k in GENERATE_ROUTES.items()} == {
        "/v1/chat/completions": Chat, "/v1/completions": Completions, "/v1/responses": Responses}
    assert {n: k.name for n, k in KINDS.items()} == {"chat": "chat", "completions": "completions",
                                                      "responses": "responses"}


@pytest.mark.parametrize("kind,doc,param", [
    ("chat", {"messages": [{"role": "user", "content": "hi"}]}, "messages"),
    ("completions", {"prompt": "hi"}, "prompt"),
    ("responses", {"input": "hi"}, "input"),
])
def test_each_kind_parses_its_own_body(kind, doc, param):
    parsed = KINDS[kind].parse(doc, CONFIG)
    assert parsed.param == param
    with pytest.raises(InvalidRequest):
        KINDS[kind].parse({**doc, "stream": "yes"}, CONFIG)


def test_chat_and_completions_name_the_engine_request_by_rid():
    for kind in ("chat", "completions"):
        fields: dict = {"max_tokens": 64}
        assert KINDS[kind].engine_ids({}, ONE, "ab-1", fields) == ("specgate-ab-1",)
        assert fields == {"max_tokens": 64, "rid": "specgate-ab-1"}
        assert KINDS[kind].end_events is None and KINDS[kind].spec_stats


def test_responses_adds_request_id_and_its_own_budget_field():
    fields: dict = {"max_tokens": 64}
    assert KINDS["responses"].engine_ids({}, ONE, "ab-1", fields) == ("resp_specgate-ab-1",)
    assert fields == {"max_output_tokens": 64, "request_id": "resp_specgate-ab-1"}
    assert KINDS["responses"].end_events == RESPONSES_END_EVENTS
    assert not KINDS["responses"].spec_stats
    assert KINDS["responses"].observer(None, {}) is None


@pytest.mark.parametrize("doc,features,ids,added", [
    ({}, ONE, ("specgate-r",), {"rid": "specgate-r"}),
    ({"rid": "mine"}, ONE, ("mine",), {}),
    ({"rid": "b"}, RequestFeatures(prompt_tokens=1, max_new_tokens=1, num_prompts=2), ("b_0", "b_1"), {}),
    ({"rid": ["x", "y"]}, RequestFeatures(prompt_tokens=1, max_new_tokens=1, num_prompts=2), ("x", "y"), {}),
    ({}, RequestFeatures(prompt_tokens=1, max_new_tokens=1, n=2), (), {}),
    ({"rid": None}, ONE, (), {}),
])
def test_abort_rids(doc, features, ids, added):
    fields: dict = {}
    assert abort_rids(doc, features, "r", fields) == ids
    assert fields == added
