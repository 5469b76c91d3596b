"""Engine-internal request fields (router.access.engine_fields): placement directives stripped,
execution controls refused, a trusted caller's sent through; the table, the config's names
and the metric agree."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import get_args

import orjson
import pytest
from pydantic import ValidationError

from router.access.auth import load_auth
from router.access.engine_fields import FIELD_NAMES, apply, screen
from router.config.server import ENGINE_FIELDS, AuthConfig, EngineField
from router.errors import InvalidRequest

BASE = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
STRIP = sorted(k for k, v in ENGINE_FIELDS.items() if v == "strip")
REFUSE = sorted(k for k, v in ENGINE_FIELDS.items() if v == "refuse")
OWN = sorted(k for k, v in ENGINE_FIELDS.items() if v == "own")


def run(doc, allowed=frozenset()):
    seen: list[tuple[str, str]] = []
    body, out = apply(orjson.dumps(doc), doc, allowed, seen.append)
    return body, out, seen


def test_the_config_names_are_the_table():
    assert set(get_args(EngineField)) == set(ENGINE_FIELDS) == FIELD_NAMES
    assert STRIP == ["bootstrap_host", "bootstrap_port", "bootstrap_room", "data_parallel_rank",
                     "disagg_prefill_dp_rank", "routed_dp_rank"]
    assert REFUSE == ["custom_logit_processor", "custom_params", "return_hidden_states", "return_routed_experts",
                      "session_id", "session_params"]
    assert OWN == ["request_id", "rid"]


def test_a_body_without_them_is_untouched():
    body = orjson.dumps(BASE)
    assert screen(BASE, frozenset()) is None
    assert apply(body, BASE, frozenset(), pytest.fail) == (body, BASE)


@pytest.mark.parametrize("extra", [
    {"bootstrap_host": "10.0.0.66", "bootstrap_port": 8998, "bootstrap_room": 4242},
    {"routed_dp_rank": 0}, {"data_parallel_rank": 0}, {"disagg_prefill_dp_rank": 0}, {"routed_dp_rank": None},
])
def test_placement_directives_are_stripped_and_counted(extra):
    body, doc, seen = run({**BASE, **extra})
    assert doc == BASE and orjson.loads(body) == BASE
    assert seen == [(k, "stripped") for k in extra]


@pytest.mark.parametrize(("extra", "param"), [
    ({"custom_logit_processor": '{"callable": "80049"}', "custom_params": {"x": 1}}, "custom_logit_processor"),
    ({"custom_params": {"x": 1}}, "custom_params"),
    ({"return_hidden_states": True}, "return_hidden_states"),
    ({"return_hidden_states": "last"}, "return_hidden_states"),
    ({"routed_dp_rank": 1, "return_routed_experts": True}, "return_routed_experts"),
    ({"session_params": {"id": "s-1", "rid": "r-1", "offset": 0}}, "session_params"),
    ({"session_id": "s-1"}, "session_id"),
])
def test_execution_controls_are_refused_with_the_field_named(extra, param):
    with pytest.raises(InvalidRequest) as exc:
        run({**BASE, **extra})
    err = exc.value
    assert (err.status, err.type, err.code, err.param) == (400, "invalid_request_error", "unsupported_parameter", param)


@pytest.mark.parametrize("value", [None, False, "", {}, []])
def test_an_unset_control_passes(value):
    doc = {**BASE, "return_hidden_states": value}
    body = orjson.dumps(doc)
    assert apply(body, doc, frozenset(), lambda labels: None) == (body, doc)


def test_a_trusted_caller_sends_its_fields_through():
    doc = {**BASE, "bootstrap_room": 7, "return_hidden_states": True, "routed_dp_rank": 1}
    body, out, seen = run(doc, frozenset({"bootstrap_room", "return_hidden_states"}))
    assert out == {**BASE, "bootstrap_room": 7, "return_hidden_states": True}
    assert orjson.loads(body) == out
    assert sorted(seen) == [("bootstrap_room", "forwarded"), ("return_hidden_states", "forwarded"),
                            ("routed_dp_rank", "stripped")]


def test_the_config_is_strict():
    digest = "a" * 64
    cfg = AuthConfig(engine_fields={"allow": ["routed_dp_rank"], "keys": {digest: ["custom_logit_processor"]}})
    assert cfg.engine_fields.allow == ("routed_dp_rank",)
    assert cfg.engine_fields.keys[digest] == ("custom_logit_processor",)
    assert AuthConfig().engine_fields.allow == () and AuthConfig().engine_fields.keys == {}
    with pytest.raises(ValidationError):
        AuthConfig(engine_fields={"allow": ["input_ids"]})
    with pytest.raises(ValidationError):
        AuthConfig(engine_fields={"keys": {"sk-plain-key": ["routed_dp_rank"]}})


def test_a_key_grant_names_its_fields():
    trusted = hashlib.sha256(b"k-trusted").hexdigest()
    auth = load_auth(AuthConfig(api_keys=["k-trusted", "k-other"],
                                engine_fields={"keys": {trusted: ["routed_dp_rank"]}}), environ={})
    assert auth.engine_fields("Bearer k-trusted") == frozenset({"routed_dp_rank"})
    assert auth.engine_fields("Bearer k-other") == frozenset()
    assert auth.engine_fields(None) == frozenset()


def test_the_chart_schema_and_the_guide_name_the_table():
    root = Path(__file__).resolve().parents[2]
    schema = json.loads((root / "helm/specgate/values.schema.json").read_text())
    assert set(schema["$defs"]["engineField"]["enum"]) == FIELD_NAMES
    guide = (root / "docs/operator-guide.md").read_text()
    section = guide[guide.index("### Engine-internal fields"):guide.index("## Non-chat endpoints")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert named == FIELD_NAMES


@pytest.mark.parametrize("extra", [{"rid": "mine-1"}, {"rid": ["a", "b"]}, {"request_id": "resp_client-1"},
                                   {"rid": None}, {"rid": "x-specgate-1"}, {"rid": 7}])
def test_a_client_id_outside_the_routers_namespace_passes_uncounted(extra):
    doc = {**BASE, **extra}
    body = orjson.dumps(doc)
    assert apply(body, doc, frozenset(), pytest.fail) == (body, doc)


@pytest.mark.parametrize(("extra", "param"), [
    ({"rid": "specgate-8585ee5c-18"}, "rid"),
    ({"rid": ["mine", "specgate-8585ee5c-18_1"]}, "rid"),
    ({"request_id": "resp_specgate-8585ee5c-18"}, "request_id"),
])
def test_a_client_id_in_the_routers_namespace_is_refused(extra, param):
    with pytest.raises(InvalidRequest) as exc:
        run({**BASE, **extra})
    err = exc.value
    assert (err.status, err.type, err.code, err.param) == (400, "invalid_request_error", "invalid_value", param)


def test_a_refused_own_id_is_counted_and_a_trusted_caller_may_send_it():
    seen: list[tuple[str, str]] = []
    doc = {**BASE, "rid": "specgate-1"}
    with pytest.raises(InvalidRequest):
        apply(orjson.dumps(doc), doc, frozenset(), seen.append)
    assert seen == [("rid", "refused")]
    _, out, seen = run(doc, frozenset({"rid"}))
    assert (out, seen) == (doc, [("rid", "forwarded")])
