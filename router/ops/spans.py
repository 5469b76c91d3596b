"""Ending a span without the :class:`router.ops.tracing.Tracing` that started it.

A request's spans are ended by whoever finishes the request (the relay, the error envelope,
the disconnect path), possibly after a config reload replaced or removed the app's tracer
(:mod:`router.app.tracing_reload`); a span needs only its own provider to end, so nothing here
reads the app's current tracing. OpenTelemetry is imported only when an error is recorded
(a router with tracing off never calls this).
"""

from __future__ import annotations

from typing import Any

__all__ = ["end_span"]


def end_span(span: Any, status: int | None, error: str | None = None, **attributes: Any) -> None:
    """Set the outcome on ``span`` (an OpenTelemetry ``Span``) and end it.

    Args:
        status: the HTTP status, as ``http.response.status_code`` (None: none is set).
        error: the error code, as ``error.type``, with status ERROR (None: no error).
        attributes: set as ``specgate.<key>`` unless None.
    """
    if status is not None:
        span.set_attribute("http.response.status_code", status)
    for key, value in attributes.items():
        if value is not None:
            span.set_attribute(f"specgate.{key}", value)
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
