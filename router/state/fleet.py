"""Several base models behind one router: one :class:`~router.state.runtime.Runtime` per model.

A :class:`Fleet` holds the runtimes of every model of a :class:`~router.config.tree.Config`
(``models:``; a one-model file is a fleet of one), by model name, in file order. Each runtime
is built from its model's one-model view (:meth:`router.config.tree.Config.for_model`), so it keeps
serving exactly one model: its pools, prefix indexes, speed fits, bypass flags, routing
overrides and prompt counter (with that model's tokenizer), and the decision stays a pure
function of one model's snapshots. Pool names and endpoint URLs are unique across the
deployment (checked at load: :mod:`router.config.models`), so a pool or an endpoint belongs to
exactly one runtime.

:func:`build_fleet` is the one builder, used at start (:func:`router.app.asgi.create_app`) and on each
reload (:mod:`router.app.reload`). With ``previous`` (a reload):

- a model still there gets ``Runtime(view, counter, previous_runtime)``, exactly the one-model
  reload: endpoints of unchanged ``(pool, URL)`` keep their health, in-flight leases and load,
  pools keep their bypass flags, prefix indexes and speed fits, overrides carry over;
- an added model starts fresh (health unknown, warm-up gated like the others), with the shared
  ledger and the routing overrides in force (``PUT /admin/config`` applies to every model);
- a removed model's runtime is simply no longer in the mapping: requests already running on it
  hold their own reference to it and to their endpoints' leases, so their streams finish
  (nothing is closed or cancelled); new requests for its names get 404 ``model_not_found``.

The other models' runtimes are rebuilt from the same previous objects, so their in-flight
requests are untouched. Like :class:`~router.state.runtime.Runtime`, building adopts live endpoints:
run it on the event loop and swap right after, with no ``await`` in between.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from router.access.auth import Auth
from router.config.tree import Config
from router.request.features import PromptCounter
from router.state.endpoint import Endpoint, LeaseLedger
from router.state.runtime import Runtime

__all__ = ["Fleet", "build_fleet"]


class Fleet:
    """The runtimes of every served model, by model name (file order).

    Attributes:
        config: the whole validated YAML (every model; the global sections).
        runtimes: model name -> its :class:`Runtime` (built from ``config.for_model(name)``).
        names: every configured name and alias -> its model's name (unique across models,
            checked at load), for :func:`router.state.models.resolve_fleet`.
        default: the first model's runtime: the model of a request without ``model``, and
            where the global sections (server, upstream, scrape, health, auth, state, tracing)
            are read, identical in every runtime.
    """

    __slots__ = ("_by_pool", "_by_url", "body_caps", "config", "default", "names", "runtimes", "single")

    def __init__(self, config: Config, runtimes: Mapping[str, Runtime]) -> None:
        if not runtimes:
            raise ValueError("a fleet needs at least one runtime")
        self.config = config
        self.runtimes: dict[str, Runtime] = dict(runtimes)
        self.default: Runtime = next(iter(self.runtimes.values()))
        self.single = len(self.runtimes) == 1  # a one-model router: every request is the default's
        self.names: dict[str, str] = {n: name for name, rt in self.runtimes.items() for n in rt.config.model.names}
        #: model name -> its body cap (bytes) when it is below the cap the body is read with
        #: (:attr:`router.config.tree.Config.max_request_bytes`), else absent: nothing to check.
        self.body_caps: dict[str, int] = {
            name: cap for name, rt in self.runtimes.items()
            if (cap := rt.config.limits.max_request_bytes) < config.max_request_bytes}
        self._by_pool = {p.name: rt for rt in self.runtimes.values() for p in rt.pools}
        self._by_url = {ep.url: rt for rt in self.runtimes.values() for p in rt.pools
                        for ep in p.endpoints.values()}

    def __iter__(self) -> Iterator[Runtime]:
        return iter(self.runtimes.values())

    def __len__(self) -> int:
        return len(self.runtimes)

    def runtime(self, model: str) -> Runtime:
        """The runtime of model ``model`` (a configured name, not an alias: resolve first with
        :func:`router.state.models.resolve`). Raises ``KeyError`` for an unknown name."""
        return self.runtimes[model]

    def runtime_of_pool(self, pool: str) -> Runtime:
        """The runtime whose pools hold ``pool``; raises ``KeyError`` when none does."""
        return self._by_pool[pool]

    def model_of_pool(self, pool: str) -> str:
        """The name of the model whose pools hold ``pool`` (``none`` when none does)."""
        runtime = self._by_pool.get(pool)
        return "none" if runtime is None else runtime.config.model.name

    def runtime_of_url(self, url: str) -> Runtime | None:
        """The runtime with a (static, at build time) endpoint at ``url``, or None."""
        return self._by_url.get(url)

    def endpoints(self) -> list[Endpoint]:
        """Every endpoint of every model's pools (discovered ones as they are now)."""
        return [ep for rt in self.runtimes.values() for p in rt.pools for ep in p.endpoints.values()]

    def ready(self) -> dict[str, bool]:
        """Model name -> whether it has a healthy endpoint (:meth:`router.state.runtime.Runtime.ready`).

        ``/ready`` answers 200 while *some* model is ready and lists each model's flag: a
        router whose pods all went unready because one model lost its engines would take every
        other model down with it (the Service would have no endpoints left), so a model without
        engines answers its own requests 503 ``no_healthy_upstream`` instead, and
        ``models.<name>.ready`` (and ``specgate_pool_healthy_endpoints``) shows it."""
        return {name: rt.ready() for name, rt in self.runtimes.items()}


def build_fleet(config: Config, counters: Mapping[str, PromptCounter], previous: Fleet | None = None, *,
                ledger: LeaseLedger | None = None, auth: Auth | None = None,
                warmup_gate: bool | None = None) -> Fleet:
    """One :class:`Runtime` per model of ``config``, each from its one-model view (see the
    module docstring for what a reload keeps).

    Args:
        config: the validated YAML.
        counters: model name -> its prompt counter (:func:`router.app.runtime_inputs.load_runtime_inputs`).
        previous: the fleet being replaced (reload), or None.
        ledger: the shared state told of leases (default: ``previous``'s).
        auth: the resolved API keys, or None (no auth).
        warmup_gate: endpoints wait for warm-up probes (default: ``previous``'s, else False).

    Raises:
        KeyError: ``counters`` lacks a model of ``config``.
    """
    if previous is not None:
        ledger = ledger if ledger is not None else previous.default.ledger
        warmup_gate = warmup_gate if warmup_gate is not None else previous.default.warmup_gate
    runtimes: dict[str, Runtime] = {}
    for model in config.models:
        prev = previous.runtimes.get(model.name) if previous is not None else None
        runtime = Runtime(config.for_model(model.name), counters[model.name], prev,
                          ledger=ledger, auth=auth, warmup_gate=warmup_gate)
        if prev is None and previous is not None:
            runtime.set_overrides(previous.default.overrides)  # one override set for every model
        runtimes[model.name] = runtime
    return Fleet(config, runtimes)
