"""Kubernetes discovery: a pool's endpoints from the EndpointSlices its label selector matches.

Algorithm (the list/watch "reflector" of client-go, one asyncio task per discovered pool, with
the official client's asyncio API, ``kubernetes.aio``):

1. **List** ``discovery.k8s.io/v1`` EndpointSlices in ``discovery.namespace`` with
   ``discovery.label_selector``; the list *replaces* the pool's known slices (so nothing missed
   while not watching survives, and nothing is counted twice) and gives a resourceVersion.
2. **Watch** from that resourceVersion (``timeoutSeconds`` = ``watch_timeout_s``, bookmarks
   asked for): ``ADDED``/``MODIFIED`` replace one slice, ``DELETED`` removes it, ``BOOKMARK``
   only advances the resourceVersion.
3. **Every (re)connect lists first**: when a watch ends for any reason (the server's timeout,
   a dropped or reset stream, an error) the next watch starts with a full list (step 1). A
   reconnect that only resumed from the last resourceVersion would keep an endpoint whose
   ``DELETED`` event was lost while disconnected (vllm-project/production-stack#1091).
4. **Periodic resync**: a watch open for ``discovery.resync_s`` seconds since the last list is
   ended and the pool re-listed, so an event missed by any path is corrected within one resync.
5. **410 Gone** (``Expired``: the resourceVersion left the server's history), as an HTTP status
   or a watch ``ERROR`` event: list again at once with a fresh resourceVersion.
6. **Any other error** (refused/reset connection, timeout, 5xx, 403): back off
   ``backoff_initial_s * 2**k`` capped at ``backoff_max_s`` (seconds, with +-20% jitter from a
   seeded RNG), then list again. Known endpoints keep serving meanwhile: an unreachable API
   server removes nothing.

Endpoint conditions (EndpointSlice ``conditions``, kubernetes/kubernetes#92968): an endpoint is
*ready* when ``ready`` is not false (the API says nil means ready) and ``terminating`` is not
true; only ready endpoints get new traffic. An endpoint with ``serving`` not false and
``terminating`` true (a pod draining in a rolling update whose readiness still passes) is a
*terminating* one: used only when ``discovery.serve_terminating_when_empty`` is set and the pool
has no ready endpoint at all (a documented last resort, off by default). A slice contributes
``{discovery.scheme}://{address}:{discovery.port}`` per endpoint; IPv6 addresses are bracketed.
The pool's set is the union over its slices (:func:`slice_endpoints` and
:func:`routable_urls` are pure). Each change is handed to the current runtime's
:meth:`router.state.runtime.Runtime.set_discovered`: new URLs are added (health *unknown*, so not
routable, until the router's own first successful scrape: a pod whose port refuses connections
never gets traffic), vanished or not-ready ones drain (no new requests, in-flight ones finish,
then the endpoint is dropped). A config reload calls :meth:`Discovery.sync`: watchers of
changed or removed discovery blocks are stopped, new ones started, and the known sets
re-applied to the new runtime in the same event-loop step as the swap.

Access: ``api_url`` (tests) when given, else in-cluster config when ``KUBERNETES_SERVICE_HOST``
is set (the pod's service account; the Helm chart grants get/list/watch on EndpointSlices),
else the kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``). A failure to load it is retried
with the same backoff.

Metrics: ``specgate_discovered_endpoints{pool,state}`` (``ready``: routed from ready
endpoints; ``terminating``: routed from terminating ones as the last resort; ``draining``),
``specgate_endpoints{pool,state}`` for every pool, discovered or static (``healthy``,
``unknown``: not yet probed, ``unhealthy``, ``draining``),
``specgate_discovery_lists_total{pool}``, ``specgate_discovery_watch_restarts_total{pool,reason}``
(``expired``: a 410 forced a re-list; ``error``: a failure forced a backoff; ``resync``: the
periodic re-list).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from router.config.tree import DiscoveryConfig, PoolConfig

if TYPE_CHECKING:
    from router.ops.metrics import RouterMetrics
    from router.state.fleet import Fleet
    from router.state.runtime import Runtime

__all__ = ["ENDPOINT_STATES", "Discovery", "DiscoverySettings", "SliceEndpoints", "endpoint_states", "ready_urls",
           "routable_urls", "slice_endpoints"]

log = logging.getLogger("specgate.discovery")


@dataclass(frozen=True, slots=True)
class DiscoverySettings:
    """How the router talks to the API server (seconds).

    Attributes:
        api_url: API server base URL overriding in-cluster/kubeconfig access (tests).
        watch_timeout_s: ``timeoutSeconds`` asked of each watch (the server ends it then).
        request_timeout_s: bound on a list call; a watch gets ``watch_timeout_s`` plus this.
        backoff_initial_s: first wait after an error; doubles per failure up to
            ``backoff_max_s``; reset by a successful list or watch event.
        seed: seed of the backoff jitter.
    """

    api_url: str | None = None
    watch_timeout_s: float = 300.0
    request_timeout_s: float = 10.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 10.0
    seed: int = 0


def _host(address: str) -> str:
    try:
        if ipaddress.ip_address(address).version == 6:
            return f"[{address}]"
    except ValueError:
        pass
    return address


@dataclass(frozen=True, slots=True)
class SliceEndpoints:
    """The base URLs of one EndpointSlice's endpoints, by condition.

    Attributes:
        ready: endpoints that may get new traffic.
        terminating: endpoints still ``serving`` while ``terminating`` (last resort only).
    """

    ready: frozenset[str] = frozenset()
    terminating: frozenset[str] = frozenset()


def slice_endpoints(slice_: Mapping[str, Any], discovery: DiscoveryConfig) -> SliceEndpoints:
    """Split one EndpointSlice (its JSON form) into ready and terminating endpoint URLs.

    Ready: ``conditions.ready`` not false (nil means ready) and ``terminating`` not true.
    Terminating: ``terminating`` true and ``serving`` not false. Everything else (not ready,
    not serving) is left out.
    """
    ready: set[str] = set()
    terminating: set[str] = set()
    for ep in slice_.get("endpoints") or ():
        cond = ep.get("conditions") or {}
        if cond.get("terminating") is True:
            if cond.get("serving") is False:
                continue
            into = terminating
        elif cond.get("ready") is False:
            continue
        else:
            into = ready
        for address in ep.get("addresses") or ():
            into.add(f"{discovery.scheme}://{_host(address)}:{discovery.port}")
    return SliceEndpoints(frozenset(ready), frozenset(terminating))


def ready_urls(slice_: Mapping[str, Any], discovery: DiscoveryConfig) -> frozenset[str]:
    """The base URLs of the ready endpoints of one EndpointSlice (see :func:`slice_endpoints`)."""
    return slice_endpoints(slice_, discovery).ready


def routable_urls(slices: Iterable[SliceEndpoints], discovery: DiscoveryConfig) -> tuple[frozenset[str], bool]:
    """The pool's URL set over its slices: ``(urls, last_resort)``.

    The union of the ready endpoints; when that is empty and
    ``discovery.serve_terminating_when_empty`` is set, the union of the terminating ones
    instead (``last_resort`` True when that set is non-empty).
    """
    slices = list(slices)
    ready = frozenset().union(*(s.ready for s in slices))
    if ready or not discovery.serve_terminating_when_empty:
        return ready, False
    terminating = frozenset().union(*(s.terminating for s in slices))
    return terminating, bool(terminating)


class _Gone(Exception):
    """The watch's resourceVersion expired (410): list again."""


