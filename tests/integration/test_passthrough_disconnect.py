"""A client that goes away during a pass-through call (``/v1/embeddings``, rerank, score,
classify) closes the router's upstream request at once and releases the lease, as
``router/upstream/proxy.py`` does for generations; the engine is never left computing for nobody."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn

from router.front.passthrough import PASSTHROUGH_ROUTES
from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, free_port, router_config, wait_until, write_router_yaml

BODIES: dict[str, dict[str, Any]] = {
    "/v1/embeddings": {"model": "embed-model", "input": "hello"},
    "/v1/rerank": {"model": "embed-model", "query": "q", "documents": ["a", "b"]},
    "/v1/score": {"model": "embed-model", "query": "q", "items": ["a"]},
    "/v1/classify": {"model": "embed-model", "input": "hello"},
}


class SlowEngine:
    """An engine that takes every pass-through request and never answers it; it records when
    the router closes the request (the ASGI ``http.disconnect``). ``/metrics`` answers at once,
    so the router's scraper keeps it healthy."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.started: list[str] = []
        self.closed: list[str] = []
        self.lock = threading.Lock()
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", interface="asgi3",
                             access_log=False)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/metrics":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"sglang:num_running_reqs 0\n"})
            return
        while (await receive()).get("more_body"):
            pass
        with self.lock:
            self.started.append(path)
        while (await receive())["type"] != "http.disconnect":
            pass
        with self.lock:
            self.closed.append(path)

    def start(self) -> SlowEngine:
        self.thread.start()
        wait_until(lambda: self.server.started, 10, "the slow engine to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def slow_stack(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Iterator[tuple[RouterServer, SlowEngine]]:
    engine = SlowEngine().start()
    plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096)).start()
    doc = router_config(tokenizer_dir, plain_url=plain.base_url)
    doc["pools"].append({"name": "embed", "speculative": False, "endpoints": [engine.base_url],
                         "serves": ["embeddings", "rerank", "score", "classify"]})
    path = write_router_yaml(tmp_path_factory.mktemp("passthrough") / "router.yaml", doc)
    router = RouterServer(path).start(ready=True)
    try:
        wait_until(lambda: router.healthy("embed") == {engine.base_url}, 15, "the slow engine to be healthy")
        yield router, engine
    finally:
        router.stop()
        plain.stop()
        engine.stop()


@pytest.mark.parametrize("path", sorted(PASSTHROUGH_ROUTES))
def test_client_disconnect_closes_the_upstream_call_and_releases_the_lease(
        slow_stack: tuple[RouterServer, SlowEngine], path: str) -> None:
    router, engine = slow_stack
    body = orjson.dumps(BODIES[path])
    before = engine.closed.count(path)
    with socket.create_connection(("127.0.0.1", router.port), timeout=5) as client:
        client.sendall(f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                       f"content-length: {len(body)}\r\n\r\n".encode() + body)
        wait_until(lambda: engine.started.count(path) > before, 5, f"the engine to receive {path}")
        assert router.pool("embed").inflight() == 1
    # the client is gone: the router's upstream request must close long before
    # upstream.nonstream_timeout_s (10 s in the tests' config)
    wait_until(lambda: engine.closed.count(path) > before, 2, f"the router to close its upstream {path}")
    wait_until(lambda: router.pool("embed").inflight() == 0, 2, "the lease to be released")
    assert router.settled_metric("specgate_requests_total", 1, pool="embed", reason=PASSTHROUGH_ROUTES[path],
                         status="499") >= 1
