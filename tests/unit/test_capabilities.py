"""What a request needs from its pool (router.request.capabilities) and how the decision applies it."""

from __future__ import annotations

import dataclasses

import pytest

from router.config.tree import ConfigError, parse_config
from router.decision.policy import (
    Decision,
    EndpointSnapshot,
    Outcome,
    PoolSnapshot,
    Reason,
    Rules,
    decide,
)
from router.errors import InvalidRequest
from router.reasons import CAPABILITY_KINDS
from router.request.capabilities import (
    KINDS,
    TRIGGER_FIELDS,
    TRIGGER_FLAGS,
    TRIGGERS,
    _check_registry,
    _trigger,
    _triggers,
    required_features,
    speculation_gate,
    speculation_hint,
    trigger_param,
    unmet,
    validate,
)
from router.request.features import RequestFeatures
from router.request.parsing import ParsedRequest

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
STRICT_TOOLS = [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {}}}]


def req(doc):
    """``doc`` as the parser hands it on: a chat request with nothing found in ``messages``."""
    return ParsedRequest("chat", doc, None, 1, False, "messages")

NEEDS = [
    ("plain chat", {}, set()),
    ("response_format text", {"response_format": {"type": "text"}}, set()),
    ("json_object", {"response_format": {"type": "json_object"}}, {"constrained_decoding"}),
    ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}}},
     {"constrained_decoding"}),
    ("structural_tag format", {"response_format": {"type": "structural_tag", "structures": [], "triggers": []}},
     {"constrained_decoding"}),
    ("regex", {"regex": "(yes|no)"}, {"constrained_decoding"}),
    ("empty regex is no constraint", {"regex": ""}, set()),
    ("ebnf", {"ebnf": 'root ::= "yes" | "no"'}, {"constrained_decoding"}),
    ("extension json_schema", {"json_schema": '{"type":"object"}'}, {"constrained_decoding"}),
    ("extension structural_tag", {"structural_tag": "{}"}, {"constrained_decoding"}),
    ("tools auto", {"tools": TOOLS, "tool_choice": "auto"}, {"tool_calls"}),
    ("tools default choice", {"tools": TOOLS}, {"tool_calls"}),
    ("tools none", {"tools": TOOLS, "tool_choice": "none"}, set()),
    ("empty tools", {"tools": [], "tool_choice": "auto"}, set()),
    ("tool_choice required", {"tools": TOOLS, "tool_choice": "required"}, {"constrained_decoding", "tool_calls"}),
    ("named tool", {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     {"constrained_decoding", "tool_calls"}),
    ("strict tool", {"tools": STRICT_TOOLS}, {"constrained_decoding", "tool_calls"}),
    ("strict tool, choice none", {"tools": STRICT_TOOLS, "tool_choice": "none"}, {"constrained_decoding"}),
    ("enable_thinking", {"chat_template_kwargs": {"enable_thinking": True}}, {"reasoning"}),
    ("enable_thinking false", {"chat_template_kwargs": {"enable_thinking": False}}, set()),
    ("thinking kwarg", {"chat_template_kwargs": {"thinking": True}}, {"reasoning"}),
    ("reasoning_effort", {"reasoning_effort": "low"}, {"reasoning"}),
    ("reasoning_effort none", {"reasoning_effort": "none"}, set()),
    ("reasoning object", {"reasoning": {"effort": "high"}}, {"reasoning"}),
    ("separate_reasoning", {"separate_reasoning": True}, {"reasoning"}),
    ("chat logprobs", {"logprobs": True, "top_logprobs": 2}, {"logprobs"}),
    ("chat logprobs false", {"logprobs": False}, set()),
    ("completions logprobs 0", {"logprobs": 0}, {"logprobs"}),
    ("presence penalty", {"presence_penalty": 0.5}, {"sampling_controls"}),
    ("zero penalties", {"presence_penalty": 0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}, set()),
    ("repetition penalty", {"repetition_penalty": 1.1}, {"sampling_controls"}),
    ("min_p", {"min_p": 0.05}, {"sampling_controls"}),
    ("min_tokens", {"min_tokens": 4}, {"sampling_controls"}),
    ("custom logit processor", {"custom_logit_processor": "x"}, {"sampling_controls"}),
    ("logit_bias is lossless", {"logit_bias": {"50256": -100}}, set()),
    ("top_k/top_p/seed", {"top_k": 5, "top_p": 0.9, "seed": 1, "temperature": 0.7}, set()),
    ("tools+thinking repro", {"tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": True,
                   "chat_template_kwargs": {"enable_thinking": True}}, {"tool_calls", "reasoning"}),
]


