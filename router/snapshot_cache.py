"""The last :class:`~router.policy.PoolSnapshot` built for each set of a pool's values
(:class:`SnapshotCache`, used by :meth:`router.pools.Runtime.snapshots`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.policy import EndpointSnapshot, PoolSnapshot

if TYPE_CHECKING:
    from router.pool import Pool

__all__ = ["EndpointValues", "SnapshotCache"]

#: An :class:`~router.policy.EndpointSnapshot`'s fields in order (url, healthy, load,
#: cached_tokens, queued, kv_free_tokens, kv_used_tokens).
EndpointValues = tuple[str, bool, int, int, int, "int | None", int]


class SnapshotCache:
    """The last :class:`~router.policy.PoolSnapshot` built for each set of a pool's values, so a
    decision whose pool reads as a recent one did reuses that object instead of building it
    (a frozen dataclass of 12 fields costs about as much as the rest of the snapshot).

    :meth:`get` takes every field that can change (hashable values: the endpoints as plain
    tuples of their fields, frozensets, numbers, None) and keys on all of them plus the pool
    object, whose config-derived fields (name, speculative, limit, reserved, speed model) are
    fixed for its life; so a hit equals what a fresh build would give. The endpoints are keyed
    as tuples, not as snapshot objects, so a lookup hashes and compares them in C (a frozen
    dataclass's ``__hash__`` and ``__eq__`` are Python functions) and the endpoint snapshots are
    built only on a miss. Loads take few distinct values, so most decisions hit; the map is
    cleared when it holds :attr:`MAX_ENTRIES`.
    """

    MAX_ENTRIES = 1024

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: dict[tuple[object, ...], PoolSnapshot] = {}

    def get(self, pool: Pool, endpoints: tuple[EndpointValues, ...], saturated: bool,
            low_acceptance: frozenset[str], accept_length_greedy: float | None,
            accept_length_sampled: float | None, capabilities: frozenset[str] | None,
            canary_mismatch: bool, adapters: frozenset[str] = frozenset(),
            prediction_fallback: bool = False,
            measured: frozenset[tuple[str, int]] | None = None) -> PoolSnapshot:
        """The snapshot of ``pool`` with these values (the :class:`~router.policy.PoolSnapshot`
        fields of the same names; built on a miss). A learning pool's speed model and
        acceptance table are keyed by the fit's version (they change only when it takes a
        request or a new prior)."""
        fit = pool.fit
        key = (pool, -1 if fit is None else fit.version, endpoints, saturated, low_acceptance,
               accept_length_greedy, accept_length_sampled, capabilities, canary_mismatch, adapters,
               prediction_fallback, measured)
        snap = self._map.get(key)
        if snap is None:
            if len(self._map) >= self.MAX_ENTRIES:
                self._map.clear()
            snap = self._map[key] = PoolSnapshot(
                name=pool.name, speculative=pool.config.speculative, limit=pool.limit, reserved=pool.reserved,
                endpoints=tuple([EndpointSnapshot(*e) for e in endpoints]), saturated=saturated,
                low_acceptance=low_acceptance, speed=pool.speed if fit is None else fit.model,
                accept_length_greedy=accept_length_greedy, accept_length_sampled=accept_length_sampled,
                capabilities=capabilities, canary_mismatch=canary_mismatch, adapters=adapters,
                prediction_fallback=prediction_fallback, measured=measured,
                accept_table=fit.accept_table() if fit is not None and pool.speculative else None)
        return snap
