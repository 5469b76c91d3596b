"""Every prediction checked against what happened, and the fallback to the shorter queue
(router.decision.prediction_check, router.decision.hysteresis.next_prediction_fallback, router.decision.policy.decide,
router.state.runtime.Runtime.advance_checks / check_prediction)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from router.config.tree import ConfigError, parse_config
from router.decision.hysteresis import next_prediction_fallback
from router.decision.policy import (
    Decision,
    EndpointSnapshot,
    PoolSnapshot,
    Reason,
    Rules,
    decide,
    predict_request,
)
from router.decision.predict import SpeedModel, completion_s
from router.decision.predicted import externality_cost
from router.decision.prediction_check import PredictionCheck, median
from router.decision.prefix import PrefixRequest
from router.loops.scraper import EngineLoad
from router.request.features import PromptCounter, RequestFeatures
from router.state.runtime import Runtime

MODEL = SpeedModel(decode_s_per_token=0.02, batch_knee=32.0, prefill_s_per_token=1e-4)
RULES = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)


def test_median_of_odd_even_and_empty():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([]) is None


def test_a_check_is_the_signed_relative_error_and_the_pool_error_its_median():
    check = PredictionCheck(window=4, max_age_s=100.0)
    assert check.add("completion", "greedy", 0, 2.0, 1.0, now=0.0) == 1.0     # twice too slow
    assert check.add("completion", "greedy", 0, 0.5, 1.0, now=1.0) == -0.5    # twice too fast
    assert check.add("completion", "sampled", 1, 1.1, 1.0, now=2.0) == pytest.approx(0.1)
    assert check.add("completion", "greedy", 0, 1.0, 0.0, now=2.0) is None    # nothing realised: not taken
    assert check.error(3.0) == (pytest.approx(0.5), 3)
    assert check.checked == {"completion": 3, "ttft": 0}
    # the window keeps the last 4 of the pool
    for i in range(4):
        check.add("completion", "greedy", 0, 1.0, 1.0, now=3.0 + i)
    assert check.error(10.0) == (0.0, 4)
    cells = check.cells(10.0)
    assert cells[("completion", "greedy", 0)] == (0.0, 0.0, 4)       # the cell's own window of 4
    assert cells[("completion", "sampled", 1)] == (pytest.approx(0.1), pytest.approx(0.1), 1)


def test_old_checks_are_not_counted():
    check = PredictionCheck(window=64, max_age_s=10.0)
    check.add("completion", "greedy", 0, 3.0, 1.0, now=0.0)
    check.add("completion", "greedy", 0, 1.0, 1.0, now=8.0)
    assert check.error(9.0) == (1.0, 2)
    assert check.error(10.5) == (0.0, 1)
    assert check.error(30.0) == (None, 0)
    assert check.cells(30.0) == {}


def test_status_shows_pool_kind_and_cells():
    check = PredictionCheck(window=8, max_age_s=60.0)
    check.add("completion", "greedy", 1, 1.5, 1.0, now=0.0)
    check.add("ttft", "greedy", 1, 0.1, 0.2, now=0.0)
    status = check.status(1.0)
    assert status["fallback"] is False and status["fallbacks"] == 0 and status["fallback_age_s"] is None
    assert (status["median_relative_error"], status["checks"], status["checked"]) == (0.5, 1, 1)
    assert status["completion"]["cells"] == {"greedy/le_4096": {"median_relative_error": 0.5, "bias": 0.5,
                                                                 "checks": 1, "correction": 1.0}}
    assert status["ttft"]["bias"] == -0.5 and status["ttft"]["checked"] == 1
    assert "correction" not in status["ttft"]["cells"]["greedy/le_4096"]


def test_a_cell_is_measured_by_one_check_that_rules_out_a_pool_predicted_too_slow():
    """Measured: MIN_CELL_CHECKS recent checks, or a latest recent check whose error is at most
    the band (0.3: the pool no faster than predicted beyond it); a check that finds the pool
    faster than predicted asks for all four."""
    check = PredictionCheck(window=8, max_age_s=60.0)
    check.add("completion", "greedy", 0, 1.2, 1.0, now=0.0)  # predicted 20% too slow: within the band
    check.add("completion", "greedy", 0, 2.0, 4.0, now=0.0)  # 2x too fast: the pool is slower still
    check.add("completion", "sampled", 1, 3.0, 1.0, now=0.0)  # 3x too slow: measure on
    assert check.measured == frozenset({("greedy", 0)}) == check.measured_cells(1.0)  # at once, and by the round
    for i in range(3):
        check.add("completion", "sampled", 1, 3.0, 1.0, now=1.0 + i)
    assert ("sampled", 1) in check.measured and check.measured_cells(4.0) == {("greedy", 0), ("sampled", 1)}
    check.add("completion", "greedy", 0, 1.5, 1.0, now=5.0)  # the latest now 50% too slow, 3 checks in all
    assert check.measured_cells(5.0) == {("sampled", 1)}
    assert check.measured_cells(70.0) == frozenset()  # every check aged out


def test_a_measured_cell_corrects_by_its_median_bias():
    """1 / (1 + b), b the median bias of its last 8 checks beyond the band (0.3), once the
    cell holds MIN_CELL_CHECKS recent checks; bounded to [1/4, 4]; ttft checks correct
    nothing; old checks drop out."""
    check = PredictionCheck(window=8, max_age_s=60.0)
    for i, predicted in enumerate((1.5, 1.4, 1.6)):  # errors 0.5, 0.4, 0.6 on realised 1.0
        check.add("completion", "greedy", 1, predicted, 1.0, now=float(i))
    check.add("ttft", "greedy", 1, 5.0, 1.0, now=0.0)
    check.add("ttft", "greedy", 1, 5.0, 1.0, now=0.0)
    check.add("ttft", "greedy", 1, 5.0, 1.0, now=0.0)
    check.add("ttft", "greedy", 1, 5.0, 1.0, now=0.0)
    assert check.corrections(3.0) == ()  # three checks: not measured yet
    check.add("completion", "greedy", 1, 1.5, 1.0, now=3.0)  # median bias 0.5, 0.2 beyond the band
    assert check.corrections(3.0) == ((("greedy", 1), 0.83),)  # 1 / 1.2
    for i in range(4):  # a sampled cell 6x too slow: bias 5, 4.7 beyond the band: 1 / 5.7, bounded to 1/4
        check.add("completion", "sampled", 0, 6.0, 1.0, now=4.0)
    assert check.corrections(4.0) == ((("greedy", 1), 0.83), (("sampled", 0), 0.25))
    assert check.status(4.0)["completion"]["cells"]["sampled/le_1024"]["correction"] == 0.25
    assert check.corrections(62.5) == ((("sampled", 0), 0.25),)  # the greedy checks at 0-2 s aged out
    for _ in range(4):  # the model comes right (a refit): 4 good checks of the last 8, median bias 2.5
        check.add("completion", "sampled", 0, 3.0, 3.0, now=5.0)
    assert dict(check.corrections(5.0))[("sampled", 0)] == 0.31  # 1 / (1 + 2.2)
    for _ in range(4):  # 3x too fast: bias -2/3, -0.37 beyond the band
        check.add("completion", "greedy", 0, 1.0, 3.0, now=5.0)
    assert dict(check.corrections(5.0))[("greedy", 0)] == 1.58  # 1 / (1 - 0.3667)
    for _ in range(8):  # the last 8 only: the 4 old ones no longer count
        check.add("completion", "sampled", 0, 3.0, 3.0, now=5.0)
    assert ("sampled", 0) not in dict(check.corrections(5.0))
    for _ in range(4):  # 25% too slow: within the band, no correction
        check.add("completion", "greedy", 2, 1.25, 1.0, now=5.0)
    assert ("greedy", 2) not in dict(check.corrections(5.0))
    # with no band (the fallback's tie-break): the whole bias
    assert dict(check.corrections(5.0, band=0.0))[("greedy", 2)] == 0.8  # 1 / 1.25
    assert dict(check.corrections(5.0, band=0.0))[("greedy", 0)] == 3.0  # 1 / (1 - 2/3)


@pytest.mark.parametrize(("previous", "error", "checks", "expected"), [
    (False, 0.6, 16, True),    # off enough, enough checks
    (False, 0.6, 15, False),   # too few checks to judge
    (True, 0.4, 16, True),     # between the bounds: unchanged
    (False, 0.4, 16, False),
    (True, 0.29, 16, False),   # below exit: back
    (True, 0.9, 3, False),     # the checks aged out: the model gets its chance again
    (True, None, 0, False),
    (False, 0.5, 16, True),    # at enter
])
def test_fallback_hysteresis(previous, error, checks, expected):
    assert next_prediction_fallback(previous, error, checks, enter=0.5, exit=0.3, min_checks=16) is expected


def _pools(spec_load: int, plain_load: int, *, spec_off: bool = False, plain_off: bool = False,
           spec_inflight: int | None = None, plain_inflight: int | None = None):
    """Each pool's one endpoint at its load; the router's own in-flight requests there are the
    load unless given (an engine with other clients' requests too)."""
    spec = PoolSnapshot("spec", True, 4096, 4, (EndpointSnapshot(
        "http://s", True, spec_load, inflight=spec_load if spec_inflight is None else spec_inflight),),
                        speed=replace(MODEL, gamma=4, c=0.05), accept_length_greedy=3.0, accept_length_sampled=3.0,
                        prediction_fallback=spec_off)
    plain = PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot(
        "http://p", True, plain_load, inflight=plain_load if plain_inflight is None else plain_inflight),),
                         speed=MODEL, prediction_fallback=plain_off)
    return spec, plain


