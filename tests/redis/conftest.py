"""Fixtures: a real ``redis-server`` per test (``redis_server``; three clustered masters:
``redis_cluster``) and two router replicas sharing it (:mod:`tests.redis.cluster`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis.cluster import Cluster, RedisCluster3, RedisServer

__all__ = ["cluster", "redis_cluster", "redis_server"]


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
