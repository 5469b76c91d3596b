"""Table-driven tests of the pure routing decision (router.decision.policy)."""

from __future__ import annotations

import pytest

from router.decision.policy import (
    Decision,
    EndpointSnapshot,
    Outcome,
    PoolSnapshot,
    Reason,
    Rules,
    decide,
    expected_speedup,
    next_low_acceptance,
    next_saturated,
)
from router.decision.prefix import PrefixRequest
from router.request.features import RequestFeatures

S = 4096          # limits.max_context_tokens
SPEC_LIMIT = 2048  # spec pool max_context_tokens
K = 4             # reserved draft tokens
LONG = 1024       # routing.long_prompt_tokens


def spec(healthy=True, saturated=False, low_acceptance=frozenset(), loads=(0,), urls=None):
    urls = urls or [f"http://s{i}" for i in range(len(loads))]
    return PoolSnapshot("spec", True, SPEC_LIMIT, K,
                        tuple(EndpointSnapshot(u, healthy, load) for u, load in zip(urls, loads)),
                        saturated=saturated, low_acceptance=low_acceptance)


def plain(healthy=True, limit=S, loads=(0,)):
    return PoolSnapshot("plain", False, limit, 0,
                        tuple(EndpointSnapshot(f"http://p{i}", healthy, load) for i, load in enumerate(loads)))


def run(p, m, pools, n=1, seed=0, **kw):
    rules = Rules(max_context_tokens=S, default_max_tokens=256, long_prompt_tokens=LONG, seed=seed)
    return decide(RequestFeatures(prompt_tokens=p, max_new_tokens=m, n=n), pools, rules, **kw)


