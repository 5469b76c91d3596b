"""A window's closed loops: the requests a client sent when its previous response ended.

A load generator with a fixed concurrency (a benchmark's ``--max-concurrency``, a pool of
worker threads, a user reading each answer before the next question) sends its next request
when its previous response has ended. Its arrivals depend on how fast the engines answered:
replayed open loop, at their recorded times, a replay only a little slower than the engines
queues requests the clients would have held back, and the error grows with the load (3
clients' 2,300-token prompts on one engine whose 8,000-token KV holds three of them: the replay
predicted 2.1x the mean the window measured). Replayed closed, a linked request leaves
``gap_s`` after its predecessor's replayed end, as its client would have sent it
(:func:`loadtests.daysim.simulate_day`'s ``follows``), so the replay of a split that answers
faster or slower keeps the clients' concurrency instead of their old timestamps.

Finding the loops (:func:`find_loops`), from the window's rows (``arrival_s`` and ``duration_s``,
seconds at the router, :func:`router.front.planwindow.window_view`): each request's end is
``c_i = a_i + d_i``. In arrival order, a request ``j`` takes the latest end ``c_i <= a_j`` that
no request took yet, when ``a_j - c_i <= eps``; ``eps = min(max_gap_s, tight / mu)`` with
``mu`` the window's ends per second. Arrivals that do not wait for an end (open loop, Poisson)
find an end that close with probability about ``1 - exp(-mu eps) <= 1 - exp(-tight)`` (22% for
``tight = 0.25``); the window is taken as closed when at least ``min_share`` (0.6, about three
times that) of its requests found one, and then every request that found one is linked; else
none is (the replay stays open loop). Only single-sequence rows (``n = 1``) with a measured
duration take part.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Loops", "find_loops"]


@dataclass(frozen=True)
class Loops:
    """The closed loops of a window.

    Attributes:
        closed: whether the window is taken as a closed loop (module docstring).
        links: ``{row index: (predecessor row index, gap_s)}`` (empty unless closed).
        share: the share of the taking-part rows that found a predecessor's end within ``eps_s``.
        eps_s: the largest gap taken as "sent when the previous response ended" (s).
        rows: the rows that took part.
    """

    closed: bool
    links: dict[int, tuple[int, float]] = field(default_factory=dict)
    share: float = 0.0
    eps_s: float = 0.0
    rows: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"closed", "linked", "share", "eps_s"}``."""
        return {"closed": self.closed, "linked": len(self.links), "share": round(self.share, 3),
                "eps_s": round(self.eps_s, 6)}


def find_loops(rows: Sequence[Mapping[str, Any]], *, tight: float = 0.25, max_gap_s: float = 0.25,
               min_share: float = 0.6, min_rows: int = 8) -> Loops:
    """The window's closed loops (module docstring); ``rows``: the window document's request
    rows (``arrival_s``, ``duration_s``, ``n``); fewer than ``min_rows`` taking part: open."""
    part = [(float(r["arrival_s"]), float(r["duration_s"]), i) for i, r in enumerate(rows)
            if int(r.get("n") or 1) == 1 and isinstance(r.get("duration_s"), int | float)
            and math.isfinite(r["duration_s"]) and r["duration_s"] >= 0]
    if len(part) < max(2, min_rows):
        return Loops(False, rows=len(part))
    part.sort()
    ends = sorted((a + d, i) for a, d, i in part)
    span = max(a + d for a, d, _ in part) - part[0][0]
    mu = len(part) / span if span > 0 else math.inf
    eps = min(max_gap_s, tight / mu)
    taken: set[int] = set()
    links: dict[int, tuple[int, float]] = {}
    for a, _, j in part:
        k = bisect.bisect_right(ends, (a, math.inf))  # the ends at or before this arrival
        while k > 0 and a - ends[k - 1][0] <= eps:
            end, i = ends[k - 1]
            if i != j and i not in taken:
                taken.add(i)
                links[j] = (i, a - end)
                break
            k -= 1
    share = len(links) / len(part)
    closed = share >= min_share
    return Loops(closed, links if closed else {}, share, eps, len(part))