def test_a_distrusted_pool_makes_the_decision_join_the_shorter_queue():
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=100, temperature_class="greedy")
    trusted = decide(f, _pools(3, 1), RULES)
    assert (trusted.pool, trusted.reason) == ("spec", Reason.SPECULATIVE)  # tau 3: spec predicted first
    assert trusted.basis == _pools(3, 1)[0]
    for spec_off, plain_off in ((True, False), (False, True)):
        d = decide(f, _pools(3, 1, spec_off=spec_off, plain_off=plain_off), RULES)
        assert (d.pool, d.endpoint, d.reason) == ("plain", "http://p", Reason.SHORTEST_QUEUE)
        assert [p for p, _ in d.predicted] == ["spec", "plain"]  # still predicted: the check goes on
        assert d.basis is not None and d.basis.name == "plain"
    # among equal queues the predicted-faster one: speculation for a short greedy request,
    # plain for a long prompt (plain's limit holds it; spec's tau is low there)
    tie = decide(f, _pools(2, 2, spec_off=True), RULES)
    assert (tie.pool, tie.reason) == ("spec", Reason.SHORTEST_QUEUE)
    long = RequestFeatures(prompt_tokens=900, max_new_tokens=100, temperature_class="sampled")
    slow = tuple(replace(p, accept_length_sampled=1.1) if p.speculative else p for p in _pools(2, 2, spec_off=True))
    assert decide(long, slow, RULES).pool == "plain"
    assert decide(long, slow, RULES).reason is Reason.SHORTEST_QUEUE
    # exploration does not apply in the fallback
    assert decide(f, _pools(0, 5, spec_off=True), replace(RULES, explore_every=1)).reason is Reason.SHORTEST_QUEUE


