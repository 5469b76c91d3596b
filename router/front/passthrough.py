"""Non-generation endpoints, passed through unchanged to a pool configured to serve them.

Per endpoint (SGLang 0.5.23 ``srt/entrypoints/http_server.py`` serves all of these):

============================  ===========  ====================================================
route                         kind         router's answer
============================  ===========  ====================================================
``POST /v1/embeddings``       embeddings   relayed to a pool whose ``serves`` lists the kind
``POST /v1/rerank``           rerank       same
``POST /v1/score``            score        same (SGLang scores with a CausalLM's logprobs too,
                                           so a plain generation pool may list it)
``POST /v1/classify``         classify     same
``POST /v1/responses``        responses    counted and routed like chat (:mod:`router.front.responses`)
============================  ===========  ====================================================

A kind no pool serves answers 404 ``{"error": {"type": "invalid_request_error", "param": null,
"code": "unsupported_endpoint"}}`` before the body is read, never a chat-shaped error and
never "no workers" (sgl-project/sglang#15931). A speculative pool can never serve a
pass-through kind (the config refuses it), so these requests never reach the spec pool and
their leases never count toward its saturation.

What the router does with a pass-through request:

- **Checks** only the envelope: body size (``limits.max_request_bytes``, 413), JSON object,
  ``model`` a string. ``input`` of ``/v1/embeddings`` must be a string, a list of strings, a
  list of token ids, a list of token-id lists (or SGLang's multimodal item objects); anything
  else is 400 ``param: "input"``. No token count and no ``max_tokens``/context rule: the
  engine applies its own limits, and truncation fields (``truncate_prompt_tokens``,
  ``dimensions``...) are forwarded untouched (vllm-project/aibrix#2663: a gateway's own
  hard-coded limit rejected what the engine would have truncated).
- **Model** (:func:`router.state.models.resolve_passthrough`; with several models,
  :func:`router.state.models.passthrough_target` first keeps the pools of the generation model
  a request names, else every model's pools serving the kind): a request naming a served
  *generation* model (``model.name``/``aliases``) on a kind served only by pools without
  ``generate`` gets 400 ``param: "model"``, ``code: "model_not_supported"``; an alias on a pool
  that generates is rewritten to ``model.name``. Another name must be one the kind's engines
  list in ``/v1/models`` (read at admission, :mod:`router.state.identity`): else 404
  ``model_not_found`` with no engine call; until every such engine has been read, the engine
  judges it, and its 4xx comes back with the same status in the router's envelope
  (:func:`router.errors.map_engine_error`).
- **Endpoint**: the healthy endpoint with the fewest router in-flight requests over the
  pools serving the kind (ties rotate); an in-flight lease is held for the call. A refused
  connection marks the endpoint down and tries the next one; an engine 5xx tries the next
  one too (these calls generate nothing, so a retry is safe), up to ``upstream.max_attempts``.
  No healthy endpoint: 503 ``no_healthy_upstream`` with ``Retry-After``.
- **Relay**: the engine's body is read whole (bounded by ``upstream.nonstream_timeout_s``,
  504 ``upstream_timeout`` past it) and sent as the same bytes with its ``Content-Type`` and a
  ``Content-Length``: a 4 MB array of floats is never parsed or re-serialised.
- **Client disconnect** (watched on the ASGI ``receive`` channel while the engine computes):
  the upstream request is cancelled, which closes its connection (the engine sees the
  disconnect and drops the work), the lease is released, nothing is retried, and the request
  is counted with status 499; as :mod:`router.upstream.proxy` does for generations. These calls carry
  no ``rid`` an ``/abort_request`` could name, so closing the connection is the whole abort.
- **Metrics**: ``specgate_requests_total{model, pool, reason=<kind>, status}`` (``model``: the
  model whose pools hold the pool that answered) and
  ``specgate_request_duration_seconds{pool}``.
- **Trace context** as on the generation routes (:mod:`router.ops.trace`): a valid ``traceparent``
  and ``tracestate`` (and ``baggage`` with ``tracing.forward_baggage``) go upstream on every
  attempt. With ``tracing.enabled`` (:mod:`router.ops.tracing`) the request has a server span
  ``POST <path>`` (``specgate.reason`` the kind, ``specgate.pool``/``final_pool`` the pool that
  answered, ``specgate.attempts``, ``specgate.outcome``; a refusal ends it with its error code)
  and each attempt a client span, child of the server span, whose context is the
  ``traceparent`` the engine receives; an attempt's span ends with the engine's status, or
  with ``error.type`` ``unreachable``, ``upstream_failed``, ``upstream_timeout`` or
  ``client_disconnect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Coroutine, Iterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from router.config.tree import UpstreamConfig
from router.errors import (
    InvalidRequest,
    NoHealthyUpstream,
    SpecgateError,
    UnsupportedEndpoint,
    UpstreamError,
    UpstreamTimeout,
    map_engine_error,
)
from router.front.context import attach_context, end_disconnected
from router.front.intake import client_request_id, parse_json, read_body
from router.ops.spans import end_span
from router.ops.trace import trace_headers
from router.state.endpoint import Endpoint
from router.state.models import passthrough_target, resolve_passthrough
from router.upstream.transport import ConnectFailed, ConnectionBroken, Transport, TransportError

__all__ = ["PASSTHROUGH_ROUTES", "UnsupportedEndpoint", "check_body", "install_passthrough_routes",
           "serving_pools"]

#: Pass-through routes: path -> endpoint kind (``PoolConfig.serves``).
PASSTHROUGH_ROUTES = {"/v1/embeddings": "embeddings", "/v1/rerank": "rerank",
                      "/v1/score": "score", "/v1/classify": "classify"}

#: The field a kind's errors name (over-length or invalid input).
_INPUT_PARAM = {"embeddings": "input", "rerank": "documents", "score": "items", "classify": "input"}


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int and t >= 0 for t in value)


def check_body(kind: str, doc: Any) -> None:
    """Validate a pass-through document's envelope (see the module docstring).

    Raises:
        InvalidRequest: naming ``param`` (``model``, ``input``, ``query``, ``documents``).
    """
    if not isinstance(doc, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_json")
    if "model" in doc and doc["model"] is not None and not isinstance(doc["model"], str):
        raise InvalidRequest("`model` must be a string", param="model")
    if kind in ("embeddings", "classify"):
        value = doc.get("input")
        ok = (isinstance(value, str) and bool(value)) or _token_ids(value) or (
            isinstance(value, list) and bool(value) and (
                all(isinstance(v, str) for v in value) or all(_token_ids(v) for v in value)
                or (kind == "embeddings" and all(isinstance(v, dict) for v in value))))
        if not ok:
            raise InvalidRequest(
                "`input` must be a non-empty string, array of strings, array of token ids or "
                "array of token-id arrays", param="input")
    elif kind == "rerank":
        if not isinstance(doc.get("query"), (str, list)):
            raise InvalidRequest("`query` must be a string or an array of content parts", param="query")
        if not isinstance(doc.get("documents"), list) or not doc["documents"]:
            raise InvalidRequest("`documents` must be a non-empty array", param="documents")


def serving_pools(runtime: Any, kind: str) -> list[Any]:
    """The runtime's pools whose ``serves`` lists ``kind`` (never a speculative pool)."""
    return [p for p in runtime.pools if kind in p.config.serves and not p.config.speculative]


