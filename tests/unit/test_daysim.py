"""The day simulator: exact step times on hand-computed cases, KV admission, the stale
accept-length gauge, determinism, the named shapes' ordering, and the policy adapter."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from loadtests.dayreport import Objective, summarize
from loadtests.dayrouter import PolicyRouter, PolicySettings, settings_for
from loadtests.dayshapes import EngineModel, Request, default_engine_model, get_shape
from loadtests.daysim import (
    Choice,
    Engine,
    PoolView,
    RequestView,
    adaptive_max_batch,
    all_adaptive,
    all_plain,
    all_spec,
    fronted,
    routed,
    simulate_day,
)
from loadtests.simulate import SimModel
from loadtests.split import specgate_at

#: t0 10 ms, knee 10, attention 1 us/token, prefill 1 ms/token, gamma 2, c 0.5.
SPEED = SimModel(t0_s=0.01, batch_knee=10.0, attn_s_per_token=1e-6, prefill_s_per_token=1e-3,
                 alpha_short=1.0, alpha_knee_tokens=1e9, alpha_drop_per_doubling=0.0, gamma=2, c=0.5)


def _model(**kw: object) -> EngineModel:
    speed = replace(SPEED, **{k: v for k, v in kw.items() if k in SPEED.__dataclass_fields__})
    rest = {k: v for k, v in kw.items() if k not in SPEED.__dataclass_fields__}
    return EngineModel(speed=speed, **rest)  # type: ignore[arg-type]


def _req(rid: int, p: int, out: int, *, at: float = 0.0, cached: int = 0, budget: int | None = None,
         temperature: float = 0.0) -> Request:
    return Request(rid, at, p, cached, out, budget or out, temperature, "t")


def _run(engine: Engine, now: float = 0.0) -> list[tuple[float, int, float]]:
    """Step an engine until idle; returns (end time, rid, first-token time) per finished request."""
    done = []
    while (dt := engine.start_step(now)) is not None:
        now += dt
        done += [(now, s.req.rid, s.first_s) for s in engine.finish_step(now)]
    return done


def test_plain_engine_exact_step_times() -> None:
    e = Engine("http://plain-0", "plain", False, _model(), random.Random(0))
    e.submit(_req(0, 1000, 3))
    # prefill 1000 tokens x 1 ms = 1.0 s -> first token; then two decode steps at b = 1 with
    # context 1001 and 1002: 0.01 * (1 + 1/10) + 1e-6 * L
    [(end, _, first)] = _run(e)
    assert first == pytest.approx(1.0)
    assert end == pytest.approx(1.0 + (0.011 + 1001e-6) + (0.011 + 1002e-6), abs=1e-12)
    assert e.steps == 3


def test_batch_uses_mean_context_and_cached_prefix() -> None:
    e = Engine("http://plain-0", "plain", False, _model(), random.Random(0))
    e.submit(_req(0, 100, 2, cached=60))   # 40 uncached tokens
    e.submit(_req(1, 300, 2, cached=300))  # fully cached: still one prefill token
    [(end0, _, f0), (end1, _, f1)] = _run(e)
    assert f0 == f1 == pytest.approx(0.041)            # one chunk of 40 + 1 tokens
    # one decode step, b = 2, mean context (101 + 301) / 2 = 201
    assert end0 == end1 == pytest.approx(0.041 + 0.01 * 1.2 + 201e-6)


def test_chunked_prefill_shares_steps_with_decode() -> None:
    e = Engine("http://plain-0", "plain", False, _model(prefill_chunk_tokens=600), random.Random(0))
    e.submit(_req(0, 10, 3))
    assert e.start_step(0.0) == pytest.approx(0.010)   # 10 prompt tokens
    assert e.finish_step(0.010) == []
    e.submit(_req(1, 1000, 2))
    # step 2: request 0 decodes (b = 1, context 11) + 600 prompt tokens of request 1
    dt = e.start_step(0.010)
    assert dt == pytest.approx(0.011 + 11e-6 + 0.6)
    e.finish_step(0.010 + dt)
    # step 3: request 0's last token + the remaining 400 prompt tokens -> request 1's first token
    dt3 = e.start_step(0.010 + dt)
    assert dt3 == pytest.approx(0.011 + 12e-6 + 0.4)
    [done] = e.finish_step(0.010 + dt + dt3)
    assert done.req.rid == 0
    assert e.decoding[0].first_s == pytest.approx(0.010 + dt + dt3)


def _cycle(context: float) -> float:
    """One speculative cycle of SPEED at b = 1 (s): T_verify + c * gamma * T_plain."""
    return 0.01 * (1 + 3 / 10) + 1e-6 * context + 0.5 * 2 * (0.011 + 1e-6 * context)


def test_speculative_cycle_exact_with_alpha_one() -> None:
    m = _model(gauge_interval_steps=2)
    e = Engine("http://spec-0", "spec", True, m, random.Random(0))
    e.submit(_req(0, 100, 7))
    # alpha 1: every cycle accepts gamma = 2 drafts + 1 bonus = 3 tokens
    # cycle(L) = 0.01 * (1 + 1 * 3 / 10) + 1e-6 L + 0.5 * 2 * (0.011 + 1e-6 L)
    [(end, _, first)] = _run(e)
    assert first == pytest.approx(0.1)
    assert end == pytest.approx(0.1 + _cycle(101) + _cycle(104), abs=1e-12)
    assert e.accept_length == 3.0


def test_speculative_alpha_zero_emits_one_token_per_cycle() -> None:
    e = Engine("http://spec-0", "spec", True, _model(alpha_short=0.0, gauge_interval_steps=1), random.Random(0))
    e.submit(_req(0, 10, 3))
    [(end, _, _)] = _run(e)
    assert end == pytest.approx(0.01 + _cycle(11) + _cycle(12), abs=1e-12)
    assert e.steps == 3
    assert e.accept_length == 1.0


def test_acceptance_draws_match_expected_tokens() -> None:
    m = default_engine_model()
    e = Engine("http://spec-0", "spec", True, m, random.Random(5))
    e.submit(_req(0, 1000, 200_000, budget=200_000))
    e.start_step(0.0)
    e.finish_step(1.0)
    total = cycles = 0
    for _ in range(20_000):
        before = e.decoding[0].generated
        e.start_step(0.0)
        e.finish_step(0.0)
        total += e.decoding[0].generated - before
        cycles += 1
    alpha = m.alpha(1000, False)
    tau = (1 - alpha ** (m.speed.gamma + 1)) / (1 - alpha)
    assert total / cycles == pytest.approx(tau, rel=0.02)


def test_kv_capacity_queues_admission_and_spec_pool_is_smaller() -> None:
    m = _model(kv_tokens=2000)
    assert m.kv_capacity(False) == 2000 and m.kv_capacity(True) == 1500
    e = Engine("http://plain-0", "plain", False, m, random.Random(0))
    e.submit(_req(0, 900, 2, budget=100))    # reserves 1000
    e.submit(_req(1, 900, 2, budget=100))    # 1000: fits beside the first (2000)
    e.submit(_req(2, 900, 2, budget=100))    # would make 3000: waits
    e.start_step(0.0)
    assert len(e.prefilling) == 2 and len(e.waiting) == 1 and e.kv_reserved == 2000
    s = Engine("http://spec-0", "spec", True, m, random.Random(0))
    assert not s.fits(_req(3, 1500, 1, budget=1)) and s.fits(_req(3, 1499, 1, budget=1))


def test_stale_gauge_keeps_last_value_and_the_policy_does_not_stick_on_it() -> None:
    # sampled requests accept nothing: the gauge reads 1.0 -> expected speedup 1 / 1.16 < 1
    m = EngineModel(speed=replace(SPEED, alpha_short=0.9, c=0.08), alpha_sampled_short=0.0,
                    gauge_interval_steps=4)
    sampled = [_req(i, 100, 40, at=0.1 * i, temperature=1.0) for i in range(3)]
    later = [_req(3, 100, 40, at=5.0, temperature=1.0), _req(4, 100, 40, at=100.0),
             _req(5, 100, 40, at=101.0, temperature=1.0)]
    settings = PolicySettings(long_prompt_tokens=10_000, saturation_enter=50, saturation_exit=40, gamma=2,
                              drafter_cost_ratio=0.08, reserved_tokens=3)
    seen: list[tuple[float, float | None, float, float | None]] = []

    class Spy(PolicyRouter):
        def __call__(self, now: float, req: RequestView, pools: tuple[PoolView, ...]) -> Choice:
            spec = next(p for p in pools if p.speculative).endpoints[0]
            seen.append((now, spec.accept_length, spec.scrape_age_s, spec.accept_length_age_s))
            return super().__call__(now, req, pools)

    res = simulate_day(sampled + later, routed(1, 2, lambda: Spy(settings)), m)
    # the sampled class measured bad (tau 1.0) is bypassed while the measurement is fresh
    # (10 s); greedy was never measured bad; 100 s later the sampled estimate has expired, so
    # the pool is used (and measured) again although the gauge still reads 1.0
    assert [r.reason for r in res.records] == ["speculative"] * 3 + ["low_acceptance", "speculative",
                                                                     "speculative"]
    # 100 s after the spec engine went idle the scrape is fresh and the gauge unchanged (it
    # moves once the greedy request has decoded) ...
    late = [x for x in seen if x[0] >= 100.0]
    assert [(acc, 0 <= age <= 0.25) for _, acc, age, _ in late] == [(1.0, True), (3.0, True)]
    # ... while the value itself has not moved for ~100 s (the engine finished within 2 s)
    assert 90 < late[0][3] < 100
    series = [v for v in res.timeline["accept_length"]["http://spec-0"] if v is not None]
    assert series[50] == series[95] == 1.0


@pytest.mark.slow
def test_same_seed_same_day_other_seed_other_day() -> None:
    model = default_engine_model()
    shape = get_shape("mixed")
    dep = routed(1, 2, lambda: PolicyRouter(settings_for(model)))
    a = simulate_day(shape.requests(3), dep, model, seed=3)
    b = simulate_day(shape.requests(3), dep, model, seed=3)
    c = simulate_day(shape.requests(4), dep, model, seed=4)
    assert [(r.endpoint, r.e2e_s, r.reason) for r in a.records] == [(r.endpoint, r.e2e_s, r.reason)
                                                                     for r in b.records]
    assert a.timeline == b.timeline and a.reasons == b.reasons
    assert [r.e2e_s for r in a.records][:50] != [r.e2e_s for r in c.records][:50]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "winner", "loser"), [("light", "all-spec", "all-plain"),
                                                      ("heavy", "all-plain", "all-spec")])
def test_shapes_ordering(name: str, winner: str, loser: str) -> None:
    model = default_engine_model()
    shape = get_shape(name)
    reqs = shape.requests(0)
    means = {}
    for dep in (all_spec(2), all_plain(2)):
        s = summarize(simulate_day(reqs, dep, model), day_s=shape.duration_s,
                      long_prompt_tokens=shape.long_prompt_tokens, objective=Objective())
        assert s["ok"] == s["requests"] > 300
        means[dep.name] = s["mean_s"]
    assert means[winner] < 0.85 * means[loser]


def test_policy_adapter_routes_long_prompts_plain_and_short_ones_spec() -> None:
    model = default_engine_model()
    reqs = [_req(0, 100_000, 10, at=0.0), _req(1, 9000, 10, at=0.5), _req(2, 300_000, 10, at=1.0)]
    res = simulate_day(reqs, routed(1, 2, lambda: PolicyRouter(settings_for(model))), model)
    assert [(r.pool, r.reason, r.status) for r in res.records] == [
        ("plain", "long_context", "ok"), ("spec", "speculative", "ok"), (None, "context_cap", "refused")]
    assert res.reasons == {"long_context": 1, "speculative": 1, "context_cap": 1}


def test_the_router_in_front_of_spec_engines_alone_serves_long_prompts_there() -> None:
    """At the split calibrate-split advises on a light day (every engine speculative) the long
    prompts have no plain pool: with speed models the long-prompt threshold gives way to the
    prediction, and the speculative pool (the only one) takes them."""
    model = default_engine_model()
    settings = settings_for(model)
    reqs = [_req(0, 100_000, 10, at=0.0), _req(1, 9000, 10, at=0.5), _req(2, 300_000, 10, at=1.0)]
    dep = specgate_at(2, 2, settings)
    assert (dep.name, dep.pools) == ("specgate 2s+0p", (("spec", True, 2),))
    res = simulate_day(reqs, dep, model)
    assert [(r.pool, r.reason, r.status) for r in res.records] == [
        ("spec", "speculative", "ok"), ("spec", "speculative", "ok"), (None, "context_cap", "refused")]
    assert [r.endpoint for r in res.records[:2]] == ["http://spec-0", "http://spec-1"]  # least load
    plain = simulate_day(reqs, specgate_at(0, 2, settings), model)
    assert (plain.deployment, plain.reasons) == ("specgate 0s+2p", {"plain_only": 2, "context_cap": 1})
    with pytest.raises(ValueError, match="0 <= k <= n"):
        fronted(3, 2, lambda: PolicyRouter(settings))


def test_settings_for_uses_the_models_crossover() -> None:
    m = default_engine_model()
    s = settings_for(m)
    assert s.saturation_enter == math.ceil(m.speed.crossover_load(12288.0))
    assert s.saturation_exit == math.floor(s.saturation_enter * 0.75)
    assert (s.gamma, s.drafter_cost_ratio, s.reserved_tokens) == (4, 0.08, 5)


def test_scrape_rounds_reach_the_router_hook_every_quarter_second() -> None:
    calls: list[float] = []

    class Hooked:
        def __call__(self, now: float, req: RequestView, pools: tuple[PoolView, ...]) -> Choice:
            return Choice("plain", "http://plain-0", "test")

        def on_scrape(self, now: float, pools: tuple[PoolView, ...]) -> None:
            calls.append(now)

    res = simulate_day([_req(0, 1000, 3)], replace(all_plain(1), make_router=Hooked), _model())
    assert res.end_s == pytest.approx(1.024003)
    assert calls == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]   # rounds stop at the first one after the end
    assert res.records[0].ttft_s == pytest.approx(1.0) and res.records[0].queue_s == 0.0


@pytest.mark.slow
def test_summary_goodput_and_latencies_on_a_hand_day(tmp_path: Path) -> None:
    from loadtests.dayreport import plot_loads

    # one plain engine: request 0 alone (TTFT 1.0 s, TPOT 12.0015 ms); request 1 at 10 s
    # (6000 prompt tokens: TTFT 6 s, one decode step)
    reqs = [_req(0, 1000, 3), _req(1, 6000, 2, at=10.0)]
    res = simulate_day(reqs, all_plain(1), _model())
    s = summarize(res, day_s=20.0, long_prompt_tokens=5000, objective=Objective(ttft_slo_s=5.0, tpot_slo_s=0.012))
    e2e0 = 1.0 + 0.011 + 1001e-6 + 0.011 + 1002e-6
    e2e1 = 6.0 + 0.011 + 6001e-6
    assert s["mean_s"] == pytest.approx((e2e0 + e2e1) / 2)
    assert s["p90_s"] == pytest.approx(e2e1)
    assert s["long_mean_s"] == pytest.approx(e2e1) and s["short_mean_s"] == pytest.approx(e2e0)
    # request 0: TPOT 12.0015 ms > 12 ms; request 1: TTFT 6 s > 5 s: neither meets it
    assert s["goodput_rps"] == 0.0
    s = summarize(res, day_s=20.0, long_prompt_tokens=5000, objective=Objective(ttft_slo_s=6.5, tpot_slo_s=0.02))
    assert s["goodput_rps"] == pytest.approx(2 / 20) and s["goodput_share"] == 1.0
    png = plot_loads([res], tmp_path / "day.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_adaptive_engine_decodes_plainly_above_its_batch_threshold() -> None:
    """Two sequences at threshold 1: plain steps (one token each) while both decode, the
    speculative cycle once one is left; the KV capacity stays the speculative engine's."""
    m = _model(kv_tokens=2000, gauge_interval_steps=1)
    e = Engine("http://spec-0", "spec", True, m, random.Random(0), adaptive_max_batch=1)
    assert e.capacity == 1500 and e.speculates_at(1) and not e.speculates_at(2)
    e.submit(_req(0, 10, 2))
    e.submit(_req(1, 10, 5))
    # prefill both (20 tokens x 1 ms), then b = 2 > 1: a plain step at mean context 11
    [(t1, _, _)] = [(t, rid, f) for t, rid, f in _run_until_first_done(e)]
    assert t1 == pytest.approx(0.020 + 0.01 * 1.2 + 11e-6, abs=1e-12)
    assert e.accept_length is None   # no speculative step yet
    # request 1 alone (context 12, 2 generated): alpha 1 gives 3 tokens per cycle, the last capped
    [(end, rid, _)] = _run(e, t1)
    assert rid == 1
    assert end == pytest.approx(t1 + _cycle(12), abs=1e-12)
    assert e.accept_length == 3.0
    plain = Engine("http://plain-0", "plain", False, m, random.Random(0), adaptive_max_batch=1)
    assert plain.adaptive_max_batch is None and plain.capacity == 2000