CASES = [
    # id, prompt, budget, n, pools, expected decision
    ("short->spec", 100, 100, 1, [spec(), plain()], Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("cap exactly S is served", 4000, 96, 1, [spec(), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("cap S+1 refused", 4000, 97, 1, [spec(), plain()], Decision(None, None, Reason.CONTEXT_CAP, Outcome.REFUSED)),
    # spec eligibility boundary: P + n*M + K <= 2048 (sweep L-K-1, L-K, L-K+1;
    # sgl-project/sglang#3574: an EAGLE draft crashed beyond its 2048 positions)
    ("L-K-1 -> spec", 1000, SPEC_LIMIT - K - 1 - 1000, 1, [spec(), plain()], Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("L-K -> spec", 1000, SPEC_LIMIT - K - 1000, 1, [spec(), plain()], Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("L-K+1 -> plain", 1000, SPEC_LIMIT - K + 1 - 1000, 1, [spec(), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("L -> plain", 1000, SPEC_LIMIT - 1000, 1, [spec(), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("L+1 -> plain", 1000, SPEC_LIMIT + 1 - 1000, 1, [spec(), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("prompt == long threshold -> spec", LONG, 10, 1, [spec(), plain()], Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("prompt > long threshold -> plain", LONG + 1, 10, 1, [spec(), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    # n weights spec eligibility (each choice decodes its own tokens) but each sequence fits the plain pool
    ("n weights spec pool", 100, 400, 8, [spec(), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("n small fits spec", 100, 400, 4, [spec(), plain()], Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("n huge per-seq fits -> no 400", 96, 4000, 8, [spec(), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("saturated -> plain", 100, 100, 1, [spec(saturated=True), plain()], Decision("plain", "http://p0", Reason.SATURATED)),
    ("low acceptance -> plain", 100, 100, 1, [spec(low_acceptance=frozenset({"sampled"})), plain()], Decision("plain", "http://p0", Reason.LOW_ACCEPTANCE)),
    ("spec unhealthy -> plain", 100, 100, 1, [spec(healthy=False), plain()], Decision("plain", "http://p0", Reason.SPEC_UNHEALTHY)),
    ("both unhealthy -> 503", 100, 100, 1, [spec(healthy=False), plain(healthy=False)], Decision(None, None, Reason.NO_HEALTHY_UPSTREAM, Outcome.UNAVAILABLE)),
    ("plain down, spec saturated -> spec", 100, 100, 1, [spec(saturated=True), plain(healthy=False)], Decision("spec", "http://s0", Reason.PLAIN_UNHEALTHY)),
    ("plain down, long -> 503", 3000, 100, 1, [spec(), plain(healthy=False)], Decision(None, None, Reason.NO_HEALTHY_UPSTREAM, Outcome.UNAVAILABLE)),
    ("plain only config", 100, 100, 1, [plain()], Decision("plain", "http://p0", Reason.PLAIN_ONLY)),
    # the long-prompt threshold is a bypass, not a limit: with no plain pool to take the
    # request, the speculative pool that holds it serves it (a spec-only config served 503)
    ("spec only config", 100, 100, 1, [spec()], Decision("spec", "http://s0", Reason.SPECULATIVE)),
    ("spec only, prompt > long threshold -> spec", LONG + 1, 10, 1, [spec()], Decision("spec", "http://s0", Reason.PLAIN_UNHEALTHY)),
    ("plain down, prompt > long threshold -> spec", LONG + 1, 10, 1, [spec(), plain(healthy=False)], Decision("spec", "http://s0", Reason.PLAIN_UNHEALTHY)),
    ("spec only, saturated -> spec", 100, 100, 1, [spec(saturated=True)], Decision("spec", "http://s0", Reason.PLAIN_UNHEALTHY)),
    ("spec down, prompt > long threshold -> plain", LONG + 1, 10, 1, [spec(healthy=False), plain()], Decision("plain", "http://p0", Reason.LONG_CONTEXT)),
    ("spec only, over its limit -> 400", 2000, 100, 1, [spec()], Decision(None, None, Reason.CONTEXT_CAP, Outcome.REFUSED)),
    ("fits no pool limit -> 400", 3000, 100, 1, [spec(), plain(limit=3000)], Decision(None, None, Reason.CONTEXT_CAP, Outcome.REFUSED)),
    ("least loaded endpoint", 100, 100, 1, [spec(loads=(5, 2, 7)), plain()], Decision("spec", "http://s1", Reason.SPECULATIVE)),
]


@pytest.mark.parametrize("name,p,m,n,pools,expected", CASES, ids=[c[0] for c in CASES])
def test_decide_table(name, p, m, n, pools, expected):
    assert run(p, m, pools, n=n) == expected


def test_excluded_endpoint_fails_over_within_pool_then_to_plain():
    pools = [spec(loads=(0, 0)), plain()]
    assert run(100, 10, pools, exclude=frozenset({"http://s0"})) == Decision("spec", "http://s1", Reason.SPECULATIVE)
    assert run(100, 10, pools, exclude=frozenset({"http://s0", "http://s1"})) == Decision(
        "plain", "http://p0", Reason.SPEC_UNHEALTHY)


def test_seeded_tie_break_is_round_robin_over_sorted_urls():
    pools = [spec(loads=(3, 3, 3), urls=["http://c", "http://a", "http://b"]), plain()]
    picks = [run(100, 10, pools, seed=1, tie_break=i).endpoint for i in range(6)]
    assert picks == ["http://b", "http://c", "http://a", "http://b", "http://c", "http://a"]


@pytest.mark.parametrize("prev,load,expected", [
    (False, 7, False), (False, 8, True), (True, 8, True), (True, 7, True), (True, 6, True),
    (True, 5, False), (False, 6, False), (False, 100, True), (True, 0, False),
])
def test_saturation_hysteresis(prev, load, expected):
    assert next_saturated(prev, load, enter=8, exit=6) is expected


def test_saturation_does_not_flap_on_a_load_trace():
    trace = [0, 4, 8, 7, 6, 7, 8, 6, 5, 6, 7, 8]
    state, states = False, []
    for load in trace:
        state = next_saturated(state, load, enter=8, exit=6)
        states.append(state)
    assert states == [False, False, True, True, True, True, True, True, False, False, False, True]


def test_expected_speedup_and_low_acceptance_hysteresis():
    # gamma 3, c 0.05: S = tau / 1.15
    assert expected_speedup(2.3, gamma=3, c=0.05) == pytest.approx(2.0)
    kw = {"gamma": 3, "c": 0.05, "enter_below": 1.0, "exit_above": 1.05}
    assert next_low_acceptance(False, 1.10, **kw) is True      # S = 0.957 < 1.0
    assert next_low_acceptance(True, 1.17, **kw) is True       # S = 1.017 in the band: stays on
    assert next_low_acceptance(True, 1.21, **kw) is False      # S = 1.052 >= 1.05
    assert next_low_acceptance(False, 1.17, **kw) is False     # in the band: stays off
    # unknown (stale, or the gauge's 0 before 40 decode steps) is never "bad"
    assert next_low_acceptance(True, None, **kw) is False
    assert next_low_acceptance(True, 0.0, **kw) is False


# Conversation affinity across pools (routing.prefix_cache.sticky_load_factor): a conversation
# cached on a saturated speculative pool's endpoint stays there below the ceiling; one cached
# on a plain pool is not pulled back to speculation when the bypass turns off.
CEILING = 8  # PrefixRequest.sticky_max_load (requests)
CACHED = 800  # estimated cached tokens of a 1000-token prompt (> 0.3 * P and > the anchor)


def cached_spec(saturated=False, low_acceptance=frozenset(), loads=(5, 5), cached=(0, CACHED), healthy=True):
    return PoolSnapshot("spec", True, SPEC_LIMIT, K,
                        tuple(EndpointSnapshot(f"http://s{i}", healthy, load, c)
                              for i, (load, c) in enumerate(zip(loads, cached))),
                        saturated=saturated, low_acceptance=low_acceptance)


def cached_plain(load=0, cached=0, healthy=True):
    return PoolSnapshot("plain", False, S, 0, (EndpointSnapshot("http://p0", healthy, load, cached),))


def affinity(p, pools, ceiling=CEILING, speculation="auto", continued=True):
    rules = Rules(max_context_tokens=S, default_max_tokens=256, long_prompt_tokens=LONG)
    features = RequestFeatures(prompt_tokens=p, max_new_tokens=100, speculation=speculation)
    prefix = PrefixRequest(anchor=1, anchor_tokens=50, continued=continued, sticky_max_load=ceiling)
    return decide(features, pools, rules, prefix=prefix)


AFFINITY_CASES = [
    # id, prompt tokens, pools, ceiling, speculation hint, expected decision
    ("cached on saturated spec, under the ceiling -> stays", 1000,
     [cached_spec(saturated=True, loads=(5, CEILING - 1)), cached_plain()], CEILING, "auto",
     Decision("spec", "http://s1", Reason.PREFIX_AFFINITY, endpoint_reason="prefix_match")),
    ("cached on saturated spec, at the ceiling -> plain", 1000,
     [cached_spec(saturated=True, loads=(5, CEILING)), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.SATURATED, endpoint_reason="rendezvous")),
    ("no match, spec saturated -> plain (shed)", 1000,
     [cached_spec(saturated=True, cached=(0, 0)), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.SATURATED, endpoint_reason="rendezvous")),
    ("match within the anchor only is no match -> plain", 1000,
     [cached_spec(saturated=True, cached=(0, 50)), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.SATURATED, endpoint_reason="rendezvous")),
    ("affinity off (ceiling 0) -> plain", 1000,
     [cached_spec(saturated=True), cached_plain()], 0, "auto",
     Decision("plain", "http://p0", Reason.SATURATED, endpoint_reason="rendezvous")),
    ("cached on spec, grown past long_prompt_tokens -> plain", LONG + 1,
     [cached_spec(saturated=True), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.LONG_CONTEXT, endpoint_reason="rendezvous")),
    ("cached on spec, not saturated, grown past long_prompt_tokens -> plain", LONG + 1,
     [cached_spec(), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.LONG_CONTEXT, endpoint_reason="rendezvous")),
    ("cached on spec with low acceptance -> plain (hard)", 1000,
     [cached_spec(low_acceptance=frozenset({"sampled"})), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.LOW_ACCEPTANCE, endpoint_reason="rendezvous")),
    ("cached on saturated spec with low acceptance -> plain (hard)", 1000,
     [cached_spec(saturated=True, low_acceptance=frozenset({"sampled"})), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.SATURATED, endpoint_reason="rendezvous")),
    ("cached on saturated spec, client opt-out -> plain (hard)", 1000,
     [cached_spec(saturated=True), cached_plain()], CEILING, "off",
     Decision("plain", "http://p0", Reason.CLIENT_OPT_OUT, endpoint_reason="rendezvous")),
    ("cached endpoint unhealthy -> plain", 1000,
     [cached_spec(saturated=True, healthy=False), cached_plain()], CEILING, "auto",
     Decision("plain", "http://p0", Reason.SPEC_UNHEALTHY, endpoint_reason="rendezvous")),
    ("cached on plain, spec flag off -> stays on plain", 1000,
     [cached_spec(cached=(0, 0)), cached_plain(cached=CACHED)], CEILING, "auto",
     Decision("plain", "http://p0", Reason.PREFIX_AFFINITY, endpoint_reason="prefix_match")),
    ("cached on plain at the ceiling, spec flag off -> spec", 1000,
     [cached_spec(cached=(0, 0), loads=(5, 6)), cached_plain(load=CEILING, cached=CACHED)], CEILING, "auto",
     Decision("spec", "http://s0", Reason.SPECULATIVE, endpoint_reason="rendezvous")),
    ("cached on both, longer on plain -> plain", 1000,
     [cached_spec(cached=(0, 400)), cached_plain(cached=CACHED)], CEILING, "auto",
     Decision("plain", "http://p0", Reason.PREFIX_AFFINITY, endpoint_reason="prefix_match")),
    ("cached on both, longer on spec -> spec", 1000,
     [cached_spec(), cached_plain(cached=400)], CEILING, "auto",
     Decision("spec", "http://s1", Reason.SPECULATIVE, endpoint_reason="prefix_match")),
    ("cached on plain, affinity off -> spec", 1000,
     [cached_spec(cached=(0, 0), loads=(5, 6)), cached_plain(cached=CACHED)], 0, "auto",
     Decision("spec", "http://s0", Reason.SPECULATIVE, endpoint_reason="rendezvous")),
    ("cached on saturated spec, plain down -> spec", 1000,
     [cached_spec(saturated=True), cached_plain(healthy=False)], CEILING, "auto",
     Decision("spec", "http://s1", Reason.PREFIX_AFFINITY, endpoint_reason="prefix_match")),
]


@pytest.mark.parametrize("name,p,pools,ceiling,speculation,expected", AFFINITY_CASES,
                         ids=[c[0] for c in AFFINITY_CASES])
def test_prefix_affinity_table(name, p, pools, ceiling, speculation, expected):
    assert affinity(p, pools, ceiling, speculation) == expected


def test_with_speed_models_a_saturated_pool_kept_by_affinity_is_predicted():
    # With speed models the prediction decides: a saturated spec pool is a candidate only for a
    # conversation cached on it below the ceiling, and its cached prefill is counted.
    from router.decision.predict import SpeedModel
    plain_speed = SpeedModel(decode_s_per_token=0.01, batch_knee=32, prefill_s_per_token=1e-4)
    spec_speed = SpeedModel(decode_s_per_token=0.01, batch_knee=32, gamma=3, c=0.1, prefill_s_per_token=1e-4)

    def pools(cached):
        s = PoolSnapshot("spec", True, SPEC_LIMIT, K, (EndpointSnapshot("http://s0", True, 5, cached),),
                         saturated=True, speed=spec_speed, accept_length_sampled=3.0)
        p = PoolSnapshot("plain", False, S, 0, (EndpointSnapshot("http://p0", True, 0),), speed=plain_speed)
        return [s, p]

    # with speed models saturation is no guard: the saturated pool is predicted, cached or not,
    # and its cached prefill is counted
    kept = affinity(1000, pools(CACHED))
    assert (kept.pool, kept.reason, kept.endpoint_reason) == ("spec", Reason.SPECULATIVE, "prefix_match")
    assert [name for name, _ in kept.predicted] == ["spec", "plain"]
    cold = affinity(1000, pools(0))
    assert [name for name, _ in cold.predicted] == ["spec", "plain"]
    assert dict(kept.predicted)["spec"] < dict(cold.predicted)["spec"]
    assert dict(kept.predicted)["plain"] == dict(cold.predicted)["plain"]


def test_a_repeated_first_prompt_is_not_a_conversation_to_keep():
    # no assistant turn (PrefixRequest.continued False): the same prompt cached on plain (e.g.
    # sent there while a capability was revoked) goes back to speculation, and a saturated
    # spec pool sheds it even when it is cached there
    plain_cached = [cached_spec(cached=(0, 0), loads=(5, 6)), cached_plain(cached=CACHED)]
    assert affinity(1000, plain_cached, continued=False) == Decision(
        "spec", "http://s0", Reason.SPECULATIVE, endpoint_reason="rendezvous")
    assert affinity(1000, [cached_spec(saturated=True), cached_plain()], continued=False) == Decision(
        "plain", "http://p0", Reason.SATURATED, endpoint_reason="rendezvous")


def test_request_features_fills_every_field_by_name():
    # request_features builds RequestFeatures positionally (cheaper than keywords): every
    # field must land where its name says, so each gets a value no other field has
    from dataclasses import fields

    from router.decision.policy import request_features
    from router.request.capabilities import required_features
    from router.request.features import parse_chat

    assert [f.name for f in fields(RequestFeatures)] == [
        "prompt_tokens", "max_new_tokens", "n", "num_prompts", "stream", "param", "budget_defaulted",
        "prompt_tokens_lower", "temperature_class", "needs", "speculation", "adapters", "prefers",
        "prompt_tokens_estimate", "prompt_bytes"]
    doc = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 3, "stream": True,
           "temperature": 0, "seed": 7, "logprobs": True}
    parsed = parse_chat(doc, max_n=8)
    rules = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)
    got = request_features(parsed, 40, rules, prompt_tokens_lower=30, speculation="on",
                           adapters=frozenset({"a"}), estimate=35, prompt_bytes=120)
    assert got == RequestFeatures(
        prompt_tokens=40, max_new_tokens=256, n=3, num_prompts=1, stream=True, param="messages",
        budget_defaulted=True, prompt_tokens_lower=30, temperature_class="greedy",
        needs=required_features(parsed), speculation="on", adapters=frozenset({"a"}),
        prefers=frozenset({"sampling_guarantee"}), prompt_tokens_estimate=35, prompt_bytes=120)
    assert got.needs and got.needs != got.prefers  # the three frozenset fields differ
