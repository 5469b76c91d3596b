"""Discovered endpoints' membership of their pool (``discovery`` blocks, :mod:`router.loops.discovery`).

The watcher hands :meth:`router.state.runtime.Runtime.set_discovered` the pool's ready URL set
whenever it changes (no reload). A new URL gets a new endpoint (health *unknown* until its first
scrape); a URL that leaves the set is *draining*: not routable, its in-flight leases run to
their end, and the release of its last lease drops it from the pool (:func:`drop_drained`; at
once when it has none). A URL that comes back while draining keeps its endpoint (health,
in-flight). The pool's endpoint map is replaced, never mutated, so a snapshot is one
consistent view. Functions of the runtime that owns the pools; no state of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from router.state.endpoint import Endpoint, LeaseLedger

if TYPE_CHECKING:
    from router.config.tree import Config
    from router.state.pool import Pool

__all__ = ["Members", "drop_drained", "set_discovered"]

log = logging.getLogger("specgate")


class Members(Protocol):
    """What membership reads and calls of the runtime that owns the pools
    (:class:`router.state.runtime.Runtime` has it; a protocol, so this module does not import
    the runtime that imports it)."""

    pools: tuple[Pool, ...]
    config: Config
    ledger: LeaseLedger | None

    def endpoint_at(self, url: str) -> Endpoint | None: ...

    def reindex(self) -> None: ...

    def warmup_required(self, pool_name: str) -> bool: ...

    def drop_drained(self, endpoint: Endpoint) -> None: ...


def set_discovered(runtime: Members, pool_name: str, urls: Iterable[str]) -> tuple[list[str], list[str]]:
    """Make ``urls`` (base URLs, ready endpoints) the routable set of ``runtime``'s discovered
    pool ``pool_name``.

    New URLs get new endpoints; present ones keep theirs (and stop draining); the others start
    draining and are dropped once idle (module docstring). A URL already serving another pool
    is ignored (logged). Static endpoints (the pool's ``endpoints``) never drain.

    Returns:
        ``(added, draining)`` URLs, each sorted (endpoints that started draining now).
    Raises:
        KeyError: when there is no pool ``pool_name``.
    """
    pool = next((p for p in runtime.pools if p.name == pool_name), None)
    if pool is None:
        raise KeyError(pool_name)
    wanted = {u.rstrip("/") for u in pool.config.endpoints}  # static ones never drain
    for url in urls:
        url = url.rstrip("/")
        other = runtime.endpoint_at(url)
        if other is not None and other.pool != pool_name:
            log.warning("discovered %s for pool %s already serves pool %s; ignored",
                        url, pool_name, other.pool)
            continue
        wanted.add(url)
    health = runtime.config.health
    added, draining, eps = [], [], []
    for url in sorted(wanted | set(pool.endpoints)):
        ep = pool.endpoints.get(url)
        if ep is None:
            ep = Endpoint(url=url, pool=pool_name, failure_threshold=health.failure_threshold,
                          success_threshold=health.success_threshold, ledger=runtime.ledger,
                          warmup_required=runtime.warmup_required(pool_name),
                          declared_adapters=pool.config.declared_adapters)
            added.append(url)
        ep.on_drained = runtime.drop_drained
        if url in wanted:
            ep.draining = False
        elif not ep.draining:
            ep.draining = True
            draining.append(url)
        if not (ep.draining and ep.inflight == 0):
            eps.append(ep)
    pool.replace_endpoints(eps)
    runtime.reindex()
    return added, draining


def drop_drained(runtime: Members, endpoint: Endpoint) -> None:
    """Drop ``endpoint`` from its pool of ``runtime`` when it is draining and idle (its last
    lease released: the endpoint's ``on_drained`` callback)."""
    for pool in runtime.pools:
        if pool.endpoints.get(endpoint.url) is endpoint and endpoint.draining and endpoint.inflight == 0:
            pool.replace_endpoints(e for e in pool.endpoints.values() if e is not endpoint)
            runtime.reindex()
            log.info("endpoint %s of pool %s drained and dropped", endpoint.url, pool.name)

