"""Deprecated (one release): the load-test fixtures, for files still added here; the tests moved
to tests/unit and tests/integration (tests/README.md), the harness to :mod:`tests.support.sim`."""

from __future__ import annotations

from typing import Self

from tests.support import RouterServer
from tests.support.sim import MODEL, router_over_pair, sim_pair

__all__ = ["MODEL", "RouterThread", "router_over_pair", "sim_pair"]


class RouterThread(RouterServer):
    """Deprecated (one release): ``tests.support.RouterServer(path).start(ready=True)``."""

    def start(self, *, ready: bool = True, timeout: float = 30.0) -> Self:
        return super().start(ready=ready, timeout=timeout)
