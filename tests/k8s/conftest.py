"""A cluster on 127.0.0.1: a fake Kubernetes API, fake SGLang pods and the router under uvicorn.

Pods get their own loopback address (127.0.0.2, 127.0.0.3, ...) and share one port, as pods
behind one Service do, so the pool's ``discovery.port`` is the same for all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from router.discovery import DiscoverySettings
from serving.fake_sglang import FakeConfig, FakeServer
from tests.helpers import free_port
from tests.integration.conftest import RouterServer
from tests.k8s.fake_kube import FakeKubeAPI, endpoint_slice

CHAT = "/v1/chat/completions"
SELECTOR = {"app.kubernetes.io/component": "pool-spec", "app.kubernetes.io/instance": "sg"}


def wait_until(pred: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Router(RouterServer):
    """The router app under uvicorn in a thread (real HTTP on 127.0.0.1), with discovery."""

    def __init__(self, config_path: Path, settings: DiscoverySettings | None = None) -> None:
        super().__init__(config_path, discovery=settings)
        self.client = httpx.Client(base_url=self.base_url, timeout=30)

    def stop(self) -> None:
        self.client.close()
        super().stop()

    def pool(self, name: str) -> Any:
        return next(p for p in self.state.runtime.pools if p.name == name)

    def urls(self, pool: str = "spec") -> set[str]:
        """Routable URLs of a pool (present and not draining)."""
        return {u for u, e in self.pool(pool).endpoints.items() if not e.draining}

    def healthy(self, pool: str = "spec") -> set[str]:
        return {u for u, e in self.pool(pool).endpoints.items() if e.healthy}


def base_config(tokenizer: Path, plain_url: str, port: int, **extra: Any) -> dict[str, Any]:
    selector = ",".join(f"{k}={v}" for k, v in SELECTOR.items())
    doc: dict[str, Any] = {
        "model": {"name": "tiny-llama", "tokenizer": str(tokenizer)},
        "limits": {"max_context_tokens": 4096, "default_max_tokens": 256, "max_request_bytes": 1_000_000},
        "pools": [
            {"name": "spec", "speculative": True, "max_context_tokens": 2048, "draft_reserved_tokens": 4,
             "discovery": {"namespace": "default", "label_selector": selector, "port": port}},
            {"name": "plain", "speculative": False, "endpoints": [plain_url]},
        ],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
        "scrape": {"interval_s": 0.05, "timeout_s": 0.5, "stale_after_s": 1.0},
        "health": {"failure_threshold": 3, "success_threshold": 2, "retry_after_s": 3},
        "upstream": {"first_byte_timeout_s": 5.0, "idle_timeout_s": 5.0, "nonstream_timeout_s": 10.0},
        "server": {"reload_interval_s": 0.1, "log_requests": False},
    }
    doc.update(extra)
    return doc


class Cluster:
    """Fake API server + fake pods (``pod(i)`` at ``127.0.0.{i+1}:port``) + plain pool + router."""

    def __init__(self, tmp: Path, tokenizer: Path) -> None:
        self.tokenizer = tokenizer
        self.api = FakeKubeAPI().start()
        self.port = free_port()
        self.pods: dict[str, FakeServer] = {}
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start()
        self.config_path = tmp / "router.yaml"
        self.config_path.write_text(yaml.safe_dump(base_config(tokenizer, self.plain.base_url, self.port)))
        self.settings = DiscoverySettings(api_url=self.api.base_url, watch_timeout_s=30,
                                          request_timeout_s=2.0, backoff_initial_s=0.05,
                                          backoff_max_s=0.4, seed=7)
        self.router: Router | None = None

    def start_router(self) -> Router:
        self.router = Router(self.config_path, self.settings).start()
        return self.router

    def pod(self, i: int) -> FakeServer:
        """The fake SGLang pod number ``i`` (started on first use)."""
        ip = f"127.0.0.{i + 1}"
        if ip not in self.pods:
            self.pods[ip] = FakeServer(
                FakeConfig(model_name="tiny-llama", context_length=2048, tokenizer_path=str(self.tokenizer),
                           speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                           speculative_num_draft_tokens=4, spec_accept_length=2.5),
                host=ip, port=self.port).start()
        return self.pods[ip]

    def url(self, i: int) -> str:
        return f"http://127.0.0.{i + 1}:{self.port}"

    def slice(self, name: str, pods: dict[int, bool], **labels: str) -> dict[str, Any]:
        """An EndpointSlice of the spec pool's Service with pods ``{i: ready}`` (started)."""
        for i in pods:
            self.pod(i)
        return endpoint_slice(name, {**SELECTOR, "kubernetes.io/service-name": "sg-pool-spec", **labels},
                              {f"127.0.0.{i + 1}": ready for i, ready in pods.items()}, port=self.port)

    def generations(self, i: int) -> int:
        """Chat completions pod ``i`` received."""
        return len(self.pod(i).requests(CHAT)["requests"])

    def close(self) -> None:
        if self.router is not None:
            self.router.stop()
        for pod in self.pods.values():
            pod.stop()
        self.plain.stop()
        self.api.close()


@pytest.fixture
def cluster(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, tokenizer_dir)
    try:
        yield c
    finally:
        c.close()
