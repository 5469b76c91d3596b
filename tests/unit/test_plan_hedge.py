"""The planner's hedge: a split safe if the window's traffic turned sampled (loadtests/plan.py step 6,
loadtests/planloop.py ``safe_splits``, the loop's target, its ``hedge`` move and its retreat)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from loadtests.plan import PlanError, advise
from loadtests.planloop import Hysteresis, PlanLoop, safe_splits


def _row(t: float, **kw: Any) -> dict[str, Any]:
    return {"arrival_s": t, "prompt_tokens": 100, "cached_tokens": 20, "output_tokens": 30, "max_tokens": 512,
            "temperature_class": "greedy", "n": 1, "pool": "spec", "duration_s": 3.0, **kw}


def _pool(name: str, spec: bool) -> dict[str, Any]:
    speed = {"decode_s_per_token": 0.02, "batch_knee": 32.0, "attention_s_per_token": 2e-7,
             "prefill_s_per_token": 2e-4, "max_running_requests": None, "gamma": 4 if spec else 0,
             "c": 0.05 if spec else 0.0}
    return {"name": name, "speculative": spec, "endpoints": 1, "healthy": 1, "kv_tokens": 400_000 if spec else 500_000,
            "speed": speed, "speed_source": "learned", "fit": {"observations": 50, "error": 0.1, "accept_length": {}},
            "check": None, "accept_length": {"greedy": 4.0, "sampled": 1.2} if spec else {}}


def _window(cls: str = "greedy", requests: int = 200, rate: float = 3.0) -> dict[str, Any]:
    """A busy window (3 requests/s on 3 engines) of one class; the speculative engines accept
    4 tokens a step on greedy requests, 1.2 on sampled ones."""
    rng = random.Random(7)
    t, rows = 0.0, []
    for _ in range(requests):
        t += rng.expovariate(rate)
        rows.append(_row(round(t, 3), prompt_tokens=rng.randint(200, 2000), output_tokens=rng.randint(100, 300),
                         temperature_class=cls))
    return {"model": "m", "window": {"requests": requests, "seconds": t}, "requests": rows,
            "pools": [_pool("spec", True), _pool("plain", False)]}


def _means(advice: dict[str, Any], key: str = "predicted_mean_s") -> list[float]:
    return [s[key] for s in advice["splits"]]


def test_a_greedy_window_is_advised_the_best_split_that_is_safe_if_it_turned_sampled() -> None:
    advice = advise(_window(), 3, hedge=0.5)
    now, turned = _means(advice), _means(advice, "predicted_mean_s_if_sampled")
    # all-speculative is best now (greedy requests accept 4 tokens a step) and the worst were
    # every request sampled: 15.3 s against all-plain's 6.26 s, 2.4 times, past 1.5
    assert min(range(4), key=lambda k: now[k]) == 3
    assert turned[0] == pytest.approx(now[0])           # all-plain: the temperature changes nothing
    assert turned[3] > 2 * turned[0]
    safe = [k for k in range(4) if turned[k] <= 1.5 * min(turned)]
    assert safe == [0, 1, 2]
    assert advice["hedge"] == {"factor": 0.5, "stressed": True, "safe": safe, "unhedged": 3}
    assert advice["advised"] == {"speculative": 2, "plain": 1}   # the best of the safe splits now
    # a looser hedge lets all-speculative in: the old argmin
    assert advise(_window(), 3, hedge=2.0)["advised"]["speculative"] == 3


@pytest.mark.parametrize("off", [None, math.inf])
def test_without_a_hedge_the_advice_is_the_replay_s_argmin(off: float | None) -> None:
    hedged = advise(_window(), 3, hedge=0.5)
    advice = advise(_window(), 3, hedge=off)
    assert advice["advised"]["speculative"] == 3 == hedged["hedge"]["unhedged"]
    assert advice["hedge"] == {"factor": None, "stressed": False, "safe": None, "unhedged": 3}
    assert _means(advice) == _means(hedged)
    assert _means(advice, "predicted_mean_s_if_sampled") == [None] * 4   # no stressed replay


def test_a_window_of_sampled_requests_only_is_advised_as_without_the_hedge() -> None:
    doc = _window("sampled")
    plain, hedged = advise(doc, 3, hedge=None), advise(doc, 3, hedge=0.0)   # even the tightest hedge
    assert hedged["advised"] == plain["advised"]
    assert (hedged["hedge"]["stressed"], hedged["hedge"]["unhedged"]) == (False, plain["advised"]["speculative"])
    for key in ("mean_s", "p90_s", "goodput_rps"):                          # its stressed replay is itself
        assert _means(hedged, f"predicted_{key}_if_sampled") == _means(plain, f"predicted_{key}")
    with pytest.raises(PlanError, match="hedge"):
        advise(doc, 3, hedge=-0.1)


@pytest.mark.parametrize(("stressed", "hedge", "metric", "safe"), [
    ({0: 6.0, 1: 7.0, 2: 9.0, 3: 15.0}, 0.5, "mean_s", {0, 1, 2}),      # 9 <= 1.5 x 6 (the bound is inclusive)
    ({0: 6.0, 1: 7.0, 2: 9.0, 3: 15.0}, 0.0, "mean_s", {0}),
    ({0: 6.0, 1: 7.0, 2: 9.0, 3: 15.0}, None, "mean_s", {0, 1, 2, 3}),
    ({0: 6.0, 1: 7.0, 2: 9.0, 3: 15.0}, math.inf, "mean_s", {0, 1, 2, 3}),
    ({0: 6.0, 1: None, 2: 8.0}, 0.5, "mean_s", {0, 2}),                # nothing completes at k = 1
    ({0: None, 1: None}, 0.5, "mean_s", {0, 1}),                       # nothing known: no hedge
    ({0: 4.0, 1: 3.0, 2: 2.0}, 0.5, "goodput_rps", {0, 1}),            # 2 x 1.5 < 4
])
def test_safe_splits(stressed: dict[int, float | None], hedge: float | None, metric: str, safe: set[int]) -> None:
    assert safe_splits(stressed, hedge, metric) == safe


def test_safe_splits_refuses_a_negative_hedge() -> None:
    with pytest.raises(ValueError, match="hedge"):
        safe_splits({0: 1.0}, -1.0, "mean_s")


# ----------------------------------------------------------------------------- the loop

H = Hysteresis(dwell_s=100.0, step_s=10.0, change_cost_s=20.0, min_gain=0.05)


def _advice(means: list[float], turned: list[float] | None, *, hedge: float | None = 0.5, trusted: bool = True,
            measured: float | None = None) -> dict[str, Any]:
    n = len(means) - 1
    splits = [{"speculative": k, "plain": n - k, "predicted_mean_s": v,
               "predicted_mean_s_if_sampled": None if turned is None else turned[k]} for k, v in enumerate(means)]
    safe = None if turned is None or hedge is None else sorted(safe_splits(dict(enumerate(turned)), hedge, "mean_s"))
    return {"metric": "mean_s", "trusted": trusted, "advised": {"speculative": 0, "plain": n},
            "window": {"requests": 10}, "splits": splits,
            "hedge": {"factor": None if turned is None else hedge, "stressed": turned is not None, "safe": safe,
                      "unhedged": min(range(n + 1), key=lambda k: means[k])},
            "measured": {"requests": 100, "mean_s": measured, "p90_s": None}}


GREEDY = ([8.0, 6.0, 5.0, 4.0], [8.0, 9.0, 13.0, 30.0])   # all-spec best now, 3.75x all-plain if sampled


def test_the_loop_s_target_stays_inside_the_hedge() -> None:
    loop = PlanLoop(3, H)
    smooth = loop.observe(_advice(*GREEDY))
    assert smooth["hedge"]["safe"] == [0, 1] and smooth["raw_safe"] == [0, 1]
    assert smooth["advised"]["speculative"] == 1
    step = loop.decide(smooth, 0, 0.0)
    assert (step.outcome, step.target, step.moved_to) == ("gain", 1, 1)
    assert loop.decide(smooth, 1, 0.0).outcome == "at_advice"            # k = 1: no move toward all-spec
    # without the hedge the same predictions move toward all-spec
    free = PlanLoop(3, H).observe(_advice(GREEDY[0], None))
    assert (free["advised"]["speculative"], PlanLoop(3, H).decide(free, 1, 0.0).moved_to) == (3, 2)


def test_the_hedge_s_safe_splits_follow_the_median_of_the_stressed_predictions() -> None:
    loop = PlanLoop(3, Hysteresis(smooth_rounds=3))
    loop.observe(_advice(*GREEDY))
    loop.observe(_advice(*GREEDY))
    spike = loop.observe(_advice(GREEDY[0], [8.0, 8.5, 9.0, 10.0]))    # one round finds all-spec safe
    assert spike["raw_safe"] == [0, 1, 2, 3]
    assert spike["hedge"]["safe"] == [0, 1]                              # the median of 30, 30, 10: 30
    assert [s["predicted_mean_s_if_sampled"] for s in spike["splits"]] == [8.0, 9.0, 13.0, 30.0]


def test_a_split_the_hedge_leaves_out_is_held_not_left_at_a_predicted_loss() -> None:
    loop = PlanLoop(3, H)
    smooth = loop.observe(_advice(*GREEDY))
    step = loop.decide(smooth, 3, 0.0)             # all-spec: 4 s now, the best; not safe
    assert (step.outcome, step.target, step.moved_to) == ("below_min_gain", 1, 3)
    assert step.gain == pytest.approx(-0.5)        # (4 - 6) / 4: toward the safe target is a loss
    # k = 2, unsafe, toward k = 3, unsafe and better now: never (the target is k = 1)
    assert loop.decide(smooth, 2, 0.0).outcome == "below_min_gain"


def test_the_retreat_still_leaves_a_collapsing_split_for_a_safe_one() -> None:
    # the traffic turned sampled on all-spec: now and stressed alike, all-plain best; the window measured 18 s
    turned = [8.0, 8.5, 13.0, 20.0]
    loop, k, steps = PlanLoop(3, H), 3, []
    for t in (0.0, 300.0, 600.0):
        step = loop.decide(loop.observe(_advice(turned, turned, trusted=False, measured=18.0)), k, t)
        loop.commit(step, t)
        k = step.moved_to
        steps.append((step.outcome, step.target, step.moved_to))
    assert steps == [("untrusted", None, 3), ("retreat", 0, 2), ("retreat", 0, 1)]
    # the retreat heads for the best split the round finds safe, not the best now
    loop = PlanLoop(3, H)
    adv = _advice([8.0, 5.0, 13.0, 20.0], [8.0, 30.0, 13.0, 20.0], trusted=False, measured=18.0)  # k = 1 unsafe
    for t in (0.0, 300.0):
        step = loop.decide(loop.observe(adv), 3, t)
        loop.commit(step, t)
    assert (step.outcome, step.target, step.moved_to) == ("retreat", 0, 2)

