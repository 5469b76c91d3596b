"""A cluster on 127.0.0.1: a fake Kubernetes API, fake SGLang pods and the router under uvicorn.

Pods get their own loopback address (127.0.0.2, 127.0.0.3, ...) and share one port, as pods
behind one Service do, so the pool's ``discovery.port`` is the same for all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from router.loops.discovery import DiscoverySettings
from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, free_port, router_config, write_router_yaml
from tests.support.fake_kube import FakeKubeAPI, endpoint_slice
from tests.support.stack import spec_fake_config

__all__ = ["CHAT", "SELECTOR", "Cluster", "base_config"]

CHAT = "/v1/chat/completions"
SELECTOR = {"app.kubernetes.io/component": "pool-spec", "app.kubernetes.io/instance": "sg"}


def base_config(tokenizer: Path, plain_url: str, port: int, **extra: Any) -> dict[str, Any]:
    """The tests' router config with the ``spec`` pool discovered by :data:`SELECTOR` on ``port``;
    ``extra`` replaces top-level sections."""
    selector = ",".join(f"{k}={v}" for k, v in SELECTOR.items())
    return router_config(tokenizer, plain_url=plain_url, **extra,
                         spec_discovery={"namespace": "default", "label_selector": selector, "port": port})


class Cluster:
    """Fake API server + fake pods (``pod(i)`` at ``127.0.0.{i+1}:port``) + plain pool + router."""

    def __init__(self, tmp: Path, tokenizer: Path) -> None:
        self.tokenizer = tokenizer
        self.api = FakeKubeAPI().start()
        self.port = free_port()
        self.pods: dict[str, FakeServer] = {}
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start()
        self.config_path = write_router_yaml(tmp / "router.yaml",
                                             base_config(tokenizer, self.plain.base_url, self.port))
        self.settings = DiscoverySettings(api_url=self.api.base_url, watch_timeout_s=30,
                                          request_timeout_s=2.0, backoff_initial_s=0.05,
                                          backoff_max_s=0.4, seed=7)
        self.router: RouterServer | None = None

    def start_router(self) -> RouterServer:
        """The router with discovery pointed at the fake API server."""
        self.router = RouterServer(self.config_path, discovery=self.settings).start()
        return self.router

    def pod(self, i: int) -> FakeServer:
        """The fake SGLang pod number ``i`` (started on first use)."""
        ip = f"127.0.0.{i + 1}"
        if ip not in self.pods:
            self.pods[ip] = FakeServer(spec_fake_config(self.tokenizer), host=ip, port=self.port).start()
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