def test_the_shorter_queue_counts_the_router_s_own_requests_not_an_old_scrape():
    # the plain engine's last scrape read 16 requests (another client's, ended since); a burst
    # decided before the next scrape round alternates by the router's own in-flight counts
    # (ties to the predicted-faster speculative pool) instead of all joining the speculative pool
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=100, temperature_class="greedy")
    inflight = {"spec": 0, "plain": 0}
    chosen = []
    for _ in range(8):
        pools = _pools(inflight["spec"], max(16, inflight["plain"]), spec_off=True,
                       plain_inflight=inflight["plain"])
        d = decide(f, pools, RULES)
        assert d.reason is Reason.SHORTEST_QUEUE
        inflight[d.pool] += 1
        chosen.append(d.pool)
    assert chosen == ["spec", "plain"] * 4


def test_the_fallback_s_tie_break_takes_each_cell_s_measured_bias_off():
    long = RequestFeatures(prompt_tokens=900, max_new_tokens=100, temperature_class="sampled")
    cell = ("sampled", 0)  # 900 tokens: the first bucket
    spec, plain = (replace(p, accept_length_sampled=1.1) if p.speculative else p for p in _pools(2, 2, spec_off=True))
    by_model = decide(long, (spec, plain), RULES)
    assert (by_model.pool, by_model.reason) == ("plain", Reason.SHORTEST_QUEUE)  # equal queues: plain predicted faster
    ratio = dict(by_model.predicted)["spec"] / dict(by_model.predicted)["plain"]
    assert 1.0 < ratio < 1.5
    # the checks measured the speculative pool's predictions in this cell 2x too slow: measured,
    # it is the faster one (what is predicted, and checked, is unchanged)
    measured = (replace(spec, measured_factor=((cell, 0.5),)), plain)
    d = decide(long, measured, RULES)
    assert (d.pool, d.reason, d.predicted) == ("spec", Reason.SHORTEST_QUEUE, by_model.predicted)
    # another cell's factor does not apply; a shorter queue still wins over the measured speed
    assert decide(long, (replace(spec, measured_factor=((("greedy", 0), 0.5),)), plain), RULES).pool == "plain"
    busier = (replace(measured[0], endpoints=(EndpointSnapshot("http://s", True, 3, inflight=3),)), plain)
    assert decide(long, busier, RULES).pool == "plain"


