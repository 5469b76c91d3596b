"""The one snapshot builder (``router.state.snapshots``): its parts, and the router's
``Runtime.snapshots`` and the day simulator's ``PolicyRouter.snapshots`` giving the same
snapshots (and so the same decision) from one recorded endpoint state."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from loadtests.dayapi import EndpointView, PoolView
from loadtests.dayrouter import PolicyRouter, PolicySettings, settings_for
from loadtests.dayshapes import default_engine_model
from router.config.tree import parse_config
from router.decision.acceptance import AcceptanceTracker
from router.decision.learn import DEFAULT_PRIOR, Observation, SpeedFit
from router.decision.policy import EndpointSnapshot, PoolSnapshot, Rules, decide
from router.decision.prediction_check import PredictionCheck
from router.request.features import PromptCounter, RequestFeatures
from router.state.engine_metrics import EngineLoad
from router.state.runtime import Runtime
from router.state.snapshots import (
    EndpointValues,
    accept_lengths,
    endpoint_snapshot,
    endpoint_values,
    pool_snapshot,
)


def test_endpoint_values_are_the_endpoint_snapshots_fields_by_name_and_default() -> None:
    fields = dataclasses.fields(EndpointSnapshot)
    assert EndpointValues._fields == tuple(f.name for f in fields)
    assert EndpointValues._field_defaults == {f.name: f.default for f in fields
                                              if f.default is not dataclasses.MISSING}
    values = EndpointValues(url="http://a", healthy=True, load=3, cached_tokens=7, queued=1,
                            kv_free_tokens=90, kv_used_tokens=10)
    assert endpoint_snapshot(values) == EndpointSnapshot(url="http://a", healthy=True, load=3, cached_tokens=7,
                                                         queued=1, kv_free_tokens=90, kv_used_tokens=10)


def test_endpoint_values_read_the_queue_and_kv_of_a_fresh_scrape_only() -> None:
    scrape = EngineLoad(num_running_reqs=2, num_queue_reqs=3, token_usage=0.25, max_total_num_tokens=1000)
    assert endpoint_values("http://a", True, 5, 40, scrape, 4) == ("http://a", True, 5, 40, 3, 750, 250, 4, 0)
    assert endpoint_values("http://a", False, 5, 0, None) == ("http://a", False, 5, 0, 0, None, 0, 0, 0)
    assert endpoint_values("http://a", True, 5, 0, None, 1, 1200) == ("http://a", True, 5, 0, 0, None, 0, 1, 1200)
    # no KV capacity exported: the queue is read, the free KV is unknown, the used one as exported
    no_cap = EngineLoad(num_queue_reqs=2, kv_used_tokens=300)
    assert endpoint_values("http://a", True, 1, 0, no_cap) == ("http://a", True, 1, 0, 2, None, 300, 0, 0)
    full = EngineLoad(max_total_num_tokens=100, kv_used_tokens=130)  # over capacity: none free
    assert endpoint_values("http://a", True, 0, 0, full).kv_free_tokens == 0


def _fit_with_tau(tau: float, temperature: str) -> SpeedFit:
    fit = SpeedFit(DEFAULT_PRIOR)
    fit.observe(Observation(prompt_tokens=100, cached_tokens=0, output_tokens=50, batch=1.0, duration_s=1.0,
                            accept_length=tau), 1.0, temperature, measured=True)
    return fit


@pytest.mark.parametrize(("live", "fit_tau", "prior", "expected"), [
    (3.0, 2.5, 2.0, 3.0),     # the live estimate first
    (None, 2.5, 2.0, 2.5),    # then what the fit measured
    (None, None, 2.0, 2.0),   # then the calibrated prior
    (0.0, None, 2.0, 2.0),    # a zero is unknown
    (None, None, None, None),
])
def test_accept_lengths_go_live_then_fit_then_prior(live, fit_tau, prior, expected) -> None:
    fit = None if fit_tau is None else _fit_with_tau(fit_tau, "greedy")
    greedy, sampled = accept_lengths({"greedy": live, "sampled": None}, fit, {"greedy": prior, "sampled": None})
    assert greedy == (None if expected is None else pytest.approx(expected))
    assert sampled is None


def test_pool_snapshot_takes_the_fits_model_and_table_over_the_configured_speed() -> None:
    fit = _fit_with_tau(3.0, "greedy")
    values = [EndpointValues("http://a", True, 1)]
    factor = ((("greedy", 0), 0.5),)
    spec = pool_snapshot(name="s", speculative=True, limit=4096, reserved=5, endpoints=values,
                         speed=dataclasses.replace(DEFAULT_PRIOR, gamma=4), fit=fit, prediction_fallback=True,
                         measured_factor=factor)
    assert (spec.speed, spec.accept_table, spec.prediction_fallback) == (fit.model, fit.accept_table(), True)
    assert spec.measured_factor == factor  # carried while distrusted only
    assert pool_snapshot(name="s", speculative=True, limit=4096, reserved=5, endpoints=values, speed=DEFAULT_PRIOR,
                         fit=None, measured_factor=factor).measured_factor == ()
    assert spec.endpoints == (EndpointSnapshot("http://a", True, 1),)
    plain = pool_snapshot(name="p", speculative=False, limit=4096, reserved=0, endpoints=values,
                          speed=DEFAULT_PRIOR, fit=None)
    assert (plain.speed, plain.accept_table, plain.prediction_fallback) == (DEFAULT_PRIOR, None, False)


# One decision's recorded state: per endpoint the router's in-flight greedy requests and its two
# last scrapes, (running, queued, token_usage, spec_accept_length, generation_tokens_total) at
# t = 1 s and 2 s; the request arrives at t = 2.5 s.
RECORDED: dict[str, dict[str, tuple[int, tuple[tuple[int, int, float, float | None, float], ...]]]] = {
    "spec": {"http://s0:1": (3, ((2, 0, 0.10, 3.2, 1000.0), (3, 0, 0.15, 3.4, 2000.0))),
             "http://s1:1": (1, ((1, 0, 0.05, 3.0, 500.0), (1, 1, 0.20, 2.8, 900.0)))},
    "plain": {"http://p0:1": (2, ((4, 1, 0.30, None, 4000.0), (5, 2, 0.35, None, 5000.0))),
              "http://p1:1": (0, ((0, 0, 0.00, None, 0.0), (1, 0, 0.02, None, 100.0)))},
}
REQUEST = RequestFeatures(prompt_tokens=3000, max_new_tokens=400, temperature_class="greedy")


def _views(settings: PolicySettings, t: float, round_: int) -> tuple[PoolView, ...]:
    pools = []
    for name, endpoints in RECORDED.items():
        views = []
        for url, (inflight, scrapes) in endpoints.items():
            running, queued, usage, acc, gen = scrapes[round_]
            views.append(EndpointView(url, name, running, queued, inflight, max(running + queued, inflight), usage,
                                      acc, 0.0, None if acc is None else 0.0, gen))
        pools.append(PoolView(name, name == "spec", tuple(views)))
    return tuple(pools)


def _runtime(settings: PolicySettings, router: PolicyRouter, learning: bool) -> Runtime:
    m = settings.speed
    assert m is not None
    routing = settings.routing().model_dump()
    routing["learning"]["enabled"] = learning
    pools: list[dict[str, object]] = [
        {"name": name, "speculative": name == "spec", "endpoints": list(RECORDED[name]),
         "max_context_tokens": settings.pool_limit_tokens, "drafter_cost_ratio": settings.drafter_cost_ratio,
         "draft_reserved_tokens": settings.reserved_tokens if name == "spec" else 0} for name in RECORDED]
    if not learning:  # the simulator's predict mode: the true model as each pool's speed block
        s = m.speed
        for pool in pools:
            pool["speed"] = {"decode_s_per_token": s.t0_s, "batch_knee": s.batch_knee,
                             "attention_s_per_token": s.attn_s_per_token, "prefill_s_per_token": s.prefill_s_per_token,
                             "max_running_requests": m.max_running}
        pools[0]["speed"]["accept_length_greedy"] = router.priors["greedy"]  # type: ignore[index]
        pools[0]["speed"]["accept_length_sampled"] = router.priors["sampled"]  # type: ignore[index]
    return Runtime(parse_config({
        "model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": settings.max_context_tokens},
        "routing": routing, "pools": pools}), PromptCounter.__new__(PromptCounter))


def _record(rt: Runtime, router: PolicyRouter, settings: PolicySettings) -> tuple[PoolView, ...]:
    """Replay RECORDED into both: the leases, then each scrape round."""
    assert settings.speed is not None
    for endpoints in RECORDED.values():
        for url, (inflight, _) in endpoints.items():
            for _ in range(inflight):
                rt.endpoint(url).lease("greedy")
                router.trackers.setdefault(url, AcceptanceTracker()).started("greedy")
    views: tuple[PoolView, ...] = ()
    for round_, t in enumerate((1.0, 2.0)):
        for name, endpoints in RECORDED.items():
            cap = settings.speed.kv_capacity(name == "spec")
            for url, (_, scrapes) in endpoints.items():
                running, queued, usage, acc, gen = scrapes[round_]
                rt.endpoint(url).record_success(EngineLoad(
                    num_running_reqs=running, num_queue_reqs=queued, token_usage=usage, spec_accept_length=acc,
                    generation_tokens_total=gen, max_total_num_tokens=cap), now=t)
        rt.advance_bypass(t)
        views = _views(settings, t, round_)
        router.on_scrape(t, views)
    return views


def _same(router_snaps: Sequence[PoolSnapshot], sim_snaps: Sequence[PoolSnapshot]) -> None:
    # the simulator models no capabilities (its requests need none): the router's served set aside
    assert [dataclasses.replace(p, capabilities=None) for p in router_snaps] == list(sim_snaps)


def _settings(**mode: bool) -> PolicySettings:
    # the router holds a pool's limit within the safe context (the simulator does not check it)
    settings = settings_for(default_engine_model(), **mode)
    return dataclasses.replace(settings, pool_limit_tokens=settings.max_context_tokens)


def _rules(settings: PolicySettings) -> Rules:
    return Rules(max_context_tokens=settings.max_context_tokens, default_max_tokens=None,
                 long_prompt_tokens=settings.long_prompt_tokens, seed=settings.seed)


def test_the_router_and_the_simulator_build_the_same_snapshots_with_speed_blocks() -> None:
    settings = _settings(predict=True)
    router = PolicyRouter(settings)
    rt = _runtime(settings, router, learning=False)
    views = _record(rt, router, settings)
    ours, sims = rt.snapshots(2.5), router.snapshots(views, 2.5)
    _same(ours, sims)
    spec = sims[0]
    assert spec.speed is not None and spec.endpoints[1].queued == 1 and spec.endpoints[0].kv_used_tokens > 0
    assert spec.accept_length_greedy is not None and spec.accept_length_greedy != router.priors["greedy"]  # live
    assert spec.accept_length_sampled == router.priors["sampled"]  # no sampled traffic: the prior
    assert decide(REQUEST, ours, _rules(settings)) == decide(REQUEST, sims, _rules(settings))


def test_the_router_and_the_simulator_build_the_same_snapshots_while_learning() -> None:
    settings = _settings(learn=True)
    router = PolicyRouter(settings)
    rt = _runtime(settings, router, learning=True)
    views = _record(rt, router, settings)
    measured = Observation(prompt_tokens=2000, cached_tokens=0, output_tokens=300, batch=2.0, duration_s=7.5,
                           accept_length=2.2)
    spec_fit, plain_check = rt.pools[0].fit, rt.pools[1].check
    assert spec_fit is not None and plain_check is not None
    for fit in (spec_fit, router.fits[True]):  # one measured sampled request, the same in both fits
        fit.observe(measured, 2.2, "sampled", measured=True)
    plain_check.fallback = True  # the plain pool's predictions are off, in both
    router.checks["plain"] = PredictionCheck()
    router.checks["plain"].fallback = True
    ours, sims = rt.snapshots(2.5), router.snapshots(views, 2.5)
    _same(ours, sims)
    assert sims[0].accept_length_sampled == pytest.approx(2.2)  # no live sampled estimate: the fit's
    assert (sims[0].prediction_fallback, sims[1].prediction_fallback) == (False, True)
    assert decide(REQUEST, ours, _rules(settings)) == decide(REQUEST, sims, _rules(settings))
