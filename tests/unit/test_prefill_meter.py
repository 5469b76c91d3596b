"""The prompt tokens the router sends an endpoint (router.state.prefill_meter) and what the
prediction and the fit make of them (router.decision.predict, router.decision.learn)."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from router.config.tree import parse_config
from router.decision.learn import DEFAULT_PRIOR, Observation, SpeedFit
from router.decision.policy import Decision, Reason
from router.decision.predict import SpeedModel, completion_s
from router.request.features import PromptCounter, RequestFeatures
from router.state.endpoint import Endpoint
from router.state.prefill_meter import PrefillMeter
from router.state.runtime import Runtime


def test_the_backlog_is_a_fluid_queue_drained_at_the_prefill_speed() -> None:
    meter = PrefillMeter()
    assert meter.add(1000, 10.0, 1e-3) == 0.0  # nothing before it
    assert meter.backlog(10.5) == pytest.approx(500.0)  # 1,000 tokens a second
    assert meter.add(200, 10.5, 1e-3) == pytest.approx(500.0)  # joins the 500 left
    assert meter.backlog(10.5) == pytest.approx(700.0)
    assert meter.backlog(11.2) == pytest.approx(0.0, abs=1e-9)
    assert meter.backlog(30.0) == 0.0  # never below 0
    assert meter.total == 1200.0
    assert meter.add(0, 31.0, 1e-3) == 0.0 and meter.total == 1200.0  # a fully cached prompt adds nothing
    instant = PrefillMeter()
    instant.add(5000, 0.0, 0.0)  # no prefill cost known: nothing waits
    assert instant.backlog(0.0) == 0.0 and instant.total == 5000.0


def test_a_finished_request_settles_every_prompt_sent_up_to_it() -> None:
    meter = PrefillMeter()
    meter.add(1000, 0.0, 1e-3)  # drained at 1,000 tokens a second: an engine slower than this one
    first = meter.total
    meter.add(600, 0.1, 1e-3)
    assert meter.backlog(0.2) == pytest.approx(1400.0)
    meter.settled(first)  # the first request finished: its prompt and all before it are prefilled
    assert meter.backlog(0.2) == 600.0
    meter.settled(meter.total)  # and the second: nothing is left
    assert meter.backlog(0.2) == 0.0
    assert meter.add(300, 0.3, 1e-3) == 0.0 and meter.backlog(0.3) == 300.0
    meter.settled(first)  # an older request finishing later settles nothing more
    assert meter.backlog(0.3) == 300.0
    ep = Endpoint(url="http://a", pool="p", state="healthy")
    lease = ep.lease()
    ep.prefill.add(2000, 0.0, 1e-3)
    lease.prompts_sent = ep.prefill.total
    assert ep.prefill.backlog(0.5) == 1500.0
    lease.release()
    assert ep.prefill.backlog(0.5) == 0.0


def test_a_snapshot_carries_the_meter_to_two_significant_digits() -> None:
    meter = PrefillMeter()
    assert meter.value(0.0) == 0
    meter.add(12345, 0.0, 1e-3)
    assert meter.value(0.0) == 12000
    assert meter.value(11.0) == 1300  # 1,345 left
    assert meter.value(12.3) == 45
    assert meter.value(12.3455) == 0
    ep = Endpoint(url="http://a", pool="p", state="healthy")
    assert ep.snapshot_values(0.0, 2.0, 0, 0).prefill_backlog_tokens == 0
    ep.prefill.add(3000, 0.0, 1e-4)
    assert ep.snapshot_values(0.1, 2.0, 0, 0).prefill_backlog_tokens == 2000


MODEL = SpeedModel(decode_s_per_token=0.01, batch_knee=8.0, prefill_s_per_token=1e-4, prefill_stall_s_per_token=1e-4)


def test_the_prediction_waits_for_the_backlog_at_the_stall_cost() -> None:
    def base(model: SpeedModel, backlog: float = 0.0) -> float:
        return completion_s(model, batch=2, prompt_tokens=1000, cached_tokens=0, output_tokens=100,
                            accept_length=None, prefill_backlog_tokens=backlog)

    alone = base(MODEL)
    assert base(MODEL, 3000) == pytest.approx(alone + 0.3)
    slow = replace(MODEL, prefill_stall_s_per_token=5e-4)
    assert base(slow, 3000) == pytest.approx(alone + 1.5)
    off = replace(MODEL, prefill_stall_s_per_token=0.0)
    assert base(off, 3000) == pytest.approx(alone)


def _stall_traffic(fits: list[SpeedFit], s_true: float, n: int = 400) -> list[Observation]:
    true = replace(MODEL, prefill_stall_s_per_token=0.0)
    rng = random.Random(7)
    seen = []
    for i in range(n):
        p, m, b, stall = rng.choice([200, 1000, 2000]), rng.randint(20, 200), rng.randint(1, 8), rng.uniform(0, 8000)
        y = completion_s(true, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=None)
        obs = Observation(p, 0, m, b, (y + s_true * stall) * rng.uniform(0.97, 1.03), stall_tokens=stall)
        for fit in fits:
            fit.observe(obs, float(i))
        seen.append(obs)
    return seen


def test_the_fit_uses_the_stall_once_it_predicts_clearly_better() -> None:
    fit = SpeedFit(DEFAULT_PRIOR, prior_weight=0.01)  # s a candidate from 2e-5
    assert fit.model.prefill_stall_s_per_token == 0.0 and fit.stall_s_per_token == 2e-5 and not fit.stall_on
    seen = _stall_traffic([fit], 3e-4)  # a slow prefill that holds up the others (a CPU engine)
    assert fit.stall_on
    assert fit.model.prefill_stall_s_per_token == fit.stall_s_per_token == pytest.approx(3e-4, rel=0.1)
    assert fit.model.prefill_s_per_token == pytest.approx(1e-4, rel=0.15)
    assert statistics.median(abs(fit.predict_s(o) - o.duration_s) / o.duration_s for o in seen[-100:]) < 0.03
    status = fit.status(400.0)
    assert status["prefill_stall_s_per_token"] == fit.model.prefill_stall_s_per_token
    stall = status["prefill_stall"]
    assert isinstance(stall, dict) and stall["used"] is True and stall["error_with"] < 0.85 * stall["error_without"]


def test_an_engine_whose_prefill_stalls_nothing_keeps_the_model_without_it() -> None:
    fit = SpeedFit(DEFAULT_PRIOR, prior_weight=0.01)
    off = SpeedFit(replace(DEFAULT_PRIOR, prefill_stall_s_per_token=0.0), prior_weight=0.01)  # no candidate
    _stall_traffic([fit, off], 0.0)  # prompts arrive, nothing waits for them
    assert not fit.stall_on and off.stall_s_per_token == 0.0
    assert fit.model == off.model  # the published model is the one without s, to the bit
    assert fit.model.prefill_stall_s_per_token == 0.0


def _runtime(learning: bool, speed: dict | None = None, spec_speed: dict | None = None) -> Runtime:
    plain: dict = {"name": "plain", "speculative": False, "endpoints": ["http://p:1"]}
    spec: dict = {"name": "spec", "speculative": True, "endpoints": ["http://s:1"]}
    if speed is not None:
        plain["speed"] = speed
    if spec_speed is not None:
        spec["speed"] = spec_speed
    doc = {"model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
           "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6},
                       "learning": {"enabled": learning}},
           "pools": [spec, plain]}
    return Runtime(parse_config(doc), PromptCounter.__new__(PromptCounter))


def _routed(pool: str, url: str) -> Decision:
    return Decision(pool, url, Reason.LONG_CONTEXT)


SPEED = {"decode_s_per_token": 0.01, "batch_knee": 8, "prefill_s_per_token": 1e-4}


def test_the_runtime_meters_each_dispatch_at_its_pools_prefill_stall() -> None:
    rt = _runtime(True, SPEED)
    plain = rt.pools[1]
    assert plain.fit is not None
    s = plain.fit.stall_s_per_token  # the candidate s at the speed block's p: 1e-4
    features = RequestFeatures(prompt_tokens=1500, max_new_tokens=20)
    assert rt.note_prompt(_routed("plain", "http://p:1"), features, 500, 1.0) == (0.0, 1000.0)  # 500 cached
    assert s == 1e-4
    assert rt.note_prompt(_routed("plain", "http://p:1"), features, 0, 1.05) == (pytest.approx(1000 - 0.05 / s),
                                                                               2500.0)
    assert rt.prompts_sent("http://p:1") == 2500.0 and rt.prompts_sent("http://s:1") == 0.0
    # the fit's model does not use its candidate s yet: the snapshot leaves the backlog out
    assert rt.snapshots(1.05)[1].endpoints[0].prefill_backlog_tokens == 0
    fixed = _runtime(False, SPEED, {**SPEED, "accept_length_greedy": 2.5, "accept_length_sampled": 2.0})  # speed blocks' models, used as they are: s = p
    alone = _runtime(False, SPEED)  # the only pool with a model: no decision predicts
    for rt_ in (fixed, alone):
        rt_.note_prompt(_routed("plain", "http://p:1"), features, 500, 1.0)
        rt_.note_prompt(_routed("plain", "http://p:1"), features, 0, 1.05)
    assert fixed.snapshots(1.05)[1].endpoints[0].prefill_backlog_tokens == 2000  # 500 left and 1,500
    assert fixed.snapshots(1.25)[1].endpoints[0].prefill_backlog_tokens == 0
    assert alone.snapshots(1.05)[1].endpoints[0].prefill_backlog_tokens == 0  # metered, never read
    assert alone.prompts_sent("http://p:1") == 2500.0
    # a finished request's observation carries what it waited for
    assert rt.learn("plain", "http://p:1", prompt_tokens=1500, cached_tokens=0, output_tokens=20, dispatch_load=0,
                    duration_s=2.0, temperature="greedy", now=3.0, stall_tokens=1500.0)


def test_a_pool_without_a_stall_term_meters_nothing() -> None:
    features = RequestFeatures(prompt_tokens=1500, max_new_tokens=20)
    off = _runtime(False)  # no speed model: nothing predicts with the meter
    assert off.note_prompt(_routed("plain", "http://p:1"), features, 0, 1.0) == (0.0, 0.0)
    learned = _runtime(True)  # the default prior: a candidate s, metered at 2e-5 though unused
    assert learned.pools[1].speed is None
    assert learned.note_prompt(_routed("plain", "http://p:1"), features, 0, 1.0) == (0.0, 1500.0)
    zero = _runtime(False, {"decode_s_per_token": 0.01, "batch_knee": 8, "prefill_s_per_token": 1e-4,
                            "prefill_stall_s_per_token": 0})
    assert zero.note_prompt(_routed("plain", "http://p:1"), features, 0, 1.0) == (0.0, 0.0)
    assert zero.snapshots(1.0)[1].endpoints[0].prefill_backlog_tokens == 0
    default = _runtime(False, {"decode_s_per_token": 0.01, "batch_knee": 8, "prefill_s_per_token": 1e-4})
    assert default.pools[1].speed is not None and default.pools[1].speed.prefill_stall_s_per_token == 1e-4
    assert default.note_prompt(_routed("plain", "http://p:1"), features, 0, 1.0) == (0.0, 1500.0)
