"""A speculative pool's bypass flags: saturation and per-class acceptance, with a flip bound.

Flags (keys of :attr:`BypassState.flags`, also the shared-state field suffixes):

- ``saturated``: the saturation guard (:func:`router.decision.policy.next_saturated` on the pool's
  load, requests);
- ``low_acceptance:greedy`` and ``low_acceptance:sampled``: the acceptance bypass per
  temperature class (:func:`router.decision.policy.next_low_acceptance` on that class's live accept
  length, :mod:`router.decision.acceptance`; unknown is never "bad").

A flag changes at most once per ``routing.min_flip_interval_s`` (s): :meth:`BypassState.proposed`
keeps a flag whose last change is more recent, whatever the hysteresis says, so a signal at a
threshold cannot toggle a pool faster (vllm-project/vllm#49548). :meth:`proposed` is pure (the
decision reads it between scrape rounds); :meth:`commit` is the one write, once per round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from router.config.tree import RoutingConfig
from router.decision.acceptance import CLASSES
from router.decision.hysteresis import next_low_acceptance, next_saturated

__all__ = ["FLAGS", "BypassState"]

FLAGS = ("saturated", *(f"low_acceptance:{c}" for c in CLASSES))


@dataclass(slots=True)
class BypassState:
    """The flags of one speculative pool and when each last changed (monotonic s)."""

    flags: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(FLAGS, False))
    flipped_at: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FLAGS, -math.inf))

    def proposed(self, *, load: int, accept_length: Mapping[str, float | None], now: float,
                 routing: RoutingConfig, gamma: int, c: float,
                 previous: Mapping[str, bool | None] | None = None) -> dict[str, bool]:
        """The flags the next hysteresis step gives (no state changes).

        Args:
            load: the pool's load (requests).
            accept_length: tau per class, None when unknown.
            now: monotonic time (s).
            routing: thresholds (``saturation``, ``acceptance``, ``min_flip_interval_s``).
            gamma, c: the pool's draft length (tokens) and drafter cost ratio.
            previous: flags to continue from instead of the local ones (the shared state's;
                a None value means "use the local flag").
        """
        prev = {k: (v if (v := (previous or {}).get(k)) is not None else self.flags[k]) for k in FLAGS}
        sat, acc = routing.saturation, routing.acceptance
        new = {"saturated": next_saturated(prev["saturated"], load, enter=sat.enter, exit=sat.exit)}
        for cls in CLASSES:
            key = f"low_acceptance:{cls}"
            new[key] = acc.enabled and next_low_acceptance(
                prev[key], accept_length.get(cls), gamma=gamma, c=c,
                enter_below=acc.min_expected_speedup, exit_above=acc.exit_speedup)
        dwell = routing.min_flip_interval_s
        return {k: (prev[k] if new[k] != prev[k] and now - self.flipped_at[k] < dwell else new[k])
                for k in FLAGS}

    def commit(self, flags: Mapping[str, bool], now: float) -> None:
        """Store ``flags``, stamping each one that changed."""
        for key in FLAGS:
            if flags[key] != self.flags[key]:
                self.flags[key] = flags[key]
                self.flipped_at[key] = now

    def low_classes(self, flags: Mapping[str, bool] | None = None) -> frozenset[str]:
        """The temperature classes whose acceptance bypass is on (in ``flags`` or the stored)."""
        flags = self.flags if flags is None else flags
        return frozenset(c for c in CLASSES if flags[f"low_acceptance:{c}"])
