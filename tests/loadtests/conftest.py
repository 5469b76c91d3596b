"""Fixtures: fake SGLang pools paced by a speed model, and the real router in front of them.

The speed model makes the "spec" fake faster than the "plain" one at short context and low
concurrency and slower at long context / higher concurrency (see loadtests.simulate): with
these parameters S(1, 42 tokens) = 2.04, S(4, 700 tokens) = 0.39.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Self

import pytest

from loadtests.simulate import SimModel, SimServer, serve_pair
from tests.support import RouterServer, router_config, write_router_yaml

MODEL = SimModel(t0_s=0.004, batch_knee=8, alpha_short=0.8, alpha_knee_tokens=64,
                 alpha_drop_per_doubling=0.3, gamma=4, c=0.05)


@pytest.fixture
def sim_pair() -> Iterator[tuple[SimServer, SimServer]]:
    """(spec, plain) paced fakes on free 127.0.0.1 ports, stopped after the test."""
    with serve_pair(MODEL) as pair:
        yield pair


class RouterThread(RouterServer):
    """Deprecated (one release): ``tests.support.RouterServer(path).start(ready=True)``."""

    def start(self, *, ready: bool = True, timeout: float = 30.0) -> Self:
        return super().start(ready=ready, timeout=timeout)


@pytest.fixture
def router_over_pair(tmp_path: Path, tokenizer_dir: Path,
                     sim_pair: tuple[SimServer, SimServer]) -> Iterator[tuple[RouterServer, SimServer, SimServer]]:
    """The router in front of the paced fakes: prompts over 1000 tokens go plain, and the
    saturation bypass enters at 8 requests (never reached by the tests' concurrency 4)."""
    spec, plain = sim_pair
    doc = router_config(
        tokenizer_dir, **{
            "model.name": "sim-model",
            "limits": {"max_context_tokens": 65536, "default_max_tokens": 64},
            "pools": [
                {"name": "spec", "speculative": True, "endpoints": [spec.base_url], "draft_reserved_tokens": 5},
                {"name": "plain", "speculative": False, "endpoints": [plain.base_url]},
            ],
            "routing": {"long_prompt_tokens": 1000, "saturation": {"enter": 8, "exit": 6},
                        "acceptance": {"enabled": False}},
            "upstream": {"first_byte_timeout_s": 10.0, "idle_timeout_s": 10.0},
            "server": {"reload_interval_s": 5.0, "log_requests": False},
        })
    path = write_router_yaml(tmp_path / "router.yaml", doc)
    router = RouterServer(path).start(ready=True)
    try:
        yield router, spec, plain
    finally:
        router.stop()
