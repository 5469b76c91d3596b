"""The day simulator's router interface: what a router sees and what it answers.

A router (:class:`Router`) is called once per request with the request's features
(:class:`RequestView`: no real output length, as in production) and one :class:`PoolView` per
pool, each endpoint as of the last 0.25 s scrape plus the router's own in-flight counts
(:class:`EndpointView`); it answers a :class:`Choice`. It may define ``on_scrape(now, pools)``,
called after every scrape round, and ``on_done(now, request, url)`` when a request ends.
:class:`RoundRobin` is the client-side baseline.
:mod:`loadtests.dayrouter` wraps the router's real policy in this interface.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Choice", "ClientRule", "EndpointView", "FixedShare", "PoolView", "RequestView", "RoundRobin", "Router"]


@dataclass(frozen=True, slots=True)
class RequestView:
    """What a router knows of a request (tokens): not its real output length; ``model``: the
    name the request sends in ``model`` (None: none, the one model of the deployment);
    ``speculation``: the client's speculation hint (``off``, ``auto``, ``on``:
    :data:`router.request.capabilities.SPECULATION_MODES`)."""

    prompt_tokens: int
    max_new_tokens: int
    temperature: float
    n: int = 1
    model: str | None = None
    speculation: str = "auto"


@dataclass(frozen=True, slots=True)
class EndpointView:
    """One engine as a router sees it at decision time.

    Attributes:
        url: the endpoint's URL; pool: its pool's name.
        running, queued: ``num_running_reqs`` / ``num_queue_reqs`` as of the last scrape.
        inflight: this router's requests sent there and not finished (exact, now).
        load: ``max(running + queued, inflight)`` (what ``router.state.endpoint.Endpoint.load`` gives
            with a fresh scrape).
        token_usage: KV reservation / capacity as of the last scrape, in [0, 1].
        accept_length: the scraped accept-length gauge (tokens/step), None on a plain engine
            or before the engine's first gauge update; it may be arbitrarily old (an idle engine
            keeps its last value).
        scrape_age_s: now minus the last scrape (s).
        accept_length_age_s: now minus the first scrape that showed the current gauge value
            (s; None without a value): how long the gauge has not moved, which a real router
            can track from its own scrapes (an idle engine's value only grows older).
        generation_tokens_total: ``sglang:generation_tokens_total`` as of the last scrape
            (tokens generated since the engine started).
        healthy: routable (always True in the simulator).
    """

    url: str
    pool: str
    running: int
    queued: int
    inflight: int
    load: int
    token_usage: float
    accept_length: float | None
    scrape_age_s: float
    accept_length_age_s: float | None = None
    generation_tokens_total: float | None = None
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pool: name, whether it speculates, its endpoints (sorted by URL)."""

    name: str
    speculative: bool
    endpoints: tuple[EndpointView, ...]


@dataclass(frozen=True, slots=True)
class Choice:
    """A router's answer: the pool, the endpoint URL, a reason label (pool None: refused)."""

    pool: str | None
    endpoint: str | None
    reason: str


class Router(Protocol):
    """``router(now_s, request, pools) -> Choice``; may keep state (hysteresis).

    A router may also define ``on_scrape(now_s, pools) -> None``: the simulator calls it after
    every scrape round with the fresh views (the real router advances its bypass hysteresis
    there), and ``on_done(now_s, request, endpoint_url) -> None``, called when a request it
    routed ends (the real router's lease release).
    """

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice: ...


class RoundRobin:
    """Client-side round robin over every endpoint of every pool, blind to load."""

    def __init__(self) -> None:
        self._i = 0

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        eps = [e for p in pools for e in p.endpoints]
        e = eps[self._i % len(eps)]
        self._i += 1
        return Choice(e.pool, e.url, "round_robin")


class FixedShare:
    """Sends a fixed share of the requests to the speculative pool (seeded draw per request),
    the rest to the plain one, each to its pool's least-loaded endpoint: the load-blind split
    that the benchmarks use as a reference for what a two-pool deployment reaches.

    Args:
        share: the speculative pool's share in [0, 1].
        seed: the draw's seed.
    """

    def __init__(self, share: float, seed: int = 0) -> None:
        if not 0 <= share <= 1:
            raise ValueError("share must be in [0, 1]")
        self.share = share
        self._rng = random.Random(seed)

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        spec = self._rng.random() < self.share
        pool = next((p for p in pools if p.speculative == spec), pools[0])
        e = min(pool.endpoints, key=lambda e: (e.load, e.url))
        return Choice(pool.name, e.url, "fixed_share")


class ClientRule:
    """The simplest rules a client applies itself at a split of ``k`` speculative and ``n - k``
    plain engines, as ``benchmarks/outofbox_http.py`` applies them over HTTP (its ``RULES``):
    each counts only its own requests in flight (:attr:`EndpointView.inflight`).

    - ``coin``: a speculative engine with probability ``k / n`` (seeded draw per request), the
      chosen kind's engine with the fewest in flight;
    - ``jsq``: join the shorter queue: the engine with the fewest in flight, a speculative one
      on ties;
    - ``length``: a prompt above ``long_prompt_tokens`` to the plain engine with the fewest in
      flight, the rest to the speculative one with the fewest.

    Ties between engines of one kind go to the first by URL.

    Args:
        rule: ``coin``, ``jsq`` or ``length``; long_prompt_tokens: the length rule's threshold
        (tokens); seed: the coin's seed.

    Raises:
        ValueError: an unknown rule.
    """

    RULES = ("coin", "jsq", "length")

    def __init__(self, rule: str, long_prompt_tokens: int, seed: int = 0) -> None:
        if rule not in self.RULES:
            raise ValueError(f"unknown rule {rule!r}; known: {', '.join(self.RULES)}")
        self.rule, self.long_prompt_tokens = rule, long_prompt_tokens
        self._rng = random.Random(seed)

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        spec = [e for p in pools if p.speculative for e in p.endpoints]
        plain = [e for p in pools if not p.speculative for e in p.endpoints]
        if self.rule == "coin":
            k, n = len(spec), len(spec) + len(plain)
            eps = spec if self._rng.random() < k / n else plain
        elif self.rule == "jsq":
            eps = spec + plain
        else:
            eps = plain if request.prompt_tokens > self.long_prompt_tokens else spec
        e = min(eps, key=lambda e: e.inflight)  # min keeps the first of equals: speculative, then by URL
        return Choice(e.pool, e.url, self.rule)
