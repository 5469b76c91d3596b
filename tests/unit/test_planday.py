"""The planner-driven deployment in the day simulator (loadtests.planday) and the slow days."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from loadtests.dayapi import RoundRobin
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.dayshapes import (
    CHANGING,
    SLOW_SHAPES,
    DayShape,
    PromptClass,
    Segment,
    default_engine_model,
    get_shape,
)
from loadtests.daysim import simulate_day
from loadtests.plan import PlanModels, predict_splits
from loadtests.planday import PlanDaySettings, PlannedRouter, out_of_service_s, planned
from loadtests.planloop import Hysteresis

MODEL = default_engine_model()
KV = {"spec": MODEL.kv_capacity(True), "plain": MODEL.kv_capacity(False)}
#: a small steady day: 0.5 requests/s for 200 s, short prompts and outputs
DAY = DayShape("t", (Segment(200, 0.5, 0.5),), (PromptClass("s", 1.0, 500, 1000, out_lo=20, out_hi=40,
                                                             max_new_tokens=64),)).requests(3)


def _advise_toward(k: int, calls: list[dict[str, Any]]):
    """An advice function that always prefers ``k`` speculative engines (the farther, the slower)."""
    def advise(doc: dict[str, Any], engines: int, **kw: Any) -> dict[str, Any]:
        calls.append({"doc": doc, **kw})
        ks = kw.get("ks") or range(engines + 1)
        return {"metric": "mean_s", "trusted": True, "advised": {"speculative": k, "plain": engines - k},
                "window": {"requests": len(doc["requests"])},
                "splits": [{"speculative": j, "plain": engines - j, "predicted_mean_s": 1.0 + abs(j - k)} for j in ks]}
    return advise


def _settings(**kw: Any) -> PlanDaySettings:
    h = Hysteresis(dwell_s=100.0, step_s=10.0, change_cost_s=5.0, min_gain=0.05)
    return PlanDaySettings(**{"interval_s": 30.0, "window_s": 60.0, "convert_s": 20.0, "hysteresis": h, **kw})


def _run(start_k: int, target: int, **kw: Any) -> tuple[PlannedRouter, list[dict[str, Any]], Any]:
    calls: list[dict[str, Any]] = []
    routers: list[PlannedRouter] = []

    def make() -> PlannedRouter:
        routers.append(PlannedRouter(RoundRobin(), 3, start_k, _settings(**kw), KV, advise_fn=_advise_toward(target, calls)))
        return routers[-1]

    dep, _ = planned(3, start_k, RoundRobin, _settings(**kw), KV)
    res = simulate_day(DAY, replace(dep, make_router=make), MODEL, seed=0)
    return routers[0], calls, res


def test_the_planner_moves_one_engine_at_a_time_and_loses_no_request() -> None:
    pr, calls, res = _run(3, 1)
    assert [r.status for r in res.records] == ["ok"] * len(DAY)
    assert [(c["t"], c["to"]) for c in pr.changes] == [(30.0, "plain"), (60.0, "plain")]
    for c in pr.changes:    # drained, then 20 s out of service, then back as a plain engine
        assert c["t"] <= c["drained_s"] < c["ready_s"] == pytest.approx(c["drained_s"] + 20.0, abs=0.25)
        assert c["new_url"].startswith("http://plain-")
    assert pr.changes[0]["ready_s"] < pr.changes[1]["t"]       # one conversion at a time
    assert (pr.active["spec"], len(pr.active["plain"]), pr.split) == (["http://spec-0"], 2, 1)
    # no request reached an engine after it left the router's view, nor before it came back
    for c in pr.changes:
        assert not [r for r in res.records if r.endpoint == c["url"] and r.arrival_s > c["t"]]
        assert not [r for r in res.records if r.endpoint == c["new_url"] and r.arrival_s < c["ready_s"]]
    assert [r["outcome"] for r in pr.rounds[:4]] == ["gain", "gain", "at_advice", "at_advice"]
    assert out_of_service_s(pr.changes, res.end_s) == pytest.approx(sum(c["ready_s"] - c["t"] for c in pr.changes))
    assert calls[0]["ks"] is None


def test_a_round_during_a_conversion_holds_and_the_reach_bounds_the_splits() -> None:
    pr, calls, _ = _run(3, 0, interval_s=10.0, reach=1)
    assert pr.rounds[1]["outcome"] == "converting"
    assert list(calls[0]["ks"]) == [2, 3]
    assert pr.split == 0 and len(pr.changes) == 3


def test_observe_only_advises_once_and_moves_nothing() -> None:
    pr, calls, _ = _run(2, 0, act=False, first_round_s=40.0, interval_s=1000.0)
    assert [(r["t"], r["outcome"], r["advised"], r["moved_to"]) for r in pr.rounds] == [(40.0, "gain", 0, 2)]
    assert pr.changes == [] and pr.split == 2
    doc = calls[0]["doc"]
    assert doc["window"]["requests"] == len(doc["requests"]) > 0
    assert all(40.0 - 60.0 <= r["arrival_s"] + (40.0 - doc["window"]["seconds"]) for r in doc["requests"])


def test_the_window_document_carries_the_learned_router_s_pools() -> None:
    settings = replace(settings_for(MODEL), predict=False, learn=True)
    dep, get = planned(2, 1, lambda: PolicyRouter(settings), _settings(act=False, first_round_s=150.0,
                                                                       interval_s=1000.0), KV)
    simulate_day(DAY, dep, MODEL, seed=0)
    pr = get()
    views = ()
    doc = pr.window_doc(150.0, views)
    spec, plain = doc["pools"]
    assert (spec["name"], spec["speculative"], spec["endpoints"], spec["kv_tokens"]) == ("spec", True, 1, KV["spec"])
    assert (plain["name"], plain["speculative"], plain["kv_tokens"]) == ("plain", False, KV["plain"])
    assert spec["speed_source"] == "learned" and spec["fit"]["observations"] > 0
    assert spec["accept_length"]["greedy"] is not None and plain["accept_length"] == {}
    assert doc["requests"][0]["arrival_s"] == 0.0
    assert pr.rounds[0]["trusted"] in (True, False) and "advised" in pr.rounds[0]


def test_predict_splits_takes_a_subset() -> None:
    models = PlanModels(MODEL, MODEL, {})
    rows = predict_splits(DAY[:20], 3, models, ks=[2, 1])
    assert [r["k"] for r in rows] == [1, 2]
    with pytest.raises(ValueError, match="out of"):
        predict_splits(DAY[:20], 3, models, ks=[4])


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        PlanDaySettings(interval_s=0)
    with pytest.raises(ValueError):
        PlannedRouter(RoundRobin(), 2, 3, PlanDaySettings(), KV)


def test_slow_days() -> None:
    assert set(CHANGING) < set(SLOW_SHAPES)
    assert {n: SLOW_SHAPES[n].duration_s for n in SLOW_SHAPES} == {
        "diurnal": 3600.0, "slow_long": 2700.0, "slow_sampled": 4200.0, "steady_light": 1500.0,
        "steady_heavy": 1500.0}
    d2, d4 = get_shape("diurnal", 2), get_shape("diurnal", 4)
    assert (d2.rate_scale, d4.rate_scale, get_shape("diurnal", 8).rate_scale) == (1.0, 2.0, 4.0)
    r2, r4 = d2.requests(0), d4.requests(0)
    assert len(r4) == pytest.approx(2 * len(r2), rel=0.05)
    peak = [r for r in r4 if 1200 <= r.arrival_s < 2400]
    assert len(peak) / 1200 == pytest.approx(6.0, rel=0.05)     # 3.0 per 2 engines, x2
    sampled = get_shape("slow_sampled", 2).requests(0)
    assert not [r for r in sampled if r.arrival_s < 1800 and r.sampled]
    assert all(r.sampled for r in sampled if r.arrival_s >= 2700)
    long_ = get_shape("slow_long", 2).requests(0)
    assert not [r for r in long_ if (r.arrival_s < 450 or r.arrival_s >= 2250) and r.kind == "long"]
    assert [r for r in long_ if 450 <= r.arrival_s < 2250 and r.kind == "long"]
    with pytest.raises(KeyError, match="diurnal"):
        get_shape("nope")
