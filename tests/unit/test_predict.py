"""The predicted-completion pool choice, the per-class acceptance tracker and the flip bound."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from router.config.tree import RoutingConfig
from router.decision.acceptance import AcceptanceTracker, temperature_class
from router.decision.bypass import BypassState
from router.decision.policy import Decision, EndpointSnapshot, PoolSnapshot, Reason, Rules, decide
from router.decision.predict import SpeedModel, completion_s, token_s
from router.decision.predicted import predict_request
from router.request.features import RequestFeatures

RULES = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)
PLAIN = SpeedModel(decode_s_per_token=0.01, batch_knee=32)
SPEC = SpeedModel(decode_s_per_token=0.01, batch_knee=32, gamma=3, c=0.1)


def pools(spec_load=0, plain_load=0, greedy=3.0, sampled=1.5, spec_speed=SPEC, saturated=False):
    return (PoolSnapshot("spec", True, 2048, 4, (EndpointSnapshot("http://s", True, spec_load),),
                         saturated=saturated, speed=spec_speed, accept_length_greedy=greedy,
                         accept_length_sampled=sampled),
            PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p", True, plain_load),), speed=PLAIN))


def req(temperature="sampled", p=100, m=100):
    return RequestFeatures(prompt_tokens=p, max_new_tokens=m, temperature_class=temperature)


def test_token_times_follow_the_formulas():
    assert token_s(PLAIN, batch=1, context=0, accept_length=None) == pytest.approx(0.01 * (1 + 1 / 32))
    plain1 = 0.01 * (1 + 1 / 32)
    verify1 = 0.01 * (1 + 4 / 32)
    assert token_s(SPEC, batch=1, context=0, accept_length=3.0) == pytest.approx((verify1 + 0.3 * plain1) / 3.0)
    # tau is clamped to [1, gamma + 1]
    assert token_s(SPEC, batch=1, context=0, accept_length=9.0) == token_s(SPEC, batch=1, context=0, accept_length=4.0)
    queued = SpeedModel(decode_s_per_token=0.01, batch_knee=32, prefill_s_per_token=1e-4, max_running_requests=4)
    one = 1e-4 * 90 + 50 * token_s(queued, batch=4, context=125, accept_length=None)
    assert completion_s(queued, batch=6, prompt_tokens=100, cached_tokens=10, output_tokens=50,
                        accept_length=None) == pytest.approx(one * 1.5)


def times(features, snaps):
    return tuple((s.name, completion_s(s.speed, batch=s.endpoints[0].load + 1, prompt_tokens=features.prompt_tokens,
                                       cached_tokens=0, output_tokens=features.max_new_tokens,
                                       accept_length=s.accept_length(features.temperature_class) if s.speculative
                                       else None)) for s in snaps)


CASES = [
    ("idle pools, greedy: speculation pays", req("greedy"), pools(), "spec", Reason.SPECULATIVE),
    ("idle pools, sampled tau 1.5 still pays", req(), pools(), "spec", Reason.SPECULATIVE),
    ("sampled tau 1.2 does not", req(), pools(sampled=1.2), "plain", Reason.PLAIN_FASTER),
    ("busy spec engine: the idle plain one finishes first", req("greedy"), pools(spec_load=40), "plain",
     Reason.PLAIN_FASTER),
    ("busy plain engine: speculation is faster even at batch 8", req("greedy"), pools(spec_load=8, plain_load=40),
     "spec", Reason.SPECULATIVE),
]


@pytest.mark.parametrize("name,features,snaps,pool,reason", CASES, ids=[c[0] for c in CASES])
def test_pool_choice_by_predicted_completion(name, features, snaps, pool, reason):
    d = decide(features, snaps, RULES)
    url = {"spec": "http://s", "plain": "http://p"}[pool]
    assert d == Decision(pool, url, reason, predicted=times(features, snaps))


def test_with_speed_models_the_thresholds_give_way_to_the_prediction():
    # long prompt, saturated: no guard; the pools are predicted (both kept as candidates)
    long = decide(req(p=1500), pools(), RULES)
    assert [name for name, _ in long.predicted] == ["spec", "plain"]
    sat = decide(req("greedy"), pools(saturated=True), RULES)
    assert [name for name, _ in sat.predicted] == ["spec", "plain"]
    assert (sat.pool, sat.reason) == ("spec", Reason.SPECULATIVE)
    # a pool without a speed model: the guard rules alone
    assert decide(req("greedy"), pools(spec_speed=None), RULES) == Decision("spec", "http://s", Reason.SPECULATIVE)
    assert decide(req(p=1500), pools(spec_speed=None), RULES) == Decision("plain", "http://p", Reason.LONG_CONTEXT)


def test_temperature_class():
    assert [temperature_class(d) for d in ({"temperature": 0}, {"temperature": 0.0}, {"top_k": 1}, {},
                                           {"temperature": 0.7}, {"temperature": False}, {"top_k": True})] == [
        "greedy", "greedy", "greedy", "sampled", "sampled", "sampled", "sampled"]


def test_tracker_ignores_an_idle_gauge_and_splits_classes():
    t = AcceptanceTracker()
    kw = {"weight": 0.5, "refresh_tokens": 160, "running_reqs": 1}
    t.started("greedy")
    assert t.scraped(3.0, 100.0, 1.0, **kw) is False        # first counter reading: a baseline
    assert t.scraped(3.0, 150.0, 2.0, **kw) is True          # decoded, gauge moved from unknown
    assert t.accept_length("greedy", 2.0, 10.0) == pytest.approx(3.0)
    assert t.accept_length("sampled", 2.0, 10.0) is None
    assert t.scraped(1.0, 150.0, 3.0, **kw) is False         # moved while idle: old news
    assert t.scraped(3.0, 200.0, 4.0, **kw) is False         # same value, < 160 tokens since
    t.finished("greedy")
    t.started("sampled")
    # window: 1 greedy still counted (it was running) + 1 sampled; observed tau 2.0. Sampled,
    # first seen beside a known greedy, starts at 1/2 and takes the LMS step alone:
    # x_s = 1/2 + 0.5 * r * 0.5 / 0.5 with r = 1/2 - (0.5/3 + 0.5/2); greedy keeps 3.0 and its age
    assert t.scraped(2.0, 400.0, 5.0, **kw) is True
    x_s = 0.5 + 0.5 * (0.5 - (0.5 / 3 + 0.5 / 2))
    assert t.accept_length("greedy", 5.0, 10.0) == pytest.approx(3.0)
    assert t.accept_length("sampled", 5.0, 10.0) == pytest.approx(1 / x_s)
    assert t.age_s("greedy", 7.0) == pytest.approx(5.0)      # greedy's last observation: 2.0
    assert t.age_s("sampled", 7.0) == pytest.approx(2.0)
    # once both are known, a mixed reading moves both (one LMS step of w 0.5)
    t.started("greedy")
    assert t.window == {"greedy": 2, "sampled": 1}           # the ended greedy one is carried
    assert t.scraped(2.5, 600.0, 6.0, **kw) is True
    r = 1 / 2.5 - (2 / 3 / 3 + 1 / 3 * x_s)                   # f = (2/3, 1/3), |f|^2 = 5/9
    assert t.accept_length("greedy", 6.0, 10.0) == pytest.approx(1 / (1 / 3 + 0.5 * r * (2 / 3) / (5 / 9)))
    assert t.accept_length("sampled", 6.0, 10.0) == pytest.approx(1 / (x_s + 0.5 * r * (1 / 3) / (5 / 9)))
    assert t.accept_length("greedy", 16.1, 10.0) is None     # too old: unknown


def test_a_first_seen_class_leaves_the_known_one_alone():
    """Sampled requests right after greedy ones (one greedy carried into the window): greedy
    keeps 2.2 instead of being dragged to 1.7, below its break-even; sampled starts at the
    reading (1.02) and its step would take it below tau 1, where it is held."""
    t = AcceptanceTracker()
    kw = {"weight": 0.5, "refresh_tokens": 160, "running_reqs": 1}
    t.started("greedy")
    assert t.scraped(2.2, 0.0, 0.0, **kw) is False            # the first counter: a baseline
    assert t.scraped(2.2, 100.0, 1.0, **kw) is True
    t.finished("greedy")
    assert t.scraped(2.2, 300.0, 2.0, **kw) is True           # 200 tokens since: re-measured
    t.started("sampled")
    assert t.window == {"greedy": 1, "sampled": 1}
    before = t.accept_length("greedy", 2.0, 10.0)
    assert t.scraped(1.02, 400.0, 3.0, **kw) is True
    assert t.accept_length("sampled", 3.0, 10.0) == pytest.approx(1.0)
    assert t.accept_length("greedy", 3.0, 10.0) == pytest.approx(before) == pytest.approx(2.2)
    assert t.age_s("greedy", 3.0) == pytest.approx(1.0)
    # both unknown and mixed (expired): both start at the observed value, as before
    t.finished("sampled")
    t.started("greedy")
    assert t.accept_length("greedy", 20.0, 10.0) is None and t.accept_length("sampled", 20.0, 10.0) is None
    assert t.scraped(1.8, 600.0, 21.0, **kw) is True
    assert (t.accept_length("greedy", 21.0, 10.0), t.accept_length("sampled", 21.0, 10.0)) == (
        pytest.approx(1.8), pytest.approx(1.8))


def test_an_expired_estimate_is_measured_afresh_not_blended():
    """A class bypassed on a bad reading is judged on its new measurement alone once the old
    one expired (with weight 0.5 a blend of 1.4 and 2.4 would read 1.77: still bypassed)."""
    t = AcceptanceTracker()
    kw = {"weight": 0.5, "refresh_tokens": 160, "running_reqs": 1}
    t.started("sampled")
    t.scraped(1.4, 0.0, 0.0, **kw)
    assert t.scraped(1.4, 100.0, 1.0, **kw) is True
    assert t.accept_length("sampled", 1.0, 10.0) == pytest.approx(1.4)
    t.finished("sampled")
    assert t.accept_length("sampled", 11.5, 10.0) is None        # expired
    assert t.age_s("sampled", 11.5) == pytest.approx(10.5)
    t.started("sampled")
    assert t.scraped(2.4, 300.0, 12.0, **kw) is True
    assert t.accept_length("sampled", 12.0, 10.0) == pytest.approx(2.4)
    # while fresh, observations blend (LMS step 0.5): 1/tau = 1/2.4 + 0.5 * (1/1.2 - 1/2.4)
    assert t.scraped(1.2, 500.0, 13.0, **kw) is True
    assert t.accept_length("sampled", 13.0, 10.0) == pytest.approx(1 / (1 / 2.4 + 0.5 * (1 / 1.2 - 1 / 2.4)))


def test_a_request_that_ended_since_the_last_scrape_counts_in_the_next_reading():
    """The gauge moved before the sampled request ended: its last steps are in the next reading,
    so that reading is not put on the greedy request alone (the real pools showed it)."""
    t = AcceptanceTracker()
    kw = {"weight": 0.5, "refresh_tokens": 160, "running_reqs": 1}
    t.started("sampled")
    t.scraped(1.4, 0.0, 0.0, **kw)
    t.finished("sampled")                                  # after the gauge moved to 1.4
    assert t.scraped(1.4, 100.0, 1.0, **kw) is True
    assert t.window == {"greedy": 0, "sampled": 1}          # carried into the next window
    t.started("greedy")
    assert t.scraped(1.9, 200.0, 2.0, **kw) is True
    # window 1/2 greedy (first seen: 1/1.9 and the LMS step alone), 1/2 sampled (known: keeps
    # 1.4): the sampled tail's share of the reading is not put on greedy
    r = 1 / 1.9 - (0.5 / 1.9 + 0.5 / 1.4)
    assert t.accept_length("greedy", 2.0, 10.0) == pytest.approx(1 / (1 / 1.9 + 0.5 * r))
    assert 1 / (1 / 1.9 + 0.5 * r) > 1.9
    assert t.accept_length("sampled", 2.0, 10.0) == pytest.approx(1.4)
    assert t.scraped(1.9, 200.0, 3.0, **kw) is False
    assert t.window == {"greedy": 1, "sampled": 0}          # only a reading resets the window


def test_flags_flip_at_most_once_per_interval():
    routing = RoutingConfig.model_validate({"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6},
                                            "min_flip_interval_s": 5.0})
    b = BypassState()
    kw = {"accept_length": {"greedy": None, "sampled": None}, "routing": routing, "gamma": 3, "c": 0.05}
    trace = [(0.0, 9), (1.0, 0), (2.0, 9), (5.5, 0), (6.0, 9), (11.0, 9), (11.5, 0)]
    states = []
    for now, load in trace:
        b.commit(b.proposed(load=load, now=now, **kw), now)
        states.append(b.flags["saturated"])
    # on at 0; off wanted at 1.0 but held until 5.5; on wanted at 6.0, held until 11.0; then held on
    assert states == [True, True, True, False, False, True, True]
    assert b.flipped_at["saturated"] == 11.0
    assert math.isinf(b.flipped_at["low_acceptance:greedy"])


def test_the_kv_read_term_grows_with_the_batch_times_its_context():
    kv = SpeedModel(decode_s_per_token=0.01, batch_knee=32, attention_s_per_token=1e-7, kv_read_s_per_token=2e-8)
    # T_plain(b, L) = t0 (1 + b / b_knee) + a L + k b L
    assert token_s(kv, batch=12, context=1000, accept_length=None) == pytest.approx(
        0.01 * (1 + 12 / 32) + 1e-7 * 1000 + 2e-8 * 12 * 1000)
    # the KV a step reads, when known, replaces b * L: requests queued in the engine read none
    assert token_s(kv, batch=12, context=1000, accept_length=None, kv_tokens=3000) == pytest.approx(
        0.01 * (1 + 12 / 32) + 1e-7 * 1000 + 2e-8 * 3000)
    # the verify pass reads each sequence's KV once, like a plain step
    spec = replace(kv, gamma=3, c=0.1)
    plain = 0.01 * (1 + 12 / 32) + 1e-4 + 2.4e-4
    verify = 0.01 * (1 + 12 * 4 / 32) + 1e-4 + 2.4e-4
    assert token_s(spec, batch=12, context=1000, accept_length=2.0) == pytest.approx((verify + 0.1 * 3 * plain) / 2.0)
    # k = 0 is the form without the term
    assert token_s(replace(kv, kv_read_s_per_token=0.0), batch=12, context=1000, accept_length=None) == \
        pytest.approx(0.01 * (1 + 12 / 32) + 1e-7 * 1000)


def test_the_prediction_reads_the_engine_s_used_kv_for_the_step_not_its_queued_requests():
    kv = SpeedModel(decode_s_per_token=0.01, batch_knee=32, kv_read_s_per_token=1e-7)
    snap = PoolSnapshot("plain", False, 100_000, 0, (EndpointSnapshot("http://p", True, load=10, queued=6,
                                                                     kv_free_tokens=50_000, kv_used_tokens=4_000),),
                        speed=kv)
    f = RequestFeatures(prompt_tokens=1000, max_new_tokens=100, temperature_class="greedy")
    # 4 running sequences: 4,000 used + this request's 1,000 + 50 read per step, batch 11 for the rest
    step = 0.01 * (1 + 11 / 32) + 1e-7 * 5050
    assert predict_request(f, snap, "http://p") == pytest.approx(100 * step)