@pytest.mark.parametrize("name,doc,expected", NEEDS, ids=[c[0] for c in NEEDS])
def test_required_features(name, doc, expected):
    validate(doc)
    assert required_features(req(doc)) == frozenset(expected)


@pytest.mark.parametrize("name,doc,expected", NEEDS, ids=[c[0] for c in NEEDS])
def test_the_fast_path_skips_only_bodies_without_a_trigger_field(name, doc, expected):
    # a body needing a kind names a field of TRIGGER_FIELDS, and the set test agrees with the full scan
    assert not expected or not TRIGGER_FIELDS.isdisjoint(doc)
    assert required_features(req(doc)) == frozenset(_triggers(req(doc)))
    assert required_features(req({**doc, "tool_choice": "required"})) == frozenset(
        _triggers(req({**doc, "tool_choice": "required"})))


def test_trigger_param_names_the_field():
    assert trigger_param(req({"regex": "a", "tools": STRICT_TOOLS}), "constrained_decoding") == "regex"
    assert trigger_param(req({"tools": STRICT_TOOLS}), "constrained_decoding") == "tools"
    assert trigger_param(req({"response_format": {"type": "json_object"}}), "constrained_decoding") == "response_format"
    assert trigger_param(req({}), "logprobs") is None
    assert trigger_param(req({"tools": TOOLS}), "no_such_kind") is None


def test_every_capability_kind_has_one_trigger_in_the_tables_order():
    assert tuple(TRIGGERS) == KINDS
    # what the fast path tests besides the body's fields is what the parser hands on
    assert set(TRIGGER_FLAGS) <= {f.name for f in dataclasses.fields(ParsedRequest)}


def test_a_kind_without_a_trigger_or_a_trigger_without_a_kind_fails_loudly():
    with pytest.raises(RuntimeError, match="without a trigger in router/request/capabilities.py: constrained_decoding"):
        _check_registry({}, CAPABILITY_KINDS[:1])
    with pytest.raises(RuntimeError, match="not capability kinds: speculative"):
        _check_registry({Reason.SPECULATIVE: None}, ())

    def fn(request):
        return None

    with pytest.raises(ValueError, match="'speculative', which is not a capability kind"):
        _trigger(Reason.SPECULATIVE, fields=("x",))(fn)
    with pytest.raises(ValueError, match="'logprobs' has two triggers"):
        _trigger(Reason.LOGPROBS, fields=("x",))(fn)
    with pytest.raises(ValueError, match="declares no fields and no flags"):
        _trigger(Reason.LOGPROBS)(fn)
    assert tuple(TRIGGERS) == KINDS   # a refused registration changed nothing


