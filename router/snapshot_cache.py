"""The last :class:`~router.policy.PoolSnapshot` built for each set of a pool's values
(:class:`SnapshotCache`, used by :meth:`router.pools.Runtime.snapshots`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router.policy import PoolSnapshot

if TYPE_CHECKING:
    from router.pools import Pool

__all__ = ["SnapshotCache"]


class SnapshotCache:
    """The last :class:`~router.policy.PoolSnapshot` built for each set of a pool's values, so a
    decision whose pool reads as a recent one did reuses that object instead of building it
    (a frozen dataclass of 12 fields costs about as much as the rest of the snapshot).

    :meth:`get` takes every field that can change as a keyword (hashable values: tuples,
    frozensets, numbers, None) and keys on all of them plus the pool object, whose
    config-derived fields (name, speculative, limit, reserved, speed model) are fixed for its
    life; so a hit equals what a fresh build would give, and a new snapshot field passed here is
    keyed without further change. Loads take few distinct values, so most decisions hit; the
    map is cleared when it holds :attr:`MAX_ENTRIES`.
    """

    MAX_ENTRIES = 1024

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: dict[tuple[object, ...], PoolSnapshot] = {}

    def get(self, pool: Pool, **values: Any) -> PoolSnapshot:
        """The snapshot of ``pool`` with ``values`` (built on a miss). A learning pool's speed
        model and acceptance table are keyed by the fit's version (they change only when it
        takes a request or a new prior)."""
        fit = pool.fit
        key = (pool, -1 if fit is None else fit.version, *values.items())
        snap = self._map.get(key)
        if snap is None:
            if len(self._map) >= self.MAX_ENTRIES:
                self._map.clear()
            learned = {} if fit is None else {
                "speed": fit.model, "accept_table": fit.accept_table() if pool.speculative else None}
            snap = self._map[key] = PoolSnapshot(
                name=pool.name, speculative=pool.config.speculative, limit=pool.limit, reserved=pool.reserved,
                **{"speed": pool.speed, **learned, **values})
        return snap
