"""Table-driven tests of conversation affinity across pools chosen by prediction
(``routing.prefix_cache.pool_affinity_ratio``, router.decision.policy): the pool a conversation's
anchor ranks first among the close ones, the same on every router replica."""

from __future__ import annotations

import pytest

from router.decision.learn import context_bucket
from router.decision.policy import Decision, EndpointSnapshot, PoolSnapshot, Reason, Rules, decide
from router.decision.predict import SpeedModel
from router.decision.prefix import PrefixRequest, rendezvous_score
from router.request.features import RequestFeatures

S = 4096     # limits.max_context_tokens
P = 1000     # prompt tokens
M = 100      # output budget
RATIO = 1.25  # the default pool_affinity_ratio
NEW_RATIO = 1.1  # the default new_affinity_ratio

#: anchors (stable hashes) whose rendezvous ranks each pool first; parity matters to
#: exploration by anchor (explore_every 2 explores the odd ones)
PLAIN_FIRST, PLAIN_FIRST_EVEN = 1, 4
SPEC_FIRST, SPEC_FIRST_ODD = 2, 3

#: the cell of every request below: sampled, P's context bucket
CELL = ("sampled", context_bucket(P))


def test_the_anchors_rank_the_pools_as_named():
    for anchor in (PLAIN_FIRST, PLAIN_FIRST_EVEN):
        assert rendezvous_score("plain", anchor) > rendezvous_score("spec", anchor)
    for anchor in (SPEC_FIRST, SPEC_FIRST_ODD):
        assert rendezvous_score("spec", anchor) > rendezvous_score("plain", anchor)


def speed(decode_s_per_token: float) -> SpeedModel:
    # no batch or attention term to speak of: completion = 1e-4 s per uncached prompt token
    # + decode_s_per_token per output token
    return SpeedModel(decode_s_per_token=decode_s_per_token, batch_knee=1e12, prefill_s_per_token=1e-4)


def pools(spec_decode=0.001, plain_decode=0.0012, spec_cached=0, plain_cached=0,
          spec_measured: frozenset | None = None, plain_measured: frozenset | None = None):
    """spec cold: 0.1 s prefill + 0.1 s decode = 0.2 s; plain cold at 0.0012 s/token: 0.22 s."""
    return [
        PoolSnapshot("spec", True, S, 4, (EndpointSnapshot("http://s0", True, 0, spec_cached),),
                     speed=speed(spec_decode), accept_length_sampled=3.0, measured=spec_measured),
        PoolSnapshot("plain", False, S, 0, (EndpointSnapshot("http://p0", True, 0, plain_cached),),
                     speed=speed(plain_decode), measured=plain_measured),
    ]


def route(pool_list, anchor=PLAIN_FIRST, ratio=RATIO, continued=True, explore_every=0, tie_break=0,
          prefix=True, new_ratio=NEW_RATIO) -> Decision:
    rules = Rules(max_context_tokens=S, default_max_tokens=256, long_prompt_tokens=S, explore_every=explore_every)
    req = PrefixRequest(anchor=anchor, anchor_tokens=50, continued=continued,
                        pool_affinity_ratio=ratio, new_affinity_ratio=new_ratio) if prefix else None
    return decide(RequestFeatures(prompt_tokens=P, max_new_tokens=M), pool_list, rules, prefix=req,
                  tie_break=tie_break)


def where(d: Decision) -> tuple[str | None, Reason]:
    return d.pool, d.reason