def _run_until_first_done(engine: Engine, now: float = 0.0) -> list[tuple[float, int, float]]:
    while (dt := engine.start_step(now)) is not None:
        now += dt
        done = [(now, s.req.rid, s.first_s) for s in engine.finish_step(now)]
        if done:
            return done
    return []


def test_adaptive_threshold_comes_from_the_models_crossover() -> None:
    m = default_engine_model()
    assert adaptive_max_batch(m) == math.floor(m.speed.crossover_load(12288.0) or 0) == 41
    never = EngineModel(speed=replace(SPEED, alpha_short=0.0))        # speculation never pays
    assert adaptive_max_batch(never) == 0
    always = EngineModel(speed=replace(SPEED, batch_knee=1e9, c=0.0))  # pays at every batch
    assert adaptive_max_batch(always) is None
    dep = all_adaptive(2, 41)
    assert (dep.name, dep.pools, dep.adaptive_max_batch) == ("all-adaptive", (("spec", True, 2),), 41)


def test_all_adaptive_matches_all_spec_below_and_all_plain_speed_above_the_threshold() -> None:
    m = default_engine_model()
    reqs = [_req(i, 1000, 50, at=0.01 * i) for i in range(60)]   # one burst of 60 on one engine
    spec = simulate_day(reqs, all_spec(1), m)
    low = simulate_day(reqs, all_adaptive(1, 1000), m)             # never reached: all-spec exactly
    assert [r.e2e_s for r in low.records] == [r.e2e_s for r in spec.records]
    high = simulate_day(reqs, all_adaptive(1, 0), m)               # never speculates
    plain = simulate_day(reqs, all_plain(1), m)
    assert [r.e2e_s for r in high.records] == [r.e2e_s for r in plain.records]
    mid = simulate_day(reqs, all_adaptive(1, 41), m)
    assert max(r.e2e_s or 0 for r in mid.records) < max(r.e2e_s or 0 for r in spec.records)


