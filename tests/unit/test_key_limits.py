"""Per-key limits, the pure parts: GCRA, plans, headers, local buckets, the config section."""

from __future__ import annotations

import hashlib

import pytest

from router.access.limit_rules import (
    LocalBuckets,
    Plan,
    Verdict,
    check,
    format_reset,
    gcra,
    headers,
    plan_for,
    token_cost,
    usage_tokens,
)
from router.access.limits import ANONYMOUS, KeyLimiter
from router.config.limits import KeyLimits, RateLimitConfig
from router.config.tree import ConfigError, parse_config


def test_gcra_admits_a_burst_then_exactly_the_rate():
    # 10 per second (T = 100 ms), burst 3.
    tat, admitted = 0.0, []
    for now in (0, 0, 0, 0, 50, 100, 150, 200, 300):
        ok, new_tat, wait = gcra(tat, float(now), 100.0, 3.0, 1)
        admitted.append((now, ok, round(wait, 6)))
        tat = new_tat if ok else tat
    assert admitted == [(0, True, 0), (0, True, 0), (0, True, 0), (0, False, 100.0), (50, False, 50.0),
                        (100, True, 0), (150, False, 50.0), (200, True, 0), (300, True, 0)]


def test_gcra_cost_and_refund_are_linear():
    ok, tat, _ = gcra(0.0, 0.0, 1.0, 1000.0, 600)
    assert ok and tat == 600.0
    ok, _, wait = gcra(tat, 0.0, 1.0, 1000.0, 500)
    assert not ok and wait == pytest.approx(100.0)
    ok, _, _ = gcra(tat - 200.0, 0.0, 1.0, 1000.0, 500)   # 200 tokens given back: it fits
    assert ok


def test_plan_for_windows_bursts_and_the_local_fraction():
    assert plan_for(KeyLimits(requests_per_minute=120)) == Plan(500.0, 120.0, request_limit="120", request_window="min")
    assert plan_for(KeyLimits(requests_per_second=2.5)) == Plan(400.0, 3.0, request_limit="2.5", request_window="s")
    assert plan_for(KeyLimits(requests_per_second=10, request_burst=1)).request_capacity == 1.0
    tpm = plan_for(KeyLimits(tokens_per_minute=6000, concurrent_requests=3))
    assert (tpm.token_interval_ms, tpm.token_capacity, tpm.concurrent, tpm.request_interval_ms) == (10.0, 6000.0, 3, 0)
    half = plan_for(KeyLimits(requests_per_second=10, tokens_per_minute=6000, concurrent_requests=3), 0.5)
    assert (half.request_interval_ms, half.request_capacity, half.token_interval_ms, half.token_capacity,
            half.concurrent) == (200.0, 5.0, 20.0, 3000.0, 1)
    tiny = plan_for(KeyLimits(requests_per_second=1, concurrent_requests=1), 0.1)
    assert (tiny.request_capacity, tiny.concurrent) == (1.0, 1)


def test_token_cost_counts_every_prompt_and_output():
    assert token_cost(100, 20) == 120
    assert token_cost(100, 20, n=3) == 160
    assert token_cost(100, 20, n=2, num_prompts=4) == 560


def test_check_charges_all_limits_or_none():
    plan = plan_for(KeyLimits(requests_per_second=10, request_burst=5, tokens_per_minute=600))  # 100 ms/tok
    verdict, rtat, ttat = check(plan, 0.0, 0.0, 0, 500, 0.0)
    assert verdict == Verdict(None, 0.0, 100.0, 50_000.0, 0) and (rtat, ttat) == (100.0, 50_000.0)
    verdict, rtat2, ttat2 = check(plan, rtat, ttat, 0, 200, 0.0)   # tokens refuse: the request is not charged
    assert verdict.denied == "tokens" and verdict.wait_ms == pytest.approx(10_000.0)
    assert (rtat2, ttat2) == (rtat, ttat)
    assert check(plan, rtat, ttat, 0, 601, 0.0)[0].denied == "tokens_max"
    conc = plan_for(KeyLimits(concurrent_requests=2))
    assert check(conc, 0.0, 0.0, 1, 0, 0.0)[0] == Verdict(None, 0.0, 0.0, 0.0, 2)
    assert check(conc, 0.0, 0.0, 2, 0, 0.0)[0].denied == "concurrent"


def test_local_buckets_release_concurrency_and_refund_tokens():
    b = LocalBuckets()
    plan = plan_for(KeyLimits(tokens_per_minute=60_000, concurrent_requests=1))   # 1 ms per token
    assert b.admit("k", plan, 40_000, 0.0).denied is None
    assert b.admit("k", plan, 10, 0.0).denied == "concurrent"
    b.finish("k", plan, 39_000, lease=True)   # used 1,000 of the 40,000 reserved
    assert b.active("k") == 0
    v = b.admit("k", plan, 59_000, 0.0)
    assert v.denied is None and v.token_backlog_ms == pytest.approx(60_000.0)
    b.finish("k", plan, 0, lease=True)
    b.finish("k", plan, 0, lease=True)   # never below zero
    assert b.active("k") == 0


