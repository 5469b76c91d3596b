"""Per-API-key limits: requests per second or minute, tokens per minute, concurrent requests.

Algorithm: each rate is a GCRA bucket (the generic cell rate algorithm of ITU-T I.371 and
the ATM Forum's TM 4.0; the form with a *theoretical arrival time* used by redis-cell and
throttled). A bucket with emission interval ``T`` (ms per unit: ``60000 / per_minute`` or
``1000 / per_second``) and capacity ``B`` (units) keeps one number, the theoretical arrival
time ``TAT`` (ms). A request of cost ``c`` at time ``now`` is admitted iff
``max(TAT, now) + c * T - now <= B * T``; then ``TAT = max(TAT, now) + c * T``. Refused, it
may retry after ``max(TAT, now) + c * T - now - B * T`` ms. ``(TAT - now) / T`` is the
level of the bucket: ``B`` minus it is what remains, ``TAT - now`` the time until the bucket
is full again (OpenAI's ``x-ratelimit-reset-*``). Sustained, a key gets exactly ``1 / T``
units per ms; at any instant at most ``B`` more. Requests cost 1 (``n`` and batches
included); tokens cost the prompt (times the prompts of a batch) plus ``n`` times the output
budget per prompt, reserved at admission (:func:`token_cost`). At the end the reservation is
corrected with the response's ``usage`` (``prompt_tokens + completion_tokens``) when the
response carried one (non-streamed chat, or a stream with ``stream_options.include_usage``):
the difference is given back (``TAT -= (reserved - used) * T``); without usage the reservation
stands. Concurrency is a count of open leases, each with an expiry renewed while it is open.

Where the state lives (:class:`KeyLimiter`):

- ``state.backend: redis``: in Redis, so every replica enforces one limit. Per key two entries
  under one hash tag, ``{P:rl:<id>}:b`` (HASH: ``r`` and ``t``, the request and token TATs in
  ms of the Redis clock) and ``{P:rl:<id>}:c`` (ZSET: one member per open request, score =
  expiry in ms), so each key's script touches one Redis Cluster slot and keys spread over the
  slots. One Lua script checks every limit and charges them all or none (atomic); the ends of
  requests are one more script per key (ZREM, correction), the finishes of 2 ms coalesced into
  one call (so a burst costs one call per key, not one per request), the renewal of open leases
  one per key every
  ``state.renew_interval_s`` (expiry ``state.lease_ttl_s``: a crashed replica's leases vanish).
- ``state.backend: memory``: the same algorithm in process memory (:class:`router.access.limit_rules.LocalBuckets`).
- Redis unreachable (a failed call, or the breaker open): the request is decided locally with
  every limit scaled by ``auth.rate_limits.local_fraction``; counted in
  ``specgate_rate_limit_checks_total{mode="fallback"}``. Such a request's lease stays local.

A request that ends in any way (completed, engine error, stream abort, client disconnect) is
finished exactly once (:meth:`KeyLimiter.finish`), from the proxy's end-of-response hook; a
finish that cannot reach Redis is retried with the renewals, and a lease it leaves behind
expires after ``state.lease_ttl_s``.

Identity: the bucket of a key is its SHA-256 digest (lowercase hex, as in the config); with
client authentication off every request shares the bucket ``anonymous`` (an unverified token
is no identity). Refused: HTTP 429 ``rate_limit_exceeded`` with OpenAI's ``error.type``
(``requests`` or ``tokens``), ``Retry-After`` (s) and the ``x-ratelimit-*`` headers
(:func:`router.access.limit_rules.headers`), sent on every response of a limited key that reached the check.

The rule itself (the buckets, :func:`~router.access.limit_rules.check`, the headers, the
:class:`~router.access.limit_rules.Ticket`) is :mod:`router.access.limit_rules`, without I/O; this module is
the limiter around it (Redis, the fallback, the finishes and renewals).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from router.access.auth import Auth, bearer_token
from router.access.limit_rules import (
    LocalBuckets,
    Plan,
    Ticket,
    Verdict,
    format_reset,
    headers,
    plan_for,
    token_cost,
    usage_tokens,
)
from router.access.limits_redis import SharedBuckets
from router.config.limits import KeyLimits, RateLimitConfig
from router.config.server import StateConfig
from router.errors import RateLimited
from router.ops.metrics import RouterMetrics
from router.request.features import RequestFeatures
from router.shared.breaker import CircuitBreaker
from router.shared.redis_client import failure_kind

__all__ = ["ANONYMOUS", "LIMIT_KINDS", "KeyLimiter"]  # the rules themselves: router.access.limit_rules

log = logging.getLogger("specgate.limits")

#: The bucket of every request when client authentication is off.
ANONYMOUS = "anonymous"
#: The ``limit`` label of ``specgate_rate_limited_total``.
LIMIT_KINDS = ("requests", "tokens", "concurrent")
#: ``Retry-After`` (s) of a refusal by the concurrency limit (no time can be known).
CONCURRENT_RETRY_S = 1


@dataclass(slots=True)
class _Finish:
    """Finished requests of one key, sent as one script call: their leases and the sum of
    their token corrections."""

    key: str
    members: list[str] = field(default_factory=list)
    refund: int = 0
    interval: float = 0.0


#: How long finishes wait to share one script call per key (s): a burst of responses costs
#: one Redis call per key rather than one each; negligible next to any lease TTL.
_COALESCE_S = 0.002
#: Plans kept per limiter (keyed by the config objects; cleared when a reload leaves more).
_PLAN_CACHE = 1024


class KeyLimiter:
    """The per-key limits of one router process (module docstring).

    Args:
        state: the ``state`` section (topology, key prefix, lease TTL, renewal, breaker).
        shared: the shared state's Redis backend (:class:`router.shared.state.RedisState`), or None
            for local buckets only.
        metrics: the router's series.
        clock: monotonic clock (s).
    """

    def __init__(self, state: StateConfig, shared: Any, metrics: RouterMetrics, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._cfg = state
        self._metrics = metrics
        self._clock = clock
        self._local = LocalBuckets()
        self._redis = None if shared is None else SharedBuckets(shared, state.key_prefix)
        self._breaker = CircuitBreaker(state.circuit_breaker.failure_threshold, state.circuit_breaker.reset_after_s,
                                       clock)
        self._replica = os.urandom(4).hex()
        self._ids = 0
        self._open: dict[str, dict[str, None]] = {}   # key -> its open shared leases
        self._queued: dict[str, _Finish] = {}         # finishes waiting for the next call
        self._pending: list[_Finish] = []             # finishes that could not reach Redis
        self._flusher: asyncio.Task[None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._plans: dict[tuple[int, float], tuple[KeyLimits, Plan]] = {}

    # -- identity -------------------------------------------------------------------------
    @staticmethod
    def resolve(config: RateLimitConfig, authorization: str | None, client_auth: bool) -> tuple[str, KeyLimits] | None:
        """The bucket id and limits of the request's key, or None when it is not limited.
        Call after the key was authenticated."""
        if not client_auth:
            limits = config.default
            return (ANONYMOUS, limits) if limits is not None and limits.limited else None
        token = bearer_token(authorization)
        if token is None:
            return None
        key = hashlib.sha256(token.encode("utf-8")).hexdigest()
        limits = config.keys.get(key, config.default)
        return (key, limits) if limits is not None and limits.limited else None

    # -- admission --------------------------------------------------------------------------
    async def check_request(self, config: RateLimitConfig, authorization: str | None, auth: Auth | None,
                            features: RequestFeatures) -> Ticket | None:
        """:meth:`resolve` then :meth:`admit` for a request with ``features`` (its
        :func:`token_cost`): its ticket, or None when its key is not limited. ``auth`` is the
        runtime's (client authentication is on when it holds client keys).

        Raises:
            RateLimited: a limit refuses it.
        """
        found = self.resolve(config, authorization, auth is not None and auth.client is not None)
        if found is None:
            return None
        cost = token_cost(features.prompt_tokens, features.max_new_tokens, features.n, features.num_prompts)
        return await self.admit(config, found[0], found[1], cost)

    async def admit(self, config: RateLimitConfig, key: str, limits: KeyLimits, cost: int) -> Ticket:
        """Check and charge ``key`` for one request of ``cost`` tokens.

        Raises:
            RateLimited: a limit refuses it (HTTP 429, nothing charged).
        """
        shared = self._redis is not None and self._breaker.allow()
        if shared:
            plan = self._plan(limits, 1.0)
            member = self._next_member() if plan.concurrent else None
            verdict = await self._admit_shared(key, plan, cost, member)
            if verdict is not None:
                return self._ticket(key, plan, verdict, cost, member, True, "shared")
        mode = "local" if self._redis is None else "fallback"
        plan = self._plan(limits, 1.0 if self._redis is None else config.local_fraction)
        verdict = self._local.admit(key, plan, cost, self._clock() * 1000.0)
        return self._ticket(key, plan, verdict, cost, None, False, mode)

    def _plan(self, limits: KeyLimits, fraction: float) -> Plan:
        cached = self._plans.get((id(limits), fraction))
        if cached is not None and cached[0] is limits:
            return cached[1]
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.clear()
        plan = plan_for(limits, fraction)
        self._plans[(id(limits), fraction)] = (limits, plan)
        return plan

    def _next_member(self) -> str:
        self._ids += 1
        return f"{self._replica}:{self._ids}"

    async def _admit_shared(self, key: str, plan: Plan, cost: int, member: str | None) -> Verdict | None:
        assert self._redis is not None
        started = time.perf_counter()
        try:
            verdict = await self._redis.admit(key, plan, cost, member, self._cfg.lease_ttl_s)
        except asyncio.CancelledError:
            if member is not None:   # the script may have run: never leave its lease behind
                self._pending.append(_Finish(key, [member]))
            raise
        except (RedisError, RedisClusterException, OSError, TimeoutError, ValueError) as exc:
            self._breaker.failure()
            self._metrics.shared_state_ops.labels("rate_limit", failure_kind(exc)).inc()
            if member is not None:
                self._pending.append(_Finish(key, [member]))
            return None
        self._breaker.success()
        self._metrics.shared_state_ops.labels("rate_limit", "ok").inc()
        self._metrics.shared_state_op_duration.labels("rate_limit").observe(time.perf_counter() - started)
        return verdict

    def _ticket(self, key: str, plan: Plan, verdict: Verdict, cost: int, member: str | None, shared: bool,
                mode: str) -> Ticket:
        extra = headers(plan, verdict)
        if verdict.denied is not None:
            self._metrics.rate_limit_checks.inc((mode, "limited"))
            kind = "tokens" if verdict.denied.startswith("tokens") else verdict.denied
            self._metrics.rate_limited.inc((kind,))
            raise _refusal(plan, verdict, cost, extra)
        self._metrics.rate_limit_checks.inc((mode, "admitted"))
        if member is not None:
            self._open.setdefault(key, {})[member] = None
        return Ticket(key, plan, cost if plan.token_interval_ms else 0, member, shared, extra)

    # -- the end of a request -------------------------------------------------------------
    def finish(self, ticket: Ticket | None, usage: Any = None) -> None:
        """Close ``ticket`` (idempotent; None: nothing): release its concurrency lease and
        correct its token reservation to the response's ``usage`` object when it has one
        (:func:`usage_tokens`)."""
        if ticket is None or ticket.done:
            return
        ticket.done = True
        used_tokens = usage_tokens(usage)
        refund = 0 if used_tokens is None or not ticket.plan.token_interval_ms else ticket.reserved - used_tokens
        if not ticket.shared:
            self._local.finish(ticket.key, ticket.plan, refund, bool(ticket.plan.concurrent))
            return
        if ticket.member is not None:
            self._open.get(ticket.key, {}).pop(ticket.member, None)
        if ticket.member is None and not refund:
            return
        item = self._queued.get(ticket.key)
        if item is None:
            item = self._queued[ticket.key] = _Finish(ticket.key)
        if ticket.member is not None:
            item.members.append(ticket.member)
        item.refund += refund
        item.interval = ticket.plan.token_interval_ms
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush(), name="specgate-limits-finish")

    async def _flush(self) -> None:
        """Send the queued finishes, one script call per key, until none is left."""
        assert self._redis is not None
        try:
            while self._queued:
                await asyncio.sleep(_COALESCE_S)
                batch, self._queued = self._queued, {}
                for item in batch.values():
                    if not self._breaker.allow():
                        self._pending.append(item)
                        continue
                    try:
                        await self._redis.finish(item.key, item.members, item.refund, item.interval)
                    except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
                        self._breaker.failure()
                        self._metrics.shared_state_ops.labels("rate_limit", failure_kind(exc)).inc()
                        self._pending.append(item)
                    else:
                        self._breaker.success()
        finally:
            self._flusher = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the renewal of open shared leases (and the retry of failed finishes)."""
        if self._redis is not None and self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renewals(), name="specgate-limits-renew")

    async def stop(self) -> None:
        """Stop the renewals; wait (bounded) for finishes in flight, then try the failed ones once."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None
        if self._flusher is not None:
            await asyncio.wait([self._flusher], timeout=2 * self._cfg.op_timeout_s + 0.5)
        if self._redis is not None and self._pending:
            with contextlib.suppress(Exception):
                await self.renew_once()

    async def _renewals(self) -> None:
        while True:
            await asyncio.sleep(self._cfg.renew_interval_s)
            try:
                await self.renew_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one round must not stop the renewals
                log.exception("rate-limit lease renewal failed")

    async def renew_once(self) -> None:
        """Re-send the finishes that failed, then renew every open shared lease (one script per key)."""
        assert self._redis is not None
        if not self._breaker.allow():
            return
        pending, self._pending = self._pending, []
        try:
            while pending:
                item = pending[0]
                await self._redis.finish(item.key, item.members, item.refund, item.interval)
                pending.pop(0)
            for key, members in list(self._open.items()):
                if members:
                    await self._redis.renew(key, list(members), self._cfg.lease_ttl_s)
                else:
                    del self._open[key]
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            self._breaker.failure()
            self._metrics.shared_state_ops.labels("rate_limit", failure_kind(exc)).inc()
            self._pending = pending + self._pending
            return
        self._breaker.success()

    @property
    def pending(self) -> int:
        """Finishes waiting to reach Redis (queued or failed)."""
        return len(self._pending) + len(self._queued)

    def open_leases(self, key: str) -> int:
        """Open concurrency leases of ``key`` held by this replica (shared and local)."""
        return len(self._open.get(key, {})) + self._local.active(key)


def _refusal(plan: Plan, verdict: Verdict, cost: int, extra: tuple[tuple[bytes, bytes], ...]) -> RateLimited:
    hdrs = {k.decode(): v.decode() for k, v in extra}
    if verdict.denied == "tokens_max":
        hdrs["x-should-retry"] = "false"
        return RateLimited(f"Request too large for tokens per min (TPM): Limit {plan.token_limit}, Requested "
                           f"{cost} (prompt + output budget). Lower max_tokens or the prompt.", kind="tokens",
                           headers=hdrs)
    if verdict.denied == "concurrent":
        hdrs["retry-after"] = str(CONCURRENT_RETRY_S)
        return RateLimited(f"Rate limit reached for concurrent requests: Limit {plan.concurrent} in flight. "
                           f"Please try again when one has finished.", kind="requests", headers=hdrs)
    hdrs["retry-after"] = str(max(1, math.ceil(verdict.wait_ms / 1000)))
    wait = format_reset(verdict.wait_ms)
    if verdict.denied == "tokens":
        return RateLimited(f"Rate limit reached for tokens per min (TPM): Limit {plan.token_limit}, Requested "
                           f"{cost}. Please try again in {wait}.", kind="tokens", headers=hdrs)
    return RateLimited(f"Rate limit reached for requests: Limit {plan.request_limit} / {plan.request_window}. "
                       f"Please try again in {wait}.", kind="requests", headers=hdrs)