def _candidates(pools: list[Any], excluded: set[str], tie: int) -> Iterator[Any]:
    eps = [e for p in pools for e in p.endpoints.values() if e.healthy and e.url not in excluded]
    if not eps:
        return iter(())
    k = tie % len(eps)
    rotated = eps[k:] + eps[:k]
    return iter(sorted(rotated, key=lambda e: e.inflight))  # stable: ties keep the rotation


async def _call(transport: Transport, endpoint: Endpoint, path: str, body: bytes,
                request_id: str, upstream: UpstreamConfig, trace: dict[str, str]) -> tuple[int, str, bytes]:
    """``POST`` the body to the endpoint (:meth:`router.upstream.transport.Transport.fetch`, within
    ``upstream.nonstream_timeout_s``): ``(status, content type, body)``. A reused connection that
    broke before the status line is a stale keep-alive connection: sent once more on the same
    engine (nothing reached it). Raises what ``fetch`` raises."""
    headers = {"content-type": "application/json", "x-request-id": request_id,
               "accept-encoding": "identity", **trace}
    url = str(endpoint.target(path))
    try:
        got = await transport.fetch("POST", url, body=body, headers=headers,
                                    timeout_s=upstream.nonstream_timeout_s,
                                    connect_timeout_s=upstream.connect_timeout_s)
    except ConnectionBroken as exc:
        if not exc.reused:
            raise
        got = await transport.fetch("POST", url, body=body, headers=headers,
                                    timeout_s=upstream.nonstream_timeout_s,
                                    connect_timeout_s=upstream.connect_timeout_s)
    return got.status, got.headers.get("content-type", "application/json"), got.body