def test_the_fallback_measures_an_idle_pool_whose_cell_was_never_checked():
    f = RequestFeatures(prompt_tokens=900, max_new_tokens=100, temperature_class="sampled")
    cell = ("sampled", 0)
    spec, plain = (replace(p, accept_length_sampled=1.1) if p.speculative else p for p in _pools(0, 0, spec_off=True))
    # plain is chosen (the tie, predicted faster) and measured in the cell, spec is not: spec takes it
    pools = (replace(spec, measured=frozenset()), replace(plain, measured=frozenset({cell})))
    d = decide(f, pools, RULES)
    assert (d.pool, d.reason) == ("spec", Reason.EXPLORE)
    # not when spec is busy, nor once its cell is measured, nor when the chosen one's is not either
    busy = (replace(pools[0], endpoints=(EndpointSnapshot("http://s", True, 1, inflight=1),)), pools[1])
    assert decide(f, busy, RULES).reason is Reason.SHORTEST_QUEUE
    both = (replace(spec, measured=frozenset({cell})), pools[1])
    assert decide(f, both, RULES).reason is Reason.SHORTEST_QUEUE
    neither = (pools[0], replace(plain, measured=frozenset()))
    assert decide(f, neither, RULES).reason is Reason.SHORTEST_QUEUE
    # a turn of a conversation is not moved to be measured
    turn = PrefixRequest(anchor=7, anchor_tokens=900, continued=True)
    assert decide(f, pools, RULES, prefix=turn).reason is Reason.SHORTEST_QUEUE


def test_the_fallback_keeps_the_hard_checks():
    over = RequestFeatures(prompt_tokens=4000, max_new_tokens=90)  # P + M + K above the spec pool's limit
    pools = (replace(_pools(0, 9, spec_off=True)[0], limit=2048), _pools(0, 9)[1])
    assert decide(over, pools, RULES) == Decision("plain", "http://p", Reason.LONG_CONTEXT)


def test_predict_request_with_the_realised_output():
    f = RequestFeatures(prompt_tokens=500, max_new_tokens=300)
    _, plain = _pools(2, 0)
    budget = predict_request(f, plain, "http://p")
    realised = predict_request(f, plain, "http://p", 40)
    assert budget == completion_s(MODEL, batch=1, prompt_tokens=500, cached_tokens=0, output_tokens=300,
                                  accept_length=None, kv_need_tokens=800)
    assert realised == completion_s(MODEL, batch=1, prompt_tokens=500, cached_tokens=0, output_tokens=40,
                                    accept_length=None, kv_need_tokens=800)
    with pytest.raises(ValueError, match="no endpoint"):
        predict_request(f, plain, "http://x")
    with pytest.raises(ValueError, match="no speed model"):
        predict_request(f, replace(plain, speed=None), "http://p")


