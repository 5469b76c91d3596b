"""The router served by uvicorn on 127.0.0.1 in front of fake SGLang pools."""

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

from router.app import create_app
from serving.fake_sglang import FakeConfig, FakeServer
from tests.helpers import free_port


class RouterServer:
    """The real router app under uvicorn in a background thread (real HTTP on 127.0.0.1)."""

    def __init__(self, config_path: Path, **app_kwargs: Any) -> None:
        self.config_path = config_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(config_path, **app_kwargs)
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                             loop="asyncio", http="httptools", lifespan="on", access_log=False)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> RouterServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("router did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    @property
    def state(self) -> Any:
        return self.app.state.specgate

    def metric(self, name: str, **labels: str) -> float:
        value = self.state.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def write_config(path: Path, tokenizer: Path, spec_url: str, plain_url: str, **overrides: Any) -> Path:
    doc: dict[str, Any] = {
        "model": {"name": "tiny-llama", "tokenizer": str(tokenizer)},
        "limits": {"max_context_tokens": 4096, "default_max_tokens": 256, "max_request_bytes": 1_000_000},
        "pools": [
            {"name": "spec", "speculative": True, "endpoints": [spec_url], "max_context_tokens": 2048,
             "draft_reserved_tokens": 4},
            {"name": "plain", "speculative": False, "endpoints": [plain_url]},
        ],
        # no flip bound: the tests step the hysteresis faster than a deployment would
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}, "min_flip_interval_s": 0},
        "scrape": {"interval_s": 0.05, "timeout_s": 0.5, "stale_after_s": 1.0},
        "health": {"failure_threshold": 3, "success_threshold": 2, "retry_after_s": 3},
        "upstream": {"first_byte_timeout_s": 5.0, "idle_timeout_s": 5.0, "nonstream_timeout_s": 10.0},
        "server": {"reload_interval_s": 0.1, "log_requests": False},
    }
    for key, value in overrides.items():
        node = doc
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    path.write_text(yaml.safe_dump(doc))
    return path


class Stack:
    """Two fakes (spec, plain) and the router."""

    def __init__(self, tmp: Path, tokenizer: Path, **overrides: Any) -> None:
        self.spec = FakeServer(FakeConfig(model_name="tiny-llama", context_length=2048,
                                          tokenizer_path=str(tokenizer), speculative_algorithm="EAGLE3",
                                          speculative_num_steps=3, speculative_eagle_topk=1,
                                          speculative_num_draft_tokens=4, spec_accept_length=2.5)).start()
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start()
        self.config_path = write_config(tmp / "router.yaml", tokenizer, self.spec.base_url,
                                        self.plain.base_url, **overrides)
        self.router = RouterServer(self.config_path).start()
        deadline = time.monotonic() + 15   # the first scrape may time out on a loaded machine
        while not all(ep.healthy for ep in self.router.state.runtime.all_endpoints()):
            if time.monotonic() > deadline:
                raise RuntimeError("fake endpoints did not become healthy")
            time.sleep(0.02)
        self.client = httpx.Client(base_url=self.router.base_url, timeout=30)

    def close(self) -> None:
        self.client.close()
        self.router.stop()
        self.spec.stop()
        self.plain.stop()

    def backend_requests(self, fake: FakeServer, path: str | None = "/v1/chat/completions") -> list[dict[str, Any]]:
        """Requests the fake received on ``path`` (None: any generation path)."""
        paths = {path} if path else {"/v1/chat/completions", "/v1/completions", "/generate"}
        return [r for r in httpx.get(fake.base_url + "/_fake/requests").json()["requests"] if r["path"] in paths]

    def fake_log(self, fake: FakeServer) -> dict[str, Any]:
        return httpx.get(fake.base_url + "/_fake/requests").json()

    def script(self, fake: FakeServer, *behaviours: dict[str, Any]) -> None:
        r = httpx.post(fake.base_url + "/_fake/script", json=list(behaviours))
        assert r.status_code == 200, r.text

    def set_gauges(self, fake: FakeServer, **gauges: Any) -> None:
        r = httpx.post(fake.base_url + "/_fake/metrics", json={"gauges": gauges})
        assert r.status_code == 200, r.text

    def wait_scrapes(self, n: int = 3) -> None:
        time.sleep(0.05 * n + 0.05)

    def inflight(self) -> int:
        return sum(ep.inflight for ep in self.router.state.runtime.all_endpoints())

    def settled_inflight(self, timeout_s: float = 2.0) -> int:
        """In-flight count once the router finished its responses (the client may see the last
        byte a moment before the router's ``finally`` releases the lease)."""
        deadline = time.monotonic() + timeout_s
        while self.inflight() != 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.inflight()


@pytest.fixture
def stack(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Stack]:
    s = Stack(tmp_path, tokenizer_dir)
    try:
        yield s
    finally:
        s.close()
