"""The per-key limits' rules, without I/O: a key's buckets (:class:`Plan`), the GCRA check
(:func:`check`, the algorithm of :mod:`router.access.limits`' docstring), one replica's buckets
(:class:`LocalBuckets`), the ``x-ratelimit-*`` headers and an admitted request's
:class:`Ticket`. :mod:`router.access.limits` (the limiter, its Redis calls) and
:mod:`router.access.limits_redis` (the same rule in Lua) build on it; :mod:`router.upstream.proxy_job` holds a
:class:`Ticket`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from router.config.limits import KeyLimits

__all__ = [
    "LocalBuckets",
    "Plan",
    "Ticket",
    "Verdict",
    "check",
    "format_reset",
    "gcra",
    "headers",
    "plan_for",
    "token_cost",
    "usage_tokens",
]


@dataclass(frozen=True, slots=True)
class Plan:
    """A key's limits as the buckets apply them (intervals in ms per unit; 0: no such limit).

    Attributes:
        request_interval_ms, request_capacity: the request bucket (``T``, ``B``).
        token_interval_ms, token_capacity: the token bucket.
        concurrent: open requests allowed at once (0: unlimited).
        request_limit, token_limit: the configured values, for ``x-ratelimit-limit-*``.
        request_window: ``s`` or ``min``, the window of ``request_limit``.
    """

    request_interval_ms: float = 0.0
    request_capacity: float = 0.0
    token_interval_ms: float = 0.0
    token_capacity: float = 0.0
    concurrent: int = 0
    request_limit: str = ""
    token_limit: str = ""
    request_window: str = ""


def plan_for(limits: KeyLimits, fraction: float = 1.0) -> Plan:
    """The buckets of ``limits``, every rate, capacity and count scaled by ``fraction``
    (``auth.rate_limits.local_fraction`` while Redis is away; capacities at least 1)."""
    r_int = r_cap = t_int = t_cap = 0.0
    r_limit = t_limit = window = ""
    if limits.requests_per_minute is not None:
        window = "min"
        r_int, r_cap = 60_000.0 / limits.requests_per_minute, float(limits.request_burst or limits.requests_per_minute)
        r_limit = str(limits.requests_per_minute)
    elif limits.requests_per_second is not None:
        window = "s"
        r_int = 1000.0 / limits.requests_per_second
        r_cap = float(limits.request_burst or math.ceil(limits.requests_per_second))
        r_limit = f"{limits.requests_per_second:g}"
    if limits.tokens_per_minute is not None:
        t_int, t_cap = 60_000.0 / limits.tokens_per_minute, float(limits.tokens_per_minute)
        t_limit = str(limits.tokens_per_minute)
    if fraction != 1.0:
        r_int, t_int = r_int / fraction, t_int / fraction
        r_cap, t_cap = max(1.0, math.floor(r_cap * fraction)), max(1.0, math.floor(t_cap * fraction))
    concurrent = limits.concurrent_requests or 0
    if concurrent and fraction != 1.0:
        concurrent = max(1, math.floor(concurrent * fraction))
    return Plan(r_int, r_cap, t_int, t_cap, concurrent, r_limit, t_limit, window)


def token_cost(prompt_tokens: int, max_new_tokens: int, n: int = 1, num_prompts: int = 1) -> int:
    """Tokens reserved at admission: each prompt (``prompt_tokens`` is the longest of a batch)
    plus ``n`` outputs of ``max_new_tokens`` per prompt."""
    return num_prompts * (prompt_tokens + n * max_new_tokens)


def gcra(tat: float, now: float, interval: float, capacity: float, cost: float) -> tuple[bool, float, float]:
    """One GCRA check (module docstring); times in ms.

    Returns:
        ``(admitted, tat, wait)``: the new TAT when admitted (else ``max(tat, now)``,
        unchanged in effect), and the ms to wait before the same request fits (0 admitted).
    """
    base = max(tat, now)
    over = base + cost * interval - now - capacity * interval
    if over > 1e-6:
        return False, base, over
    return True, base + cost * interval, 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one check.

    Attributes:
        denied: None (admitted), or the limit that refused: ``requests``, ``tokens``,
            ``tokens_max`` (the request alone is over the token capacity: it never fits) or
            ``concurrent``. The first of that order when several do.
        wait_ms: when refused by a rate, the ms until the request would fit.
        request_backlog_ms, token_backlog_ms: ``TAT - now`` of each bucket after the check.
        active: the key's open requests after the check.
    """

    denied: str | None
    wait_ms: float = 0.0
    request_backlog_ms: float = 0.0
    token_backlog_ms: float = 0.0
    active: int = 0


