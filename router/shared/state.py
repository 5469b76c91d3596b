"""State shared by router replicas: in-flight leases, bypass flags, routing overrides.

Backends (``state.backend``):

- ``memory`` (:class:`MemoryState`): one replica, nothing shared. In-flight counts are the
  replica's own leases; routing overrides live on the runtime.
- ``redis`` (:class:`RedisState`): every replica reads and writes one Redis.

Redis key layout (``P`` = ``state.key_prefix``; the braces are a Redis Cluster hash tag, so
all keys of one deployment share a slot and one Lua script may touch them all)::

    {P}:inflight:<pool>:<endpoint url>   ZSET    member "<replica id>:<n>", one per lease;
                                                 score = lease expiry (ms, Redis server clock)
    {P}:bypass                           HASH    "<pool>:saturated", "<pool>:low_acceptance"
                                                 -> "1" / "0"
    {P}:overrides                        STRING  JSON of router.config.tree.Overrides (absent: none)

Algorithm, per replica:

1. Taking or releasing a :class:`~router.state.endpoint.Lease` changes process memory only: the local
   count, the set of open leases, a queue of ZADDs / ZREMs. No request waits for Redis.
2. One writer task sends what is queued as **one Lua script call** (atomic): ZADD new leases
   with score ``now + lease_ttl_s`` (``now`` from Redis ``TIME``, so replica clocks do not
   matter); ZREM released ones; re-ZADD every open lease when a renewal is due (every
   ``renew_interval_s``) or after a failure (reconciliation); compare-and-set changed bypass
   flags; then per endpoint ZREMRANGEBYSCORE(-inf, now) (expired leases of crashed replicas
   vanish) and ZCARD; HGETALL the flags; GET the overrides. A batch goes out 2 ms after a
   lease change (a burst shares one call, one call is in flight at a time, and a lease taken
   and released within those 2 ms costs no call) and at least once per ``scrape.interval_s``
   (a *round*).
3. The result gives each endpoint the count C over all replicas, paired with this replica's
   local count B when the batch was taken; until the next batch the policy sees
   ``max(local, C + local - B)`` (own changes exact, other replicas' as of the batch), and the
   load is ``max(scraped engine load, that)`` (:meth:`router.state.endpoint.Endpoint.load`).
4. Bypass: after each batch every speculative pool's hysteresis continues *from the shared
   flag* (:meth:`router.state.runtime.Runtime.sync_bypass`, the pure ``next_saturated`` /
   ``next_low_acceptance``); a differing result is written back with compare-and-set. When one
   replica flips a flag the others follow at their next batch (within one scrape interval),
   and since all see the same shared loads they leave together.
5. Overrides are read each batch and applied when they change.

Failures (BerriAI/litellm#35273, #34299): every call is bounded by ``op_timeout_s`` (socket connect and read
timeouts, plus ``asyncio.timeout``) and passes a :class:`CircuitBreaker`. *Degraded* means the
breaker is not closed or no call has succeeded yet (a replica starts while Redis is down):
shared counts are dropped and routing uses local counts, ``/ready`` says so (and stays ready),
``specgate_shared_state_degraded`` is 1 and each entry is counted. Leases keep working
locally. On recovery the first successful batch re-adds every open lease (fresh expiry) and
removes every lease released meanwhile (tombstones); ZADD / ZREM of one member are idempotent,
so counts are neither negative nor doubled. A command sent just before an outage may still run
late (a SIGSTOPped Redis runs its buffered commands on SIGCONT), so tombstones are re-sent for
``lease_ttl_s`` after a recovery. A crashed replica's leases expire after ``lease_ttl_s``.

Sources: BerriAI/litellm#35273 (no socket timeout: every request hung), #34299 (swallowed
errors never opened the breaker), #3400 (no start while Redis was down); the circuit breaker
is M. Nygard's, *Release It!* (2007), chapter 5.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson
from redis.exceptions import RedisClusterException, RedisError

from router.config.tree import ConfigError, Overrides, StateConfig, parse_overrides
from router.errors import SharedStateUnavailable
from router.ops.metrics import RouterMetrics
from router.shared.breaker import CircuitBreaker
from router.shared.redis_client import AUTH_LOG_INTERVAL_S, build_client, failure_kind, is_moved

__all__ = ["CircuitBreaker", "LeasedEndpoint", "MemoryState", "RedisState", "build_shared_state", "redis_keys"]

log = logging.getLogger("specgate.state")

#: KEYS[1] bypass hash, KEYS[2] overrides, KEYS[3..] in-flight ZSETs.
#: ARGV[1] lease TTL (ms); then per ZSET: nadd, members..., nrem, members...; then nflags and
#: (field, expected, new) triples (expected "" = absent).
#: Returns {counts, HGETALL bypass, GET overrides, now_ms}.
SYNC_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local i = 2
local counts = {}
for k = 3, #KEYS do
  local key = KEYS[k]
  local n = tonumber(ARGV[i]); i = i + 1
  for j = 1, n do redis.call('ZADD', key, now + ttl, ARGV[i]); i = i + 1 end
  if n > 0 and redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  n = tonumber(ARGV[i]); i = i + 1
  for j = 1, n do redis.call('ZREM', key, ARGV[i]); i = i + 1 end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  counts[#counts + 1] = redis.call('ZCARD', key)
end
local n = tonumber(ARGV[i]); i = i + 1
for j = 1, n do
  local field, expected, new = ARGV[i], ARGV[i + 1], ARGV[i + 2]; i = i + 3
  local cur = redis.call('HGET', KEYS[1], field)
  if (cur == false and expected == '') or cur == expected then
    redis.call('HSET', KEYS[1], field, new)
  end
end
return {counts, redis.call('HGETALL', KEYS[1]), redis.call('GET', KEYS[2]), now}
"""


