"""Each speculative-pool check alone (router.decision.checks), and their order in the decision."""

from __future__ import annotations

import pytest

from router.decision.checks import (
    SPECULATIVE_CHECKS,
    Rejection,
    Strength,
    acceptance,
    canary,
    capability,
    fit,
    health,
    long_prompt,
    lora_adapter,
    opt_out,
    sampling_guarantee,
    saturation,
)
from router.decision.policy import EndpointSnapshot, PoolSnapshot, Rules, screen
from router.reasons import Reason
from router.request.features import RequestFeatures

RULES = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)


def pool(**kw: object) -> PoolSnapshot:
    base: dict[str, object] = {"name": "spec", "speculative": True, "limit": 2048, "reserved": 4,
                               "endpoints": (EndpointSnapshot("http://s0", True, 0),)}
    base.update(kw)
    return PoolSnapshot(**base)  # type: ignore[arg-type]


def req(p: int = 100, m: int = 100, **kw: object) -> RequestFeatures:
    return RequestFeatures(prompt_tokens=p, max_new_tokens=m, **kw)  # type: ignore[arg-type]


def test_canary():
    assert canary(req(), pool(), RULES) is None
    assert canary(req(), pool(canary_mismatch=True), RULES) == Rejection(Reason.CANARY_MISMATCH, Strength.HARD)


def test_capability_names_the_first_missing_kind():
    needs = frozenset({"logprobs", "tool_calls"})
    assert capability(req(), pool(capabilities=frozenset()), RULES) is None
    assert capability(req(needs=needs), pool(capabilities=frozenset()), RULES) == Rejection(
        Reason.TOOL_CALLS, Strength.HARD)
    assert capability(req(needs=needs), pool(capabilities=frozenset({"tool_calls"})), RULES) == Rejection(
        Reason.LOGPROBS, Strength.HARD)
    assert capability(req(needs=needs), pool(capabilities=frozenset({"tool_calls", "logprobs"})), RULES) is None


def test_fit_is_p_plus_n_m_plus_k_against_the_limit():
    assert fit(req(1000, 2048 - 4 - 1000), pool(), RULES) is None
    assert fit(req(1000, 2048 - 4 - 1000 + 1), pool(), RULES) == Rejection(Reason.LONG_CONTEXT, Strength.HARD)
    assert fit(req(100, 500, n=4), pool(), RULES) == Rejection(Reason.LONG_CONTEXT, Strength.HARD)


def test_long_prompt_is_soft():
    assert long_prompt(req(1024), pool(), RULES) is None
    assert long_prompt(req(1025), pool(), RULES) == Rejection(Reason.LONG_CONTEXT, Strength.SOFT, predicted=True)


def test_health():
    down = (EndpointSnapshot("http://s0", False, 0), EndpointSnapshot("http://s1", False, 3))
    assert health(req(), pool(), RULES) is None
    assert health(req(), pool(endpoints=down), RULES) == Rejection(Reason.SPEC_UNHEALTHY, Strength.HARD)
    assert health(req(), pool(endpoints=()), RULES) == Rejection(Reason.SPEC_UNHEALTHY, Strength.HARD)


def test_opt_out_is_a_bypass():
    assert opt_out(req(speculation="auto"), pool(), RULES) is None
    assert opt_out(req(speculation="on"), pool(), RULES) is None
    assert opt_out(req(speculation="off"), pool(), RULES) == Rejection(Reason.CLIENT_OPT_OUT, Strength.BYPASS)


def test_saturation_is_a_predicted_bypass():
    assert saturation(req(), pool(), RULES) is None
    assert saturation(req(), pool(saturated=True), RULES) == Rejection(Reason.SATURATED, Strength.BYPASS, predicted=True)


def test_acceptance_is_per_temperature_class():
    low = pool(low_acceptance=frozenset({"sampled"}))
    assert acceptance(req(temperature_class="greedy"), low, RULES) is None
    assert acceptance(req(temperature_class="sampled"), low, RULES) == Rejection(
        Reason.LOW_ACCEPTANCE, Strength.SOFT, predicted=True)


def test_lora_adapter_needs_every_adapter_on_the_pool():
    hard = Rejection(Reason.LORA_ADAPTER, Strength.HARD)
    assert lora_adapter(req(), pool(), RULES) is None  # the base model
    assert lora_adapter(req(adapters=frozenset({"sql"})), pool(), RULES) == hard
    assert lora_adapter(req(adapters=frozenset({"sql"})), pool(adapters=frozenset({"sql", "chat"})), RULES) is None
    assert lora_adapter(req(adapters=frozenset({"sql", "x"})), pool(adapters=frozenset({"sql"})), RULES) == hard
    # hard: the client's `on` hint does not put it back
    assert screen(req(adapters=frozenset({"sql"}), speculation="on"), pool(), RULES) == [hard]


def test_check_order():
    assert SPECULATIVE_CHECKS == (canary, capability, lora_adapter, fit, long_prompt, health, opt_out, saturation,
                                  acceptance, sampling_guarantee)


def test_sampling_guarantee_is_a_soft_preference_not_a_prediction():
    assert sampling_guarantee(req(), pool(), RULES) is None
    prefers = frozenset({"sampling_guarantee"})
    assert sampling_guarantee(req(prefers=prefers), pool(), RULES) == Rejection(
        Reason.SAMPLING_GUARANTEE, Strength.SOFT)
    # a prediction does not drop it; the client's on hint does
    assert [r.reason for r in screen(req(prefers=prefers), pool(), RULES, predicting=True)] == [
        Reason.SAMPLING_GUARANTEE]
    assert screen(req(prefers=prefers, speculation="on"), pool(), RULES) == []


@pytest.mark.parametrize(("features", "snapshot", "predicting", "expected"), [
    (req(), pool(), False, []),
    (req(1500, 100, speculation="off"), pool(saturated=True), False,
     [Reason.LONG_CONTEXT, Reason.CLIENT_OPT_OUT, Reason.SATURATED]),
    # the client's on hint drops the soft rejections only
    (req(1500, 100, speculation="on", temperature_class="sampled"),
     pool(saturated=True, low_acceptance=frozenset({"sampled"})), False, [Reason.SATURATED]),
    # with speed models the predicted rejections give way to the prediction; the others stay
    (req(1500, 100, temperature_class="sampled"),
     pool(saturated=True, low_acceptance=frozenset({"sampled"})), True, []),
    (req(1500, 1000, speculation="off"), pool(saturated=True), True, [Reason.LONG_CONTEXT, Reason.CLIENT_OPT_OUT]),
])
def test_screen(features, snapshot, predicting, expected):
    assert [r.reason for r in screen(features, snapshot, RULES, predicting=predicting)] == expected
