"""The ``cluster`` fixture (:class:`tests.support.k8s_cluster.Cluster`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import RouterServer
from tests.support import wait_until as _wait_until
from tests.support.k8s_cluster import CHAT, SELECTOR, Cluster, base_config

# CHAT, Cluster, Router, base_config and wait_until stay importable from here for one release
# (new code: tests.support.k8s_cluster and tests.support).
__all__ = ["CHAT", "SELECTOR", "Cluster", "Router", "base_config", "cluster", "wait_until"]


class Router(RouterServer):
    """Deprecated: :class:`tests.support.RouterServer` (``discovery=settings``)."""

    def __init__(self, config_path: Path, settings: Any = None) -> None:
        super().__init__(config_path, discovery=settings)


def wait_until(pred: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    """Deprecated: :func:`tests.support.wait_until` (``timeout=``)."""
    return _wait_until(pred, timeout_s, what, interval=0.02)


@pytest.fixture
def cluster(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, tokenizer_dir)
    try:
        yield c
    finally:
        c.close()