INVALID = [
    ("response_format not an object", {"response_format": "json"}, "response_format"),
    ("unknown type", {"response_format": {"type": "yaml"}}, "response_format"),
    ("json_schema without json_schema", {"response_format": {"type": "json_schema"}}, "response_format"),
    ("json_schema without schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "c"}}},
     "response_format"),
    ("json_schema schema not an object",
     {"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": "x"}}}, "response_format"),
    ("json_schema without name", {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
     "response_format"),
    ("json_schema strict not bool",
     {"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA, "strict": "yes"}}},
     "response_format"),
    ("regex not a string", {"regex": ["a"]}, "regex"),
    ("ebnf not a string", {"ebnf": 1}, "ebnf"),
    ("json_schema extension not a string", {"json_schema": {"type": "object"}}, "json_schema"),
    ("tool_choice unknown", {"tool_choice": "always"}, "tool_choice"),
    ("tool_choice named without name", {"tool_choice": {"type": "function", "function": {}}}, "tool_choice"),
]


@pytest.mark.parametrize("name,doc,param", INVALID, ids=[c[0] for c in INVALID])
def test_malformed_constraints_are_400_with_their_param(name, doc, param):
    with pytest.raises(InvalidRequest) as info:
        validate(doc)
    assert (info.value.status, info.value.param, info.value.code) == (400, param, "invalid_value")


def test_json_schema_shorthand_is_accepted():
    doc = {"response_format": {"type": "json_schema", "schema": SCHEMA}}  # SGLang's set_json_schema
    validate(doc)
    assert required_features(req(doc)) == {"constrained_decoding"}


def test_unmet_reports_the_first_missing_kind_in_order():
    need = frozenset({"logprobs", "tool_calls", "constrained_decoding"})
    assert unmet(need, None) is None
    assert unmet(need, frozenset()) == "constrained_decoding"
    assert unmet(need, frozenset({"constrained_decoding"})) == "tool_calls"
    assert unmet(need, frozenset({"constrained_decoding", "tool_calls", "logprobs"})) is None
    assert unmet(frozenset(), frozenset()) is None


def test_speculation_gate():
    assert speculation_gate(frozenset(), "off", None) == "client_opt_out"
    assert speculation_gate(frozenset({"reasoning"}), "on", frozenset()) == "reasoning"
    assert speculation_gate(frozenset({"reasoning"}), "auto", frozenset({"reasoning"})) is None


def test_speculation_hint_precedence_and_validation():
    assert speculation_hint({}, None, None) == "auto"
    assert speculation_hint({}, None, "off") == "off"
    assert speculation_hint({}, " On ", "off") == "on"
    assert speculation_hint({"specgate_speculation": "off"}, "on", "on") == "off"
    with pytest.raises(InvalidRequest) as info:
        speculation_hint({"specgate_speculation": "sometimes"}, None, None)
    assert info.value.param == "specgate_speculation"
    with pytest.raises(InvalidRequest) as info:
        speculation_hint({}, "maybe", None)
    assert (info.value.param, info.value.code) == (None, "invalid_header")


# --- the decision -----------------------------------------------------------------------

RULES = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)


def spec(capabilities=frozenset(), low_acceptance=frozenset(), saturated=False):
    return PoolSnapshot("spec", True, 2048, 4, (EndpointSnapshot("http://s0", True, 0),),
                        saturated=saturated, low_acceptance=low_acceptance, capabilities=capabilities)


def plain(healthy=True):
    return PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p0", healthy, 0),))


def feats(needs=(), speculation="auto", p=100):
    return RequestFeatures(prompt_tokens=p, max_new_tokens=10, needs=frozenset(needs), speculation=speculation)