def _attempt_span(tracing: Any, parent: Any, endpoint: Endpoint, path: str, attempt: int,
                  trace: dict[str, str]) -> tuple[Any, dict[str, str]]:
    """One attempt's client span (:meth:`router.ops.tracing.Tracing.start_attempt`) and the trace
    headers to send: ``trace`` with the span's ``traceparent`` (the client's tracestate kept).
    The server span ``parent`` records the attempt (``specgate.pool`` the first one's pool,
    ``final_pool`` the latest one's, ``attempts`` their count)."""
    parent.set_attributes({"specgate.final_pool": endpoint.pool, "specgate.attempts": attempt,
                           **({"specgate.pool": endpoint.pool} if attempt == 1 else {})})
    span, context = tracing.start_attempt(parent, endpoint.url, path, endpoint.pool, attempt)
    return span, {**trace, **context}


class _ClientGone(Exception):
    """The client disconnected while the engine was computing its answer."""


async def _until_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _call_unless_gone(request: Request, call: Coroutine[Any, Any, tuple[int, str, bytes]]
                            ) -> tuple[int, str, bytes]:
    """Await the upstream ``call`` (a coroutine) unless the client disconnects first: then
    cancel it (the transport closes the upstream connection) and raise :class:`_ClientGone`. The body
    was read whole before, so the next ASGI message is the disconnect."""
    upstream = asyncio.create_task(call)
    watch = asyncio.ensure_future(_until_disconnect(request.receive))
    try:
        await asyncio.wait((upstream, watch), return_when=asyncio.FIRST_COMPLETED)
        if upstream.done():
            return upstream.result()
        raise _ClientGone()
    finally:
        for task in (upstream, watch):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def _start_trace(request: Request, state: Any, context: Any, request_id: str,
                 kind: str) -> tuple[Any, dict[str, str]]:
    """The request's trace headers to forward (:func:`router.ops.trace.trace_headers`) and the
    tracer its spans come from (``state.tracing`` now, even if a reload swaps it; None: off).
    With a tracer, ``context.span`` is the server span (a refusal's error path ends it)."""
    cfg = state.runtime.config
    trace = trace_headers(request.headers.getlist("traceparent"), request.headers.getlist("tracestate"),
                          request.headers.get("baggage") if cfg.tracing.forward_baggage else None)
    tracing = state.tracing
    if tracing is not None:
        context.span = tracing.start_request(request.scope["path"], trace, request_id)
        context.span.set_attribute("specgate.reason", kind)
    return tracing, trace


async def _forward_body(request: Request, fleet: Any, pools: list[Any], kind: str) -> tuple[bytes, list[Any]]:
    """The body to forward and the pools it may go to: read (the largest
    ``limits.max_request_bytes``, its encoding undone), JSON, checked for ``kind``
    (:func:`check_body`), its ``model`` resolved (:func:`router.state.models.passthrough_target`,
    :func:`router.state.models.resolve_passthrough`: an alias of a generation model is rewritten to
    the name the engine knows). Raises what those raise (400, 404, 413, 415)."""
    body = await read_body(request, fleet.config.max_request_bytes)
    doc = parse_json(request, body)
    check_body(kind, doc)
    pools, cat = passthrough_target(fleet, doc.get("model"), kind, pools)
    forward = resolve_passthrough(
        doc.get("model"), cat, generating=any("generate" in p.config.serves for p in pools),
        listed=all(e.served_models is not None for p in pools for e in p.endpoints.values()))
    if forward is not None:
        body = orjson.dumps({**doc, "model": forward})
    return body, pools


