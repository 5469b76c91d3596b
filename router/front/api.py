"""Thin HTTP handlers: the generation routes' entry (:func:`serve_generate`, which runs the
request pipeline of :mod:`router.front.pipeline`), the probes and ``/metrics``.

Every error goes through one handler that writes OpenAI's error envelope
(:mod:`router.errors`); FastAPI's 422 ``{"detail": [...]}`` shape is never returned.
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from router.errors import (
    AuthenticationError,
    ContextLengthExceeded,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NoHealthyUpstream,
    NotFound,
    RateLimited,
    RequestTooLarge,
    SpecgateError,
)
from router.front.admin import install_admin_routes
from router.front.context import end_disconnected, request_context
from router.front.model_routes import install_model_routes
from router.front.passthrough import install_passthrough_routes
from router.front.pipeline import generate
from router.front.readiness import ready_view
from router.front.request_kinds import KINDS
from router.ops.spans import end_span
from router.reasons import Reason
from router.state.models import UnknownAdapter

if TYPE_CHECKING:
    from collections.abc import Mapping

    from router.front.appstate import FrontState as AppState
    from router.front.request_kinds import RequestKind

__all__ = ["GENERATE_ROUTES", "install_routes", "serve_generate"]

access_log = logging.getLogger("specgate.access")


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.specgate
    return state


_REJECT_REASON = {
    ModelNotFound: "model_not_found",
    UnknownAdapter: "model_not_found",
    ContextLengthExceeded: Reason.CONTEXT_CAP.value,
    NoHealthyUpstream: Reason.NO_HEALTHY_UPSTREAM.value,
    RequestTooLarge: "request_too_large",
    AuthenticationError: "unauthorized",
    RateLimited: "rate_limited",
}


def _error_response(request: Request, err: SpecgateError) -> Response:
    state = getattr(request.app.state, "specgate", None)
    context = request_context(request)
    request_id = context.request_id if context is not None else None
    features = context.features if context is not None else None
    reason = (context.reject_reason if context is not None else None) or _REJECT_REASON.get(
        type(err), "invalid_request")
    path = request.scope["path"]
    if state is not None and path.startswith("/v1/") and not path.startswith("/v1/models"):
        model = (context.model if context is not None else None) or "none"
        state.metrics.requests.inc((model, "none", reason, str(err.status)))
        if state.runtime.config.server.log_requests:
            access_log.info(orjson.dumps({
                "request_id": request_id, "model": model, "pool": "none",
                "reason": reason, "status": err.status, "code": err.code, "param": err.param,
                "prompt_tokens": features.prompt_tokens if features is not None else None,
                "prompt_tokens_exact": features.prompt_exact if features is not None else None}).decode())
    if context is not None and context.span is not None:
        end_span(context.span, err.status, err.code or "error", reason=reason)
        context.span = None
    headers = err.response_headers()
    headers["x-specgate-pool"] = "none"
    headers["x-specgate-reason"] = reason
    if request_id:
        headers["x-request-id"] = request_id
    return Response(err.body(), status_code=err.status, headers=headers)


def _head_where_get(app: FastAPI) -> None:
    """Serve ``HEAD`` on every ``GET`` route, as RFC 9110 9.3.2 and 9.1 ask of a general-purpose
    server (health checkers and ``curl -I`` send it; FastAPI's ``app.get`` registers ``GET``
    alone, so they got 405). The server (uvicorn) sends the ``GET`` answer's head without its
    body."""
    for route in app.router.routes:
        methods = getattr(route, "methods", None)
        if isinstance(methods, set) and "GET" in methods:
            methods.add("HEAD")


#: The generation routes served by :func:`serve_generate` (path -> request kind,
#: :mod:`router.front.request_kinds`).
GENERATE_ROUTES: Mapping[str, RequestKind] = MappingProxyType({
    "/v1/chat/completions": KINDS["chat"], "/v1/completions": KINDS["completions"],
    "/v1/responses": KINDS["responses"]})


async def serve_generate(scope: dict[str, Any], receive: Any, send: Any, kind: RequestKind) -> None:
    """ASGI handler of ``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/responses``
    (``kind``: the route's :data:`GENERATE_ROUTES` value): the request pipeline
    (:func:`router.front.pipeline.generate`).

    Called by :class:`router.app.asgi.RouterApp` ahead of FastAPI's middleware stack and router,
    which cost about a sixth of the proxy's CPU per request (the profile in docs/performance.md); errors get the
    same OpenAI envelope as every other route. ``scope["app"]`` must be the router app.
    A client that disconnects while its body is being read gets no answer (nothing to send to).
    """
    request = Request(scope, receive)
    response: Response
    try:
        response = await generate(request, kind)
    except SpecgateError as err:
        response = _error_response(request, err)
    except ClientDisconnect:
        end_disconnected(request)
        return
    except Exception:
        logging.getLogger("specgate").exception("internal error")
        response = _error_response(request, SpecgateError("internal router error"))
    await response(scope, receive, send)


def install_routes(app: FastAPI) -> None:
    """Register the OpenAI-compatible routes, probes, metrics and error handlers on ``app``."""

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, KINDS["chat"])

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, KINDS["completions"])

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await generate(request, KINDS["responses"])

    @app.get("/health")
    async def health() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready(request: Request) -> Response:
        """Ready while some model has a healthy endpoint (router.front.readiness)."""
        state = _state(request)
        drain = getattr(request.app, "drain", None)  # router.front.drain: not ready from the drain's start
        ok, body = ready_view(state.fleet, state.clock(), drain is not None and drain.active)
        return JSONResponse({**body, "shared_state": state.shared.status()}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        state = _state(request)
        state.refresh_gauges()
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(SpecgateError)
    async def _specgate_error(request: Request, exc: SpecgateError) -> Response:
        return _error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _error_response(request, InvalidRequest("invalid request"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return _error_response(request, NotFound(f"no route {request.url.path}"))
        if exc.status_code == 405:  # RFC 9110 15.5.6: the Allow header names the route's methods
            allow = (exc.headers or {}).get("Allow")  # Starlette joins a set: sorted, the same every time
            allow = ", ".join(sorted(m.strip() for m in allow.split(","))) if allow else None
            return _error_response(request, MethodNotAllowed(f"method {request.method} not allowed",
                                                             headers={"allow": allow} if allow else None))
        return _error_response(request, SpecgateError(str(exc.detail), status=exc.status_code))

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> Response:
        logging.getLogger("specgate").exception("internal error")
        return _error_response(request, SpecgateError("internal router error"))

    del chat_completions, completions, responses, health, ready, metrics  # registered
    install_admin_routes(app)
    install_model_routes(app)
    install_passthrough_routes(app)
    _head_where_get(app)
