"""OpenTelemetry spans of the router (router.ops.tracing) over real HTTP, exported to the SDK's
InMemorySpanExporter: a server span per request, a client span per attempt whose context the
engine receives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.support import wait_until
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def traced(tmp_path: Path, tokenizer_dir: Path) -> Iterator[tuple[Stack, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    s = Stack(tmp_path, tokenizer_dir, router_kwargs={"span_exporter": exporter},
              tracing={"enabled": True, "service_name": "specgate-test",
                             "resource_attributes": {"deployment.environment": "ci"}})
    try:
        yield s, exporter
    finally:
        s.close()


def chat(**kw):
    return {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **kw}


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_span_and_one_client_span_per_attempt(traced, stream: bool) -> None:
    stack, exporter = traced
    stack.script(stack.spec, {"status": 500})  # failover: two attempts
    r = stack.client.post(CHAT, json=chat(stream=stream),
                          headers={"traceparent": TRACEPARENT, "tracestate": "vendora=x,vendorb=y"})
    assert r.status_code == 200
    wait_until(lambda: len(exporter.get_finished_spans()) == 3, 5, "three spans")
    spans = exporter.get_finished_spans()
    server = next(s for s in spans if s.kind is SpanKind.SERVER)
    clients = sorted((s for s in spans if s.kind is SpanKind.CLIENT), key=lambda s: s.attributes["specgate.attempt"])
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE_ID}  # one trace, the client's
    assert server.parent.span_id == 0x00f067aa0ba902b7 and server.name == "POST /v1/chat/completions"
    assert all(c.parent.span_id == server.context.span_id for c in clients)
    assert [(c.attributes["specgate.pool"], c.attributes["http.response.status_code"]) for c in clients] == [
        ("spec", 500), ("plain", 200)]
    attrs = server.attributes
    assert attrs["specgate.pool"] == "spec" and attrs["specgate.reason"] == "speculative"  # the decision
    assert attrs["specgate.final_pool"] == "plain"  # where it was served
    assert attrs["specgate.attempts"] == 2 and attrs["http.response.status_code"] == 200
    assert isinstance(attrs["specgate.prompt_tokens"], int) and isinstance(attrs["specgate.prompt_tokens_exact"], bool)
    assert server.resource.attributes["service.name"] == "specgate-test"
    assert server.resource.attributes["deployment.environment"] == "ci"
    sent = stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain)
    for attempt, client in zip(sent, clients, strict=True):  # each attempt carries its own span as parent
        assert attempt["headers"]["traceparent"] == f"00-{TRACE_ID}-{client.context.span_id:016x}-01"
        assert attempt["headers"]["tracestate"] == "vendora=x,vendorb=y"


def test_a_refused_request_ends_its_span_with_the_error(traced) -> None:
    stack, exporter = traced
    r = stack.client.post(CHAT, json=chat(max_tokens=10**9))
    assert r.status_code == 400
    wait_until(lambda: len(exporter.get_finished_spans()) == 1, 5, "one span")
    (span,) = exporter.get_finished_spans()
    assert span.kind is SpanKind.SERVER and span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "context_length_exceeded"
    assert span.attributes["http.response.status_code"] == 400
    assert span.parent is None  # no client context: a new root


def test_without_client_context_the_engine_joins_the_routers_trace(traced) -> None:
    stack, exporter = traced
    assert stack.client.post(CHAT, json=chat()).status_code == 200
    wait_until(lambda: len(exporter.get_finished_spans()) == 2, 5, "two spans")
    client = next(s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT)
    sent = (stack.backend_requests(stack.spec) + stack.backend_requests(stack.plain))[0]
    version, trace_id, parent_id, flags = sent["headers"]["traceparent"].split("-")
    assert (version, trace_id, parent_id) == ("00", f"{client.context.trace_id:032x}", f"{client.context.span_id:016x}")
    assert int(flags, 16) & 1  # sampled (the SDK also sets Trace Context level 2's random-id bit, 0x02)
