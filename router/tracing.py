"""OpenTelemetry traces of the router (``tracing:`` in the YAML; off by default).

With ``tracing.enabled`` the app builds one :class:`Tracing` in its lifespan (its own
``TracerProvider``, never the process-global one) exporting over OTLP/HTTP (protobuf) with
the OpenTelemetry SDK's ``BatchSpanProcessor``:

- a **server span** per generation request (the pass-through routes have theirs too,
  :mod:`router.passthrough`), ``POST <path>`` (kind SERVER), child of the
  client's valid ``traceparent`` (:mod:`router.trace`) or a new root, with the decision as
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

from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from router.config_server import TracingConfig

__all__ = ["Tracing"]


class Tracing:
    """One app's tracer provider, tracer and W3C propagator.

    Args:
        cfg: the ``tracing`` config section.
        exporter: export to this instead of OTLP, synchronously (tests pass the SDK's
            ``InMemorySpanExporter``).
    """

    def __init__(self, cfg: TracingConfig, exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({**cfg.resource_attributes, "service.name": cfg.service_name})
        self.provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(cfg.sampler_ratio)))
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            otlp = OTLPSpanExporter(endpoint=cfg.endpoint, timeout=cfg.export_timeout_s)
            self.provider.add_span_processor(BatchSpanProcessor(otlp))
        else:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
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

    @staticmethod
    def end(span: Span, status: int | None, error: str | None = None, **attributes: Any) -> None:
        """Set the outcome on ``span`` and end it (``error``: the error code, status ERROR)."""
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        for key, value in attributes.items():
            if value is not None:
                span.set_attribute(f"specgate.{key}", value)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking: call it off the event loop)."""
        self.provider.shutdown()
