"""Fixtures: ``stack``, the router served by uvicorn on 127.0.0.1 in front of fake SGLang pools
(:class:`tests.support.stack.Stack`); ``cluster``, a fake Kubernetes API with fake pods and the
router with discovery (:class:`tests.support.k8s_cluster.Cluster`); ``sim_pair``, the paced
load-test fakes, and ``router_over_pair``, the router in front of them (:mod:`tests.support.sim`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.k8s_cluster import Cluster
from tests.support.sim import router_over_pair, sim_pair
from tests.support.stack import Stack

__all__ = ["cluster", "router_over_pair", "sim_pair", "stack"]


@pytest.fixture
def stack(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Stack]:
    s = Stack(tmp_path, tokenizer_dir)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def cluster(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, tokenizer_dir)
    try:
        yield c
    finally:
        c.close()

