"""The live speed model (router.decision.learn), its use in the decision and in the Runtime."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from router.config.tree import parse_config
from router.decision.learn import DEFAULT_PRIOR, Observation, SpeedFit
from router.decision.policy import Decision, EndpointSnapshot, PoolSnapshot, Reason, Rules, decide
from router.decision.predict import SpeedModel, completion_s
from router.loops.scraper import EngineLoad, parse_sglang_metrics
from router.request.features import PromptCounter, RequestFeatures
from router.state.runtime import Runtime

TRUE = SpeedModel(decode_s_per_token=0.01, batch_knee=8.0, attention_s_per_token=1e-7, prefill_s_per_token=1e-4)


def _traffic(fit: SpeedFit, model: SpeedModel, n: int, *, seed: int, tau: float | None = None,
             start: int = 0) -> None:
    rng = random.Random(seed)
    for i in range(n):
        p, m, b = rng.choice([200, 1000, 4000, 20000]), rng.randint(20, 400), rng.randint(1, 24)
        y = completion_s(model, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=tau)
        fit.observe(Observation(p, 0, m, b, y * rng.uniform(0.95, 1.05), tau), float(start + i),
                    "greedy" if tau is not None else None)


@pytest.mark.parametrize("spec", [False, True])
def test_the_fit_recovers_the_engine_from_the_default_prior(spec):
    gamma, c, tau = (4, 0.05, 2.5) if spec else (0, 0.0, None)
    fit = SpeedFit(replace(DEFAULT_PRIOR, gamma=gamma, c=c), prior_weight=0.01, forgetting=0.995)
    _traffic(fit, replace(TRUE, gamma=gamma, c=c), 400, seed=1, tau=tau)
    got = fit.model
    assert got.decode_s_per_token == pytest.approx(0.01, rel=0.05)
    assert got.batch_knee == pytest.approx(8.0, rel=0.08)
    assert got.prefill_s_per_token == pytest.approx(1e-4, rel=0.1)
    assert (got.gamma, got.c) == (gamma, c)
    assert fit.count == 400 and fit.updated_at == 399.0
    assert fit.error is not None and fit.error < 0.05
    assert fit.accept_length("greedy") == (pytest.approx(2.5) if spec else None)


def test_the_prior_stands_until_traffic_and_forgetting_follows_drift():
    fit = SpeedFit(DEFAULT_PRIOR, prior_weight=0.05, forgetting=0.99)
    # the prior's s is a candidate, not used until it predicts better
    assert fit.model == replace(DEFAULT_PRIOR, prefill_stall_s_per_token=0.0) and fit.count == 0 and fit.error is None
    _traffic(fit, TRUE, 300, seed=2)
    assert fit.model.decode_s_per_token == pytest.approx(0.01, rel=0.1)
    slower = replace(TRUE, decode_s_per_token=0.02)  # a new engine version, twice as slow per token
    _traffic(fit, slower, 400, seed=3, start=300)
    assert fit.model.decode_s_per_token == pytest.approx(0.02, rel=0.1)


def test_bad_observations_are_ignored_and_the_model_stays_positive():
    fit = SpeedFit(DEFAULT_PRIOR)
    fit.observe(Observation(100, 0, 0, 1, 1.0), 0.0)
    fit.observe(Observation(100, 0, 10, 1, 0.0), 0.0)
    assert fit.count == 0
    for i in range(50):  # durations that no positive model explains (decode free, prefill negative)
        fit.observe(Observation(10_000, 0, 1, 1, 1e-4), float(i))
    m = fit.model
    assert min(m.decode_s_per_token, m.batch_knee, m.prefill_s_per_token, m.attention_s_per_token) > 0
    with pytest.raises(ValueError, match="forgetting"):
        SpeedFit(DEFAULT_PRIOR, forgetting=0.0)


def test_kv_wait_makes_a_full_engine_slow():
    free = completion_s(TRUE, batch=2, prompt_tokens=6000, cached_tokens=0, output_tokens=100, accept_length=None,
                        kv_need_tokens=6100, kv_free_tokens=60_000, kv_used_tokens=0)
    full = completion_s(TRUE, batch=2, prompt_tokens=6000, cached_tokens=0, output_tokens=100, accept_length=None,
                        kv_need_tokens=6100, kv_free_tokens=100, kv_used_tokens=60_000)
    assert full == pytest.approx(free * (1 + 6000 / 60_000))


RULES = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)


def _pools(spec_load=0, plain_load=0, *, speed=True, saturated=False, plain_kv=None):
    spec = PoolSnapshot("spec", True, 4096, 4, (EndpointSnapshot("http://s", True, spec_load),),
                        saturated=saturated, speed=replace(TRUE, gamma=4, c=0.05) if speed else None,
                        accept_length_greedy=3.0, accept_length_sampled=1.2)
    free, used = plain_kv if plain_kv is not None else (None, 0)
    plain = PoolSnapshot("plain", False, 4096, 0,
                         (EndpointSnapshot("http://p", True, plain_load, 0, 0, free, used),),
                         speed=TRUE if speed else None)
    return (spec, plain)


def test_a_bypass_without_speed_models_never_moves_work_to_a_busier_pool():
    long = RequestFeatures(prompt_tokens=2000, max_new_tokens=100)
    assert decide(long, _pools(0, 0, speed=False), RULES) == Decision("plain", "http://p", Reason.LONG_CONTEXT)
    assert decide(long, _pools(3, 3, speed=False), RULES) == Decision("plain", "http://p", Reason.LONG_CONTEXT)
    assert decide(long, _pools(3, 4, speed=False), RULES) == Decision("spec", "http://s", Reason.PLAIN_BUSIER)
    short = RequestFeatures(prompt_tokens=100, max_new_tokens=100)
    assert decide(short, _pools(9, 12, speed=False, saturated=True), RULES) == Decision(
        "spec", "http://s", Reason.PLAIN_BUSIER)
    # the client's off hint is no speed bypass: it moves the request whatever the load
    off = RequestFeatures(prompt_tokens=100, max_new_tokens=100, speculation="off")
    assert decide(off, _pools(0, 12, speed=False), RULES) == Decision("plain", "http://p", Reason.CLIENT_OPT_OUT)


def test_a_full_kv_sends_long_prompts_away_from_the_plain_pool():
    long = RequestFeatures(prompt_tokens=2000, max_new_tokens=100, temperature_class="greedy")
    roomy = decide(long, _pools(4, 0, plain_kv=(100_000, 0)), RULES)
    assert (roomy.pool, roomy.reason) == ("plain", Reason.PLAIN_FASTER)
    full = decide(long, _pools(4, 0, plain_kv=(500, 1500)), RULES)
    assert (full.pool, full.reason) == ("spec", Reason.SPECULATIVE)


def test_exploration_sends_one_in_every_n_to_a_close_runner_up():
    rules = replace(RULES, explore_every=4, explore_ratio=2.0)
    f = RequestFeatures(prompt_tokens=100, max_new_tokens=100, temperature_class="greedy")
    got = [decide(f, _pools(), rules, tie_break=i).reason for i in range(8)]
    assert got == [Reason.SPECULATIVE] * 3 + [Reason.EXPLORE] + [Reason.SPECULATIVE] * 3 + [Reason.EXPLORE]
    assert decide(f, _pools(), rules, tie_break=3).pool == "plain"
    # a runner-up predicted more than explore_ratio times slower is not explored
    far = replace(rules, explore_ratio=1.01)
    assert decide(f, _pools(), far, tie_break=3).reason is Reason.SPECULATIVE


def test_the_scraper_reads_the_kv_capacity():
    load = parse_sglang_metrics('sglang:max_total_num_tokens{tp_rank="0"} 200000\n'
                                'sglang:max_total_num_tokens{tp_rank="1"} 180000\n'
                                "sglang:token_usage 0.25\nsglang:num_queue_reqs 2\n")
    assert (load.max_total_num_tokens, load.kv_used_tokens, load.kv_used, load.num_queue_reqs) == (180000, None,
                                                                                                   45000, 2)
    assert parse_sglang_metrics("sglang:kv_used_tokens 1234\n").kv_used == 1234
    assert EngineLoad().kv_used == 0


def _runtime(learning: dict | None = None, speed: dict | None = None) -> Runtime:
    spec: dict = {"name": "spec", "speculative": True, "endpoints": ["http://s:1"]}
    if speed is not None:
        spec["speed"] = speed
    doc = {"model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
           "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6},
                       **({"learning": learning} if learning is not None else {})},
           "pools": [spec, {"name": "plain", "speculative": False, "endpoints": ["http://p:1"]}]}
    return Runtime(parse_config(doc), PromptCounter.__new__(PromptCounter))


def test_the_runtime_learns_by_default_and_snapshots_carry_the_fit():
    rt = _runtime()
    spec, plain = rt.pools
    assert spec.fit is not None and plain.fit is not None
    assert spec.fit.prior == replace(DEFAULT_PRIOR, gamma=spec.config.gamma, c=spec.config.drafter_cost_ratio)
    for ep in rt.all_endpoints():
        ep.record_success(EngineLoad(num_running_reqs=1, max_total_num_tokens=50_000, token_usage=0.5), now=1.0)
        ep.record_success(EngineLoad(num_running_reqs=1, max_total_num_tokens=50_000, token_usage=0.5), now=1.0)
    assert rt.learn("plain", "http://p:1", prompt_tokens=1000, cached_tokens=0, output_tokens=50, dispatch_load=1,
                    duration_s=1.5, temperature="greedy", now=2.0)
    assert plain.fit.count == 1 and spec.fit.count == 0
    snaps = rt.snapshots(2.0)
    assert snaps[1].speed == plain.fit.model != DEFAULT_PRIOR
    assert snaps[0].endpoints[0] == EndpointSnapshot("http://s:1", True, 1, 0, 0, 25_000, 25_000)
    assert rt.rules.explore_every == 50
    # a reload keeps the fit while the prior is unchanged
    again = Runtime(rt.config, rt.counter, rt)
    assert again.pools[1].fit is plain.fit


def test_learning_off_leaves_the_thresholds():
    rt = _runtime({"enabled": False})
    assert [p.fit for p in rt.pools] == [None, None]
    assert [s.speed for s in rt.snapshots(0.0)] == [None, None]
    assert rt.rules.explore_every == 0
    assert not rt.learn("plain", "http://p:1", prompt_tokens=1, cached_tokens=0, output_tokens=1, dispatch_load=0,
                        duration_s=1.0, temperature="greedy", now=0.0)


def test_the_change_detector_follows_a_step_in_speed_within_a_hundred_requests():
    def errors(detect: bool) -> tuple[float, int]:
        fit = SpeedFit(DEFAULT_PRIOR, prior_weight=0.05, forgetting=0.995, detect_changes=detect)
        _traffic(fit, TRUE, 300, seed=4)
        _traffic(fit, replace(TRUE, decode_s_per_token=0.02), 100, seed=5, start=300)  # twice as slow
        return abs(fit.model.decode_s_per_token - 0.02) / 0.02, fit.changes

    err, changes = errors(True)
    assert changes >= 1 and err < 0.1
    err_off, changes_off = errors(False)
    assert changes_off == 0 and err_off > 0.3  # forgetting alone still remembers the old engine


def test_the_acceptance_table_follows_a_change_of_task_within_a_minute():
    def table_after(memory_s: float) -> tuple[SpeedFit, float]:
        fit = SpeedFit(replace(DEFAULT_PRIOR, gamma=4, c=0.05), memory_s=memory_s)
        for i in range(400):  # code, one request per second in this bucket: tau 3.4
            fit.observe(Observation(2000, 0, 200, 4, 4.0, 3.4), float(i), "greedy", measured=True)
        assert fit.accept_table()[("greedy", 1)] == pytest.approx(3.4)
        for i in range(400, 464):  # chat from t = 400 s: tau 2.3
            fit.observe(Observation(2000, 0, 200, 4, 4.0, 2.3), float(i), "greedy", measured=True)
        return fit, fit.accept_table()[("greedy", 1)]

    fit, tau = table_after(30.0)  # 64 s later: e^-2 of the old weight is left
    assert 2.3 < tau < 2.45
    assert fit.accept_length("greedy") == pytest.approx(2.3, abs=0.05)  # at most 20 observations' worth
    assert fit.status(464.0)["changes"] == fit.changes
    _, tau_counted = table_after(1e12)  # per observation alone: the last 200 requests
    assert tau_counted > 2.9


def _kv_traffic(fit: SpeedFit, model: SpeedModel, n: int, *, seed: int) -> list[Observation]:
    """Requests whose batch and context vary apart (so ``b * L`` is not ``b`` or ``L`` alone)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, m, b = rng.choice([200, 1000, 4000]), rng.randint(20, 400), rng.randint(1, 16)
        ctx = rng.choice([300.0, 1500.0, 6000.0])
        y = completion_s(model, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=None,
                         context_tokens=ctx)
        obs = Observation(p, 0, m, b, y * rng.uniform(0.97, 1.03), None, ctx)
        fit.observe(obs, float(i))
        out.append(obs)
    return out


def test_a_speed_block_s_kv_read_term_is_learned_and_a_zero_one_stays_zero():
    true = replace(TRUE, kv_read_s_per_token=5e-8)  # a batch of 16 at 6,000 tokens: +0.0048 s a token
    fit = SpeedFit(replace(true, kv_read_s_per_token=1.5e-7, decode_s_per_token=0.02), prior_weight=0.01)
    seen = _kv_traffic(fit, true, 400, seed=4)
    assert fit.model.kv_read_s_per_token == pytest.approx(5e-8, rel=0.15)
    assert fit.model.decode_s_per_token == pytest.approx(0.01, rel=0.1)
    assert statistics.median(abs(fit.predict_s(o) - o.duration_s) / o.duration_s for o in seen[-100:]) < 0.05
    assert fit.status(400.0)["kv_read_s_per_token"] == fit.model.kv_read_s_per_token
    # the default prior has no such term, and the fit keeps it so: the others absorb what they can
    plain = SpeedFit(DEFAULT_PRIOR, prior_weight=0.01)
    _kv_traffic(plain, true, 400, seed=4)
    assert plain.model.kv_read_s_per_token == 0.0