class _PoolWatch:
    """The list/watch loop of one pool (see the module docstring)."""

    def __init__(self, owner: Discovery, pool: PoolConfig) -> None:
        assert pool.discovery is not None
        self.owner = owner
        self.name = pool.name
        self.discovery: DiscoveryConfig = pool.discovery
        self.slices: dict[str, SliceEndpoints] = {}
        self.urls: frozenset[str] = frozenset()
        self.last_resort = False
        self.synced = False
        self.task: asyncio.Task[None] | None = None
        self._rv: str | None = None
        self._listed_at = 0.0

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop(), name=f"specgate-discovery-{self.name}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    def _set(self, slices: dict[str, SliceEndpoints]) -> None:
        self.slices = slices
        urls, last_resort = routable_urls(slices.values(), self.discovery)
        self.synced = True
        if urls != self.urls or last_resort != self.last_resort:
            if last_resort and not self.last_resort:
                log.warning("discovery %s: no ready endpoint; routing to terminating endpoints %s "
                            "(serve_terminating_when_empty)", self.name, sorted(urls))
            self.urls, self.last_resort = urls, last_resort
            if self.owner.watches.get(self.name) is self:  # not a watcher a reload replaced
                self.owner.apply(self.name)

    async def _loop(self) -> None:
        owner, m = self.owner, self.owner.metrics
        failures = 0
        while True:
            try:
                api = await owner.api()
                await self._list(api)  # every (re)connect starts from a full list
                failures = 0
                resync = await self._watch(api)
                if resync:
                    m.discovery_watch_restarts.labels(self.name, "resync").inc()
            except asyncio.CancelledError:
                raise
            except _Gone:
                log.info("discovery %s: resourceVersion %s expired; re-listing", self.name, self._rv)
                m.discovery_watch_restarts.labels(self.name, "expired").inc()
            except Exception as exc:  # noqa: BLE001  (connection, timeout, 5xx, 403, kubeconfig)
                delay = owner.backoff(failures)
                failures += 1
                m.discovery_watch_restarts.labels(self.name, "error").inc()
                log.warning("discovery %s: %s: %s; re-listing in %.2f s", self.name,
                            type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)
            self._rv = None

    async def _list(self, api: Any) -> None:
        settings = self.owner.settings
        result = await api.list_namespaced_endpoint_slice(
            self.discovery.namespace, label_selector=self.discovery.label_selector,
            _request_timeout=float(settings.request_timeout_s))
        raw = self.owner.client.sanitize_for_serialization(result)
        self.owner.metrics.discovery_lists.labels(self.name).inc()
        self._rv = (raw.get("metadata") or {}).get("resourceVersion") or None
        self._listed_at = asyncio.get_running_loop().time()
        self._set({item["metadata"]["name"]: slice_endpoints(item, self.discovery)
                   for item in raw.get("items") or ()})
        log.info("discovery %s: listed %d slices, %d routable endpoints (resourceVersion %s)",
                 self.name, len(self.slices), len(self.urls), self._rv)
        if self._rv is None:
            raise RuntimeError("list without a resourceVersion")

    async def _watch(self, api: Any) -> bool:
        """Watch until the server ends the stream (False) or the resync is due (True)."""
        from kubernetes.aio import watch
        from kubernetes.aio.client.exceptions import ApiException

        settings = self.owner.settings
        deadline = asyncio.timeout_at(self._listed_at + self.discovery.resync_s)
        w = watch.Watch()
        try:
            async with deadline:
                stream = w.stream(
                    api.list_namespaced_endpoint_slice, self.discovery.namespace,
                    label_selector=self.discovery.label_selector, resource_version=self._rv,
                    allow_watch_bookmarks=True, timeout_seconds=max(1, int(settings.watch_timeout_s)),
                    _request_timeout=float(settings.watch_timeout_s + settings.request_timeout_s))
                async for event in stream:
                    kind, obj = event["type"], event["raw_object"]
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if kind == "BOOKMARK":
                        self._rv = rv or self._rv
                        continue
                    name = obj["metadata"]["name"]
                    slices = dict(self.slices)
                    if kind == "DELETED":
                        slices.pop(name, None)
                    elif kind in ("ADDED", "MODIFIED"):
                        slices[name] = slice_endpoints(obj, self.discovery)
                    self._rv = rv or self._rv
                    self._set(slices)
        except TimeoutError:
            if deadline.expired():
                return True
            raise
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone() from None
            raise
        finally:
            await w.close()
        return False


