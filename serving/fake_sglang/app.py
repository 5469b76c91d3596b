"""``create_fake_app``: the fake SGLang server's Starlette app (its routes and handlers).

The behaviour it mimics is the module docstring of :mod:`serving.fake_sglang`. Every handler is
a module function taking the app's ``FakeState`` and the request; this module binds them to
the routes. A generation request is logged, matched against the script queue (a scripted
status, SSE or "queue_full" answer short-cuts it), parsed (:mod:`serving.fake_sglang.protocol`)
and answered by :func:`serving.fake_sglang.serve.serve_job`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from serving.fake_sglang import admin, embeddings, endpoints
from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.endpoints import logged
from serving.fake_sglang.errors import ClientError, json_response, sglang_error
from serving.fake_sglang.faults import (
    CONN_KEY,
    CYCLE_KEY,
    queue_full,
    scripted_sse,
    scripted_status,
)
from serving.fake_sglang.lora import check_lora
from serving.fake_sglang.metrics import metrics
from serving.fake_sglang.protocol import parse_chat, parse_completions, parse_generate, read_json
from serving.fake_sglang.serve import serve_job
from serving.fake_sglang.state import FakeState
from serving.fake_sglang.stepping import StepEngine, Stepper

__all__ = ["create_fake_app"]


class _FakeStarlette(Starlette):
    """Starlette that remembers uvicorn's request cycle (for TCP resets) in the scope."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            cycle = getattr(send, "__self__", None)
            if cycle is not None and hasattr(cycle, "transport"):
                scope[CYCLE_KEY] = cycle
                conns = self.state.fake.connections
                scope[CONN_KEY] = conns.get(cycle.transport, 0)
                conns[cycle.transport] = scope[CONN_KEY] + 1
        await super().__call__(scope, receive, send)


class _Asgi:
    """Wrap a raw ASGI handler so a Starlette endpoint can return it as its response."""

    def __init__(self, handler: Callable[[Any, Any, Any], Awaitable[None]]) -> None:
        self.handler = handler

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.handler(scope, receive, send)


def _bind(
    state: FakeState, handler: Callable[[FakeState, Request], Awaitable[Any]]
) -> Callable[[Request], Awaitable[Any]]:
    """``handler(state, request)`` as a Starlette endpoint (not logged)."""

    async def endpoint(request: Request) -> Any:
        return await handler(state, request)

    return endpoint


async def _generation(state: FakeState, request: Request, kind: str) -> Any:
    """One generation request (``kind``: "chat", "completions" or "generate").

    Returns a JSON error response (SGLang's flat body; ``/generate``: ``{"error":{"message"}}``)
    for a refused request, else an ASGI app that answers it.
    """
    entry = state.log_request(request, None)
    behaviour: Behaviour | None = None
    try:
        if kind != "generate":
            ct = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ct != "application/json":
                await read_json(request, entry)
                raise ClientError(
                    "1 validation error: header content-type: "
                    "Unsupported Media Type: Only 'application/json' is allowed",
                    "Bad Request",
                )
        body = await read_json(request, entry)
        if not isinstance(body, dict):
            raise ClientError(
                "1 validation error: body: Input should be a valid dictionary", "Bad Request"
            )
        entry["stream"] = bool(body.get("stream", False))
        entry["reused_connection"] = reused = request.scope.get(CONN_KEY, 0) > 0
        behaviour = state.take_behaviour(request.url.path, reused)
        if behaviour is not None and behaviour.fault == "queue_full":
            stream = entry["stream"]
            return _Asgi(lambda s, r, se: queue_full(se, entry, stream))
        if behaviour is not None and behaviour.status is not None:
            return _Asgi(lambda s, r, se: scripted_status(s, r, se, entry, behaviour))
        if behaviour is not None and behaviour.sse_events is not None:
            return _Asgi(lambda s, r, se: scripted_sse(s, r, se, entry, behaviour))
        entry["lora"] = check_lora(state.launch_config, body, kind)
        if kind == "chat":
            job, prompts = await parse_chat(state, body, entry, behaviour)
        elif kind == "completions":
            job, prompts = await parse_completions(state, body, entry, behaviour)
        else:
            job, prompts = await parse_generate(state, body, entry, behaviour)
    except ClientError as e:
        entry["status"] = e.status
        entry["outcome"] = "error"
        if kind == "generate":
            return json_response({"error": {"message": e.message}}, e.status)
        return sglang_error(e.message, e.kind, e.status)
    return _Asgi(lambda s, r, se: serve_job(state, s, r, se, job, kind, prompts))


