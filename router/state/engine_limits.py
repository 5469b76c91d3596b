"""The context an engine reports bounds what the router sends it: each endpoint's limit and its
pool's limit follow the engines, below the configured caps.

An engine restarted behind the same address with a smaller ``--context-length`` (or a smaller
KV pool) refuses what its pool's configured limit still admits: SGLang 0.5.23 answers 400 "The
input (N tokens) is longer than the model's context length (M tokens)." or "Requested token
count exceeds the model's maximum context length of M tokens." (``TokenizerManager.
_validate_one_request``), and its scheduler aborts an input that does not fit its KV pool
(``max_req_len = min(context_length - 1, max_total_num_tokens - 1)``,
``Scheduler.init_req_max_new_tokens``). Field reports: odysseus-dev/odysseus#678 (a client kept
a restarted server's old context length), ai-dynamo/dynamo#12207 (a worker's KV blocks change
across a restart), sgl-project/sglang#32730 (``max_total_num_tokens`` is the real KV capacity).

Symbols (tokens): ``configured`` a pool's limit from the config (``Config.pool_limit``: its
own ``max_context_tokens``, else its engine's ``context_length``, else the model's
``limits.max_context_tokens``; the validated cap), ``E`` an engine's limit
(:attr:`router.state.endpoint.Endpoint.engine_context`: the smaller of its context length and its KV
pool; None when it reported neither).

- **An endpoint's limit** is ``min(configured, E)`` (``configured`` when ``E`` is unknown): never
  above the configured cap, followed back up when the engine restarts bigger.
- **A pool's limit** (:attr:`router.state.pool.Pool.limit`, what the decision compares a request
  with) is the largest limit of its endpoints that serve the pool's model and are not draining
  (``configured`` when there is none): the pool takes a request that one of them can hold.
- **Per request**, an endpoint whose limit is below its pool's is left out of the decision for
  a request it cannot hold (:func:`too_small`), with the pool's own measure: ``P + n * M + K``
  on a speculative pool, ``P + M`` on a plain one (:mod:`router.decision.policy`). So a request that
  fits no engine any more goes to a pool where it fits, or gets the router's clean 400
  ``context_length_exceeded`` when none does; never the engine's 400.

A pool with ``follow_engine_context: false`` keeps its configured limit whatever its engines
report (engines whose lengths are not in the router's tokens). :func:`follow` runs after every scrape round (on the event loop) and returns the pools whose
limit moved, which the app logs and counts (``specgate_pool_context_limit_changes_total``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from router.request.features import RequestFeatures
    from router.state.endpoint import Endpoint
    from router.state.pool import Pool

__all__ = ["LimitChange", "SmallEndpoint", "endpoint_limit", "follow", "pool_limit", "too_small"]

log = logging.getLogger("specgate")


class SmallEndpoint(NamedTuple):
    """An endpoint whose limit is below its pool's (tokens): left out of a request it cannot hold."""

    url: str
    limit: int
    reserved: int
    speculative: bool


class LimitChange(NamedTuple):
    """A pool's limit moved (tokens): from ``before`` to ``after``, with ``configured`` its cap."""

    pool: str
    before: int
    after: int
    configured: int


def endpoint_limit(configured: int, engine: int | None) -> int:
    """``min(configured, engine)``; ``configured`` when the engine's limit is unknown (tokens)."""
    return configured if engine is None or engine >= configured else engine


def pool_limit(configured: int, endpoints: Iterable[Endpoint]) -> int:
    """The largest :func:`endpoint_limit` over ``endpoints`` that serve their pool's model and are
    not draining; ``configured`` when there is none (tokens)."""
    limits = [endpoint_limit(configured, e.engine_context) for e in endpoints
              if e.identity_error is None and not e.draining]
    return max(limits) if limits else configured


def follow(pools: Iterable[Pool]) -> tuple[list[LimitChange], tuple[SmallEndpoint, ...]]:
    """Set every pool's :attr:`~router.state.pool.Pool.limit` from its endpoints' engines (module
    docstring); returns the pools whose limit moved and the endpoints below their pool's limit.
    Logs each move once (WARNING down, INFO up)."""
    changes: list[LimitChange] = []
    small: list[SmallEndpoint] = []
    for pool in pools:
        configured = pool.configured_limit
        eps = list(pool.endpoints.values())
        if not pool.config.follow_engine_context:  # pools[].follow_engine_context: false
            limit, eps = configured, []
        else:
            limit = pool_limit(configured, eps)
        if limit != pool.limit:
            changes.append(LimitChange(pool.name, pool.limit, limit, configured))
            (log.warning if limit < pool.limit else log.info)(
                "pool %s: context limit %d -> %d tokens (configured %d; its engines report %s)",
                pool.name, pool.limit, limit, configured,
                ", ".join(f"{e.url}: {e.engine_context}" for e in eps if e.engine_context is not None) or "none")
            pool.limit = limit
        for e in eps:
            own = endpoint_limit(configured, e.engine_context)
            if own < limit:
                small.append(SmallEndpoint(e.url, own, pool.reserved, pool.speculative))
    return changes, tuple(small)


def too_small(small: Iterable[SmallEndpoint], features: RequestFeatures) -> frozenset[str]:
    """The URLs of ``small`` that cannot hold a request of ``features``: ``P + n * M + K >
    limit`` on a speculative pool, ``P + M > limit`` on a plain one (the pool checks of
    :mod:`router.decision.policy`, with the endpoint's limit)."""
    return frozenset(s.url for s in small
                     if (features.weight + s.reserved if s.speculative else features.sequence_tokens) > s.limit)
