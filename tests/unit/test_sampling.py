"""router.request.sampling: sampling-control values checked before any engine, and the speculative caveats."""

from __future__ import annotations

import pytest

from router.errors import InvalidRequest
from router.request.sampling import check_min_tokens, speculative_caveats, validate_sampling


@pytest.mark.parametrize("doc", [
    {}, {"logit_bias": None}, {"logit_bias": {}}, {"logit_bias": {"50256": -100, "1": 100, "7": 0.5}},
    {"min_p": 0}, {"min_p": 1}, {"min_p": 0.3}, {"min_p": None},
    {"min_tokens": 0}, {"min_tokens": 20}, {"seed": 1234}, {"seed": -(2**63)}, {"seed": None},
])
def test_valid_values_pass(doc):
    validate_sampling(doc)


@pytest.mark.parametrize("doc,param,code", [
    ({"logit_bias": {"50256": 101}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"50256": -101}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"50256": -100.5}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"the": -100}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"-1": 5}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"1.5": 5}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"٣": 5}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"5": "high"}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": {"5": True}}, "logit_bias", "invalid_logit_bias"),
    ({"logit_bias": [5]}, "logit_bias", "invalid_logit_bias"),
    ({"min_p": 1.5}, "min_p", "invalid_value"), ({"min_p": -0.1}, "min_p", "invalid_value"), ({"min_p": "0.3"}, "min_p", "invalid_value"),
    ({"min_tokens": -1}, "min_tokens", "invalid_value"), ({"min_tokens": 2.0}, "min_tokens", "invalid_value"),
    ({"min_tokens": True}, "min_tokens", "invalid_value"),
    ({"seed": "1234"}, "seed", "invalid_value"), ({"seed": 1.5}, "seed", "invalid_value"), ({"seed": 2**63}, "seed", "invalid_value"),
])
def test_malformed_values_are_400_with_the_param(doc, param, code):
    with pytest.raises(InvalidRequest) as info:
        validate_sampling(doc)
    assert (info.value.status, info.value.param, info.value.code) == (400, param, code)


def test_min_tokens_above_the_budget():
    check_min_tokens({"min_tokens": 32}, 32)
    check_min_tokens({}, 1)
    with pytest.raises(InvalidRequest) as info:
        check_min_tokens({"min_tokens": 33}, 32)
    assert (info.value.param, info.value.code) == ("min_tokens", "min_tokens_exceeds_budget")


@pytest.mark.parametrize("doc,expected", [
    ({}, ()), ({"seed": None, "logit_bias": {}}, ()), ({"seed": 0}, ("seed",)),
    ({"logit_bias": {"1": 2}, "seed": 3}, ("seed", "logit_bias")), ({"min_p": 0.3}, ()),
])
def test_speculative_caveats(doc, expected):
    assert speculative_caveats(doc) == expected