DECISIONS = [
    ("plain sampling -> spec", feats(), [spec(), plain()], Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("constrained -> plain", feats({"constrained_decoding"}), [spec(), plain()],
     Decision("plain", "http://p0", Reason.CONSTRAINED_DECODING)),
    ("tools -> plain", feats({"tool_calls"}), [spec(), plain()], Decision("plain", "http://p0", Reason.TOOL_CALLS)),
    ("reasoning -> plain", feats({"reasoning"}), [spec(), plain()], Decision("plain", "http://p0", Reason.REASONING)),
    ("logprobs -> plain", feats({"logprobs"}), [spec(), plain()], Decision("plain", "http://p0", Reason.LOGPROBS)),
    ("penalties -> plain", feats({"sampling_controls"}), [spec(), plain()],
     Decision("plain", "http://p0", Reason.SAMPLING_CONTROLS)),
    ("validated constrained -> spec", feats({"constrained_decoding"}), [spec({"constrained_decoding"}), plain()],
     Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("partly validated -> plain", feats({"tool_calls", "reasoning"}), [spec({"tool_calls"}), plain()],
     Decision("plain", "http://p0", Reason.REASONING)),
    ("capability before long context", feats({"logprobs"}, p=2000), [spec(), plain()],
     Decision("plain", "http://p0", Reason.LOGPROBS)),
    ("no pool serves it -> refused", feats({"tool_calls"}), [spec()],
     Decision(None, None, Reason.TOOL_CALLS, Outcome.REFUSED)),
    ("needs but plain down -> 503, never spec", feats({"constrained_decoding"}), [spec(), plain(healthy=False)],
     Decision(None, None, Reason.NO_HEALTHY_UPSTREAM, Outcome.UNAVAILABLE)),
    ("hint off -> plain", feats(speculation="off"), [spec(), plain()],
     Decision("plain", "http://p0", Reason.CLIENT_OPT_OUT)),
    ("hint off, plain down -> spec fallback", feats(speculation="off"), [spec(), plain(healthy=False)],
     Decision("spec", "http://s0", Reason.PLAIN_UNHEALTHY)),
    ("hint off, spec-only config -> spec", feats(speculation="off"), [spec()],
     Decision("spec", "http://s0", Reason.PLAIN_UNHEALTHY)),
    ("hint on passes the long-prompt threshold", feats(speculation="on", p=1500), [spec(), plain()],
     Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("hint on passes the acceptance bypass", feats(speculation="on"), [spec(low_acceptance=frozenset({"greedy", "sampled"})), plain()],
     Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("hint on keeps the saturation guard", feats(speculation="on"), [spec(saturated=True), plain()],
     Decision("plain", "http://p0", Reason.SATURATED)),
    ("hint on keeps the pool limit", feats(speculation="on", p=2040), [spec(), plain()],
     Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("hint on keeps capabilities", feats({"constrained_decoding"}, speculation="on"), [spec(), plain()],
     Decision("plain", "http://p0", Reason.CONSTRAINED_DECODING)),
    ("hint auto keeps long-prompt threshold", feats(p=1500), [spec(), plain()],
     Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
]


@pytest.mark.parametrize("name,features,pools,expected", DECISIONS, ids=[c[0] for c in DECISIONS])
def test_decide_with_capabilities_and_hint(name, features, pools, expected):
    assert decide(features, pools, RULES) == expected


# --- config -----------------------------------------------------------------------------

def _cfg(spec_extra=None, plain_extra=None, auth=None):
    doc = {
        "model": {"name": "m", "tokenizer": "/tmp/t"},
        "limits": {"max_context_tokens": 4096},
        "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://s:1"], **(spec_extra or {})},
                  {"name": "plain", "speculative": False, "endpoints": ["http://p:1"], **(plain_extra or {})}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
    }
    if auth is not None:
        doc["auth"] = auth
    return parse_config(doc)


def test_config_capabilities_default_conservative_and_validated():
    cfg = _cfg()
    assert cfg.pools[0].served_capabilities == frozenset()
    assert cfg.pools[1].served_capabilities is None
    cfg = _cfg({"capabilities": ["constrained_decoding", "logprobs"]})
    assert cfg.pools[0].served_capabilities == {"constrained_decoding", "logprobs"}
    for bad in (["json"], ["logprobs", "logprobs"], "logprobs"):
        with pytest.raises(ConfigError, match="capabilities"):
            _cfg({"capabilities": bad})
    with pytest.raises(ConfigError, match="capabilities"):
        _cfg(plain_extra={"capabilities": []})


def test_config_speculation_defaults_by_key_digest():
    digest = "a" * 64
    cfg = _cfg(auth={"api_keys": ["k1"], "speculation_defaults": {digest: "off"}})
    assert cfg.auth.speculation_defaults == {digest: "off"}
    with pytest.raises(ConfigError, match="speculation_defaults"):
        _cfg(auth={"speculation_defaults": {"k1": "off"}})      # a key, not its digest
    with pytest.raises(ConfigError, match="speculation_defaults"):
        _cfg(auth={"speculation_defaults": {digest: "never"}})
