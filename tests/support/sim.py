"""The paced load-test fakes (:mod:`loadtests.simulate`) and the router in front of them; the
fixtures ``sim_pair`` and ``router_over_pair`` are defined here and imported by conftests.

The speed model makes the "spec" fake faster than the "plain" one at short context and low
concurrency and slower at long context / higher concurrency: with these parameters
S(1, 42 tokens) = 2.04, S(4, 700 tokens) = 0.39.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtests.simulate import SimModel, SimServer, serve_pair
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer

__all__ = ["MODEL", "router_over_pair", "sim_pair", "sim_router_config"]

MODEL = SimModel(t0_s=0.004, batch_knee=8, alpha_short=0.8, alpha_knee_tokens=64,
                 alpha_drop_per_doubling=0.3, gamma=4, c=0.05)


def sim_router_config(tokenizer: str | Path, spec_url: str, plain_url: str) -> dict[str, Any]:
    """The router in front of the paced fakes: prompts over 1000 tokens go plain, and the
    saturation bypass enters at 8 requests; acceptance bypass off; no learning (the
    thresholds' own behaviour)."""
    return router_config(
        tokenizer, **{
            "model.name": "sim-model",
            "limits": {"max_context_tokens": 65536, "default_max_tokens": 64},
            "pools": [
                {"name": "spec", "speculative": True, "endpoints": [spec_url], "draft_reserved_tokens": 5},
                {"name": "plain", "speculative": False, "endpoints": [plain_url]},
            ],
            "routing": {"long_prompt_tokens": 1000, "saturation": {"enter": 8, "exit": 6},
                        "acceptance": {"enabled": False}, "learning": {"enabled": False}},
            "upstream": {"first_byte_timeout_s": 10.0, "idle_timeout_s": 10.0},
            "server": {"reload_interval_s": 5.0, "log_requests": False},
        })


@pytest.fixture
def sim_pair() -> Iterator[tuple[SimServer, SimServer]]:
    """(spec, plain) paced fakes on free 127.0.0.1 ports, stopped after the test."""
    with serve_pair(MODEL) as pair:
        yield pair


@pytest.fixture
def router_over_pair(tmp_path: Path, tokenizer_dir: Path,
                     sim_pair: tuple[SimServer, SimServer]) -> Iterator[tuple[RouterServer, SimServer, SimServer]]:
    """The router in front of the paced fakes (:func:`sim_router_config`; the saturation bypass
    at 8 requests is never reached by the tests' concurrency 4)."""
    spec, plain = sim_pair
    path = write_router_yaml(tmp_path / "router.yaml", sim_router_config(tokenizer_dir, spec.base_url, plain.base_url))
    router = RouterServer(path).start(ready=True)
    try:
        yield router, spec, plain
    finally:
        router.stop()
