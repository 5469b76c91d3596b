"""A tiny OTLP/HTTP trace receiver on 127.0.0.1 (aiohttp in a background thread).

It accepts ``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest`` body (the
OpenTelemetry protocol, https://opentelemetry.io/docs/specs/otlp/#otlphttp; ``gzip``
``Content-Encoding`` decoded), decodes it with the ``opentelemetry-proto`` messages and keeps
each span as a :class:`ReceivedSpan`; it answers 200 with an empty
``ExportTraceServiceResponse``. Any other content type is 415, an undecodable body 400.

    with OtlpReceiver() as rx:
        ...  # point exporters at rx.url
        rx.wait_for(lambda spans: len(spans) >= 3, timeout=30)

No state outside the instance; one instance per test or script.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from aiohttp import web
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.support.net import free_port
from tests.support.wait import wait_until

__all__ = ["OtlpReceiver", "ReceivedSpan", "format_trace"]

_KINDS = {Span.SPAN_KIND_SERVER: "SERVER", Span.SPAN_KIND_CLIENT: "CLIENT", Span.SPAN_KIND_INTERNAL: "INTERNAL",
          Span.SPAN_KIND_PRODUCER: "PRODUCER", Span.SPAN_KIND_CONSUMER: "CONSUMER"}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as exported.

    Attributes:
        service: the resource's ``service.name``.
        name: the span's name.
        kind: ``SERVER``, ``CLIENT``, ``INTERNAL``, ``PRODUCER``, ``CONSUMER`` or ``UNSPECIFIED``.
        trace_id: 32 lowercase hex digits.
        span_id: 16 lowercase hex digits.
        parent_span_id: 16 hex digits, or ``""`` for a root span.
        attributes: the span's attributes (string, int, float and bool values; others as text).
        start_ns, end_ns: Unix nanoseconds.
    """

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, object]
    start_ns: int
    end_ns: int


def _value(v: object) -> object:
    which = v.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(v, which) if which in ("string_value", "int_value", "double_value", "bool_value") else str(v)


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one ``ExportTraceServiceRequest`` (raises DecodeError when it is not one)."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        service = next((kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"), "")
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(ReceivedSpan(
                    service=service, name=s.name, kind=_KINDS.get(s.kind, "UNSPECIFIED"),
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_span_id=s.parent_span_id.hex(),
                    attributes={kv.key: _value(kv.value) for kv in s.attributes},
                    start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano))
    return out


class OtlpReceiver:
    """The receiver (module docstring). ``url``: ``http://127.0.0.1:<port>/v1/traces``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/traces"
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="otlp-receiver")

    async def _traces(self, request: web.Request) -> web.Response:
        if request.content_type != "application/x-protobuf":
            return web.Response(status=415, text="want application/x-protobuf")
        body = await request.read()
        if request.headers.get("content-encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        try:
            spans = decode(body)
        except DecodeError:
            return web.Response(status=400, text="not an ExportTraceServiceRequest")
        with self._lock:
            self._spans.extend(spans)
            self.requests += 1
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def start(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in arrival order."""
        with self._lock:
            return list(self._spans)

    def wait_for(self, predicate: Callable[[list[ReceivedSpan]], bool], timeout: float,
                 what: str = "spans") -> list[ReceivedSpan]:
        """Wait until ``predicate(spans)`` holds; return the spans then (AssertionError on timeout)."""
        wait_until(lambda: predicate(self.spans()), timeout,
                   lambda: f"{what}; received: {[(s.service, s.name) for s in self.spans()]}", interval=0.05)
        return self.spans()


def format_trace(spans: list[ReceivedSpan]) -> str:
    """The spans as an indented tree per trace: ``service  KIND  name  span_id <- parent``."""
    lines = []
    by_trace: dict[str, list[ReceivedSpan]] = {}
    for s in sorted(spans, key=lambda s: s.start_ns):
        by_trace.setdefault(s.trace_id, []).append(s)
    for trace_id, members in by_trace.items():
        lines.append(f"trace {trace_id}")
        ids = {s.span_id for s in members}
        children: dict[str, list[ReceivedSpan]] = {}
        for s in members:
            children.setdefault(s.parent_span_id if s.parent_span_id in ids else "", []).append(s)

        _walk(children, "", 1, lines)
    return "\n".join(lines)


def _walk(children: dict[str, list[ReceivedSpan]], parent: str, depth: int, lines: list[str]) -> None:
    for s in children.get(parent, []):
        link = s.parent_span_id or "(root)"
        lines.append(f"{'  ' * depth}{s.service:<16} {s.kind:<8} {s.name.strip():<32} {s.span_id} <- {link}")
        _walk(children, s.span_id, depth + 1, lines)
