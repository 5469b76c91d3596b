"""The ``tracing`` section applied on a config reload (router.app.tracing_reload): turned on, its
service name changed, turned off, each without a restart; a request in flight across the
swap ends its spans in the tracer it started with, which is shut down only after it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.support import router_config, wait_until, write_router_yaml
from tests.support.stack import Stack

CHAT = "/v1/chat/completions"
BODY = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def traced(tmp_path: Path, tokenizer_dir: Path) -> Iterator[tuple[Stack, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    s = Stack(tmp_path, tokenizer_dir, router_kwargs={"span_exporter": exporter})  # tracing off
    try:
        yield s, exporter
    finally:
        s.close()


def reload_with(stack: Stack, tokenizer_dir: Path, tracing: dict[str, Any]) -> None:
    done = stack.router.state.reloads_ok
    write_router_yaml(stack.config_path, router_config(tokenizer_dir, stack.spec.base_url, stack.plain.base_url,
                                                       tracing=tracing))
    wait_until(lambda: stack.router.state.reloads_ok == done + 1, 15, "the reload")


def services(exporter: InMemorySpanExporter) -> list[str]:
    return [s.resource.attributes["service.name"] for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


def test_tracing_is_turned_on_changed_and_off_by_a_reload(traced, tokenizer_dir: Path) -> None:
    stack, exporter = traced
    assert stack.client.post(CHAT, json=BODY).status_code == 200
    assert exporter.get_finished_spans() == () and stack.router.state.tracing is None
    reload_with(stack, tokenizer_dir, {"enabled": True, "service_name": "router-a"})
    assert stack.client.post(CHAT, json=BODY).status_code == 200
    wait_until(lambda: services(exporter) == ["router-a"], 5, "a span of router-a")
    first = stack.router.state.tracing
    reload_with(stack, tokenizer_dir, {"enabled": True, "service_name": "router-b", "sampler_ratio": 1.0})
    assert stack.router.state.tracing is not first
    wait_until(lambda: first not in stack.router.state.retiring, 5, "the old tracer retired (no span open)")
    assert stack.client.post(CHAT, json=BODY).status_code == 200
    wait_until(lambda: services(exporter) == ["router-a", "router-b"], 5, "a span of router-b")
    same = stack.router.state.tracing
    reload_with(stack, tokenizer_dir, {"enabled": True, "service_name": "router-b", "forward_baggage": True})
    assert stack.router.state.tracing is same  # baggage is read per request: no new tracer
    reload_with(stack, tokenizer_dir, {"enabled": False})
    assert stack.router.state.tracing is None
    assert stack.client.post(CHAT, json=BODY).status_code == 200
    wait_until(lambda: not stack.router.state.retiring, 5, "the last tracer retired")
    assert services(exporter) == ["router-a", "router-b"]


def test_a_request_in_flight_across_the_swap_keeps_its_tracer(traced, tokenizer_dir: Path) -> None:
    stack, exporter = traced
    reload_with(stack, tokenizer_dir, {"enabled": True, "service_name": "router-a"})
    old = stack.router.state.tracing
    stack.script(stack.spec, {"delay_s": 1.5}, {"delay_s": 1.5})  # the engine holds the request
    stack.script(stack.plain, {"delay_s": 1.5}, {"delay_s": 1.5})
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(stack.client.post(CHAT, json=BODY).status_code))
    t.start()
    wait_until(lambda: old.open_spans == 2, 10, "the request's server and client spans open")
    reload_with(stack, tokenizer_dir, {"enabled": False})
    assert stack.router.state.tracing is None and old in stack.router.state.retiring  # not shut down yet
    t.join(30)
    assert result == [200]
    wait_until(lambda: old not in stack.router.state.retiring, 5, "the old tracer retired after the request")
    spans = exporter.get_finished_spans()
    assert sorted(s.kind.name for s in spans) == ["CLIENT", "SERVER"]  # both ended, none dropped
    assert {s.resource.attributes["service.name"] for s in spans} == {"router-a"}
