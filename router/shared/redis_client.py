"""The shared state's Redis client (:mod:`router.shared.state`): its topology and its error kinds.

Topologies (``state.topology``):

- ``standalone``: one ``redis.asyncio.Redis`` on ``state.redis_url`` (a primary, or a
  proxy in front of one).
- ``cluster``: ``redis.asyncio.cluster.RedisCluster`` seeded from ``state.redis_url`` (any
  node); it learns the slot map and follows ``MOVED`` and ``ASK`` (resharding) by itself.
- ``sentinel``: ``redis.asyncio.sentinel.Sentinel(...).master_for(state.sentinel_master)``;
  ``state.redis_url`` lists the sentinels (``redis://[:pw@]h1:26379,h2:26379/0``, the password
  and database being the primary's). A connection to a primary demoted by a failover answers
  ``READONLY``; redis-py then drops it and asks the sentinels for the new primary
  (redis/redis-py#460, #435), so the next call reaches it: one failed call, no lasting outage.
  Every key of a deployment carries the ``{key_prefix}`` hash tag, so the one sync script
  touches one slot and ``CROSSSLOT`` cannot happen.

A ``standalone`` client answered ``MOVED`` has been pointed at a cluster node that does not own
the deployment's slot (redis/redis-py cluster behaviour; BerriAI/litellm#8878 is the same fault
in another router): :class:`RedisState` then switches to the cluster client once, logs it, and
retries the call, rather than staying degraded for good.

Error kinds (:func:`failure_kind`, the ``result`` label of ``specgate_shared_state_ops_total``):
``timeout``, ``connection_error``, ``auth_error`` (``NOAUTH``, ``WRONGPASS``, ``NOPERM``: a
rotated password or ACL; retried only at the breaker's pace, logged at most once per
:data:`AUTH_LOG_INTERVAL_S`), ``readonly`` (``READONLY``: a demoted primary after a
failover), ``moved`` (``MOVED``/``ASK`` not followed), ``cluster_down`` (``CLUSTERDOWN``,
``TRYAGAIN``, ``MASTERDOWN``) and ``error`` (anything else).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AUTH_LOG_INTERVAL_S", "build_client", "failure_kind", "is_moved"]

#: Seconds between two log lines about refused credentials (the breaker paces the retries).
AUTH_LOG_INTERVAL_S = 60.0


def build_client(url: str, *, cluster: bool, timeout_s: float, sentinel_master: str | None = None) -> Any:
    """A ``redis.asyncio`` client for ``url``: the cluster client when ``cluster``, the primary
    of ``sentinel_master`` through the sentinels ``url`` lists when that is set, else a plain
    one; socket connect and read timeouts of ``timeout_s`` seconds, and no retries of their own
    beyond following the cluster's redirections (the router's breaker owns retrying).

    Raises:
        ValueError: ``url`` is not a Redis URL.
    """
    from redis.asyncio import Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    if sentinel_master is not None:
        return _sentinel_client(url, sentinel_master, timeout_s)
    if cluster:
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                     retry=Retry(NoBackoff(), 0), cluster_error_retry_attempts=2)
    return Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                          retry=Retry(NoBackoff(), 0), health_check_interval=0)


def _sentinel_client(url: str, master: str, timeout_s: float) -> Any:
    from urllib.parse import unquote, urlsplit

    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel
    from redis.backoff import NoBackoff

    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError("a sentinel URL is redis://[:password@]host:port[,host:port...]/db")
    hosts = parts.netloc.rpartition("@")[2]
    sentinels = []
    for item in hosts.split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"sentinel address {item!r} is not host:port")
        sentinels.append((host, int(port)))
    db = parts.path.strip("/") or "0"
    if not db.isdigit():
        raise ValueError("the database in the URL must be a number")
    kwargs: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                              "retry": Retry(NoBackoff(), 0), "db": int(db), "ssl": parts.scheme == "rediss"}
    if parts.password:
        kwargs["password"] = unquote(parts.password)
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    sentinel = Sentinel(sentinels, sentinel_kwargs={"socket_timeout": timeout_s,
                                                   "socket_connect_timeout": timeout_s}, **kwargs)
    return sentinel.master_for(master)


def is_moved(exc: BaseException) -> bool:
    """True for a ``MOVED`` or ``ASK`` redirection (``redis.exceptions.AskError`` and its
    subclass ``MovedError``)."""
    from redis.exceptions import AskError

    return isinstance(exc, AskError)


def failure_kind(exc: BaseException) -> str:
    """The error kind of a failed Redis call (module docstring)."""
    from redis.exceptions import (
        AskError,
        AuthenticationError,
        AuthenticationWrongNumberOfArgsError,
        ClusterDownError,
        MasterDownError,
        NoPermissionError,
        ReadOnlyError,
        TryAgainError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    if isinstance(exc, (TimeoutError, RedisTimeoutError)):
        return "timeout"
    if isinstance(exc, (AuthenticationError, AuthenticationWrongNumberOfArgsError, NoPermissionError)):
        return "auth_error"  # before connection_error: AuthenticationError is a ConnectionError
    if isinstance(exc, ReadOnlyError):
        return "readonly"
    if isinstance(exc, AskError):
        return "moved"
    if isinstance(exc, (ClusterDownError, TryAgainError, MasterDownError)):
        return "cluster_down"
    if isinstance(exc, (RedisConnectionError, OSError)):
        return "connection_error"
    if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):  # a script's error reply wraps the code
        return "auth_error"
    return "error"
