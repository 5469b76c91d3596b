"""The last :class:`~router.decision.snapshot.PoolSnapshot` built for each set of a pool's values
(:class:`SnapshotCache`, used by :meth:`router.state.runtime.Runtime.snapshots`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.decision.snapshot import PoolSnapshot
from router.state.snapshots import EndpointValues, pool_snapshot

if TYPE_CHECKING:
    from router.state.pool import Pool

__all__ = ["SnapshotCache"]


class SnapshotCache:
    """The last :class:`~router.decision.snapshot.PoolSnapshot` built for each set of a pool's values, so a
    decision whose pool reads as a recent one did reuses that object instead of building it
    (a frozen dataclass of 12 fields costs about as much as the rest of the snapshot).

    :meth:`get` takes every field that can change (hashable values: the endpoints as
    :class:`router.state.snapshots.EndpointValues` tuples, frozensets, numbers, None) and keys on all of them plus the pool
    object, whose config-derived fields (name, speculative, limit, reserved, speed model) are
    fixed for its life; so a hit equals what a fresh build would give. The endpoints are keyed
    as tuples, not as snapshot objects, so a lookup hashes and compares them in C (a frozen
    dataclass's ``__hash__`` and ``__eq__`` are Python functions) and the snapshot is built only
    on a miss, by :func:`router.state.snapshots.pool_snapshot`. Loads take few distinct values, so most decisions hit; the map is
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
            measured: frozenset[tuple[str, int]] | None = None,
            correction: tuple[tuple[tuple[str, int], float], ...] = (),
            measured_factor: tuple[tuple[tuple[str, int], float], ...] = ()) -> PoolSnapshot:
        """The snapshot of ``pool`` with these values (the :class:`~router.decision.snapshot.PoolSnapshot`
        fields of the same names; built on a miss). A learning pool's speed model and
        acceptance table are keyed by the fit's version (they change only when it takes a
        request or a new prior)."""
        fit = pool.fit
        key = (pool, -1 if fit is None else fit.version, endpoints, saturated, low_acceptance,
               accept_length_greedy, accept_length_sampled, capabilities, canary_mismatch, adapters,
               prediction_fallback, measured, correction, measured_factor)
        snap = self._map.get(key)
        if snap is None:
            if len(self._map) >= self.MAX_ENTRIES:
                self._map.clear()
            snap = self._map[key] = pool_snapshot(
                name=pool.name, speculative=pool.config.speculative, limit=pool.limit, reserved=pool.reserved,
                endpoints=endpoints, speed=pool.speed, fit=fit, saturated=saturated, low_acceptance=low_acceptance,
                accept_length_greedy=accept_length_greedy, accept_length_sampled=accept_length_sampled,
                capabilities=capabilities, canary_mismatch=canary_mismatch, adapters=adapters,
                prediction_fallback=prediction_fallback, measured=measured, correction=correction,
                measured_factor=measured_factor)
        return snap
