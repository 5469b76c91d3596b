"""Several models behind one router in the day simulator: the interleaved stream, the
per-model routers and pools, and a fleet day that gives each model exactly its day alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loadtests.dayapi import EndpointView, PoolView, RequestView, RoundRobin
from loadtests.dayfamilies import get_family
from loadtests.dayfleet import (
    FleetModel,
    FleetRouter,
    config_resolver,
    fleet_deployment,
    fleet_models,
    interleave,
    model_records,
)
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.dayshapes import Request
from loadtests.daysim import Choice, routed, simulate_day


def _req(rid: int, at: float) -> Request:
    return Request(rid, at, 100, 0, 10, 10, 0.0, "t")


def _pool(name: str, spec: bool) -> PoolView:
    return PoolView(name, spec, (EndpointView(f"http://{name}-0", name, 0, 0, 0, 0, 0.0, None, 0.0),))


class _Seen:
    """A router that records the pools it was shown and answers its first pool's endpoint."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.scrapes: list[tuple[str, ...]] = []
        self.done: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        self.calls.append(tuple(p.name for p in pools))
        return Choice(pools[0].name, pools[0].endpoints[0].url, "seen")

    def on_scrape(self, now: float, pools: tuple[PoolView, ...]) -> None:
        self.scrapes.append(tuple(p.name for p in pools))

    def on_done(self, now: float, request: RequestView, url: str, record: object = None,
                pools: tuple[PoolView, ...] = ()) -> None:
        self.done.append((url, tuple(p.name for p in pools)))


def test_interleave_sorts_by_arrival_renumbers_and_tags() -> None:
    merged, origin = interleave({"a": [_req(0, 0.0), _req(1, 2.0)], "b": [_req(0, 1.0), _req(1, 2.0)]})
    assert [(r.rid, r.arrival_s, r.model) for r in merged] == [
        (0, 0.0, "a"), (1, 1.0, "b"), (2, 2.0, "a"), (3, 2.0, "b")]  # fmt: skip
    assert origin == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


def test_each_model_router_sees_its_own_pools_only() -> None:
    a, b = _Seen(), _Seen()
    fleet = FleetRouter({"a": a, "b": b}, {"a": ["a-spec", "a-plain"], "b": ["b-plain"]})
    pools = (_pool("a-spec", True), _pool("a-plain", False), _pool("b-plain", False))
    assert fleet(0.0, RequestView(10, 10, 0.0, model="b"), pools) == Choice("b-plain", "http://b-plain-0", "seen")
    assert fleet(0.0, RequestView(10, 10, 0.0, model="a"), pools) == Choice("a-spec", "http://a-spec-0", "seen")
    assert fleet(0.0, RequestView(10, 10, 0.0, model="c"), pools) == Choice(None, None, "model_not_found")
    assert (a.calls, b.calls) == ([("a-spec", "a-plain")], [("b-plain",)])
    fleet.on_scrape(0.25, pools)
    assert (a.scrapes, b.scrapes) == ([("a-spec", "a-plain")], [("b-plain",)])
    fleet.on_done(1.0, RequestView(10, 10, 0.0, model="b"), "http://b-plain-0", None, pools)
    fleet.on_done(1.0, RequestView(10, 10, 0.0, model="c"), "http://b-plain-0", None, pools)
    assert (a.done, b.done) == ([], [("http://b-plain-0", ("b-plain",))])


def test_a_resolver_maps_names_to_models() -> None:
    a = _Seen()
    fleet = FleetRouter({"a": a}, {"a": ["a-plain"]}, resolve=lambda name: "a" if name in ("a", "alias") else None)
    assert fleet(0.0, RequestView(10, 10, 0.0, model="alias"), (_pool("a-plain", False),)).pool == "a-plain"


def test_fleet_deployment_refuses_shared_pool_names() -> None:
    engine = get_family("default").model
    m = FleetModel("a", engine, (("p", False, 1),), RoundRobin)
    with pytest.raises(ValueError, match="pool name 'p' is used twice"):
        fleet_deployment([m, replace(m, name="b")])
    with pytest.raises(ValueError, match="has no pools"):
        fleet_deployment([replace(m, pools=())])
    with pytest.raises(ValueError, match="at least one model"):
        fleet_deployment([])


def test_a_fleet_day_gives_each_model_its_day_alone() -> None:
    days, models, alone = {}, [], {}
    for fam_name, shape_name in (("default", "light"), ("moe_spec_pays", "light")):
        family = get_family(fam_name)
        reqs = family.shape(shape_name, 2).shortened(0.1).requests(3)
        settings = replace(settings_for(family.model, long_prompt_tokens=family.scaled_tokens(32768),
                                        context_tokens=family.scaled_tokens(12288)), learn=True)
        alone[fam_name] = simulate_day(reqs, routed(1, 2, lambda s=settings: PolicyRouter(s)), family.model, seed=3)
        days[fam_name] = reqs
        models.append(FleetModel(fam_name, family.model, ((f"{fam_name}-spec", True, 1), (f"{fam_name}-plain", False, 1)),
                                 lambda s=settings: PolicyRouter(s)))
    dep, pool_models, pool_seeds = fleet_deployment(models)
    merged, origin = interleave(days)
    fleet = simulate_day(merged, dep, models[0].engine, seed=3, pool_models=pool_models, pool_seeds=pool_seeds)
    for name, res in alone.items():
        mine = model_records(fleet.records, origin, name)
        assert len(mine) == len(res.records) > 20
        # the same requests end at the same times, on the same kind of pool, for the same reason
        assert [(r.rid, r.e2e_s, r.speculative, r.reason) for r in mine] == [
            (r.rid, r.e2e_s, r.speculative, r.reason) for r in res.records]  # fmt: skip
        assert {r.pool for r in mine} <= {f"{name}-spec", f"{name}-plain"}


def test_the_fleet_comes_from_the_routers_own_config() -> None:
    from benchmarks.two_models import fleet_config

    config = fleet_config(["m-one", "m-two"])
    engine = get_family("default").model
    models = fleet_models(config, {"m-one": engine, "m-two": engine}, {"m-one": RoundRobin, "m-two": RoundRobin})
    assert [(m.name, m.pools) for m in models] == [
        ("m-one", (("m-one-spec", True, 1), ("m-one-plain", False, 1))),
        ("m-two", (("m-two-spec", True, 1), ("m-two-plain", False, 1)))]  # fmt: skip
    dep, _, seeds = fleet_deployment(models)
    assert dep.pools == models[0].pools + models[1].pools
    assert seeds == {"m-one-spec": 0, "m-one-plain": 1, "m-two-spec": 0, "m-two-plain": 1}
    # the simulated engines' URLs are the config's endpoints
    assert [u for p in config.pools for u in p.endpoints] == [f"http://{p[0]}-0" for p in dep.pools]


def test_the_config_resolver_takes_names_and_aliases() -> None:
    from router.config.tree import parse_config

    pool = {"speculative": False, "engine": {"model_path": "/m"}}
    config = parse_config({"models": [
        {"name": "a", "aliases": ["gpt-a"], "tokenizer": "/t", "limits": {"max_context_tokens": 4096},
         "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
         "pools": [{**pool, "name": "pa", "endpoints": ["http://pa-0"]}]},
        {"name": "b", "tokenizer": "/t", "limits": {"max_context_tokens": 4096},
         "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
         "pools": [{**pool, "name": "pb", "endpoints": ["http://pb-0"]}]}]})  # fmt: skip
    resolve = config_resolver(config)
    assert [resolve(n) for n in ("a", "gpt-a", "b", None, "c")] == ["a", "a", "b", "a", None]
