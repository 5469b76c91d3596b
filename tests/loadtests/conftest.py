"""Fixtures: fake SGLang pools paced by a speed model, and the real router in front of them.

The speed model makes the "spec" fake faster than the "plain" one at short context and low
concurrency and slower at long context / higher concurrency (see loadtests.simulate): with
these parameters S(1, 42 tokens) = 2.04, S(4, 700 tokens) = 0.39.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

from loadtests.simulate import SimModel, SimServer, serve_pair
from tests.helpers import free_port

MODEL = SimModel(t0_s=0.004, batch_knee=8, alpha_short=0.8, alpha_knee_tokens=64,
                 alpha_drop_per_doubling=0.3, gamma=4, c=0.05)


@pytest.fixture
def sim_pair() -> Iterator[tuple[SimServer, SimServer]]:
    """(spec, plain) paced fakes on free 127.0.0.1 ports, stopped after the test."""
    with serve_pair(MODEL) as pair:
        yield pair


class RouterThread:
    """The real router (``router.app.create_app``) under uvicorn in a thread on 127.0.0.1."""

    def __init__(self, config_path: Path) -> None:
        from router.app import create_app

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(create_app(config_path), host="127.0.0.1", port=self.port,
                             log_level="warning", loop="asyncio", lifespan="on", access_log=False)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> RouterThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while True:
            if self.server.started:
                try:
                    if httpx.get(self.base_url + "/ready", timeout=1).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("router did not become ready")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


@pytest.fixture
def router_over_pair(tmp_path: Path, tokenizer_dir: Path,
                     sim_pair: tuple[SimServer, SimServer]) -> Iterator[tuple[RouterThread, SimServer, SimServer]]:
    """The router in front of the paced fakes: prompts over 1000 tokens go plain, and the
    saturation bypass enters at 8 requests (never reached by the tests' concurrency 4)."""
    spec, plain = sim_pair
    doc: dict[str, Any] = {
        "model": {"name": "sim-model", "tokenizer": str(tokenizer_dir)},
        "limits": {"max_context_tokens": 65536, "default_max_tokens": 64},
        "pools": [
            {"name": "spec", "speculative": True, "endpoints": [spec.base_url], "draft_reserved_tokens": 5},
            {"name": "plain", "speculative": False, "endpoints": [plain.base_url]},
        ],
        "routing": {"long_prompt_tokens": 1000, "saturation": {"enter": 8, "exit": 6},
                    "acceptance": {"enabled": False}},
        "scrape": {"interval_s": 0.05, "timeout_s": 0.5, "stale_after_s": 1.0},
        "upstream": {"first_byte_timeout_s": 10.0, "idle_timeout_s": 10.0},
        "server": {"reload_interval_s": 5.0, "log_requests": False},
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(doc))
    router = RouterThread(path).start()
    try:
        yield router, spec, plain
    finally:
        router.stop()
