"""Spans of the pass-through routes (router.front.passthrough) over real HTTP, exported to the SDK's
InMemorySpanExporter: a server span per request and a client span per upstream attempt, whose
context is the ``traceparent`` the engine receives; with tracing off the client's context is
forwarded unchanged."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from router.front.passthrough import PASSTHROUGH_ROUTES
from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, free_port, router_config, wait_until, write_router_yaml

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
BODIES: dict[str, dict[str, Any]] = {
    "/v1/embeddings": {"model": "embed-model", "input": "hello"},
    "/v1/rerank": {"model": "embed-model", "query": "q", "documents": ["a", "b"]},
    "/v1/score": {"model": "embed-model", "query": "q", "items": ["a"]},
    "/v1/classify": {"model": "embed-model", "input": "hello"},
}


class Engine:
    """An engine answering every pass-through POST with ``status`` (``None``: never answers,
    until the router closes the request); it records each request's headers. ``/metrics``
    answers at once, so the scraper keeps it healthy."""

    def __init__(self, status: int | None) -> None:
        self.status = status
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.headers: list[dict[str, str]] = []
        self.closed = 0
        self.lock = threading.Lock()
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
                             interface="asgi3", access_log=False)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"sglang:num_running_reqs 0\n"})
            return
        while (await receive()).get("more_body"):
            pass
        with self.lock:
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        if self.status is None:
            while (await receive())["type"] != "http.disconnect":
                pass
            with self.lock:
                self.closed += 1
            return
        body = orjson.dumps({"object": "list", "data": []} if self.status == 200 else
                            {"object": "error", "message": "boom", "type": "InternalServerError", "code": 500})
        await send({"type": "http.response.start", "status": self.status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    def start(self) -> Engine:
        self.thread.start()
        wait_until(lambda: self.server.started, 10, "the engine to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class PassStack:
    """A plain generation fake, an ``embed`` pool of ``engines`` (in this order) serving every
    pass-through kind, and the router (tracing per ``tracing``)."""

    def __init__(self, tmp: Path, tokenizer: Path, engines: list[Engine], tracing: dict[str, Any],
                 exporter: InMemorySpanExporter | None) -> None:
        self.engines = [e.start() for e in engines]
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096)).start()
        doc = router_config(tokenizer, plain_url=self.plain.base_url, tracing=tracing)
        doc["pools"].append({"name": "embed", "speculative": False, "endpoints": [e.base_url for e in engines],
                             "serves": ["embeddings", "rerank", "score", "classify"]})
        path = write_router_yaml(tmp / "router.yaml", doc)
        kwargs = {"span_exporter": exporter} if exporter is not None else {}
        self.router = RouterServer(path, **kwargs).start(ready=True, timeout=60)
        urls = {e.base_url for e in engines}
        wait_until(lambda: self.router.healthy("embed") == urls, 15, "the engines to be healthy")
        self.client = self.router.client

    def close(self) -> None:
        self.router.stop()
        self.plain.stop()
        for e in self.engines:
            e.stop()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def failover(tmp_path: Path, tokenizer_dir: Path, exporter: InMemorySpanExporter) -> Iterator[PassStack]:
    """The first endpoint answers 500, the second 200 (a fresh router: its first pass-through
    request tries the endpoints in config order)."""
    s = PassStack(tmp_path, tokenizer_dir, [Engine(500), Engine(200)], {"enabled": True}, exporter)
    try:
        yield s
    finally:
        s.close()


def _spans(exporter: InMemorySpanExporter, n: int) -> list[Any]:
    wait_until(lambda: len(exporter.get_finished_spans()) == n, 5,
               lambda: f"{n} spans, got {[s.name for s in exporter.get_finished_spans()]}")
    return list(exporter.get_finished_spans())


@pytest.mark.parametrize("path", sorted(PASSTHROUGH_ROUTES))
def test_a_server_span_and_a_client_span_per_attempt(failover: PassStack, exporter: InMemorySpanExporter,
                                                     path: str) -> None:
    r = failover.client.post(path, json=BODIES[path], headers={"traceparent": TRACEPARENT, "tracestate": "vendora=x"})
    assert r.status_code == 200, r.text
    spans = _spans(exporter, 3)
    (server,) = [s for s in spans if s.kind is SpanKind.SERVER]
    clients = sorted((s for s in spans if s.kind is SpanKind.CLIENT), key=lambda s: s.attributes["specgate.attempt"])
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE_ID}  # one trace, the client's
    assert server.name == f"POST {path}" and server.parent.span_id == 0x00f067aa0ba902b7
    assert {k: server.attributes[k] for k in ("specgate.reason", "specgate.pool", "specgate.final_pool",
                                              "specgate.attempts", "specgate.outcome", "http.response.status_code")} == {
        "specgate.reason": PASSTHROUGH_ROUTES[path], "specgate.pool": "embed", "specgate.final_pool": "embed",
        "specgate.attempts": 2, "specgate.outcome": "ok", "http.response.status_code": 200}
    assert server.status.status_code is StatusCode.UNSET
    assert [(c.name, c.parent.span_id, c.attributes["server.address"], c.attributes["http.response.status_code"],
             c.attributes.get("error.type")) for c in clients] == [
        (f"POST {path}", server.context.span_id, failover.engines[0].base_url, 500, "engine_error"),
        (f"POST {path}", server.context.span_id, failover.engines[1].base_url, 200, None)]
    for engine, client in zip(failover.engines, clients, strict=True):  # each attempt: its own span as parent
        (sent,) = engine.headers
        assert sent["traceparent"] == f"00-{TRACE_ID}-{client.context.span_id:016x}-01"
        assert sent["tracestate"] == "vendora=x"


def test_a_refused_pass_through_request_ends_its_span_with_the_error(failover: PassStack,
                                                                     exporter: InMemorySpanExporter) -> None:
    r = failover.client.post("/v1/embeddings", json={"model": "embed-model", "input": 5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    (span,) = _spans(exporter, 1)
    assert span.kind is SpanKind.SERVER and span.parent is None  # no client context: a new root
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes["error.type"], span.attributes["http.response.status_code"]) == ("invalid_value", 400)
    assert all(e.headers == [] for e in failover.engines)


def test_every_endpoint_failing_ends_the_server_span_with_the_engine_error(
        tmp_path: Path, tokenizer_dir: Path, exporter: InMemorySpanExporter) -> None:
    s = PassStack(tmp_path, tokenizer_dir, [Engine(500), Engine(500)], {"enabled": True}, exporter)
    try:
        r = s.client.post("/v1/embeddings", json=BODIES["/v1/embeddings"])
        assert (r.status_code, r.json()["error"]["code"]) == (502, "upstream_error")  # the engine's 5xx, mapped
        spans = _spans(exporter, 3)
        (server,) = [x for x in spans if x.kind is SpanKind.SERVER]
        assert server.status.status_code is StatusCode.ERROR and server.attributes["specgate.attempts"] == 2
        assert (server.attributes["http.response.status_code"], server.attributes["error.type"]) == (
            502, "upstream_error")
        assert sorted(x.attributes["http.response.status_code"] for x in spans if x.kind is SpanKind.CLIENT) == [500, 500]
    finally:
        s.close()


def test_a_client_gone_ends_both_spans_as_a_disconnect(tmp_path: Path, tokenizer_dir: Path,
                                                       exporter: InMemorySpanExporter) -> None:
    hang = Engine(None)
    s = PassStack(tmp_path, tokenizer_dir, [hang], {"enabled": True}, exporter)
    try:
        body = orjson.dumps(BODIES["/v1/embeddings"])
        with socket.create_connection(("127.0.0.1", s.router.port), timeout=10) as c:
            c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            wait_until(lambda: len(hang.headers) == 1, 10, "the engine to get the request")
        wait_until(lambda: hang.closed == 1, 10, "the router to close the upstream request")
        spans = _spans(exporter, 2)
        by_kind = {x.kind: x for x in spans}
        assert by_kind[SpanKind.SERVER].attributes["specgate.outcome"] == "client_disconnect"
        assert by_kind[SpanKind.SERVER].attributes["http.response.status_code"] == 499
        assert by_kind[SpanKind.CLIENT].attributes["error.type"] == "client_disconnect"
        assert by_kind[SpanKind.CLIENT].parent.span_id == by_kind[SpanKind.SERVER].context.span_id
        wait_until(lambda: s.router.state.runtime.endpoint(hang.base_url).inflight == 0, 5, "the lease released")
    finally:
        s.close()


@pytest.mark.parametrize("forward_baggage", [False, True])
def test_with_tracing_off_the_clients_context_is_forwarded_unchanged(
        tmp_path: Path, tokenizer_dir: Path, forward_baggage: bool) -> None:
    ok = Engine(200)
    s = PassStack(tmp_path, tokenizer_dir, [ok], {"enabled": False, "forward_baggage": forward_baggage}, None)
    try:
        assert s.router.state.tracing is None
        for path in sorted(PASSTHROUGH_ROUTES):
            r = s.client.post(path, json=BODIES[path], headers={
                "traceparent": TRACEPARENT, "tracestate": "vendora=x", "baggage": "user=alice"})
            assert r.status_code == 200
        malformed = s.client.post("/v1/embeddings", json=BODIES["/v1/embeddings"],
                                  headers={"traceparent": TRACEPARENT.upper(), "tracestate": "vendora=x"})
        assert malformed.status_code == 200
        *good, bad = ok.headers
        assert [(h["traceparent"], h["tracestate"], h.get("baggage")) for h in good] == [
            (TRACEPARENT, "vendora=x", "user=alice" if forward_baggage else None)] * len(PASSTHROUGH_ROUTES)
        assert "traceparent" not in bad and "tracestate" not in bad  # malformed: dropped (W3C)
    finally:
        s.close()
