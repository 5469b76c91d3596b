"""A bounded prompt's expected P (router.request.features.TokensPerByte) in the speed prediction only."""

from __future__ import annotations

import pytest

from router.decision.policy import EndpointSnapshot, PoolSnapshot, Reason, Rules, decide
from router.decision.predict import SpeedModel
from router.request.features import RequestFeatures, TokensPerByte

RULES = Rules(max_context_tokens=65536, default_max_tokens=256, long_prompt_tokens=1024)
PREFILL = SpeedModel(decode_s_per_token=0.01, batch_knee=32, prefill_s_per_token=1e-3)


def test_the_ratio_is_learned_and_the_estimate_stays_within_the_bounds():
    r = TokensPerByte(memory=4)
    assert r.estimate(1000, 100, 1001) is None  # nothing known: the bound stands
    r.observe(250, 1000)
    assert (r.value, r.count) == (0.25, 1)
    r.observe(500, 1000)  # 0.5: the average moves by a quarter of the difference
    assert r.value == pytest.approx(0.3125)
    assert r.estimate(1000, 100, 1001) == 312
    assert r.estimate(1000, 400, 1001) == 400    # never below the lower bound
    assert r.estimate(10_000, 100, 1001) == 1001  # never above the upper one
    r.observe(0, 1000)
    r.observe(10, 0)
    assert r.count == 2
    with pytest.raises(ValueError, match="memory must be >= 1"):
        TokensPerByte(0)


def _pools(speed=PREFILL):
    return (PoolSnapshot("spec", True, 65536, 4, (EndpointSnapshot("http://s", True, 0),), speed=speed,
                         accept_length_greedy=3.0, accept_length_sampled=1.5),
            PoolSnapshot("plain", False, 65536, 0, (EndpointSnapshot("http://p", True, 0),), speed=speed))


def test_the_prediction_uses_the_estimate_and_the_rules_the_bound():
    bounded = RequestFeatures(prompt_tokens=8000, prompt_tokens_lower=2000, prompt_tokens_estimate=2400,
                              max_new_tokens=100, temperature_class="greedy")
    exact = RequestFeatures(prompt_tokens=2400, max_new_tokens=100, temperature_class="greedy")
    d = decide(bounded, _pools(), RULES)
    assert d.predicted == decide(exact, _pools(), RULES).predicted  # seconds as if P were 2400
    assert d.predicted != decide(RequestFeatures(prompt_tokens=8000, max_new_tokens=100,
                                                 temperature_class="greedy"), _pools(), RULES).predicted
    # without speed models the long-prompt rule reads the bound (8000 > 1024), not the estimate (900)
    low = RequestFeatures(prompt_tokens=8000, prompt_tokens_lower=500, prompt_tokens_estimate=900,
                          max_new_tokens=100, temperature_class="greedy")
    assert decide(low, _pools(speed=None), RULES).reason is Reason.LONG_CONTEXT
    assert bounded.predicted_weight == 2400 + 100 and bounded.weight == 8000 + 100


def test_the_bytes_behind_a_bound_are_the_texts_bytes(tokenizer_dir):
    from router.request.features import PromptCounter
    from router.request.parsing import parse_chat, parse_completions

    counter = PromptCounter(tokenizer_dir)
    docs = [parse_chat({"model": "m", "messages": [{"role": "user", "content": "héllo wörld " * 40}]}, max_n=8),
            parse_completions({"model": "m", "prompt": "plain ascii " * 30}, max_n=8),
            parse_completions({"model": "m", "prompt": ["short", "a longer prompt ü" * 9]}, max_n=8)]
    for parsed in docs:
        rendered = counter.render(parsed)
        _, hi = counter.bounds(rendered)
        assert counter.text_bytes_of_bound(hi, rendered) == counter.text_bytes(rendered) > 0