@pytest.mark.parametrize("ms,text", [(0, "0s"), (-3, "0s"), (0.2, "1ms"), (12, "12ms"), (999.5, "1000ms"),
                                     (1000, "1s"), (1500, "1.5s"), (59_999, "59.999s"), (60_000, "1m0s"),
                                     (361_500, "6m1.5s")])
def test_format_reset_is_openais_duration(ms, text):
    assert format_reset(ms) == text


def test_headers_name_only_the_limited_kinds():
    plan = plan_for(KeyLimits(requests_per_minute=60, tokens_per_minute=1000))   # 1000 ms/req, 60 ms/tok
    out = dict(headers(plan, Verdict(None, 0.0, 2500.0, 6000.0, 0)))
    assert out == {b"x-ratelimit-limit-requests": b"60", b"x-ratelimit-remaining-requests": b"57",
                   b"x-ratelimit-reset-requests": b"2.5s", b"x-ratelimit-limit-tokens": b"1000",
                   b"x-ratelimit-remaining-tokens": b"900", b"x-ratelimit-reset-tokens": b"6s"}
    assert headers(plan_for(KeyLimits(concurrent_requests=2)), Verdict(None)) == ()
    full = dict(headers(plan_for(KeyLimits(requests_per_second=1)), Verdict("requests", 10, 1000.0, 0.0, 0)))
    assert full[b"x-ratelimit-remaining-requests"] == b"0"


def test_usage_tokens():
    assert usage_tokens({"prompt_tokens": 12, "completion_tokens": 4}) == 16
    for bad in (None, [], {"prompt_tokens": 1}, {"prompt_tokens": 1, "completion_tokens": True},
                {"prompt_tokens": -1, "completion_tokens": 2}, {"prompt_tokens": 1.0, "completion_tokens": 2}):
        assert usage_tokens(bad) is None


def test_resolve_by_digest_default_and_anonymous():
    key = "sk-gold"
    digest = hashlib.sha256(key.encode()).hexdigest()
    gold, other = KeyLimits(requests_per_second=50), KeyLimits(requests_per_second=5)
    cfg = RateLimitConfig(default=other, keys={digest: gold})
    assert KeyLimiter.resolve(cfg, f"Bearer {key}", True) == (digest, gold)
    assert KeyLimiter.resolve(cfg, "Bearer sk-else", True) == (hashlib.sha256(b"sk-else").hexdigest(), other)
    assert KeyLimiter.resolve(cfg, f"Bearer {key}", False) == (ANONYMOUS, other)   # auth off: one bucket
    assert KeyLimiter.resolve(RateLimitConfig(keys={digest: gold}), "Bearer sk-else", True) is None
    assert KeyLimiter.resolve(cfg, None, True) is None
    assert not RateLimitConfig().enabled and not RateLimitConfig(default=KeyLimits()).enabled and cfg.enabled


def _cfg(limits: dict) -> dict:
    return {"model": {"name": "m", "tokenizer": "/nonexistent"}, "limits": {"max_context_tokens": 4096},
            "pools": [{"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:1"]}],
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
            "auth": {"rate_limits": limits}}


@pytest.mark.parametrize("limits,where", [
    ({"default": {"requests_per_second": 1, "requests_per_minute": 60}}, "at most one"),
    ({"default": {"request_burst": 3}}, "request_burst needs"),
    ({"default": {"requests_per_second": 0}}, "requests_per_second"),
    ({"default": {"tokens_per_minute": "100"}}, "tokens_per_minute"),
    ({"default": {"concurrent_requests": 1.5}}, "concurrent_requests"),
    ({"default": {"rpm": 5}}, "rpm"),
    ({"keys": {"not-a-digest": {}}}, "keys"),
    ({"local_fraction": 0}, "local_fraction"),
    ({"local_fraction": 1.5}, "local_fraction"),
])
def test_config_refuses_bad_limits(limits, where):
    with pytest.raises(ConfigError) as exc:
        parse_config(_cfg(limits))
    assert where in str(exc.value)


def test_config_accepts_limits():
    digest = "ab" * 32
    cfg = parse_config(_cfg({"default": {"requests_per_minute": 60}, "local_fraction": 0.5,
                             "keys": {digest: {"requests_per_second": 20, "tokens_per_minute": 100000,
                                               "concurrent_requests": 4}}}))
    rl = cfg.auth.rate_limits
    assert rl.keys[digest].concurrent_requests == 4 and rl.default == KeyLimits(requests_per_minute=60)
