"""Two fake SGLang pools (``spec`` EAGLE-3, ``plain``) and the router in front of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer
from tests.support.wait import wait_until

__all__ = ["Stack", "spec_fake_config"]


def spec_fake_config(tokenizer: Path, **kw: Any) -> FakeConfig:
    """The ``spec`` pool's fake: EAGLE-3 (3 steps, top-1, 4 draft tokens), accept length 2.5."""
    return FakeConfig(model_name="tiny-llama", context_length=2048, tokenizer_path=str(tokenizer),
                      speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                      speculative_num_draft_tokens=4, spec_accept_length=2.5, **kw)


class Stack:
    """Two fakes (spec, plain) and the router, every endpoint healthy once built.

    Args:
        tmp: a directory for ``router.yaml``.
        tokenizer: the tokenizer directory (router and fakes count with it).
        router_kwargs: passed to :func:`router.app.asgi.create_app` (e.g. ``span_exporter``).
        overrides: dotted config paths (:func:`tests.support.config.router_config`).
    """

    def __init__(self, tmp: Path, tokenizer: Path, *, router_kwargs: dict[str, Any] | None = None,
                 **overrides: Any) -> None:
        self.spec = FakeServer(spec_fake_config(tokenizer)).start()
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           tokenizer_path=str(tokenizer))).start()
        self.config_path = write_router_yaml(
            tmp / "router.yaml", router_config(tokenizer, self.spec.base_url, self.plain.base_url, **overrides))
        self.router = RouterServer(self.config_path, **(router_kwargs or {})).start()
        # the first scrape may time out on a loaded machine
        wait_until(lambda: all(ep.healthy for ep in self.router.state.fleet.endpoints()), 15,
                   "the fake endpoints to become healthy")
        self.client = self.router.client

    def reconfigure(self, edit: Callable[[dict[str, Any]], object]) -> None:
        """Rewrite the router's YAML with ``edit(doc)`` (in place) and wait until the reload
        applied it and every endpoint of the new runtime is healthy."""
        doc = yaml.safe_load(self.config_path.read_text())
        edit(doc)
        old = self.router.state.runtime
        self.config_path.write_text(yaml.safe_dump(doc))
        wait_until(lambda: self.router.state.runtime is not old and all(
            ep.healthy for ep in self.router.state.runtime.all_endpoints()), 10, "the reload to apply")

    def close(self) -> None:
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

    def wait_scrapes(self, n: int = 1) -> None:
        """Wait until ``n`` scrape rounds begun after this call have finished."""
        self.router.wait_scrape_rounds(n)

    def inflight(self) -> int:
        return sum(ep.inflight for ep in self.router.state.fleet.endpoints())

    def settled_inflight(self, timeout_s: float = 2.0) -> int:
        """In-flight count once the router finished its responses (the client may see the last
        byte a moment before the router's ``finally`` releases the lease)."""
        try:
            wait_until(lambda: self.inflight() == 0, timeout_s, "in-flight 0")
        except AssertionError:
            pass
        return self.inflight()