async def _chat(state: FakeState, request: Request) -> Any:
    """``POST /v1/chat/completions``."""
    return await _generation(state, request, "chat")


async def _completions(state: FakeState, request: Request) -> Any:
    """``POST /v1/completions``."""
    return await _generation(state, request, "completions")


async def _generate(state: FakeState, request: Request) -> Any:
    """``POST|PUT /generate`` (SGLang's native API)."""
    return await _generation(state, request, "generate")


#: SGLang's endpoints that log themselves (generation, embeddings, responses).
_SELF_LOGGED = (
    ("/v1/chat/completions", _chat, ("POST",)),
    ("/v1/responses", endpoints.responses, ("POST",)),
    ("/v1/embeddings", embeddings.embeddings, ("POST",)),
    ("/v1/rerank", embeddings.rerank, ("POST", "PUT")),
    ("/v1/completions", _completions, ("POST",)),
    ("/generate", _generate, ("POST", "PUT")),
)
#: SGLang's other endpoints, logged by ``endpoints.logged``.
_LOGGED = (
    ("/v1/models", endpoints.models, ("GET",)),
    ("/v1/models/{model:path}", endpoints.model_one, ("GET",)),
    ("/health", endpoints.health, ("GET",)),
    ("/health_generate", endpoints.health, ("GET",)),
    ("/server_info", endpoints.server_info, ("GET",)),
    ("/get_server_info", endpoints.server_info, ("GET",)),
    ("/model_info", endpoints.model_info, ("GET",)),
    ("/get_model_info", endpoints.model_info, ("GET",)),
    ("/metrics", metrics, ("GET",)),
    ("/v1/loads", endpoints.loads, ("GET",)),
    ("/abort_request", endpoints.abort_request, ("POST",)),
    ("/flush_cache", endpoints.flush_cache, ("GET", "POST")),
)
#: The fake's control API, never logged as traffic.
_CONTROL = (
    ("/_fake/script", admin.c_script, ("POST",)),
    ("/_fake/requests", admin.c_requests, ("GET",)),
    ("/_fake/reset", admin.c_reset, ("POST",)),
    ("/_fake/health", admin.c_health, ("POST",)),
    ("/_fake/metrics", admin.c_metrics, ("POST",)),
    ("/_fake/state", admin.c_state, ("GET",)),
    ("/_fake/relaunch", admin.c_relaunch, ("POST",)),
)


def create_fake_app(config: FakeConfig, *, step_engine: StepEngine | None = None) -> Starlette:
    """Build the fake server's Starlette app; its state is ``app.state.fake`` (``FakeState``).

    ``step_engine``: drive generation by this step model (:mod:`serving.fake_sglang.stepping`)
    instead of the per-request sleeps.

    Errors: ``OSError``/``ValueError`` from ``transformers`` when ``config.tokenizer_path`` is
    not a loadable tokenizer.
    """
    state = FakeState(config)
    if step_engine is not None:
        state.stepper = Stepper(step_engine)
    routes = [
        *(Route(p, _bind(state, h), methods=m) for p, h, m in _SELF_LOGGED),
        *(Route(p, logged(state, h), methods=m) for p, h, m in _LOGGED),
        *(Route(p, _bind(state, h), methods=m) for p, h, m in _CONTROL),
    ]
    app = _FakeStarlette(routes=routes)
    app.state.fake = state
    return app