def _runtime(check: dict | None = None) -> Runtime:
    doc = {"model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
           "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6},
                       "learning": {"check": check or {"min_checks": 4, "window": 8}}},
           "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://s:1"]},
                     {"name": "plain", "speculative": False, "endpoints": ["http://p:1"]}]}
    rt = Runtime(parse_config(doc), PromptCounter.__new__(PromptCounter))
    for ep in rt.all_endpoints():
        ep.record_success(EngineLoad(num_running_reqs=0, max_total_num_tokens=50_000, token_usage=0.0), now=1.0)
        ep.record_success(EngineLoad(num_running_reqs=0, max_total_num_tokens=50_000, token_usage=0.0), now=1.0)
    return rt


def test_the_runtime_checks_predictions_and_falls_back_and_comes_back():
    rt = _runtime()
    f = RequestFeatures(prompt_tokens=200, max_new_tokens=100, temperature_class="greedy")
    d = rt.decide(f, 2.0)
    assert d.reason in (Reason.SPECULATIVE, Reason.PLAIN_FASTER) and d.basis is not None
    predicted = predict_request(f, d.basis, d.endpoint, 50)
    # the engine takes 3x the prediction, again and again
    for i in range(4):
        err = rt.check_prediction(d, f, output_tokens=50, duration_s=3 * predicted, ttfb_s=None, now=2.0 + i)
        assert err == pytest.approx(-2 / 3)
    pool = rt.pool(d.pool)
    assert pool.check.error(6.0) == (pytest.approx(2 / 3), 4)
    assert rt.advance_checks(6.0) == [(d.pool, True)]
    assert pool.prediction_fallback and pool.check.fallbacks == 1
    assert rt.advance_checks(6.5) == []  # no change, nothing reported
    assert [s.prediction_fallback for s in rt.snapshots(6.5)] == [p.name == d.pool for p in rt.pools]
    assert rt.decide(f, 6.5).reason is Reason.SHORTEST_QUEUE
    # the predictions come right: 5 good checks of 8 bring the median below the exit bound
    for i in range(5):
        rt.check_prediction(d, f, output_tokens=50, duration_s=predicted, ttfb_s=None, now=7.0 + i)
    assert rt.advance_checks(12.0) == [(d.pool, False)]
    assert rt.decide(f, 12.0).reason is not Reason.SHORTEST_QUEUE
    # a reload with the same window keeps the checks
    again = Runtime(rt.config, rt.counter, rt)
    assert again.pool(d.pool).check is pool.check


def test_a_stream_checks_its_first_token_too_and_an_unpredicted_decision_nothing():
    rt = _runtime()
    f = RequestFeatures(prompt_tokens=200, max_new_tokens=100, stream=True, temperature_class="sampled")
    d = rt.decide(f, 2.0)
    rt.check_prediction(d, f, output_tokens=10, duration_s=1.0, ttfb_s=0.05, now=2.0)
    pool = rt.pool(d.pool)
    assert pool.check.checked == {"completion": 1, "ttft": 1}
    assert rt.check_prediction(Decision("plain", "http://p:1", Reason.CLIENT_OPT_OUT), f, output_tokens=10,
                               duration_s=1.0, ttfb_s=None, now=3.0) is None


def test_check_disabled_never_falls_back():
    rt = _runtime({"enabled": False, "min_checks": 1, "window": 4})
    f = RequestFeatures(prompt_tokens=200, max_new_tokens=100)
    d = rt.decide(f, 2.0)
    rt.check_prediction(d, f, output_tokens=100, duration_s=100.0, ttfb_s=None, now=2.0)
    assert rt.advance_checks(3.0) == [] and not rt.pool(d.pool).prediction_fallback


@pytest.mark.parametrize(("check", "match"), [
    ({"fallback_enter": 0.3, "fallback_exit": 0.3}, "fallback_exit must be below fallback_enter"),
    ({"window": 8, "min_checks": 9}, "min_checks must be at most window"),
    ({"window": 0}, "window"),
])
def test_bad_check_settings_are_refused(check, match):
    with pytest.raises(ConfigError, match=match):
        _runtime(check)