CASES = [
    # id, pools, route kwargs, expected (pool, reason)
    ("close: the anchor's pool, not the fastest", pools(), {}, ("plain", Reason.PREFIX_AFFINITY)),
    ("close: the anchor's pool is the fastest", pools(), {"anchor": SPEC_FIRST}, ("spec", Reason.SPECULATIVE)),
    ("close, plain fastest: the anchor's spec pool", pools(spec_decode=0.0012, plain_decode=0.001),
     {"anchor": SPEC_FIRST}, ("spec", Reason.PREFIX_AFFINITY)),
    ("close, plain fastest and the anchor's", pools(spec_decode=0.0012, plain_decode=0.001), {},
     ("plain", Reason.PLAIN_FASTER)),
    # 0.1 + 0.1 * 1.49 = 0.249 s: within 1.25x the spec pool's 0.2 s
    ("just within the bound", pools(plain_decode=0.00149), {}, ("plain", Reason.PREFIX_AFFINITY)),
    ("past the bound: the fastest", pools(plain_decode=0.0016), {}, ("spec", Reason.SPECULATIVE)),
    ("ratio 1: the fastest always", pools(), {"ratio": 1.0}, ("spec", Reason.SPECULATIVE)),
    ("no prefix request: the fastest", pools(), {"prefix": False}, ("spec", Reason.SPECULATIVE)),
    ("no anchor: the fastest", pools(), {"anchor": None}, ("spec", Reason.SPECULATIVE)),
    # a request that continues nothing: within new_affinity_ratio (1.1) only, unmeasured or not
    ("new: within 1.1", pools(plain_decode=0.0011), {"continued": False}, ("plain", Reason.PREFIX_AFFINITY)),
    ("new: 1.1x past it", pools(), {"continued": False}, ("spec", Reason.SPECULATIVE)),
    ("new: its ratio 1 turns it off", pools(plain_decode=0.0011), {"continued": False, "new_ratio": 1.0},
     ("spec", Reason.SPECULATIVE)),
    ("new: unmeasured is no exception", pools(plain_decode=0.005, plain_measured=frozenset()), {"continued": False},
     ("spec", Reason.SPECULATIVE)),
    # spec's cache of 800 tokens: 0.12 s; plain's 0.22 s is 1.83x that but 1.1x spec's cold
    # 0.2 s: the replica that routed the earlier turns to spec agrees with one that did not
    ("a local cache does not widen the gap", pools(spec_cached=800), {}, ("plain", Reason.PREFIX_AFFINITY)),
    # plain 0.26 s is past 1.25x spec's cold 0.2 s: the cache makes no difference then
    ("cached and far: the fastest", pools(spec_cached=800, plain_decode=0.0016), {}, ("spec", Reason.SPECULATIVE)),
    # plain cached: 0.1 * 0.2 + 0.1 * 1.2 = 0.14 s beats spec's 0.2 s by 1.43x, but the best
    # cold prediction is spec's own 0.2 s (plain's: 0.22 s): close, the anchor's spec pool
    ("cached on the slower-anchored pool", pools(plain_cached=800), {"anchor": SPEC_FIRST},
     ("spec", Reason.PREFIX_AFFINITY)),
    # plain 3x slower: out of the bound, unless its predictions for the cell are unchecked
    ("far and measured", pools(plain_decode=0.005, plain_measured=frozenset({CELL})), {},
     ("spec", Reason.SPECULATIVE)),
    ("far and not tracked (measured None)", pools(plain_decode=0.005), {}, ("spec", Reason.SPECULATIVE)),
    ("far but unmeasured in the cell", pools(plain_decode=0.005, plain_measured=frozenset({("greedy", CELL[1])})),
     {}, ("plain", Reason.PREFIX_AFFINITY)),
    ("far, unmeasured, the anchor's pool is the fastest",
     pools(plain_decode=0.005, plain_measured=frozenset()), {"anchor": SPEC_FIRST}, ("spec", Reason.SPECULATIVE)),
]


@pytest.mark.parametrize(("name", "pool_list", "kw", "expected"), CASES, ids=[c[0] for c in CASES])
def test_pool_affinity_table(name, pool_list, kw, expected):
    d = route(pool_list, **kw)
    assert where(d) == expected
    assert d.endpoint == ("http://s0" if d.pool == "spec" else "http://p0")
    assert [name for name, _ in d.predicted] == ["spec", "plain"]


def test_predictions_of_the_table_are_what_its_comments_say():
    d = route(pools())
    assert dict(d.predicted) == pytest.approx({"spec": 0.2, "plain": 0.22}, rel=1e-6)
    d = route(pools(spec_cached=800))
    assert dict(d.predicted) == pytest.approx({"spec": 0.12, "plain": 0.22}, rel=1e-6)