def check(plan: Plan, rtat: float, ttat: float, active: int, cost: int,
          now: float) -> tuple[Verdict, float, float]:
    """Every limit of ``plan`` at once; charge all or none. Returns the verdict and the new
    TATs (the Lua script in :mod:`router.access.limits_redis` is the same rule)."""
    denied: str | None = None
    wait = 0.0
    new_r, new_t = max(rtat, now), max(ttat, now)
    if plan.request_interval_ms:
        ok, new_r, w = gcra(rtat, now, plan.request_interval_ms, plan.request_capacity, 1)
        if not ok:
            denied, wait = "requests", w
    if plan.token_interval_ms:
        if cost > plan.token_capacity:
            denied = denied or "tokens_max"
        else:
            ok, new_t, w = gcra(ttat, now, plan.token_interval_ms, plan.token_capacity, cost)
            if not ok:
                denied, wait = denied or "tokens", max(wait, w)
    if plan.concurrent and active >= plan.concurrent:
        denied = denied or "concurrent"
    if denied is not None:
        return Verdict(denied, wait, max(rtat - now, 0.0), max(ttat - now, 0.0), active), rtat, ttat
    if not plan.request_interval_ms:
        new_r = rtat
    if not plan.token_interval_ms:
        new_t = ttat
    return (Verdict(None, 0.0, max(new_r - now, 0.0), max(new_t - now, 0.0), active + (1 if plan.concurrent else 0)),
            new_r, new_t)


class LocalBuckets:
    """The buckets of one replica (``state.backend: memory``, or Redis unreachable).

    Keys are the configured digests, client keys that passed authentication, or
    :data:`router.access.limits.ANONYMOUS`: bounded by the key ring.
    """

    def __init__(self) -> None:
        self._keys: dict[str, list[float]] = {}   # id -> [request TAT, token TAT, open requests]

    def admit(self, key: str, plan: Plan, cost: int, now: float) -> Verdict:
        """Check and charge ``key`` at ``now`` (ms)."""
        entry = self._keys.setdefault(key, [0.0, 0.0, 0.0])
        verdict, entry[0], entry[1] = check(plan, entry[0], entry[1], int(entry[2]), cost, now)
        if verdict.denied is None and plan.concurrent:
            entry[2] += 1
        return verdict

    def finish(self, key: str, plan: Plan, refund: int, lease: bool) -> None:
        """One request of ``key`` ended: close its lease, give back ``refund`` tokens."""
        entry = self._keys.get(key)
        if entry is None:
            return
        if lease:
            entry[2] = max(0.0, entry[2] - 1)
        if refund and plan.token_interval_ms:
            entry[1] -= refund * plan.token_interval_ms

    def active(self, key: str) -> int:
        """Open requests of ``key`` here."""
        entry = self._keys.get(key)
        return 0 if entry is None else int(entry[2])


def format_reset(ms: float) -> str:
    """A duration as OpenAI writes ``x-ratelimit-reset-*``: ``0s``, ``12ms``, ``1.5s``, ``6m0s``."""
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{math.ceil(ms)}ms"
    seconds = math.ceil(ms) / 1000
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m" + (f"{rest:.3f}".rstrip("0").rstrip(".") or "0") + "s"


def headers(plan: Plan, verdict: Verdict) -> tuple[tuple[bytes, bytes], ...]:
    """The ``x-ratelimit-*`` headers of a key with ``plan`` after ``verdict`` (only the kinds
    the key is limited by): ``limit`` (the configured value), ``remaining`` (whole units left
    in the bucket) and ``reset`` (until the bucket is full again)."""
    out: list[tuple[bytes, bytes]] = []
    for kind, interval, capacity, limit, backlog in (
            ("requests", plan.request_interval_ms, plan.request_capacity, plan.request_limit,
             verdict.request_backlog_ms),
            ("tokens", plan.token_interval_ms, plan.token_capacity, plan.token_limit, verdict.token_backlog_ms)):
        if not interval:
            continue
        remaining = max(0, math.floor(capacity - backlog / interval + 1e-9))
        out += [(f"x-ratelimit-limit-{kind}".encode(), limit.encode()),
                (f"x-ratelimit-remaining-{kind}".encode(), str(remaining).encode()),
                (f"x-ratelimit-reset-{kind}".encode(), format_reset(backlog).encode())]
    return tuple(out)


@dataclass(slots=True)
class Ticket:
    """One admitted request of a limited key, finished once by :meth:`router.access.limits.KeyLimiter.finish`.

    Attributes:
        key: the bucket id.
        plan: the limits it was admitted under.
        reserved: tokens charged at admission.
        member: its concurrency lease in Redis (None: none, or admitted locally).
        shared: admitted through Redis.
        headers: its ``x-ratelimit-*`` response headers.
    """

    key: str
    plan: Plan
    reserved: int
    member: str | None
    shared: bool
    headers: tuple[tuple[bytes, bytes], ...]
    done: bool = False


def usage_tokens(usage: Any) -> int | None:
    """``prompt_tokens + completion_tokens`` of a response's ``usage`` object, or None when
    it is missing or malformed."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if type(prompt) is not int or type(completion) is not int or prompt < 0 or completion < 0:
        return None
    return prompt + completion
