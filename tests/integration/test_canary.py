"""The live lossless canary (router.loops.canary) against fake SGLang pools on 127.0.0.1."""

from __future__ import annotations

import dataclasses

import pytest

from router.config.tree import parse_config
from router.loops.canary import answer_key, probes
from tests.support import wait_until
from tests.support.bodies import TOOLS
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
CANARY = {"enabled": True, "interval_s": 0.2, "check_s": 0.05, "max_tokens": 6, "timeout_s": 5.0,
          "prompts": ["one", "two"]}


def wait_for(cond, what: str, timeout_s: float = 10.0) -> None:
    wait_until(cond, timeout_s, what)


def perturb(fake, on: bool) -> None:
    fake.state.config = dataclasses.replace(fake.state.config, perturb_output=on)


def rounds(stack: Stack, result: str) -> float:
    return stack.router.metric("specgate_canary_rounds_total", pool="spec", result=result)


def chat_pool(stack: Stack) -> tuple[str, str]:
    r = stack.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 3,
                                      "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    return r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]


@pytest.fixture
def canary_stack(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, canary={**CANARY, "on_mismatch": "eject"})
    try:
        yield s
    finally:
        s.close()


def test_canary_matches_on_lossless_pools_and_is_not_client_traffic(canary_stack):
    s = canary_stack
    wait_for(lambda: rounds(s, "match") >= 2, "two matching rounds")
    assert rounds(s, "mismatch") == 0 and rounds(s, "error") == 0
    assert s.router.metric("specgate_canary_mismatch", pool="spec") == 0
    sent = s.backend_requests(s.spec)
    assert sent and all(r["headers"].get("x-specgate-canary") == "1" for r in sent)
    assert {(r["body"]["temperature"], r["body"]["max_tokens"]) for r in sent} == {(0, 6)}
    assert s.router.metric("specgate_requests_total", pool="spec", reason="speculative", status="200") == 0
    assert chat_pool(s) == ("spec", "speculative")


def test_canary_mismatch_ejects_the_pool_until_a_round_matches(canary_stack):
    s = canary_stack
    wait_for(lambda: rounds(s, "match") >= 1, "a first matching round")
    perturb(s.spec, True)
    wait_for(lambda: s.router.metric("specgate_canary_mismatch", pool="spec") == 1, "a mismatch")
    assert rounds(s, "mismatch") >= 1
    assert chat_pool(s) == ("plain", "canary_mismatch")
    perturb(s.spec, False)
    wait_for(lambda: s.router.metric("specgate_canary_mismatch", pool="spec") == 0, "a matching round")
    assert chat_pool(s) == ("spec", "speculative")


def test_alert_mode_reports_without_ejecting(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, canary={**CANARY, "on_mismatch": "alert"})
    try:
        perturb(s.spec, True)
        wait_for(lambda: s.router.metric("specgate_canary_mismatch", pool="spec") == 1, "a mismatch")
        assert chat_pool(s) == ("spec", "speculative")
    finally:
        s.close()


def test_a_reload_starts_a_round_at_once(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, canary={**CANARY, "interval_s": 3600.0})
    try:
        wait_for(lambda: rounds(s, "match") == 1, "the first round")
        s.config_path.write_text(s.config_path.read_text() + "\n# touched\n")   # same config, new file
        wait_for(lambda: rounds(s, "match") == 2, "a round after the reload")
    finally:
        s.close()


def _config(capabilities):
    return parse_config({
        "model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
        "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://s:1"], "capabilities": capabilities},
                  {"name": "plain", "speculative": False, "endpoints": ["http://p:1"]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
        "canary": {"prompts": ["a"]}})


def test_probes_include_tool_and_reasoning_prompts_for_the_kinds_a_pool_serves():
    assert [p.name for p in probes(_config([]))] == ["prompt0"]
    named = [p.name for p in probes(_config(["tool_calls", "reasoning"]))]
    assert named == ["prompt0", "tool_call", "reasoning"]
    tool = probes(_config(["tool_calls"]))[1]
    assert tool.fields["tool_choice"] == "auto" and tool.fields["tools"][0]["function"]["name"] == "get_weather"


def test_answer_key_compares_tool_calls_and_finish():
    doc = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "a", "function": {"name": "f", "arguments": "{\"x\":1}"}}]}, "finish_reason": "tool_calls"}],
        "usage": {"completion_tokens": 7}}
    other = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "b", "function": {"name": "f", "arguments": "{\"x\":1}"}}]}, "finish_reason": "tool_calls"}],
        "usage": {"completion_tokens": 7}}
    assert answer_key(doc) == answer_key(other)          # call ids are random per engine
    other["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{}"
    assert answer_key(doc) != answer_key(other)
    with pytest.raises(ValueError):
        answer_key({"error": {}})


def test_a_tool_probe_mismatch_revokes_only_tool_calls(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, canary={**CANARY, "on_mismatch": "eject"})
    try:
        s.reconfigure(lambda doc: doc["pools"][0].update(capabilities=["tool_calls"]))
        s.spec.state.config = dataclasses.replace(s.spec.state.config, perturb_output=True,
                                                  perturb_only_field="tools")
        wait_for(lambda: s.router.metric("specgate_canary_mismatch", pool="spec") == 1, "a tool-probe mismatch")
        tool_probe = [r for r in s.backend_requests(s.spec) if "tools" in r["body"]]
        assert tool_probe and tool_probe[0]["headers"]["x-specgate-canary"] == "1"
        r = s.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 3, "tools": TOOLS,
                                      "messages": [{"role": "user", "content": "weather?"}]})
        assert (r.status_code, r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == (
            200, "plain", "tool_calls")
        assert chat_pool(s) == ("spec", "speculative")        # plain sampling still speculates
        perturb(s.spec, False)
        wait_for(lambda: s.router.metric("specgate_canary_mismatch", pool="spec") == 0, "a matching round")
        r = s.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 3, "tools": TOOLS,
                                      "messages": [{"role": "user", "content": "weather?"}]})
        assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("spec", "speculative")
    finally:
        s.close()
