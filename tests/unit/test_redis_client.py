"""router.shared.redis_client: error kinds of failed Redis calls, and the clients per topology."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from redis import exceptions as rex

from router.config.tree import ConfigError, StateConfig
from router.ops.metrics import RouterMetrics
from router.shared.redis_client import build_client, failure_kind, is_moved
from router.shared.state import RedisState


@pytest.mark.parametrize("exc,kind", [
    (TimeoutError(), "timeout"), (rex.TimeoutError(), "timeout"),
    (rex.AuthenticationError("invalid username-password pair"), "auth_error"),
    (rex.NoPermissionError("this user has no permissions"), "auth_error"),
    (rex.ResponseError("NOAUTH Authentication required."), "auth_error"),
    (rex.ReadOnlyError("You can't write against a read only replica."), "readonly"),
    (rex.MovedError("3999 127.0.0.1:6381"), "moved"), (rex.AskError("3999 127.0.0.1:6381"), "moved"),
    (rex.ClusterDownError("The cluster is down"), "cluster_down"), (rex.TryAgainError("x"), "cluster_down"),
    (rex.ConnectionError("refused"), "connection_error"), (OSError(), "connection_error"),
    (rex.ResponseError("ERR something"), "error"),
])
def test_failure_kinds(exc, kind):
    assert failure_kind(exc) == kind


def test_is_moved():
    assert is_moved(rex.MovedError("1 h:1")) and is_moved(rex.AskError("1 h:1"))
    assert not is_moved(rex.ResponseError("ERR"))


def test_clients_per_topology():
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

    assert isinstance(build_client("redis://127.0.0.1:1/0", cluster=False, timeout_s=0.1), Redis)
    assert isinstance(build_client("redis://127.0.0.1:1/0", cluster=True, timeout_s=0.1), RedisCluster)
    primary = build_client("redis://:pw@127.0.0.1:26379,127.0.0.1:26380/2", cluster=False, timeout_s=0.1,
                           sentinel_master="mymaster")
    assert isinstance(primary, Redis)
    pool = primary.connection_pool
    assert pool.service_name == "mymaster" and pool.connection_kwargs["password"] == "pw"
    assert pool.connection_kwargs["db"] == 2
    assert [c.connection_pool.connection_kwargs["port"] for c in pool.sentinel_manager.sentinels] == [26379, 26380]


@pytest.mark.parametrize("url", ["redis://127.0.0.1/0", "redis://127.0.0.1:26379/x", "unix:///tmp/s.sock"])
def test_bad_sentinel_urls_fail_the_load(url):
    with pytest.raises(ConfigError, match="not a Redis URL"):
        RedisState(StateConfig(backend="redis", topology="sentinel"), url,
                   metrics=RouterMetrics(CollectorRegistry()))


def test_the_readiness_target_never_shows_credentials():
    st = RedisState(StateConfig(backend="redis", topology="sentinel"), "redis://u:secret@h1:26379,h2:26379/0",
                    metrics=RouterMetrics(CollectorRegistry()))
    assert st.target == "redis://h1:26379,h2:26379/0" and st.status()["topology"] == "sentinel"