#: How long the writer waits after a wake-up so that one call carries a burst of lease changes
#: (seconds); negligible next to the scrape interval, and it keeps Redis calls per second
#: bounded by ~1/_COALESCE_S however many requests arrive.
_COALESCE_S = 0.002


def redis_keys(prefix: str) -> dict[str, str]:
    """The key names of a deployment: ``bypass``, ``overrides`` and the ``inflight`` prefix."""
    tag = "{" + prefix + "}"
    return {"bypass": f"{tag}:bypass", "overrides": f"{tag}:overrides", "inflight": f"{tag}:inflight:"}


class LeasedEndpoint(Protocol):
    """What the lease ledger reads of an endpoint (``router.state.endpoint.Endpoint`` has it)."""

    pool: str
    url: str


class MemoryState:
    """The single-replica backend: nothing is shared, nothing can fail."""

    backend = "memory"
    degraded = False
    ledger = None

    async def start(self, get_fleet: Callable[[], Any]) -> None:
        """Nothing to start."""

    async def stop(self) -> None:
        """Nothing to stop."""

    async def store_overrides(self, overrides: Overrides) -> None:
        """Overrides live on the runtime alone (carried over by reloads)."""

    def status(self) -> dict[str, Any]:
        """The readiness detail."""
        return {"backend": "memory", "status": "ok"}


@dataclass(slots=True)
class _Batch:
    seq: int
    keys: list[str]
    endpoints: dict[str, Any]
    bases: dict[str, int]
    adds: dict[str, list[str]]
    rems: dict[str, set[str]]
    flags: dict[str, tuple[bool | None, bool]]
    full: bool