def test_exploration_measures_a_runner_up_whose_cell_is_unmeasured_however_slow_it_looks():
    rules = replace(RULES, explore_every=4, explore_ratio=1.5)
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=100, temperature_class="greedy")
    spec, plain = _pools(0, 0)
    plain = replace(plain, speed=replace(MODEL, decode_s_per_token=0.2))  # predicted 10x+ slower: never explored
    assert decide(f, (spec, replace(plain, measured=frozenset({("greedy", 0)}))), rules, tie_break=3).pool == "spec"
    assert decide(f, (spec, plain), rules, tie_break=3).pool == "spec"  # untracked (None): as before
    # its (greedy, le_1024) cell has not been checked enough: the 4th decision explores it
    unmeasured = replace(plain, measured=frozenset({("sampled", 0), ("greedy", 1)}))
    got = [decide(f, (spec, unmeasured), rules, tie_break=i) for i in range(8)]
    assert [(d.pool, d.reason) for d in got] == ([("spec", Reason.SPECULATIVE)] * 3 + [("plain", Reason.EXPLORE)]) * 2
    # ... only while its endpoint is idle: a busy one would slow its batch for a measurement
    busy = replace(unmeasured, endpoints=(EndpointSnapshot("http://p", True, 1),))
    assert decide(f, (spec, busy), rules, tie_break=3).reason is Reason.SPECULATIVE


def test_the_runtime_marks_cells_measured_at_their_fourth_check_and_recounts_at_the_scrape_round():
    rt = _runtime()
    f = RequestFeatures(prompt_tokens=200, max_new_tokens=100, temperature_class="greedy")
    d = rt.decide(f, 2.0)
    for i in range(3):
        rt.check_prediction(d, f, output_tokens=100, duration_s=1.0, ttfb_s=None, now=2.0 + i)
    rt.advance_checks(5.0)
    pool = rt.pool(d.pool)
    assert pool.check.measured == frozenset()
    rt.check_prediction(d, f, output_tokens=100, duration_s=1.0, ttfb_s=None, now=5.0)
    assert pool.check.measured == frozenset({("greedy", 0)})  # the fourth check: at once
    assert next(s for s in rt.snapshots(5.2) if s.name == d.pool).measured == frozenset({("greedy", 0)})
    rt.advance_checks(5.5)
    assert pool.check.measured == frozenset({("greedy", 0)})
    rt.advance_checks(302.5)  # the check at 2 s aged out (max_age_s 300), three left: recounted at the round
    assert pool.check.measured == frozenset()


def test_externality_is_what_the_others_lose_while_the_request_shares_their_batch():
    from router.decision.predict import externality_s, token_s

    m = replace(MODEL, batch_knee=8.0)
    slower = token_s(m, batch=4, context=600, accept_length=None) - token_s(m, batch=3, context=600, accept_length=None)
    assert externality_s(m, batch=4, sequences=1, output_tokens=100, accept_length=None,
                         context_tokens=600) == pytest.approx(3 * 100 * slower)
    assert externality_s(m, batch=1, sequences=1, output_tokens=100, accept_length=None, context_tokens=600) == 0.0
    capped = replace(m, max_running_requests=3)  # the request waits: the running ones are not slowed
    assert externality_s(capped, batch=4, sequences=1, output_tokens=100, accept_length=None,
                         context_tokens=600) == 0.0
    # on a busy plain endpoint the request's own time is shorter, but with its cost to the others
    # the decision ranks the idle speculative endpoint first
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=200, temperature_class="sampled")
    spec = PoolSnapshot("spec", True, 4096, 4, (EndpointSnapshot("http://s", True, 0),),
                        speed=replace(m, gamma=4, c=0.05), accept_length_sampled=1.3)
    plain = PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p", True, 2),), speed=m)
    assert decide(f, (spec, plain), RULES).pool == "plain"
    assert decide(f, (spec, plain), replace(RULES, marginal_cost=True)).pool == "spec"


def test_the_runtime_ranks_by_marginal_cost_unless_the_config_turns_it_off():
    assert _runtime().rules.marginal_cost is True  # routing.learning.marginal_cost: on by default
    doc = {"model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
           "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6},
                       "learning": {"marginal_cost": False}},
           "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://s:1"]},
                     {"name": "plain", "speculative": False, "endpoints": ["http://p:1"]}]}
    assert Runtime(parse_config(doc), PromptCounter.__new__(PromptCounter)).rules.marginal_cost is False
    with pytest.raises(ConfigError, match="marginal_cost"):
        parse_config({**doc, "routing": {**doc["routing"], "learning": {"marginal_cost": "yes"}}})