def test_every_turn_of_a_conversation_agrees_across_replicas():
    # two replicas: one routed the earlier turns to plain (its index holds them), the other
    # has no cache of the conversation and a plain model 20% more pessimistic; both send the
    # next turn to the anchor's pool
    seen = route(pools(plain_cached=800))
    unseen = route(pools(plain_decode=0.00144))
    assert where(seen) == ("plain", Reason.PLAIN_FASTER)
    assert where(unseen) == ("plain", Reason.PREFIX_AFFINITY)


EXPLORE_CASES = [
    # id, anchor, continued, tie_break, expected (pool, reason); explore_every 2
    ("continued, odd anchor: explored whatever the tie-break", SPEC_FIRST_ODD, True, 0, ("plain", Reason.EXPLORE)),
    ("continued, even anchor: never explored", SPEC_FIRST, True, 1, ("spec", Reason.SPECULATIVE)),
    ("continued, even anchor, tie-break 0", SPEC_FIRST, True, 0, ("spec", Reason.SPECULATIVE)),
    ("explored conversation on its affinity pool: the other explored", PLAIN_FIRST, True, 0, ("spec", Reason.EXPLORE)),
    ("continued, even anchor on its affinity pool: not explored", PLAIN_FIRST_EVEN, True, 1, ("plain", Reason.PREFIX_AFFINITY)),
    ("new conversation: the tie-break explores", SPEC_FIRST, False, 1, ("plain", Reason.EXPLORE)),
    ("new conversation: the tie-break does not", SPEC_FIRST_ODD, False, 0, ("spec", Reason.SPECULATIVE)),
]


@pytest.mark.parametrize(("name", "anchor", "continued", "tie_break", "expected"), EXPLORE_CASES,
                         ids=[c[0] for c in EXPLORE_CASES])
def test_a_continued_conversation_is_explored_whole(name, anchor, continued, tie_break, expected):
    d = route(pools(), anchor=anchor, continued=continued, explore_every=2, tie_break=tie_break)
    assert where(d) == expected


def test_without_an_anchor_the_tie_break_explores():
    assert where(route(pools(), anchor=None, explore_every=2, tie_break=1)) == ("plain", Reason.EXPLORE)
    assert where(route(pools(), anchor=None, explore_every=2, tie_break=0)) == ("spec", Reason.SPECULATIVE)


def test_with_the_marginal_cost_the_affinity_compares_costs_too():
    """``routing.learning.marginal_cost``: the pools are ranked by completion plus the seconds the
    request adds to the others decoding beside it, and "close" is judged by the same measure.
    spec holds 50 sequences (knee 100): the request would take 0.1 + 0.1 * (1 + 51/100) = 0.251 s
    there, within 1.25x plain's 0.22 s, but it adds 50 * 0.1 / 100 = 0.05 s to the others: 0.301 s,
    past 1.25x plain's cost (0.22 s, nothing beside it). The anchor ranks spec first."""
    busy_spec = PoolSnapshot("spec", True, S, 4, (EndpointSnapshot("http://s0", True, 50, 0),),
                             speed=SpeedModel(decode_s_per_token=0.001, batch_knee=100, prefill_s_per_token=1e-4),
                             accept_length_sampled=3.0)
    plain = pools()[1]
    req = PrefixRequest(anchor=SPEC_FIRST, anchor_tokens=50, continued=True, pool_affinity_ratio=RATIO,
                        new_affinity_ratio=NEW_RATIO)
    features = RequestFeatures(prompt_tokens=P, max_new_tokens=M)
    for marginal, expected in ((False, ("spec", Reason.PREFIX_AFFINITY)), (True, ("plain", Reason.PLAIN_FASTER))):
        rules = Rules(max_context_tokens=S, default_max_tokens=256, long_prompt_tokens=S, marginal_cost=marginal)
        d = decide(features, [busy_spec, plain], rules, prefix=req)
        assert where(d) == expected, marginal
        assert dict(d.predicted) == pytest.approx({"spec": 0.251, "plain": 0.22}, rel=1e-6)  # completions