class RedisState:
    """The Redis backend (see the module docstring); also the runtime's lease ledger.

    Args:
        config: the ``state`` section.
        url: the Redis URL (never logged with its password).
        metrics: the router's series.
        clock: monotonic clock (s).
        client: a ``redis.asyncio.Redis`` to use (tests); by default one is built from ``url``
            for ``config.topology`` with ``op_timeout_s`` socket timeouts and no retries
            (:func:`router.shared.redis_client.build_client`; a standalone client answered ``MOVED``
            switches to the cluster client once).
    """

    backend = "redis"

    def __init__(self, config: StateConfig, url: str, *, metrics: RouterMetrics,
                 clock: Callable[[], float] = time.monotonic, client: Any = None) -> None:
        self._cfg = config
        self._metrics = metrics
        self._clock = clock
        self._url = url
        self.topology = config.topology
        self._may_switch = client is None and config.topology == "standalone"
        try:
            self._client = client or build_client(
                url, cluster=config.topology == "cluster", timeout_s=config.op_timeout_s,
                sentinel_master=config.sentinel_master if config.topology == "sentinel" else None)
        except (ValueError, RedisClusterException) as exc:
            raise ConfigError(f"state.redis_url is not a Redis URL: {exc}") from None
        self._auth_logged_at: float | None = None
        self._closing: list[asyncio.Task[None]] = []   # the standalone client after a switch
        parts = urlsplit(url)
        self.target = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"  # no credentials
        self._script = self._client.register_script(SYNC_LUA)
        self._scripts: dict[str, tuple[Any, Any]] = {}   # other modules' scripts: source -> (client, Script)
        keys = redis_keys(config.key_prefix)
        self._bypass_key, self._overrides_key, self._inflight_prefix = (
            keys["bypass"], keys["overrides"], keys["inflight"])
        self.replica_id = f"{socket.gethostname()}-{os.urandom(3).hex()}"
        self._breaker = CircuitBreaker(config.circuit_breaker.failure_threshold,
                                       config.circuit_breaker.reset_after_s, clock)
        self._ids = 0
        self._open: dict[str, str] = {}                  # lease id -> ZSET key
        self._sent: set[str] = set()                     # lease ids possibly in Redis
        self._adds: dict[str, dict[str, None]] = {}      # key -> lease ids not sent yet
        self._rems: dict[str, set[str]] = {}             # key -> tombstones not confirmed
        self._linger: dict[str, tuple[str, float]] = {}  # tombstone -> (key, re-send until)
        self._flag_writes: dict[str, tuple[bool | None, bool]] = {}
        self._full = True
        self._renew_at = 0.0
        self._seq = 0
        self._overrides_min_seq = 0
        self._bad_overrides: bytes | None = None
        self._last_ok: float | None = None
        self._last_error: str | None = None
        self._failed_since_ok = False
        self._linger_until = 0.0
        self._linger_mark = 0
        self._was_degraded = False
        self._wake = asyncio.Event()
        self._round_due = False
        self._tasks: list[asyncio.Task[None]] = []
        self._get_fleet: Callable[[], Any] = lambda: None

    # -- the lease ledger (called on the request path: memory only) -------------------
    @property
    def ledger(self) -> RedisState:
        """This object (it records leases)."""
        return self

    def _key(self, endpoint: LeasedEndpoint) -> str:
        return f"{self._inflight_prefix}{endpoint.pool}:{endpoint.url}"

    def acquired(self, endpoint: LeasedEndpoint) -> str:
        """Record a new lease; queue its ZADD unless degraded (then recovery re-adds it)."""
        self._ids += 1
        lease_id = f"{self.replica_id}:{self._ids}"
        key = self._key(endpoint)
        self._open[lease_id] = key
        if not self._full:
            self._adds.setdefault(key, {})[lease_id] = None
            self._wake.set()
        return lease_id

    def released(self, endpoint: LeasedEndpoint, lease_id: str) -> None:
        """Record a release; queue a ZREM if the lease may have reached Redis."""
        key = self._open.pop(lease_id, None)
        if key is None:
            return
        pending = self._adds.get(key)
        if pending is not None and lease_id in pending:
            del pending[lease_id]   # never sent: nothing to undo
            return
        if lease_id in self._sent:
            self._rems.setdefault(key, set()).add(lease_id)
            if self._breaker.state == "closed":
                self._wake.set()

    # -- status -------------------------------------------------------------------------
    @property
    def degraded(self) -> bool:
        """True while routing on local counts (breaker not closed, or never reached Redis)."""
        return self._last_ok is None or self._breaker.state != "closed"

    def status(self) -> dict[str, Any]:
        """The readiness detail (no secrets: the URL is shown without credentials)."""
        return {
            "backend": "redis",
            "status": "degraded" if self.degraded else "ok",
            "target": self.target,
            "breaker": self._breaker.state,
            "consecutive_failures": self._breaker.failures,
            "topology": self.topology,
            "last_error": self._last_error,
            "last_success_age_s": None if self._last_ok is None else round(self._clock() - self._last_ok, 3),
            "open_leases": len(self._open),
            "pending_releases": sum(len(v) for v in self._rems.values()),
        }

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self, get_fleet: Callable[[], Any]) -> None:
        """One bounded first sync (a failure only makes the start degraded), then the tasks.

        ``get_fleet`` returns the current :class:`router.state.fleet.Fleet` (or None): the leases,
        bypass flags and overrides of every model's runtime go through this one state (pool
        names, hence keys, are unique across the deployment)."""
        self._get_fleet = get_fleet
        await self._batch_once()
        self._update_degraded()
        self._tasks = [asyncio.create_task(self._writer(), name="specgate-state-writer"),
                       asyncio.create_task(self._rounds(), name="specgate-state-rounds")]

    async def stop(self) -> None:
        """Stop the tasks, send the last releases (one bounded try), close the client."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if any(self._rems.values()) or any(self._adds.values()):
            await self._batch_once()
        with contextlib.suppress(Exception):
            await self._client.aclose()
        await asyncio.gather(*self._closing)

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(_COALESCE_S)   # gather the lease changes of a burst into one call
            self._wake.clear()
            if not self._round_due and not self._pending():
                continue   # e.g. a lease taken and released within the coalescing window
            self._round_due = False
            try:
                await self._batch_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one batch must not stop the writer
                log.exception("shared-state batch failed")

    async def _rounds(self) -> None:
        while True:
            await asyncio.sleep(self._get_fleet().config.scrape.interval_s)
            self._round_due = True
            self._wake.set()

    def _pending(self) -> bool:
        return self._full or bool(self._flag_writes) or any(self._adds.values()) or any(self._rems.values())

    # -- one batch ----------------------------------------------------------------------
    async def _batch_once(self) -> None:
        if not self._breaker.allow():
            self._metrics.shared_state_ops.labels("sync", "short_circuit").inc()
            self._update_degraded()
            return
        batch = self._take()
        keys, args = self._encode(batch)
        started = time.perf_counter()
        try:
            reply = await self._call(lambda: self._script(keys=keys, args=args))
            counts, flags, raw = self._decode(reply, len(batch.keys))
        except (RedisError, RedisClusterException, OSError, TimeoutError, ValueError) as exc:  # every failure counts
            self._failed(batch, exc, "sync")
        else:
            self._metrics.shared_state_op_duration.labels("sync").observe(time.perf_counter() - started)
            self._succeeded(batch, counts, flags, self._parse_overrides(raw))

    async def _call(self, op: Callable[[], Any]) -> Any:
        """``await op()`` within ``op_timeout_s``; a standalone client answered ``MOVED`` or
        ``ASK`` becomes the cluster client (:mod:`router.shared.redis_client`) and retries once."""
        try:
            async with asyncio.timeout(self._cfg.op_timeout_s):
                return await op()
        except RedisError as exc:
            if not (self._may_switch and is_moved(exc)):
                raise
        self._switch_to_cluster()
        async with asyncio.timeout(self._cfg.op_timeout_s):
            return await op()

    async def run_script(self, source: str, keys: list[str], args: list[Any]) -> Any:
        """Run the Lua ``source`` (another module's: router/access/limits_redis.py) with ``keys`` and
        ``args``, bounded by ``op_timeout_s`` and following a ``MOVED`` as the sync does; raises
        what redis-py raises. Its failures do not move this object's breaker."""
        def script() -> Any:
            client = self._client
            entry = self._scripts.get(source)
            if entry is None or entry[0] is not client:
                entry = self._scripts[source] = (client, client.register_script(source))
            return entry[1](keys=keys, args=args)

        return await self._call(script)

    def _switch_to_cluster(self) -> None:
        old = self._client
        self._may_switch = False
        self._client = build_client(self._url, cluster=True, timeout_s=self._cfg.op_timeout_s)
        self._script = self._client.register_script(SYNC_LUA)
        self.topology = "cluster"
        log.warning("shared state: %s answered MOVED (a Redis Cluster node); using the cluster client "
                    "(set state.topology: cluster)", self.target)
        async def close() -> None:
            with contextlib.suppress(Exception):
                await old.aclose()

        self._closing.append(asyncio.get_running_loop().create_task(close()))

    def _take(self) -> _Batch:
        fleet = self._get_fleet()
        now = self._clock()
        self._seq += 1
        full = self._full or now >= self._renew_at
        self._full = False   # leases taken while this batch is out are queued (set back on failure)
        adds: dict[str, list[str]] = {}
        if full:
            for lease_id, key in self._open.items():
                adds.setdefault(key, []).append(lease_id)
        else:
            adds = {key: list(ids) for key, ids in self._adds.items() if ids}
        self._adds = {}
        rems, self._rems = self._rems, {}
        for lease_id, (key, until) in list(self._linger.items()):
            if until <= now:
                del self._linger[lease_id]
            else:
                rems.setdefault(key, set()).add(lease_id)
        flags, self._flag_writes = self._flag_writes, {}
        endpoints = ({self._key(ep): ep for rt in fleet for ep in rt.all_endpoints()}
                     if fleet is not None else {})
        bases = {key: ep.inflight for key, ep in endpoints.items()}
        keys = list(endpoints) + sorted({*adds, *rems} - set(endpoints))
        for ids in adds.values():
            self._sent.update(ids)
        return _Batch(self._seq, keys, endpoints, bases, adds, rems, flags, full)

    def _encode(self, batch: _Batch) -> tuple[list[str], list[Any]]:
        keys = [self._bypass_key, self._overrides_key, *batch.keys]
        args: list[Any] = [int(self._cfg.lease_ttl_s * 1000)]
        for key in batch.keys:
            adds = batch.adds.get(key, [])
            rems = sorted(batch.rems.get(key, ()))
            args += [len(adds), *adds, len(rems), *rems]
        args.append(len(batch.flags))
        for field_, (expected, new) in batch.flags.items():
            args += [field_, "" if expected is None else str(int(expected)), str(int(new))]
        return keys, args

    @staticmethod
    def _decode(reply: Any, n: int) -> tuple[list[int], dict[str, bool], bytes | None]:
        """Parse the sync script's reply; raises ``ValueError`` when it is malformed."""
        try:
            counts = [int(c) for c in reply[0]]
            flat = reply[1] or []
            flags = {bytes(flat[i]).decode(): bytes(flat[i + 1]) == b"1" for i in range(0, len(flat) - 1, 2)}
            raw = reply[2]
        except (TypeError, IndexError, KeyError, UnicodeDecodeError) as exc:
            raise ValueError(f"unexpected reply from the sync script: {type(exc).__name__}") from None
        if len(counts) != n:
            raise ValueError("unexpected count list from the sync script")
        return counts, flags, raw

    def _parse_overrides(self, raw: bytes | None) -> Overrides | None:
        """The shared overrides (empty when absent); None when invalid (logged once per value)."""
        if not raw:
            return Overrides()
        try:
            return parse_overrides(orjson.loads(raw))
        except (ConfigError, orjson.JSONDecodeError) as exc:
            if raw != self._bad_overrides:
                self._bad_overrides = raw
                log.error("ignoring invalid shared overrides at %s: %s", self._overrides_key, exc)
            return None

    def _failed(self, batch: _Batch, exc: BaseException, op: str) -> None:
        for key, ids in batch.rems.items():
            self._rems.setdefault(key, set()).update(ids)
        self._full = True   # the next success re-adds every open lease
        self._failed_since_ok = True
        self._breaker.failure()
        self._record_error(op, exc)
        self._update_degraded()

    def _record_error(self, op: str, exc: BaseException) -> None:
        """Count a failed call by kind; refused credentials are logged loudly, at most once per
        :data:`router.shared.redis_client.AUTH_LOG_INTERVAL_S` (the breaker paces the retries)."""
        kind = failure_kind(exc)
        self._last_error = f"{kind}: {type(exc).__name__}"
        self._metrics.shared_state_ops.labels(op, kind).inc()
        now = self._clock()
        if kind == "auth_error" and (self._auth_logged_at is None
                                     or now - self._auth_logged_at >= AUTH_LOG_INTERVAL_S):
            self._auth_logged_at = now
            log.error("shared state: Redis at %s refused the router's credentials (%s); check the "
                      "password in state.redis_url / $%s (rotated?)", self.target, exc,
                      self._cfg.redis_url_env)

    def _succeeded(self, batch: _Batch, counts: list[int], flags: dict[str, bool],
                   overrides: Overrides | None) -> None:
        now = self._clock()
        self._breaker.success()
        self._last_ok = now
        self._metrics.shared_state_ops.labels("sync", "ok").inc()
        if self._failed_since_ok:
            self._failed_since_ok = False
            self._linger_until = now + self._cfg.lease_ttl_s
            self._linger_mark = self._ids   # leases a late (pre-outage) command may name
        if batch.full:
            self._renew_at = now + self._cfg.renew_interval_s
        for key, ids in batch.rems.items():
            self._sent.difference_update(ids)
            if now < self._linger_until:
                for lease_id in ids:
                    if int(lease_id.rsplit(":", 1)[1]) <= self._linger_mark:
                        self._linger.setdefault(lease_id, (key, self._linger_until))
        for key, count in zip(batch.keys, counts):
            ep = batch.endpoints.get(key)
            if ep is not None:
                ep.shared_inflight, ep.shared_base, ep.shared_at = count, batch.bases[key], now
        self._update_degraded()
        fleet = self._get_fleet()
        if fleet is None:
            return
        for runtime in fleet:  # overrides apply to every model (router.front.admin)
            if overrides is not None and batch.seq >= self._overrides_min_seq and overrides != runtime.overrides:
                log.info("routing overrides from the shared state: %s", overrides.flat())
                runtime.set_overrides(overrides)
            for field_, expected, new in runtime.sync_bypass(flags, now):
                self._flag_writes[field_] = (expected, new)
                self._wake.set()

    def _update_degraded(self) -> None:
        degraded = self.degraded
        if degraded and not self._was_degraded:
            self._metrics.shared_state_degraded_entries.inc()
            log.warning("shared state degraded (%s): routing on local counts", self._last_error)
            fleet = self._get_fleet()
            for ep in [e for rt in fleet for e in rt.all_endpoints()] if fleet is not None else ():
                ep.shared_inflight = None
        elif not degraded and self._was_degraded:
            log.warning("shared state recovered: leases reconciled")
        self._was_degraded = degraded
        self._metrics.shared_state_degraded.set(int(degraded))

    # -- admin ----------------------------------------------------------------------------
    async def store_overrides(self, overrides: Overrides) -> None:
        """Write (or, when empty, delete) the shared overrides, bounded by ``op_timeout_s``.

        Raises:
            SharedStateUnavailable: the breaker is open or the write failed (nothing is
                applied; a write that timed out may still land, so re-read with GET).
        """
        if not self._breaker.allow():
            self._metrics.shared_state_ops.labels("overrides", "short_circuit").inc()
            raise SharedStateUnavailable("the shared state (Redis) is unavailable; overrides unchanged")
        async def write() -> Any:
            if overrides.flat():
                return await self._client.set(self._overrides_key,
                                              orjson.dumps(overrides.model_dump(exclude_none=True)))
            return await self._client.delete(self._overrides_key)

        try:
            await self._call(write)
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:  # every failure counts
            self._breaker.failure()
            self._record_error("overrides", exc)
            self._update_degraded()
            raise SharedStateUnavailable("the shared state (Redis) is unavailable; overrides unchanged") from None
        self._breaker.success()
        self._metrics.shared_state_ops.labels("overrides", "ok").inc()
        self._overrides_min_seq = self._seq + 1


def build_shared_state(config: StateConfig, *, metrics: RouterMetrics,
                       clock: Callable[[], float] = time.monotonic,
                       environ: Mapping[str, str] | None = None) -> MemoryState | RedisState:
    """The backend ``config.backend`` names (nothing connects yet).

    Raises:
        ConfigError: ``redis`` without ``redis_url`` and with the ``redis_url_env`` variable
            unset or empty, or a malformed URL.
    """
    if config.backend == "memory":
        return MemoryState()
    env = os.environ if environ is None else environ
    url = config.redis_url or env.get(config.redis_url_env, "")
    if not url:
        raise ConfigError(f"state.backend is redis but neither state.redis_url nor "
                          f"${config.redis_url_env} is set")
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"${config.redis_url_env} is not a redis://, rediss:// or unix:// URL")
    return RedisState(config, url, metrics=metrics, clock=clock)