def test_the_marginal_cost_moves_a_request_off_a_fuller_faster_pool():
    # spec: 12 decoding, a request there finishes in less time than on the idle plain endpoint, but
    # it slows the 12 by more than the difference: ranked by the sum, plain wins
    m = MODEL
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=200, temperature_class="greedy")
    spec = PoolSnapshot("spec", True, 4096, 4, (EndpointSnapshot("http://s", True, 12),),
                        speed=replace(m, gamma=4, c=0.05), accept_length_greedy=4.0)
    plain = PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p", True, 0),), speed=m)
    selfish = decide(f, (spec, plain), RULES)
    own = dict(selfish.predicted)
    assert selfish.pool == "spec" and own["spec"] < own["plain"]
    from router.decision.predict import token_s

    sm = spec.speed
    ctx = 100 + 200 / 2  # no KV known: the request's own context
    slower = token_s(sm, batch=13, context=ctx, accept_length=4.0) - token_s(sm, batch=12, context=ctx, accept_length=4.0)
    assert externality_cost(f, spec, "http://s") == pytest.approx(12 * 200 * slower)  # all 200 of its tokens
    assert own["spec"] + externality_cost(f, spec, "http://s") > own["plain"]
    assert decide(f, (spec, plain), replace(RULES, marginal_cost=True)).pool == "plain"


def test_a_correction_scales_the_pools_predictions_in_its_cell_only():
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=100, temperature_class="greedy")  # cell (greedy, 0)
    spec, plain = _pools(0, 2)
    base, cost = predict_request(f, plain, "http://p"), externality_cost(f, plain, "http://p")
    assert cost > 0
    halved = replace(plain, correction=((("greedy", 0), 0.5),))
    assert predict_request(f, halved, "http://p") == pytest.approx(base * 0.5, rel=1e-12)
    assert externality_cost(f, halved, "http://p") == pytest.approx(cost * 0.5, rel=1e-12)
    assert predict_request(f, halved, "http://p", raw=True) == base  # what a check evaluates
    other = replace(plain, correction=((("sampled", 0), 0.5), (("greedy", 1), 0.5)))
    assert predict_request(f, other, "http://p") == base
    # the decision reads the corrected predictions: spec (tau 3) first, plain at a quarter first
    assert decide(f, (spec, plain), RULES).pool == "spec"
    quarter = replace(plain, correction=((("greedy", 0), 0.25),))
    d = decide(f, (spec, quarter), RULES)
    assert (d.pool, d.reason) == ("plain", Reason.PLAIN_FASTER)
    assert dict(d.predicted)["plain"] == pytest.approx(base * 0.25, rel=1e-12)


def test_a_runner_up_unchecked_where_the_best_is_checked_is_explored_at_once():
    """Not waiting for the periodic turn (explore_every 50, tie-break 0), however slow it is
    predicted: the best's cell is measured, the runner-up's is not and its endpoint is idle;
    not for a continued conversation (its turn would prefill again elsewhere), nor for a
    first turn whose anchor ranks the best's pool first."""
    rules = replace(RULES, explore_every=50, explore_ratio=1.5)
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=100, temperature_class="greedy")
    spec, plain = _pools(0, 0)
    spec = replace(spec, measured=frozenset({("greedy", 0)}))
    far = replace(plain, measured=frozenset({("greedy", 1)}), speed=replace(MODEL, decode_s_per_token=0.2))
    t = dict(decide(f, (spec, far), rules, tie_break=0).predicted)
    assert t["plain"] > 10 * t["spec"]
    assert where(decide(f, (spec, far), rules, tie_break=0)) == ("plain", Reason.EXPLORE)
    busy = replace(far, endpoints=(EndpointSnapshot("http://p", True, 1),))
    checked = replace(far, measured=frozenset({("greedy", 0)}))
    cold = replace(spec, measured=frozenset())  # a cold start: the periodic rule only
    for s, p in ((spec, busy), (spec, checked), (cold, far), (spec, replace(far, measured=None))):
        assert where(decide(f, (s, p), rules, tie_break=0)) == ("spec", Reason.SPECULATIVE)
    # with an anchor (anchor 1 ranks plain first, 2 spec: tests/unit/test_policy_affinity.py):
    # a first turn is explored to the pool its conversation will stay on only, a later turn never
    first = PrefixRequest(anchor=1, continued=False)
    assert where(decide(f, (spec, far), rules, tie_break=0, prefix=first)) == ("plain", Reason.EXPLORE)
    for prefix in (first._replace(continued=True), first._replace(anchor=2)):
        assert where(decide(f, (spec, far), rules, tie_break=0, prefix=prefix)) == ("spec", Reason.SPECULATIVE)