def test_settled_is_the_window_from_which_every_later_one_is_within_tolerance():
    from loadtests.dayreport import recovery_s, settled_s

    ref = [{"start_s": 300.0 + 30 * i, "mean_s": 10.0} for i in range(5)]
    run = [{"start_s": w["start_s"], "mean_s": m} for w, m in zip(ref, [10.2, 11.0, 10.4, None, 10.5], strict=True)]
    assert recovery_s(run, ref, start_s=300.0) == 0.0
    assert settled_s(run, ref, start_s=300.0) == 60.0  # the gap window is skipped
    assert settled_s(run[:2], ref[:2], start_s=300.0) is None


def test_a_fixed_share_sends_its_share_to_the_speculative_pool():
    from loadtests.dayapi import EndpointView, FixedShare, PoolView, RequestView

    def ep(url, pool, load):
        return EndpointView(url, pool, load, 0, load, load, 0.0, None, 0.0)

    pools = (PoolView("spec", True, (ep("s1", "spec", 3), ep("s2", "spec", 1))), PoolView("plain", False,
                                                                                       (ep("p1", "plain", 0),)))
    router = FixedShare(0.3, seed=1)
    picks = [router(0.0, RequestView(100, 10, 0.0), pools) for _ in range(1000)]
    assert sum(c.pool == "spec" for c in picks) == 280  # seeded: 28.0% of 1,000
    assert {c.endpoint for c in picks if c.pool == "spec"} == {"s2"}


