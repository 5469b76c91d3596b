"""The planner's pure parts: the window as a day, the speed model as an engine model, the advice's shape,
the loop's hysteresis (loadtests/plan.py, loadtests/planloop.py)."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest

from drafters.spec_math import expected_tokens
from loadtests.dayshapes import default_engine_model
from loadtests.plan import (
    PlanError,
    advise,
    bucket_tokens,
    day_from_window,
    engine_model_from_speed,
    engine_models,
    measured,
    pool_limits,
    predict_splits,
    replay_check,
    trust,
)
from loadtests.planloop import Hysteresis, PlanLoop, PlanMetrics
from router import SpeedModel


def _row(t: float, **kw: Any) -> dict[str, Any]:
    return {"arrival_s": t, "prompt_tokens": 100, "cached_tokens": 20, "output_tokens": 30, "max_tokens": 64,
            "temperature_class": "greedy", "n": 1, "pool": "spec", "duration_s": 0.5, **kw}


def test_day_from_window_expands_n_and_takes_the_budget_when_output_is_unknown() -> None:
    doc = {"requests": [_row(2.0, n=2, temperature_class="sampled"), _row(0.0, output_tokens=None),
                        _row(1.0, cached_tokens=500, output_tokens=100)]}
    day, unreported = day_from_window(doc)
    assert unreported == 1
    assert [(r.rid, r.arrival_s, r.prompt_tokens, r.cached_tokens, r.output_tokens, r.max_new_tokens, r.temperature)
            for r in day] == [(0, 0.0, 100, 20, 64, 64, 0.0), (1, 1.0, 100, 100, 100, 100, 0.0),
                              (2, 2.0, 100, 20, 30, 64, 1.0), (3, 2.0, 100, 20, 30, 64, 1.0)]


def test_day_from_an_empty_or_broken_window_is_refused() -> None:
    with pytest.raises(PlanError, match="no finished request"):
        day_from_window({"requests": []})
    with pytest.raises(PlanError, match="lacks a usable field"):
        day_from_window({"requests": [{"arrival_s": 0.0}]})


@pytest.mark.parametrize(("label", "tokens"), [("le_1024", 512.0), ("le_4096", 2048.0), ("gt_65536", 131072.0)])
def test_bucket_tokens(label: str, tokens: float) -> None:
    assert bucket_tokens(label) == tokens


def test_bucket_tokens_refuses_an_unknown_label() -> None:
    with pytest.raises(PlanError):
        bucket_tokens("mid_12")


SPEED = SpeedModel(decode_s_per_token=0.01, batch_knee=24.0, attention_s_per_token=3e-7, prefill_s_per_token=1e-4,
                   max_running_requests=48, gamma=4, c=0.1)


def test_speed_model_maps_term_for_term() -> None:
    m = engine_model_from_speed(SPEED, gamma=4, c=0.1, accept_length={"greedy": 3.0, "sampled": 2.0},
                                kv_tokens=100_000, spec_kv_fraction=0.6)
    s = m.speed
    assert (s.t0_s, s.batch_knee, s.attn_s_per_token, s.prefill_s_per_token, s.gamma, s.c) == (
        0.01, 24.0, 3e-7, 1e-4, 4, 0.1)
    assert (m.kv_tokens, m.spec_kv_fraction, m.max_running) == (100_000, 0.6, 48)
    # alpha inverts the measured accept length; no per-bucket data: no fall with context
    assert expected_tokens(s.alpha_short, 4) == pytest.approx(3.0)
    assert expected_tokens(m.alpha_sampled_short, 4) == pytest.approx(2.0)
    assert s.alpha_drop_per_doubling == 0.0
    # the simulator's decode step is the router's per-token model
    assert s.plain_token_s(8, 1000) == pytest.approx(0.01 * (1 + 8 / 24) + 3e-7 * 1000)


def test_speed_model_takes_the_fall_of_acceptance_from_the_buckets() -> None:
    m = engine_model_from_speed(SPEED, gamma=4, c=0.1,
                                accept_table={"greedy/le_1024": 3.4, "greedy/le_16384": 2.6, "sampled/le_1024": 1.9})
    s = m.speed
    assert s.alpha_knee_tokens == 512.0
    assert expected_tokens(s.alpha_short, 4) == pytest.approx(3.4)
    assert s.alpha_drop_per_doubling > 0
    assert expected_tokens(s.alpha(8192.0), 4) == pytest.approx(2.6)
    assert expected_tokens(m.alpha_sampled_short, 4) == pytest.approx(1.9)


def test_without_a_measured_acceptance_the_base_model_stays() -> None:
    base = default_engine_model()
    m = engine_model_from_speed(SPEED, gamma=4, c=0.1)
    assert (m.speed.alpha_short, m.alpha_sampled_short, m.kv_tokens) == (
        base.speed.alpha_short, base.alpha_sampled_short, base.kv_tokens)


def _pool(name: str, spec: bool, **kw: Any) -> dict[str, Any]:
    speed = {"decode_s_per_token": 0.02, "batch_knee": 32.0, "attention_s_per_token": 2e-7,
             "prefill_s_per_token": 2e-4, "max_running_requests": None, "gamma": 4 if spec else 0,
             "c": 0.05 if spec else 0.0}
    return {"name": name, "speculative": spec, "endpoints": 1, "healthy": 1, "kv_tokens": 400_000 if spec else 500_000,
            "speed": speed, "speed_source": "learned", "fit": {"observations": 50, "error": 0.1, "accept_length": {}},
            "check": None, "accept_length": {"greedy": 3.0, "sampled": 1.8} if spec else {}, **kw}


def _doc(requests: int = 40, **pools: Any) -> dict[str, Any]:
    rng = random.Random(7)
    t, rows = 0.0, []
    for _ in range(requests):
        t += rng.expovariate(1.0)
        rows.append(_row(round(t, 3), prompt_tokens=rng.randint(200, 2000), output_tokens=rng.randint(20, 200),
                         max_tokens=256, temperature_class=rng.choice(["greedy", "sampled"])))
    return {"model": "m", "window": {"requests": requests, "seconds": t}, "requests": rows,
            "pools": [pools.get("spec", _pool("spec", True)), pools.get("plain", _pool("plain", False))]}


def test_engine_models_take_each_pools_kv_and_the_speculative_gamma() -> None:
    m = engine_models(_doc())
    assert m.spec.kv_tokens == m.plain.kv_tokens == 500_000
    assert m.spec.spec_kv_fraction == m.plain.spec_kv_fraction == 0.8
    assert (m.spec.speed.gamma, m.plain.speed.gamma) == (4, 4)
    assert m.sources == {"speculative": "spec:learned", "plain": "plain:learned"}


def test_the_replay_sends_a_prompt_above_the_speculative_pool_s_limit_where_the_router_does() -> None:
    # 2,300-token prompts, above the speculative pool's 2,048-token limit: the router sends them
    # to the plain pool, so the replay must too (on a drafter, with its prefill, they would be
    # predicted at another engine's speed); with every engine speculative they have nowhere to go
    doc = _doc(spec=_pool("spec", True, limit_tokens=2048), plain=_pool("plain", False, limit_tokens=4096))
    for r in doc["requests"]:
        r["prompt_tokens"] = 2300
    assert pool_limits(doc) == {"spec": 2048, "plain": 4096}
    assert pool_limits({"pools": [_pool("spec", True)]}) == {"spec": None, "plain": None}
    requests, _ = day_from_window(doc)
    models = engine_models(doc)
    rows = {r["k"]: r for r in predict_splits(requests, 2, models, limits=pool_limits(doc))}
    assert (rows[0]["ok"], rows[1]["ok"], rows[1]["spec_share"]) == (40, 40, 0.0)
    assert (rows[2]["ok"], rows[2]["refused"]) == (0, 40)
    unbounded = {r["k"]: r for r in predict_splits(requests, 2, models)}
    assert (unbounded[2]["ok"], unbounded[1]["spec_share"] > 0) == (40, True)


def test_the_replay_keeps_each_request_s_speculation_hint() -> None:
    # the same short requests; asked off the speculative pool, none is replayed there (the
    # router's client_opt_out), where without the hint the router puts some on it
    doc = _doc()
    requests, _ = day_from_window(doc)
    assert {r.speculation for r in requests} == {"auto"}  # rows without the field: auto
    models = engine_models(doc)
    auto = {r["k"]: r for r in predict_splits(requests, 2, models)}
    for r in doc["requests"]:
        r["speculation"] = "off"
    off_requests, _ = day_from_window(doc)
    assert {r.speculation for r in off_requests} == {"off"}
    off = {r["k"]: r for r in predict_splits(off_requests, 2, models)}
    assert auto[1]["spec_share"] > 0 and off[1]["spec_share"] == 0.0
    assert off[1]["reasons"] == {"client_opt_out": 40}
    # an unknown value is replayed as auto (the router refuses it with a 400 before any window)
    doc["requests"][0]["speculation"] = "sometimes"
    assert day_from_window(doc)[0][0].speculation == "auto"


def test_advice_shape() -> None:
    doc = _doc()
    for r in doc["requests"]:
        r["duration_s"] = 2.0            # what the replay of the current split (1 + 1) predicts, within 30%
    advice = advise(doc, 3)
    assert set(advice) == {"advised", "splits", "window", "metric", "current", "trusted", "untrusted_because",
                           "model", "measured", "hedge"}
    assert advice["measured"] == {"requests": 40, "mean_s": 2.0, "p90_s": 2.0}
    assert [(s["speculative"], s["plain"]) for s in advice["splits"]] == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert all(set(s) == {"speculative", "plain", "predicted_mean_s", "predicted_p90_s", "predicted_goodput_rps",
                          "predicted_mean_s_if_sampled", "predicted_p90_s_if_sampled",
                          "predicted_goodput_rps_if_sampled"} for s in advice["splits"])
    assert (advice["hedge"]["factor"], advice["hedge"]["stressed"]) == (0.5, True)
    safe = [s for s in advice["splits"] if s["speculative"] in advice["hedge"]["safe"]]
    best = min(safe, key=lambda s: (s["predicted_mean_s"], s["speculative"]))
    assert advice["advised"] == {"speculative": best["speculative"], "plain": 3 - best["speculative"]}
    loops = advice["window"].pop("closed_loop")
    assert advice["window"] == {"requests": 40, "seconds": pytest.approx(_doc()["window"]["seconds"]),
                                "sequences": 40, "unreported": 0}
    assert (loops["closed"], loops["linked"]) == (False, 0)  # Poisson arrivals: replayed open loop
    assert (advice["metric"], advice["current"], advice["trusted"]) == ("mean_s", {"speculative": 1, "plain": 1}, True)


def test_advice_by_goodput_takes_the_highest() -> None:
    advice = advise(_doc(), 2, metric="goodput_rps")
    best = max(advice["splits"], key=lambda s: (s["predicted_goodput_rps"], -s["speculative"]))
    assert advice["advised"]["speculative"] == best["speculative"]
    with pytest.raises(PlanError, match="unknown metric"):
        advise(_doc(), 2, metric="long_mean_s")


def test_a_high_prediction_error_makes_the_advice_untrusted() -> None:
    check = {"median_relative_error": 0.4, "checked": 200, "fallback": False}
    assert trust(_doc(spec=_pool("spec", True, check=check)), 0.25) == [
        "pool spec: median prediction error 0.40 > 0.25"]
    fell_back = {"median_relative_error": 0.1, "checked": 200, "fallback": True}
    assert trust(_doc(plain=_pool("plain", False, check=fell_back)), 0.25) == [
        "pool plain: the router fell back from its speed model (prediction error)"]
    young = _pool("spec", True, fit={"observations": 3, "error": 0.1, "accept_length": {}})
    young_plain = _pool("plain", False, fit={"observations": 2, "error": 0.1})
    assert trust(_doc(spec=young, plain=young_plain), 0.25) == ["no pool's fit has learned 10 requests yet"]
    unmeasured = _pool("spec", True, accept_length={"greedy": None, "sampled": None})
    assert trust(_doc(spec=unmeasured), 0.25) == ["the speculative pool's acceptance was never measured"]
    assert trust(_doc(), 0.25) == []


# ----------------------------------------------------------------------------- the loop


def _advice(means: list[float | None], *, trusted: bool = True, metric: str = "mean_s") -> dict[str, Any]:
    n = len(means) - 1
    return {"metric": metric, "trusted": trusted, "advised": {"speculative": 0, "plain": n},
            "window": {"requests": 10}, "splits": [{"speculative": k, "plain": n - k, f"predicted_{metric}": v}
                                                   for k, v in enumerate(means)]}


H = Hysteresis(dwell_s=100.0, step_s=10.0, change_cost_s=20.0, min_gain=0.05)


@pytest.mark.parametrize(("means", "current", "outcome", "moved_to"), [
    ([2.0, 1.5, 1.0, 1.2], 1, "gain", 2),            # one engine toward k = 2
    ([2.0, 1.5, 1.0, 1.2], 3, "gain", 2),
    ([2.0, 1.5, 1.0, 1.2], 2, "at_advice", 2),
    ([1.0, 0.99, 1.0, 1.0], 0, "below_min_gain", 0),  # 1% < 5%
    ([None, 1.0, 0.9, 1.0], 0, "gain", 1),           # nothing completes at k = 0
    ([1.0, 1.0, 1.0, None], 0, "at_advice", 0),
])
def test_loop_decides(means: list[float | None], current: int, outcome: str, moved_to: int) -> None:
    step = PlanLoop(3, H).decide(_advice(means), current, 0.0)
    assert (step.outcome, step.moved_to) == (outcome, moved_to)


def test_the_cost_of_a_change_outweighs_a_small_gain() -> None:
    # gain 10% on 3 engines over a 100 s dwell = 30 engine-s; moving 2 engines costs 2 x 20 = 40
    step = PlanLoop(3, H).decide(_advice([1.1, 1.05, 0.99]), 0, 0.0)
    assert step.outcome == "below_cost"
    assert step.gain == pytest.approx(0.1)


def test_untrusted_advice_is_not_acted_on() -> None:
    step = PlanLoop(3, H).decide(_advice([2.0, 1.5, 1.0, 1.2], trusted=False), 0, 0.0)
    assert (step.outcome, step.target, step.changed) == ("untrusted", None, False)


def test_floors_bound_the_target_and_restore_a_pool_below_them() -> None:
    loop = PlanLoop(3, Hysteresis(dwell_s=100.0, step_s=10.0, change_cost_s=20.0, floor_speculative=1, floor_plain=1))
    assert loop.target(_advice([3.0, 2.0, 1.5, 1.0])) == 2
    step = loop.decide(_advice([3.0, 2.0, 1.5, 1.0]), 0, 0.0)
    assert (step.outcome, step.moved_to) == ("floor", 1)
    with pytest.raises(ValueError, match="exceed"):
        PlanLoop(1, Hysteresis(floor_speculative=1, floor_plain=1))


def test_step_wait_and_dwell_after_a_change() -> None:
    loop = PlanLoop(3, H)
    first = loop.decide(_advice([2.0, 1.5, 1.0, 1.2]), 1, 0.0)
    loop.commit(first, 0.0)
    assert loop.decide(_advice([2.0, 1.5, 1.0, 0.5]), 2, 5.0).outcome == "step_wait"
    assert loop.decide(_advice([2.0, 1.5, 1.0, 0.5]), 2, 10.0).outcome == "gain"      # same direction
    assert loop.decide(_advice([1.7, 1.9, 2.0, 2.0]), 2, 50.0).outcome == "dwell"     # reversal within dwell
    assert loop.decide(_advice([1.7, 1.9, 2.0, 2.0]), 2, 100.0).moved_to == 1


def test_a_large_gain_reverses_within_the_dwell() -> None:
    loop = PlanLoop(3, H)
    loop.commit(loop.decide(_advice([2.0, 1.5, 1.0, 1.2]), 1, 0.0), 0.0)
    small = loop.decide(_advice([1.7, 1.9, 2.0, 2.0]), 2, 50.0)       # 15% < reverse_gain 20%
    big = loop.decide(_advice([1.5, 1.9, 2.0, 2.0]), 2, 50.0)         # 25%: the traffic turned
    assert (small.outcome, big.outcome, big.moved_to) == ("dwell", "gain", 1)
    assert big.gain == pytest.approx(0.25)
    with pytest.raises(ValueError, match="reverse_gain"):
        Hysteresis(reverse_gain=-0.1)


def test_metrics_show_the_advice_and_the_last_change() -> None:
    metrics, loop = PlanMetrics(), PlanLoop(3, H)
    advice = {**_advice([2.0, 1.5, 1.0, 1.2]), "advised": {"speculative": 2, "plain": 1}}
    metrics.advice(advice)
    step = loop.decide(advice, 1, 0.0)
    metrics.step(step, 3, 1_700_000_000.0)
    get = metrics.registry.get_sample_value
    assert get("specgate_plan_advised_engines", {"pool": "speculative"}) == 2
    assert get("specgate_plan_advised_engines", {"pool": "plain"}) == 1
    assert get("specgate_plan_current_engines", {"pool": "speculative"}) == 2
    assert get("specgate_plan_changes_total", {"reason": "gain"}) == 1
    assert get("specgate_plan_rounds_total", {"outcome": "gain"}) == 1
    assert get("specgate_plan_last_change_timestamp_seconds") == 1_700_000_000.0
    assert get("specgate_plan_last_change_reason", {"reason": "gain"}) == 1
    assert get("specgate_plan_last_change_reason", {"reason": "floor"}) == 0
    assert get("specgate_plan_trusted") == 1
    assert math.isfinite(get("specgate_plan_window_requests"))


def test_a_small_gain_every_round_is_acted_on_after_the_sustained_rounds() -> None:
    loop = PlanLoop(3, Hysteresis(dwell_s=1000.0, step_s=10.0, change_cost_s=20.0, min_gain=0.05,
                                  sustained_gain=0.02, sustained_rounds=3))
    small = _advice([1.0, 0.97, 0.96, 0.96])     # 4% toward k = 2 from k = 0
    outcomes = []
    for t in (0.0, 60.0, 120.0):
        step = loop.decide(small, 0, t)
        outcomes.append((step.outcome, step.moved_to))
        loop.commit(step, t)
    assert outcomes == [("below_min_gain", 0), ("below_min_gain", 0), ("gain", 1)]
    assert loop.streak == (0, 0)
    # a round at the advice, or below sustained_gain, starts the count again
    loop = PlanLoop(3, loop.h)
    for adv in (small, _advice([0.96, 0.97, 1.0, 1.0]), small, _advice([1.0, 0.995, 0.99, 0.99]), small, small):
        step = loop.decide(adv, 0, 0.0)
        loop.commit(step, 0.0)
    assert loop.streak == (1, 2) and step.outcome == "below_min_gain"


def test_observe_takes_each_split_s_median_over_the_last_rounds() -> None:
    loop = PlanLoop(3, Hysteresis(smooth_rounds=3))
    first = loop.observe(_advice([2.0, 1.5, 1.0, 1.2]))
    assert [s["predicted_mean_s"] for s in first["splits"]] == [2.0, 1.5, 1.0, 1.2]
    loop.observe(_advice([2.0, 1.5, 1.1, 1.3]))
    spike = loop.observe(_advice([2.0, 9.0, 8.0, 1.1]))        # one round predicts k = 3 best
    assert [s["predicted_mean_s"] for s in spike["splits"]] == [2.0, 1.5, 1.1, 1.2]
    assert spike["advised"] == {"speculative": 2, "plain": 1}
    assert loop.decide(spike, 2, 0.0).outcome == "at_advice"
    # a split predicted in fewer rounds takes the median of those; one the round does not complete stays None
    out = loop.observe({**_advice([None, 1.0]), "splits": [{"speculative": 0, "predicted_mean_s": None},
                                                            {"speculative": 1, "predicted_mean_s": 1.0}]})
    assert [s["predicted_mean_s"] for s in out["splits"]] == [None, 1.5]
    with pytest.raises(ValueError, match="smooth_rounds"):
        Hysteresis(smooth_rounds=0)


def _turned(means: list[float | None], measured: float | None, *, trusted: bool = False) -> dict[str, Any]:
    return {**_advice(means, trusted=trusted), "measured": {"requests": 100, "mean_s": measured, "p90_s": None}}


def test_a_retreat_needs_two_rounds_of_prediction_and_measurement_against_the_split() -> None:
    steps = {}
    for trusted in (True, False):
        loop = PlanLoop(3, H)                              # retreat_ratio 1.5, retreat_rounds 2
        turned = _turned([8.0, 8.5, 13.0, 20.0], 18.0, trusted=trusted)  # all-spec predicted 20, measured 18
        k, steps[trusted] = 3, []
        for t in (0.0, 300.0, 600.0, 900.0, 1200.0):
            step = loop.decide(loop.observe(turned), k, t)
            loop.commit(step, t)
            k = step.moved_to
            steps[trusted].append((step.outcome, step.current, step.moved_to, step.retreat))
    assert steps[False] == [
        ("untrusted", 3, 3, -1),       # the first round: evidence, held (untrusted, one round)
        ("retreat", 3, 2, -1),         # the second: one engine toward k = 0, past the untrusted model
        ("retreat", 2, 1, -1),         # k = 2 predicted 13 >= 1.5 x 8 and measured 18 >= 12: on
        ("retreat", 1, 0, -1),         # untrusted: k = 1's 8.5 need only exceed k = 0's 8 (measured 18)
        ("untrusted", 0, 0, 0)]        # at the best split: no evidence
    assert steps[True] == [
        ("gain", 3, 2, -1),            # trusted: the loop's own gain (60% > reverse_gain) moves first
        ("retreat", 2, 1, -1),
        ("below_cost", 1, 1, 0),       # trusted: k = 1's own 8.5 < 1.5 x 8 ends the retreat; 6% on 3 engines
        ("below_cost", 1, 1, 0), ("below_cost", 1, 1, 0)]   # over 100 s < 20 engine-s


def test_a_replay_far_from_what_the_window_measured_is_not_trusted() -> None:
    splits = [{"k": 0, "mean_s": 10.0, "p90_s": 20.0}, {"k": 1, "mean_s": 24.0, "p90_s": 30.0}]
    seen = {"requests": 100, "mean_s": 8.0, "p90_s": 25.0}
    assert replay_check(splits, 1, seen, "mean_s", 0.3) == [(
        "the replay of the current split (1 speculative) predicts mean_s 24.00 s, the window measured 8.00 s "
        "(off by more than 0.30)")]
    assert replay_check(splits, 1, seen, "p90_s", 0.3) == []            # 30 against 25: within 30%
    assert replay_check(splits, 0, seen, "mean_s", 0.3) == []           # 10 against 8
    assert replay_check(splits, 1, seen, "goodput_rps", 0.3) == []      # goodput is not checked
    assert replay_check(splits, 1, {"mean_s": None}, "mean_s", 0.3) == []
    assert replay_check(splits, 2, seen, "mean_s", 0.3) == []           # the current split not replayed
    doc = _doc()                                                        # measured 0.5 s, replayed about 1.9 s
    advice = advise(doc, 3)
    assert not advice["trusted"]
    assert advice["untrusted_because"][0].startswith("the replay of the current split (1 speculative) predicts")


def test_measured_takes_the_window_s_durations() -> None:
    doc = {"requests": [_row(float(i), duration_s=float(d)) for i, d in enumerate([3, 1, 2, 10, 4])]
           + [_row(9.0, duration_s=None)]}
    assert measured(doc) == {"requests": 5, "mean_s": 4.0, "p90_s": 10.0}
    assert measured({"requests": []}) == {"requests": 0, "mean_s": None, "p90_s": None}


@pytest.mark.parametrize(("means", "measured", "metric", "trusted"), [
    ([8.0, 8.5, 10.0, 20.0], 11.0, "mean_s", False),       # measured 11 < 1.5 x 8: one replay's spike
    ([8.0, 8.5, 10.0, 11.0], 18.0, "mean_s", True),        # trusted, predicted 11 < 12: the requests' own slowness
    ([8.0, 8.5, 10.0, 7.5], 18.0, "mean_s", False),        # untrusted, predicted below the best: not this split's
    ([8.0, 8.5, 10.0, 20.0], None, "mean_s", False),       # nothing measured
    ([8.0, 8.5, 10.0, 20.0], 18.0, "goodput_rps", False),  # goodput never retreats
])
def test_no_retreat_without_both_prediction_and_measurement(means: list[float], measured: float | None,
                                                            metric: str, trusted: bool) -> None:
    loop = PlanLoop(3, replace(H, min_gain=10.0, sustained_gain=10.0))  # the loop's own gain never acts
    adv = {**_advice(means, trusted=trusted, metric=metric),
           "measured": {"requests": 100, "mean_s": measured, "p90_s": None, "goodput_rps": measured}}
    for t in (0.0, 300.0, 600.0):
        step = loop.decide(loop.observe(adv), 3, t)
        loop.commit(step, t)
        assert step.retreat == 0 and not step.changed


def test_one_round_of_evidence_then_a_quiet_one_does_not_retreat() -> None:
    loop = PlanLoop(3, H)
    outcomes = []
    for adv in (_turned([8.0, 8.5, 10.0, 20.0], 18.0), _turned([8.0, 8.5, 10.0, 11.0], 10.0),
                _turned([8.0, 8.5, 10.0, 20.0], 18.0)):
        step = loop.decide(loop.observe(adv), 3, 0.0)
        loop.commit(step, 0.0)
        outcomes.append(step.outcome)
    assert outcomes == ["untrusted", "untrusted", "untrusted"]
    assert loop.retreat_streak == (-1, 1)


def test_a_retreat_waits_step_s_and_respects_the_floors() -> None:
    loop = PlanLoop(3, Hysteresis(dwell_s=100.0, step_s=10.0, change_cost_s=20.0, floor_speculative=2))
    turned = _turned([8.0, 8.5, 10.0, 20.0], 18.0, trusted=True)
    loop.commit(loop.decide(loop.observe(turned), 3, 0.0), 0.0)
    loop.last_change_at, loop.last_direction = 0.0, 1
    assert loop.decide(loop.observe(turned), 3, 5.0).outcome == "step_wait"   # retreat held by step_s
    step = loop.decide(loop.observe(turned), 3, 10.0)
    assert (step.outcome, step.target, step.moved_to) == ("retreat", 2, 2)    # k = 2 is the best within the floor
    with pytest.raises(ValueError, match="retreat_ratio"):
        Hysteresis(retreat_ratio=1.0)