async def serve_passthrough(request: Request, kind: str, tie: int) -> Response:
    """Answer one pass-through request (see the module docstring)."""
    state = request.app.state.specgate
    fleet = state.fleet
    runtime = fleet.default  # the global sections (auth, upstream, health)
    cfg = runtime.config
    received = time.perf_counter()
    request_id = client_request_id(request.headers.get("x-request-id")) or state.next_request_id()
    context = attach_context(request, request_id)
    tracing, trace = _start_trace(request, state, context, request_id, kind)
    if runtime.auth is not None:
        runtime.auth.check_client(request.headers.get("authorization"))
    path = request.scope["path"]
    pools = [p for rt in fleet for p in serving_pools(rt, kind)]
    if not pools:
        raise UnsupportedEndpoint(f"{path} is not served by this router: no pool is configured "
                                  f"to serve `{kind}`")
    body, pools = await _forward_body(request, fleet, pools, kind)
    excluded: set[str] = set()
    error: SpecgateError | None = None
    for attempt in range(cfg.upstream.max_attempts):
        endpoint = next(_candidates(pools, excluded, tie + attempt), None)
        if endpoint is None:
            break
        span, headers = (None, trace) if context.span is None else _attempt_span(
            tracing, context.span, endpoint, path, attempt + 1, trace)
        lease = endpoint.lease()
        status: int | None = None
        failure: str | None = None
        try:
            status, ctype, data = await _call_unless_gone(
                request, _call(state.transport, endpoint, path, body, request_id, cfg.upstream, headers))
        except _ClientGone:
            failure = "client_disconnect"  # answered below, once the attempt's span has ended
        except TimeoutError:
            failure = "upstream_timeout"
            raise UpstreamTimeout("the engine did not answer within upstream.nonstream_timeout_s") from None
        except TransportError as exc:  # no connection, or it broke: another endpoint may answer
            unreachable = isinstance(exc, ConnectFailed)
            failure = "unreachable" if unreachable else "upstream_failed"
            endpoint.mark_down()
            excluded.add(endpoint.url)
            error = UpstreamError("upstream worker unreachable" if unreachable else "upstream worker failed")
            continue
        finally:
            lease.release()
            if span is not None:
                end_span(span, status, failure if failure is not None or status is None or status < 500
                            else "engine_error")
        if failure == "client_disconnect":
            state.metrics.requests.inc((fleet.model_of_pool(endpoint.pool), endpoint.pool, kind, "499"))
            if context.span is not None:
                end_span(context.span, 499, failure, outcome=failure)
                context.span = None
            return Response(status_code=499)  # nobody to send it to (the server drops it)
        assert status is not None  # every other failure continued or raised
        if status >= 500:
            excluded.add(endpoint.url)
            error = map_engine_error(status, data, param=_INPUT_PARAM[kind])
            continue
        if status >= 400:
            raise map_engine_error(status, data, param=_INPUT_PARAM[kind])
        state.metrics.requests.inc((fleet.model_of_pool(endpoint.pool), endpoint.pool, kind, str(status)))
        state.metrics.request_duration.observe((endpoint.pool,), time.perf_counter() - received)
        if context.span is not None:
            end_span(context.span, status, outcome="ok")
            context.span = None
        return Response(data, status_code=status, headers={
            "content-type": ctype, "x-request-id": request_id,
            "x-specgate-pool": endpoint.pool, "x-specgate-reason": kind})
    if error is not None:
        raise error
    raise NoHealthyUpstream(f"no healthy endpoint serves `{kind}`",
                            headers={"retry-after": str(cfg.health.retry_after_s)})


def install_passthrough_routes(app: FastAPI) -> None:
    """Register the :data:`PASSTHROUGH_ROUTES` on ``app`` (errors go through its handlers)."""
    tie = itertools.count()  # per app: rotates ties between idle endpoints

    def route(kind: str) -> Any:
        async def handler(request: Request) -> Response:
            try:
                return await serve_passthrough(request, kind, next(tie))
            except ClientDisconnect:  # gone while its body was read: nobody to answer, not a 500
                end_disconnected(request)
                return Response(status_code=499)
        return handler

    for path, kind in PASSTHROUGH_ROUTES.items():
        app.add_api_route(path, route(kind), methods=["POST"], include_in_schema=False)