def where(d: Decision) -> tuple[str | None, Reason]:
    return d.pool, d.reason


def test_the_runtime_corrects_a_cell_from_its_checks_and_keeps_checking_the_raw_model():
    rt = _runtime()
    f = RequestFeatures(prompt_tokens=200, max_new_tokens=100, temperature_class="greedy")
    d = rt.decide(f, 2.0)
    raw = predict_request(f, d.basis, d.endpoint, 100)
    for i in range(4):  # the engine takes half the prediction: bias +1, 0.7 beyond the band: factor 0.59
        assert rt.check_prediction(d, f, output_tokens=100, duration_s=raw / 2, ttfb_s=None, now=2.0 + i) == 1.0
    rt.advance_checks(6.0)
    pool = rt.pool(d.pool)
    assert pool.check.correction == ((("greedy", 0), 0.59),)
    snap = next(s for s in rt.snapshots(6.0) if s.name == d.pool)
    assert snap.correction == ((("greedy", 0), 0.59),)
    assert predict_request(f, snap, d.endpoint, 100) == pytest.approx(raw * 0.59, rel=1e-9)
    again = rt.decide(f, 6.0)
    assert dict(again.predicted)[d.pool] == pytest.approx(raw * 0.59, rel=1e-9)
    # the error (1.0 over 4 checks) turned the pool's fallback on: with both queues empty, the
    # other pool, never checked in this cell, takes the request to be measured
    assert pool.check.fallback and again.reason is Reason.EXPLORE and again.pool != d.pool
    # the corrected pool's prediction is checked against the raw model still (no correction of the correction)
    on_it = Decision(d.pool, d.endpoint, Reason.SHORTEST_QUEUE, predicted=again.predicted, basis=snap)
    assert rt.check_prediction(on_it, f, output_tokens=100, duration_s=raw / 2, ttfb_s=None, now=6.0) == \
        pytest.approx(1.0, rel=1e-9)


def test_a_reload_with_a_new_prior_forgets_the_cells_not_the_pools_checks():
    doc = {"model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
           "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6},
                       "learning": {"check": {"min_checks": 4, "window": 8}}},
           "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://s:1"]},
                     {"name": "plain", "speculative": False, "endpoints": ["http://p:1"]}]}
    rt = _runtime()  # the same document, its endpoints scraped healthy
    assert rt.config == parse_config(doc)
    f = RequestFeatures(prompt_tokens=200, max_new_tokens=100, temperature_class="greedy")
    d = rt.decide(f, 2.0)
    raw = predict_request(f, d.basis, d.endpoint, 100)
    for i in range(4):
        rt.check_prediction(d, f, output_tokens=100, duration_s=raw / 2, ttfb_s=None, now=2.0 + i)
    rt.advance_checks(6.0)
    check = rt.pool(d.pool).check
    assert check.correction == ((("greedy", 0), 0.59),) and check.measured == frozenset({("greedy", 0)})
    same = Runtime(rt.config, rt.counter, rt)  # the same prior: the fit and the corrections stay
    assert same.pool(d.pool).check is check and check.correction == ((("greedy", 0), 0.59),)
    other = next(p for p in doc["pools"] if p["name"] == d.pool)
    other["speed"] = {"decode_s_per_token": 0.01, "batch_knee": 32.0,
                      **({"accept_length_greedy": 3.0, "accept_length_sampled": 2.0} if other["speculative"] else {})}
    again = Runtime(parse_config(doc), rt.counter, same)
    assert again.pool(d.pool).check is check
    assert (check.correction, check.measured, check.cells(6.0)) == ((), frozenset(), {})
    assert check.error(6.0) == (1.0, 4)  # the pool's own checks (the fallback's input) stay
    again.advance_checks(6.5)
    assert check.correction == ()
