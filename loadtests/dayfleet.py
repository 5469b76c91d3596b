"""Several models behind one router in the day simulator (:mod:`loadtests.daysim`).

A fleet deployment runs every model's engines in one simulated day: each model has its own
pools (named ``<model>-spec``, ``<model>-plain``), its own engine model (the pools' engines
run it: ``simulate_day(pool_models=...)``) and its own traffic; the days are interleaved by
arrival time into one request stream, each request carrying the name of its model
(:func:`interleave`). One :class:`FleetRouter` fronts them all, as the router's fleet does:
the request's ``model`` is resolved to one of the configured models, and that model's router
(a :class:`loadtests.dayrouter.PolicyRouter` with the model's settings, the router's per-model
state: trackers, bypass flags, speed fits, tie-break counter) decides among that model's
pools only; the scrape and the end of a request reach the model's router with its own pools.

The fleet can come from a router config (:func:`fleet_models`, :func:`config_resolver`): the
``models:`` YAML the router itself would load (``router.config.tree.parse_config``), each pool one
simulated engine per endpoint URL, requests resolved by the models' configured names and
aliases (a request without ``model`` to the first model, as the router's fleet does).

Each model's pools draw their engines' randomness as they do when the model runs alone
(``pool_seeds``: the pool's index in the model's own deployment), so the comparison of a model
in the fleet with the same model alone (same requests, same seeds) isolates what sharing one
router changes. Errors: ``ValueError`` for a model without pools, a pool name used twice, or
an empty fleet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from loadtests.dayapi import Choice, PoolView, RequestView, Router
from loadtests.dayshapes import EngineModel, Request
from loadtests.daysim import Deployment, RequestRecord
from router import Config

__all__ = ["FleetModel", "FleetRouter", "config_resolver", "fleet_deployment", "fleet_models", "interleave",
           "model_records"]


@dataclass(frozen=True)
class FleetModel:
    """One model of a fleet deployment.

    Attributes:
        name: the model's name (what its requests send as ``model``).
        engine: its engines' model (speed, capacity, acceptance).
        pools: ``(pool name, speculative, engine count)`` in config order.
        make_router: builds a fresh router for the model's pools (routers keep state).
    """

    name: str
    engine: EngineModel
    pools: tuple[tuple[str, bool, int], ...]
    make_router: Callable[[], Router]


class FleetRouter:
    """One router in front of several models' pools (module docstring).

    Args:
        routers: model name -> that model's router.
        pools: model name -> the names of its pools.
        resolve: the request's ``model`` (None: absent) -> the configured model's name, or None
            for a name no model serves (the request is then refused, reason
            ``model_not_found``); default: the exact model names.
    """

    def __init__(self, routers: Mapping[str, Router], pools: Mapping[str, Sequence[str]],
                 resolve: Callable[[str | None], str | None] | None = None) -> None:
        if set(routers) != set(pools):
            raise ValueError("routers and pools name different models")
        self.routers = dict(routers)
        self._pools = {m: frozenset(ps) for m, ps in pools.items()}
        self._resolve = resolve or (lambda name: name if name in self.routers else None)

    def _own(self, model: str, pools: tuple[PoolView, ...]) -> tuple[PoolView, ...]:
        mine = self._pools[model]
        return tuple(p for p in pools if p.name in mine)

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        """The request's model's router decides among that model's pools."""
        model = self._resolve(request.model)
        if model is None:
            return Choice(None, None, "model_not_found")
        return self.routers[model](now, request, self._own(model, pools))

    def on_scrape(self, now: float, pools: tuple[PoolView, ...]) -> None:
        """A scrape round reaches every model's router with its own pools."""
        for model, router in self.routers.items():
            hook = getattr(router, "on_scrape", None)
            if hook is not None:
                hook(now, self._own(model, pools))

    def on_done(self, now: float, request: RequestView, url: str, record: RequestRecord | None = None,
                pools: tuple[PoolView, ...] = ()) -> None:
        """A request ended: its model's router is told, with that model's pools."""
        model = self._resolve(request.model)
        if model is None:
            return
        hook = getattr(self.routers[model], "on_done", None)
        if hook is not None:
            hook(now, request, url, record, self._own(model, pools))


def fleet_models(config: Config, engines: Mapping[str, EngineModel],
                 make_router: Mapping[str, Callable[[], Router]]) -> list[FleetModel]:
    """The fleet of a router config, in its models' order: each pool as the config lists it,
    one simulated engine per endpoint URL (the simulator names them ``http://<pool>-<i>``).

    Raises:
        KeyError: ``engines`` or ``make_router`` lacks one of the config's models.
    """
    return [FleetModel(m.name, engines[m.name], tuple((p.name, p.speculative, len(p.endpoints)) for p in m.pools),
                       make_router[m.name]) for m in config.models]


def config_resolver(config: Config) -> Callable[[str | None], str | None]:
    """A request's ``model`` -> the configured model it names (its name or an alias, the
    config's ``names``), the first model for a request without one, None for any other."""
    names = {n: m.name for m in config.models for n in m.names}
    first = config.models[0].name
    return lambda name: first if name is None else names.get(name)


def fleet_deployment(models: Sequence[FleetModel], *, label: str = "fleet",
                     resolve: Callable[[str | None], str | None] | None = None,
                     ) -> tuple[Deployment, dict[str, EngineModel], dict[str, int]]:
    """The fleet as one deployment: ``(deployment, pool_models, pool_seeds)`` for
    :func:`loadtests.daysim.simulate_day` (pool_seeds: each pool's index in its own model's
    pools, so its engines draw as in that model's deployment alone)."""
    if not models:
        raise ValueError("a fleet needs at least one model")
    pools: list[tuple[str, bool, int]] = []
    pool_models: dict[str, EngineModel] = {}
    pool_seeds: dict[str, int] = {}
    for m in models:
        if not m.pools:
            raise ValueError(f"model {m.name!r} has no pools")
        for i, pool in enumerate(m.pools):
            if pool[0] in pool_models:
                raise ValueError(f"pool name {pool[0]!r} is used twice")
            pools.append(pool)
            pool_models[pool[0]] = m.engine
            pool_seeds[pool[0]] = i

    def make() -> FleetRouter:
        return FleetRouter({m.name: m.make_router() for m in models},
                           {m.name: [p[0] for p in m.pools] for m in models}, resolve)

    return Deployment(label, tuple(pools), make), pool_models, pool_seeds


def interleave(days: Mapping[str, Sequence[Request]]) -> tuple[list[Request], list[tuple[str, int]]]:
    """Every model's day in one stream: ``(requests, origin)``.

    ``requests`` are sorted by arrival time (ties: the models' order in ``days``, then the
    request's own order), renumbered ``rid`` 0..n-1 and tagged with their model's name;
    ``origin[rid]`` is ``(model, the request's rid in its own day)``.
    """
    tagged = sorted(((r.arrival_s, mi, r.rid, name, r) for mi, (name, day) in enumerate(days.items()) for r in day),
                    key=lambda t: (t[0], t[1], t[2]))
    out = [replace(r, rid=i, model=name) for i, (_, _, _, name, r) in enumerate(tagged)]
    return out, [(name, rid) for _, _, rid, name, _ in tagged]


def model_records(records: Sequence[RequestRecord], origin: Sequence[tuple[str, int]],
                  model: str) -> list[RequestRecord]:
    """The records of ``model``'s requests in a fleet run, renumbered with their own day's
    rids (so they line up with the same model's run alone)."""
    return [replace(rec, rid=origin[rec.rid][1]) for rec in records if origin[rec.rid][0] == model]
