"""What the error path knows of one request: a typed context on the ASGI scope.

A handler (:func:`router.front.api.serve_generate`, :func:`router.front.passthrough.serve_passthrough`)
attaches one :class:`RequestContext` as soon as it has the request's id
(:func:`attach_context`) and fills in what it learns later; the error envelope
(``router.front.api._error_response``), which gets only the request, reads it back with
:func:`request_context` for the ``x-request-id`` header, the rejection reason and the prompt
size in the access log. It lives under the scope key :data:`CONTEXT_KEY`, like the drain's
keys (:mod:`router.front.drain`), so a FastAPI exception handler, which builds its own ``Request``
on the same scope, sees it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request

    from router.request.features import RequestFeatures

__all__ = ["CONTEXT_KEY", "RequestContext", "attach", "attach_context", "end_disconnected", "request_context"]

#: ASGI scope key of a request's :class:`RequestContext`.
CONTEXT_KEY = "specgate.context"


@dataclass(slots=True)
class RequestContext:
    """One request's context, attached once; only its handler writes the later fields.

    Attributes:
        request_id: the id echoed in ``x-request-id`` (the client's sane one, else the
            router's own, :func:`router.front.api.client_request_id`).
        features: the request's features once its prompt was sized (prompt tokens, exact or
            an upper bound), None before.
        reject_reason: the policy's reason (a :class:`router.decision.policy.Reason` value) when it
            refused a kind no pool serves, None otherwise (the error's own reason applies).
        span: the request's server span while the handler owns it (:mod:`router.ops.tracing`;
            None with tracing off); the error path ends it.
        model: the configured name of the request's model once resolved
            (:func:`router.state.models.resolve_fleet`), None before: the ``model`` label of
            a refusal's ``specgate_requests_total`` and its access log line (``none``).
    """

    request_id: str
    features: RequestFeatures | None = None
    reject_reason: str | None = None
    span: Any = None
    model: str | None = None


def attach_context(request: Request, request_id: str) -> RequestContext:
    """Attach a new :class:`RequestContext` for ``request_id`` to ``request``'s scope (replacing
    any earlier one) and return it."""
    return attach(request, RequestContext(request_id))


def attach(request: Request, context: RequestContext) -> RequestContext:
    """Attach ``context`` (a :class:`RequestContext`, or a handler's subclass of it that also
    carries what its later steps read) to ``request``'s scope, replacing any earlier one."""
    request.scope[CONTEXT_KEY] = context
    return context


def request_context(request: Request) -> RequestContext | None:
    """The context attached to ``request``'s scope, or None (a route that attaches none, or an
    error before the request's id was known)."""
    context = request.scope.get(CONTEXT_KEY)
    return context if isinstance(context, RequestContext) else None


def end_disconnected(request: Request) -> None:
    """End the request's open server span, if any, as a client disconnect (status 499,
    ``error.type`` ``client_disconnect``): the client went away before it could be answered
    (while its body was being read, or cut by ``server.body_timeout_s``)."""
    context = request_context(request)
    if context is None or context.span is None:
        return
    from router.ops.spans import end_span

    end_span(context.span, 499, "client_disconnect", outcome="client_disconnect")
    context.span = None
