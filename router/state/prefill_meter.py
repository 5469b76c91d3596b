"""The prompt tokens the router has sent one endpoint and the engine has not prefilled yet (the
``B`` of :mod:`router.decision.predict`).

SGLang runs each step either as a prefill batch or as a decode batch, a prefill whenever one
can be formed (``--enable-mixed-chunk`` off by default), so every prompt an engine takes holds
up the requests behind it and stops the ones decoding there for as long as it prefills. The
router sees every prompt it sends, so it keeps, per endpoint:

- the **backlog** (tokens): a fluid queue fed by each dispatch's uncached prompt tokens and
  drained at ``1 / s`` tokens per second (``s``: the pool's ``prefill_stall_s_per_token`` when
  the prompt was sent, the seconds one prompt token takes from the other requests), never below
  0;
- the **total** (tokens) ever sent, so a finished request's :class:`router.decision.learn.Observation`
  counts the prompts that arrived while it ran (the total at its end less the total after its
  own dispatch);
- what is **settled**: the engine prefills in arrival order, so once a request has finished,
  every prompt sent up to it is prefilled, and the backlog is at most the tokens sent since
  (:meth:`PrefillMeter.settled`): a backlog drained slower than the engine really prefills
  (``s`` too large, as a ``speed`` block's ``p`` can be for a fast engine) does not outlive the
  requests that carried it.

Each replica meters its own dispatches only (prompts other replicas send the engine are not
seen here). Not thread-safe: the event loop's only. Time is passed in (monotonic s).
"""

from __future__ import annotations

__all__ = ["PrefillMeter"]


class PrefillMeter:
    """One endpoint's prompt tokens (module docstring).

    Attributes:
        total: prompt tokens sent to the endpoint so far (tokens, only grows).
    """

    __slots__ = ("_at", "_backlog", "_drain_s", "_through", "total")

    def __init__(self) -> None:
        self._backlog = 0.0
        self._at = 0.0
        self._drain_s = 0.0  # s per token of the last dispatch (0: drained at once)
        self._through = 0.0  # the total after the latest-sent request that has finished
        self.total = 0.0

    def backlog(self, now: float) -> float:
        """Tokens sent and not yet prefilled at ``now`` (the fluid queue drained since the last
        dispatch at the speed recorded with it)."""
        if self._backlog <= 0.0 or self._drain_s <= 0.0:
            return 0.0
        return max(0.0, min(self._backlog - (now - self._at) / self._drain_s, self.total - self._through))

    def settled(self, through: float) -> None:
        """A request whose dispatch brought the total to ``through`` (tokens) has finished: every
        prompt sent up to it is prefilled."""
        self._through = max(self._through, through)

    def add(self, tokens: float, now: float, s_per_token: float) -> float:
        """Record ``tokens`` uncached prompt tokens sent at ``now`` to an engine that prefills
        at ``s_per_token`` (s per token); returns the backlog the request joins (tokens before
        it, itself not included)."""
        before = self.backlog(now)
        if tokens > 0:
            self._backlog = before + tokens
            self._at = now
            self._drain_s = s_per_token
            self.total += tokens
        return before

    def value(self, now: float) -> int:
        """The backlog at ``now`` as a snapshot carries it
        (:attr:`router.decision.snapshot.EndpointSnapshot.prefill_backlog_tokens`, tokens), to
        two significant digits: it changes with every instant, and a snapshot keyed on it exactly
        would never be reused (:class:`router.state.snapshot_cache.SnapshotCache`); two digits
        move the term by at most 5%."""
        x = self.backlog(now)
        if x < 100.0:
            return int(x)
        scale = 10
        while x >= 100 * scale:
            scale *= 10
        return round(x / scale) * scale
