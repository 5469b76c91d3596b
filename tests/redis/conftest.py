"""Fixtures: a real ``redis-server`` per test (``redis_server``; three clustered masters:
``redis_cluster``) and two router replicas sharing it (:mod:`tests.redis.cluster`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.redis.cluster import (
    CHAT,
    COMPLETIONS,
    PREFIX,
    Cluster,
    RedisCluster3,
    RedisServer,
    inflight_key,
    state_section,
)
from tests.support import wait_until

# These names stay importable from here for one release (new code: tests.redis.cluster and
# tests.support.wait_until).
__all__ = ["CHAT", "COMPLETIONS", "PREFIX", "Cluster", "RedisServer", "cluster", "inflight_key", "redis_cluster",
           "redis_server", "state_section", "wait_for"]


def wait_for(cond: Any, timeout: float = 5.0, every: float = 0.02) -> bool:
    """Deprecated: :func:`tests.support.wait_until`. Polls ``cond``; returns its last truth value."""
    with contextlib.suppress(AssertionError):
        wait_until(cond, timeout, interval=every)
    return bool(cond())


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster(tmp_path: Path, tokenizer_dir: Path, redis_server: RedisServer) -> Iterator[Cluster]:
    c = Cluster(tmp_path, tokenizer_dir, redis_server, **{"routing.saturation": {"enter": 3, "exit": 1}})
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisCluster3]:
    """Three clustered ``redis-server`` masters (:class:`tests.redis.cluster.RedisCluster3`)."""
    rc = RedisCluster3(tmp_path)
    try:
        yield rc
    finally:
        rc.close()
