"""The ``auth.rate_limits`` section of the config tree: per-API-key request, token and
concurrency limits (applied by :mod:`router.access.limits`).

A key's limits are ``keys[<its SHA-256 digest>]`` when listed there, else ``default``; a key
with neither is not limited. With client authentication off every request counts against one
shared ``anonymous`` bucket with ``default`` (an unverified bearer token is no identity).
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated

from pydantic import Field, model_validator

from router.config.base import PositiveFloat, PositiveInt, Strict

__all__ = ["KeyLimits", "RateLimitConfig"]


class KeyLimits(Strict):
    """One key's limits; a field left out is no limit of that kind.

    Attributes:
        requests_per_second: the sustained request rate (requests/s); a key may burst
            ``request_burst`` requests at once.
        requests_per_minute: the same per minute (at most one of the two may be set). It is
            the value of ``x-ratelimit-limit-requests``.
        request_burst: the request bucket's capacity (requests); default: one window's worth
            (``requests_per_minute`` for a per-minute limit, ``ceil(requests_per_second)``
            for a per-second one).
        tokens_per_minute: prompt tokens + output budget per minute (tokens); the bucket holds
            one minute's worth, so a request larger than this is refused outright.
        concurrent_requests: requests of the key in flight at once, over all replicas.
    """

    requests_per_second: PositiveFloat | None = None
    requests_per_minute: PositiveInt | None = None
    request_burst: PositiveInt | None = None
    tokens_per_minute: PositiveInt | None = None
    concurrent_requests: PositiveInt | None = None

    @model_validator(mode="after")
    def _check(self) -> KeyLimits:
        if self.requests_per_second is not None and self.requests_per_minute is not None:
            raise ValueError("set at most one of requests_per_second and requests_per_minute")
        if self.request_burst is not None and self.requests_per_second is None and self.requests_per_minute is None:
            raise ValueError("request_burst needs requests_per_second or requests_per_minute")
        return self

    @property
    def limited(self) -> bool:
        """True when at least one limit is set."""
        return (self.requests_per_second is not None or self.requests_per_minute is not None
                or self.tokens_per_minute is not None or self.concurrent_requests is not None)


class RateLimitConfig(Strict):
    """Per-key limits (:mod:`router.access.limits`; docs/operator-guide.md, "Per-key rate limits").

    Attributes:
        default: the limits of a key not listed in ``keys`` (None: such keys are not limited).
        keys: per client key (its SHA-256 digest in lowercase hex, as in ``auth.priority.keys``),
            its limits.
        local_fraction: while the shared state (Redis) cannot be reached, each replica enforces
            this fraction of every limit on its own (rates, bursts and concurrency scaled, at
            least 1); ``1 / replicas`` keeps the sum under the limit, 1.0 (default) keeps
            every replica at the full limit. With ``state.backend: memory`` the full limits
            apply locally.
    """

    default: KeyLimits | None = None
    keys: dict[Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{64}$")],
               KeyLimits] = {}  # noqa: RUF012 (a pydantic field)
    local_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0

    @cached_property
    def enabled(self) -> bool:
        """True when some key can be limited (computed once: the request path reads it)."""
        return (self.default is not None and self.default.limited) or any(v.limited for v in self.keys.values())