#: The states of ``specgate_endpoints{pool,state}``.
ENDPOINT_STATES = ("healthy", "unknown", "unhealthy", "draining", "warming", "identity_mismatch")


def endpoint_states(endpoints: Iterable[Any]) -> dict[str, int]:
    """Count endpoints (:class:`router.state.endpoint.Endpoint`) by state: ``draining`` first (a
    draining endpoint gets no new request whatever its health), else its health state
    (``unknown``: not probed successfully yet, so not routable; ``warming``: healthy by its
    scrapes, waiting for its warm-up probes, router/loops/warmup.py; ``identity_mismatch``: it
    answers, but serves another model, router/state/identity.py)."""
    out = dict.fromkeys(ENDPOINT_STATES, 0)
    for e in endpoints:
        state = ("draining" if e.draining else "identity_mismatch" if e.identity_error is not None
                 else "warming" if e.warming else e.state)
        out[state if state in out else "unhealthy"] += 1
    return out


class Discovery:
    """The discovery watchers of every pool with a ``discovery`` block.

    Args:
        get_fleet: returns the current :class:`router.state.fleet.Fleet` (a pool is its model's
            runtime's: pool names are unique across the deployment).
        metrics: the router's :class:`router.ops.metrics.RouterMetrics`.
        settings: API access and timing (:class:`DiscoverySettings`).
    """

    def __init__(self, get_fleet: Callable[[], Fleet], metrics: RouterMetrics,
                 settings: DiscoverySettings | None = None) -> None:
        settings = settings or DiscoverySettings()
        self._get_fleet = get_fleet
        self.metrics = metrics
        self.settings = settings
        self.watches: dict[str, _PoolWatch] = {}
        self.client: Any = None
        self._api: Any = None
        self._rng = random.Random(settings.seed)

    # -- API access ---------------------------------------------------------------------
    async def api(self) -> Any:
        """The shared ``DiscoveryV1Api`` (built on first use: api_url, in-cluster or kubeconfig)."""
        if self._api is None:
            from kubernetes.aio import client, config

            cfg = client.Configuration()
            if self.settings.api_url is not None:
                cfg.host = self.settings.api_url.rstrip("/")
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(client_configuration=cfg)
            else:
                await config.load_kube_config(client_configuration=cfg)
            self.client = client.ApiClient(cfg)
            self._api = client.DiscoveryV1Api(self.client)
        return self._api

    def backoff(self, failures: int) -> float:
        """Seconds to wait after ``failures`` consecutive failures (capped, +-20% jitter)."""
        s = self.settings
        base: float = min(s.backoff_max_s, s.backoff_initial_s * (2 ** min(failures, 30)))
        return base * self._rng.uniform(0.8, 1.2)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Start a watcher for every discovered pool of the current fleet."""
        self.sync(self._get_fleet())

    def sync(self, fleet: Fleet) -> None:
        """Match the watchers to the pools of every model of ``fleet`` and apply the known sets.

        Called right after a reload swapped ``fleet`` in (same event-loop step). A watcher
        whose pool is gone or whose discovery block changed is cancelled (and replaced).
        """
        wanted = {p.name: p for rt in fleet for p in rt.pools if p.config.discovery is not None}
        for name, w in list(self.watches.items()):
            pool = wanted.get(name)
            if pool is None or pool.config.discovery != w.discovery:
                del self.watches[name]
                if w.task is not None:
                    w.task.cancel()
                self._gauges(name, ())
        for name, pool in wanted.items():
            if name not in self.watches:
                w = _PoolWatch(self, pool.config)
                self.watches[name] = w
                w.start()
            elif self.watches[name].synced:
                self.apply(name)

    async def stop(self) -> None:
        """Cancel every watcher and close the API client."""
        for w in list(self.watches.values()):
            await w.stop()
        self.watches.clear()
        if self.client is not None:
            await self.client.close()
            self.client, self._api = None, None

    # -- applying -----------------------------------------------------------------------
    def apply(self, name: str) -> None:
        """Hand pool ``name``'s ready URL set to its model's current runtime; update the gauges."""
        w = self.watches.get(name)
        if w is None:
            return
        try:
            runtime = self._get_fleet().runtime_of_pool(name)
            added, draining = runtime.set_discovered(name, w.urls)
        except KeyError:
            return
        if added or draining:
            log.info("discovery %s: added %s, draining %s", name, added, draining)
        pool = next(p for p in runtime.pools if p.name == name)
        self._gauges(name, list(pool.endpoints.values()), w.last_resort)

    def refresh_gauges(self, runtime: Runtime) -> None:
        """Recount the endpoint gauges: ``specgate_discovered_endpoints`` of every discovered
        pool (drops happen on release) and ``specgate_endpoints`` of every pool."""
        g = self.metrics.endpoints
        for pool in runtime.pools:
            eps = list(pool.endpoints.values())
            w = self.watches.get(pool.name)
            if w is not None:
                self._gauges(pool.name, eps, w.last_resort)
            counts = endpoint_states(eps)
            for state, n in counts.items():
                g.labels(pool.name, state).set(n)

    def _gauges(self, name: str, endpoints: Iterable[Any], last_resort: bool = False) -> None:
        eps = list(endpoints)
        routed = sum(not e.draining for e in eps)
        g = self.metrics.discovered_endpoints
        g.labels(name, "ready").set(0 if last_resort else routed)
        g.labels(name, "terminating").set(routed if last_resort else 0)
        g.labels(name, "draining").set(len(eps) - routed)

    def known(self) -> dict[str, frozenset[str]]:
        """Each watched pool's current routable URL set (for ``/ready``-style introspection and tests)."""
        return {name: w.urls for name, w in self.watches.items()}