def test_the_client_rules_choose_by_their_own_in_flight_counts():
    import random

    from loadtests.dayapi import ClientRule, EndpointView, PoolView, RequestView

    def ep(url, pool, inflight, load=0):  # load (the scrape) differs from in flight: the rules read in flight
        return EndpointView(url, pool, load, 0, inflight, load, 0.0, None, 0.0)

    pools = (PoolView("spec", True, (ep("s1", "spec", 2, load=0), ep("s2", "spec", 1, load=9))),
             PoolView("plain", False, (ep("p1", "plain", 1), ep("p2", "plain", 3))))
    short, long = RequestView(100, 10, 0.0), RequestView(5000, 10, 0.0)
    jsq = ClientRule("jsq", 1024)
    assert jsq(0.0, short, pools) == Choice("spec", "s2", "jsq")  # 1 in flight on s2 and p1: spec first on ties
    length = ClientRule("length", 1024)
    assert length(0.0, short, pools) == Choice("spec", "s2", "length")
    assert length(0.0, long, pools) == Choice("plain", "p1", "length")
    coin = ClientRule("coin", 1024, seed=3)
    draws = random.Random(3)
    expected = ["spec" if draws.random() < 2 / 4 else "plain" for _ in range(200)]
    picks = [coin(0.0, short, pools) for _ in range(200)]
    assert [c.pool for c in picks] == expected
    assert {c.endpoint for c in picks} == {"s2", "p1"}
    with pytest.raises(ValueError, match="unknown rule 'rr'"):
        ClientRule("rr", 1024)


