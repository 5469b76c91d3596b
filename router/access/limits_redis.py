"""The per-key limits' Redis side (:mod:`router.access.limits`): three Lua scripts and their calls.

Keys of the bucket ``<id>`` (``P`` = ``state.key_prefix``), both under the hash tag
``{P:rl:<id>}`` so that each script touches one Redis Cluster slot::

    {P:rl:<id>}:b   HASH   r -> request TAT, t -> token TAT (ms of the Redis clock, "%.3f")
                           PEXPIRE: the time the fuller bucket needs to drain, + 1 s
    {P:rl:<id>}:c   ZSET   member "<replica>:<n>" per open request, score = expiry (ms)

The admission script is :func:`router.access.limit_rules.check` written in Lua (one rule, tested against
each other on a real redis-server: tests/redis/test_key_limits.py). Time is Redis's ``TIME``,
so replicas' clocks do not matter. Calls go through :meth:`router.shared.state.RedisState.run_script`
(bounded by ``state.op_timeout_s``, ``MOVED`` followed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router.access.limit_rules import Verdict

if TYPE_CHECKING:
    from router.access.limit_rules import Plan

__all__ = ["ADMIT_LUA", "FINISH_LUA", "RENEW_LUA", "SharedBuckets", "bucket_keys"]

#: KEYS[1] hash, KEYS[2] zset. ARGV: 1 request interval (ms, 0: none), 2 request capacity,
#: 3 token interval (ms, 0: none), 4 token capacity, 5 cost (tokens), 6 concurrency limit
#: (0: none), 7 lease member, 8 lease TTL (ms).
#: Returns {denied ('' admitted), ceil(wait ms), floor(request backlog ms * 1000),
#: floor(token backlog ms * 1000), open requests}.
ADMIT_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ri, rc, ti, tc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cost, climit, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[8])
local denied, wait = '', 0
local rtat = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
local ttat = tonumber(redis.call('HGET', KEYS[1], 't') or '0')
local nr, nt = math.max(rtat, now), math.max(ttat, now)
if ri > 0 then
  local over = nr + ri - now - rc * ri
  if over > 1e-6 then denied = 'requests'; wait = over else nr = nr + ri end
end
if ti > 0 then
  if cost > tc then
    if denied == '' then denied = 'tokens_max' end
  else
    local over = nt + cost * ti - now - tc * ti
    if over > 1e-6 then
      if denied == '' then denied = 'tokens' end
      wait = math.max(wait, over)
    else nt = nt + cost * ti end
  end
end
local active = 0
if climit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  active = redis.call('ZCARD', KEYS[2])
  if active >= climit and denied == '' then denied = 'concurrent' end
end
if denied ~= '' then
  return {denied, math.ceil(wait), math.floor(math.max(rtat - now, 0) * 1000),
          math.floor(math.max(ttat - now, 0) * 1000), active}
end
if ri > 0 then redis.call('HSET', KEYS[1], 'r', string.format('%.3f', nr)) end
if ti > 0 then redis.call('HSET', KEYS[1], 't', string.format('%.3f', nt)) end
if ri > 0 or ti > 0 then
  redis.call('PEXPIRE', KEYS[1], math.ceil(math.max(nr, nt) - now) + 1000)
end
if climit > 0 then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[7])
  active = active + 1
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
end
return {'', 0, math.floor((nr - now) * 1000), math.floor((nt - now) * 1000), active}
"""

#: KEYS[1] hash, KEYS[2] zset. ARGV: 1 tokens to give back (negative: charge more), 2 token
#: interval (ms), 3.. the members of the finished requests' leases.
FINISH_LUA = """
for i = 3, #ARGV do redis.call('ZREM', KEYS[2], ARGV[i]) end
local refund = tonumber(ARGV[1])
if refund ~= 0 then
  local tat = redis.call('HGET', KEYS[1], 't')
  if tat then
    redis.call('HSET', KEYS[1], 't', string.format('%.3f', tonumber(tat) - refund * tonumber(ARGV[2])))
  end
end
return 1
"""

#: KEYS[1] zset. ARGV: 1 lease TTL (ms), 2.. members still open (only existing ones are
#: renewed: a lease finished meanwhile is not brought back).
RENEW_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[i]) end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""


def bucket_keys(prefix: str, key: str) -> tuple[str, str]:
    """The HASH and ZSET names of bucket ``key`` (one hash tag: one cluster slot)."""
    tag = "{" + prefix + ":rl:" + key + "}"
    return f"{tag}:b", f"{tag}:c"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SharedBuckets:
    """The buckets in Redis (module docstring).

    Args:
        state: the shared state (:class:`router.shared.state.RedisState`), whose client, timeout and
            redirection handling the calls use.
        prefix: ``state.key_prefix``.
    """

    def __init__(self, state: Any, prefix: str) -> None:
        self._state = state
        self._prefix = prefix

    async def admit(self, key: str, plan: Plan, cost: int, member: str | None, ttl_s: float) -> Verdict:
        """Run the admission script; raises what redis-py raises, ``ValueError`` on a bad reply."""
        reply = await self._state.run_script(ADMIT_LUA, list(bucket_keys(self._prefix, key)), [
            repr(plan.request_interval_ms), repr(plan.request_capacity), repr(plan.token_interval_ms),
            repr(plan.token_capacity), cost, plan.concurrent, member or "", int(ttl_s * 1000)])
        try:
            denied = _text(reply[0])
            return Verdict(denied or None, float(reply[1]), int(reply[2]) / 1000, int(reply[3]) / 1000,
                           int(reply[4]))
        except (TypeError, IndexError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"unexpected reply from the rate-limit script: {type(exc).__name__}") from None

    async def finish(self, key: str, members: list[str], refund: int, interval_ms: float) -> None:
        """Close the leases ``members`` and give back ``refund`` tokens (one call)."""
        await self._state.run_script(FINISH_LUA, list(bucket_keys(self._prefix, key)),
                                     [refund, repr(interval_ms), *members])

    async def renew(self, key: str, members: list[str], ttl_s: float) -> None:
        """Push the expiry of the open ``members`` to now + ``ttl_s``."""
        await self._state.run_script(RENEW_LUA, [bucket_keys(self._prefix, key)[1]], [int(ttl_s * 1000), *members])
