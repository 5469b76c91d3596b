"""OpenTelemetry traces of the router (``tracing:`` in the YAML; off by default).

With ``tracing.enabled`` the app builds one :class:`Tracing` in its lifespan (its own
``TracerProvider``, never the process-global one) exporting over OTLP/HTTP (protobuf) with
the OpenTelemetry SDK's ``BatchSpanProcessor``:

- a **server span** per generation request (the pass-through routes have theirs too,
  :mod:`router.front.passthrough`), ``POST <path>`` (kind SERVER), child of the
  client's valid ``traceparent`` (:mod:`router.ops.trace`) or a new root, with the decision as
  attributes: ``specgate.pool``, ``specgate.reason``, ``specgate.endpoint_reason``,
  ``specgate.prompt_tokens``, ``specgate.prompt_tokens_exact``, ``specgate.predicted_s`` (the
  chosen pool's predicted completion time), ``specgate.request_id``, then ``specgate.final_pool``
  (where it was served, after any failover), ``specgate.attempts``, ``specgate.outcome`` and
  ``http.response.status_code``; a refused request's span carries
  ``error.type`` (the error code) and status ERROR;
- a **client span** per upstream attempt (failover and stale-connection resend each get
  one), ``POST <path>`` (kind CLIENT), child of the server span, with ``server.address`` (the
  endpoint URL), ``specgate.pool``, ``specgate.attempt`` and the engine's status. Its context
  is what goes upstream as ``traceparent``/``tracestate`` (the client's tracestate members
  kept), so the engine's spans (SGLang ``--enable-trace``) are its children.

Sampling: ``ParentBased(TraceIdRatioBased(sampler_ratio))``: a client's sampled flag is
followed, new traces are sampled at the ratio. A span that is not sampled still propagates
its context (flags ``00``). With tracing off nothing here runs and the client's context is
forwarded unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from router.config.server import TracingConfig
from router.ops.spans import end_span

__all__ = ["Tracing"]


class _OpenSpans(SpanProcessor):
    """Counts the provider's spans started and not yet ended (so a tracer replaced by a
    reload is shut down only once its requests are done, :mod:`router.app.tracing_reload`)."""

    def __init__(self) -> None:
        self.count = 0

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        self.count += 1

    def on_end(self, span: ReadableSpan) -> None:
        self.count -= 1


class _Borrowed(SpanExporter):
    """An exporter the app was given (tests), used but never shut down by a provider."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._inner.export(spans)

    def shutdown(self) -> None:
        pass


class Tracing:
    """One app's tracer provider, tracer and W3C propagator.

    Args:
        cfg: the ``tracing`` config section.
        exporter: export to this instead of OTLP, synchronously (tests pass the SDK's
            ``InMemorySpanExporter``).
    """

    def __init__(self, cfg: TracingConfig, exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({**cfg.resource_attributes, "service.name": cfg.service_name})
        self.config = cfg
        self.provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(cfg.sampler_ratio)))
        self._open = _OpenSpans()
        self.provider.add_span_processor(self._open)
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            otlp = OTLPSpanExporter(endpoint=cfg.endpoint, timeout=cfg.export_timeout_s)
            self.provider.add_span_processor(BatchSpanProcessor(otlp))
        else:  # borrowed: a reload's new tracer exports to it too, so shutting this one down keeps it open
            self.provider.add_span_processor(SimpleSpanProcessor(_Borrowed(exporter)))
        self.tracer = self.provider.get_tracer("specgate.router")
        self._propagator = TraceContextTextMapPropagator()

    def start_request(self, path: str, client_trace: dict[str, str], request_id: str) -> Span:
        """The server span of one request, child of ``client_trace`` (validated W3C headers)."""
        parent: Context | None = self._propagator.extract(client_trace) if client_trace else None
        return self.tracer.start_span(f"POST {path}", context=parent, kind=SpanKind.SERVER, attributes={
            "http.request.method": "POST", "url.path": path, "specgate.request_id": request_id})

    def start_attempt(self, parent: Span, url: str, path: str, pool: str, attempt: int) -> tuple[Span, dict[str, str]]:
        """A client span for one upstream attempt and the W3C headers that carry its context."""
        span = self.tracer.start_span(f"POST {path}", context=set_span_in_context(parent), kind=SpanKind.CLIENT,
                                      attributes={"http.request.method": "POST", "server.address": url,
                                                  "specgate.pool": pool, "specgate.attempt": attempt})
        headers: dict[str, str] = {}
        self._propagator.inject(headers, context=set_span_in_context(span))
        return span, headers

    #: Set the outcome on a span and end it (:func:`router.ops.spans.end_span`).
    end = staticmethod(end_span)

    @property
    def open_spans(self) -> int:
        """Spans of this provider started and not yet ended."""
        return self._open.count

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking: call it off the event loop)."""
        self.provider.shutdown()