def test_policy_settings_turn_the_prediction_fallback_and_the_marginal_cost_on_and_off():
    on = PolicySettings(long_prompt_tokens=1024, saturation_enter=8, saturation_exit=6)
    assert on.check and on.marginal_cost  # the router's defaults
    assert on.routing().learning.check.enabled is True
    off = replace(on, check=False)
    assert off.routing().learning.check.enabled is False
    assert off.routing().learning.check.window == on.routing().learning.check.window


def test_a_closed_loop_s_request_leaves_its_gap_after_its_predecessor_ends() -> None:
    # r0 alone on one plain engine ends at 1.0 + two decode steps (test_plain_engine_exact_step_times);
    # r1 was recorded at 0.1 s, but its client waited for r0: it is sent 0.5 s after r0's end,
    # and runs alone as r0 did; r2 follows r1 and r3 is open (at its own arrival)
    end0 = 1.0 + (0.011 + 1001e-6) + (0.011 + 1002e-6)
    day = [_req(0, 1000, 3), _req(1, 1000, 3, at=0.1), _req(2, 1000, 3, at=0.2), _req(3, 10, 1, at=30.0)]
    res = simulate_day(day, all_plain(1), _model(), follows={1: (0, 0.5), 2: (1, 0.0)})
    r0, r1, r2, r3 = res.records
    assert [r.status for r in res.records] == ["ok"] * 4
    assert r1.arrival_s == pytest.approx(end0 + 0.5)
    assert r1.e2e_s == pytest.approx(r0.e2e_s) == pytest.approx(end0)
    assert r2.arrival_s == pytest.approx(2 * end0 + 0.5)
    assert (r3.arrival_s, r3.queue_s) == (30.0, 0.0)
    # open loop (no links): r1 and r2 queue behind r0's prefill
    open_ = simulate_day(day, all_plain(1), _model())
    assert open_.records[1].arrival_s == 0.1 and open_.records[1].e2e_s > end0


def test_a_closed_loop_link_outside_the_day_is_refused() -> None:
    with pytest.raises(ValueError, match="follows 7"):
        simulate_day([_req(0, 10, 1)], all_plain(1), _model(), follows={0: (7, 0.0)})
