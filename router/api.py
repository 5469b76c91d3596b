"""Thin HTTP handlers: read body -> parse -> count (off the loop) -> decide -> proxy.

Every error goes through one handler that writes OpenAI's error envelope
(:mod:`router.errors`); FastAPI's 422 ``{"detail": [...]}`` shape is never returned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

from router.admin import install_admin_routes
from router.admission import PRIORITY_FIELD, PRIORITY_HEADER, engine_priority, resolve_priority
from router.capabilities import HINT_FIELD, HINT_HEADER, speculation_hint, trigger_param
from router.context import attach_context, end_disconnected, request_context
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
from router.features import (
    ParsedRequest,
    RequestFeatures,
    needs_exact,
    parse_chat,
    parse_completions,
)
from router.fleet_models import check_model_body, model_runtime
from router.intake import client_request_id
from router.intake import header as _header
from router.intake import header_map as _header_map
from router.intake import header_values as _header_values
from router.intake import parse_json as _parse_json
from router.intake import read_body as _read_body
from router.model_routes import install_model_routes
from router.models import resolve_request
from router.observe import ResponseObserver, wants_tools
from router.passthrough import install_passthrough_routes
from router.policy import (
    Decision,
    Outcome,
    Reason,
    over_length_message,
    request_features,
)
from router.prefix import PrefixChain, chain_for_request
from router.proxy import ProxyJob, ProxyResponse, Redecision
from router.readiness import ready_view
from router.responses import RESPONSES_END_EVENTS, check_served, parse_responses, responses_fields
from router.sampling import check_min_tokens, speculative_caveats
from router.spans import end_span
from router.specstats import FIELD as SPEC_STATS_FIELD
from router.trace import trace_headers

if TYPE_CHECKING:
    from router.app import AppState
    from router.features import PromptCounter, Rendered
    from router.policy import Decision
    from router.pools import Runtime

__all__ = ["GENERATE_ROUTES", "install_routes", "serve_generate"]

access_log = logging.getLogger("specgate.access")


#: :data:`router.capabilities.HINT_HEADER` as an ASGI header name (lower-case bytes).
_HINT_HEADER = HINT_HEADER.lower().encode("latin-1")
_PRIORITY_HEADER = PRIORITY_HEADER.lower().encode("latin-1")

def _state(request: Request) -> AppState:
    state: AppState = request.app.state.specgate
    return state


#: Bodies up to this size are rendered on the event loop (a chat template over a few KB takes
#: tens of microseconds, less than a thread hop); larger ones are rendered in a worker thread.
_INLINE_RENDER_BYTES = 16 * 1024


def _render_bounds(counter: PromptCounter, parsed: ParsedRequest) -> tuple[Rendered, tuple[int, int]]:
    rendered = counter.render(parsed)
    return rendered, counter.bounds(rendered)


def _add_fields(body: bytes, doc: dict[str, Any], fields: dict[str, Any]) -> bytes:
    """``body`` (the JSON object ``doc``) with ``fields`` added, without re-serialising it.

    The fields are spliced in before the closing brace (a 234k-token body is ~0.7-1 MB;
    dumping it again would cost the event loop about a millisecond, docs/performance.md). Falls back to
    ``orjson.dumps`` when a field's key is already in ``doc`` (e.g. ``"max_tokens": null``)
    or the body does not end with ``}``.
    """
    if not fields:
        return body
    end = len(body)
    while end and body[end - 1] in b" \t\r\n":  # JSON's whitespace
        end -= 1
    if end < 2 or body[end - 1] != 0x7D or any(k in doc for k in fields):  # 0x7D: "}"
        return orjson.dumps({**doc, **fields})
    extra = b",".join(orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in fields.items())
    # One copy of the body (a memoryview slice is not a copy; `body[:end - 1] + ...` was two).
    return b"".join((memoryview(body)[:end - 1], b"," if doc else b"", extra, b"}"))


async def _size_prompt(state: AppState, runtime: Runtime, parsed: ParsedRequest,
                       body_bytes: int, rendered_out: list[Rendered] | None = None) -> tuple[int, int | None]:
    """Prompt tokens for the decision: ``(P, None)`` exact, or ``(hi, lo)`` when no decision
    threshold lies between the byte-length bounds (then ``hi`` decides as P would).

    Rendering runs on the loop for small bodies, in the tokeniser threads for large ones;
    exact BPE encoding always runs in the threads, and only when a decision threshold falls
    inside the byte-length bounds (:class:`router.features.PromptCounter`). Never an
    under-count: the value used is exact or ``hi >= P``. The rendered prompt is appended to
    ``rendered_out`` when given (for the prefix chain, without rendering twice).
    """
    counter = runtime.counter
    loop = asyncio.get_running_loop()
    if body_bytes <= _INLINE_RENDER_BYTES:
        rendered = counter.render(parsed)
        lo, hi = counter.bounds(rendered)
    else:
        rendered, (lo, hi) = await loop.run_in_executor(state.executor, _render_bounds, counter, parsed)
    if rendered_out is not None:
        rendered_out.append(rendered)
    if lo == hi:  # token-id prompts
        return hi, None
    if not needs_exact(lo, hi, runtime.flip_points(parsed.max_new_tokens, parsed.n)):
        return hi, lo
    exact = await loop.run_in_executor(state.executor, counter.exact, rendered)
    media = getattr(rendered, "media_tokens", 0)
    # With non-text parts the text is counted exactly and each part by its upper bound.
    return (exact + media, exact) if media else (exact, None)


async def _generate(request: Request, kind: str) -> Response:
    state = _state(request)
    fleet = state.fleet  # this request's models, even if a reload swaps the fleet
    runtime = fleet.default  # global sections until the model is resolved
    cfg = runtime.config
    received = time.perf_counter()
    own_id = state.next_request_id()
    headers = _header_map(request.scope)
    request_id = client_request_id(_header(headers, b"x-request-id")) or own_id
    context = attach_context(request, request_id)
    # every value of a repeated header (trace context: exactly one allowed)
    trace = trace_headers(_header_values(request.scope, headers, b"traceparent"),
                          _header_values(request.scope, headers, b"tracestate"),
                          _header(headers, b"baggage") if cfg.tracing.forward_baggage else None)
    tracing = state.tracing  # the one this request's spans come from, even if a reload swaps it
    if tracing is not None:  # router.tracing: the server span, ended by _finish or the error path
        context.span = tracing.start_request(request.scope["path"], trace, request_id)
    authorization = _header(headers, b"authorization")
    if runtime.auth is not None:
        runtime.auth.check_client(authorization)
    if kind == "responses" and len(fleet) == 1:
        check_served(runtime)
    body = await _read_body(request, fleet.config.max_request_bytes, headers)
    doc = _parse_json(request, body, headers)
    runtime = model_runtime(fleet, doc)  # router.fleet_models: the runtime of the body's model
    cfg = runtime.config
    limits = cfg.limits
    check_model_body(fleet, runtime, len(body))
    if kind == "responses":
        check_served(runtime)
    if kind == "chat":
        parsed = parse_chat(doc, max_n=limits.max_n, media=cfg.model.media_tokens)
    else:
        parsed = _PARSERS[kind](doc, max_n=limits.max_n)
    resolved = resolve_request(runtime, doc)  # router.models: 404 before any work for an unknown name
    context.model = runtime.model_name
    auth = runtime.auth
    priority = resolve_priority(doc, _header(headers, _PRIORITY_HEADER),
                                auth.priority_grant(authorization) if auth else None,
                                auth.priority_default if auth else None)
    state.metrics.priority_requests.inc((priority.source,))
    key_default = auth.speculation_default(authorization) if auth else None
    hint = speculation_hint(doc, _header(headers, _HINT_HEADER), key_default)
    pc = cfg.routing.prefix_cache
    rendered: list[Rendered] | None = [] if pc.enabled else None
    prompt_tokens, lower = await _size_prompt(state, runtime, parsed, len(body), rendered)
    state.metrics.prompt_tokens.observe(("exact" if lower is None else "upper_bound",), prompt_tokens)
    features = request_features(parsed, prompt_tokens, runtime.rules, prompt_tokens_lower=lower)
    if hint != features.speculation or resolved.adapters:  # a copy only for a hint or an adapter
        features = dataclasses.replace(features, speculation=hint, adapters=resolved.adapters)
    context.features = features
    check_min_tokens(doc, features.max_new_tokens)
    rl = cfg.auth.rate_limits  # router.limits: a 429 before the decision and any engine call
    ticket = await state.limiter.check_request(rl, authorization, auth, features) if rl.enabled else None
    try:  # until the job holds the ticket: a refusal or an error here gives it back
        chain = matches = None
        if rendered:
            chain = chain_for_request(rendered[0], doc, kind, block_chars=pc.block_chars, max_blocks=pc.max_blocks,
                                      anchor_blocks=pc.anchor_blocks, adapters=resolved.adapters)
            if chain is not None:
                matches = runtime.prefix_matches(chain, prompt_tokens)
        decision = runtime.decide(features, state.clock(), chain=chain, matches=matches)
        if decision.outcome is Outcome.REFUSED and decision.reason is not Reason.CONTEXT_CAP:
            context.reject_reason = decision.reason.value
            raise InvalidRequest(_unserved_message(decision.reason.value, doc), code="unsupported_feature",
                                 param=trigger_param(doc, decision.reason.value))
        if decision.outcome is Outcome.REFUSED:
            if lower is not None and len(body) <= _INLINE_RENDER_BYTES and not parsed.media_tokens:
                # Refused on the byte bound; the exact count refuses too (no flip point lies
                # between the bounds), and a small prompt is counted exactly for the message.
                exact = await asyncio.get_running_loop().run_in_executor(state.executor, runtime.counter.count, parsed)
                features = request_features(parsed, exact, runtime.rules)
                context.features = features
            raise ContextLengthExceeded(over_length_message(features, runtime.rules), param=parsed.param)
        if decision.outcome is Outcome.UNAVAILABLE:
            raise NoHealthyUpstream("no healthy upstream can serve this request",
                                    headers={"retry-after": str(cfg.health.retry_after_s)})
        assert decision.pool is not None and decision.endpoint is not None  # routed: both are set
        if context.span is not None:
            context.span.set_attributes({
                "specgate.pool": decision.pool, "specgate.reason": decision.reason.value,
                "specgate.endpoint_reason": decision.endpoint_reason or "least_load",
                "specgate.prompt_tokens": features.prompt_tokens, "specgate.prompt_tokens_exact": features.prompt_exact,
                **({"specgate.predicted_s": dict(decision.predicted)[decision.pool]} if decision.predicted else {})})
        if decision.predicted:
            state.metrics.predicted_completion.observe((decision.pool,), dict(decision.predicted)[decision.pool])
        if chain is not None:
            _note_prefix(state, runtime, decision, chain, matches, prompt_tokens)
    except BaseException:
        state.limiter.finish(ticket)
        raise
    lease = runtime.endpoint(decision.endpoint).lease(features.temperature_class, bool(features.adapters))
    dispatch = (decision.endpoint, *runtime.dispatch_state(decision.endpoint, state.clock(), features))
    try:
        fields: dict[str, Any] = {}
        if resolved.forward is not None:  # an alias, a bare adapter, or none (SGLang: "default")
            fields["model"] = resolved.forward
        if features.budget_defaulted and limits.default_max_tokens is not None:
            fields["max_tokens"] = features.max_new_tokens
        spec_stats = _spec_stats(runtime, decision, kind, doc, fields)
        # the engine rid stays the router's own id: a client may reuse its x-request-id
        # (retries), and SGLang refuses a rid that is already running
        abort_rids = (responses_fields if kind == "responses" else _abort_rids)(doc, features, own_id, fields)
        if priority.value is not None and doc.get(PRIORITY_FIELD) != priority.value:
            fields[PRIORITY_FIELD] = priority.value  # (replaces the client's: router.admission)
        drop = (HINT_FIELD,) if priority.value is not None else (HINT_FIELD, PRIORITY_FIELD)
        if any(k in doc for k in drop):  # the router's own field, an untrusted priority
            doc = {k: v for k, v in doc.items() if k not in drop}
            body = orjson.dumps(doc)
        pool_bodies = {} if priority.value is None else {
            p.name: _add_fields(body, doc, {**fields, PRIORITY_FIELD: engine_priority(priority.value, order)})
            for p in cfg.pools if (order := p.priority_order) != "larger_first"}
        job = ProxyJob(request_id=request_id, path=request.scope["path"], body=_add_fields(body, doc, fields),
                       features=features, decision=decision, lease=lease, abort_rids=abort_rids,
                       received_at=received, end_events=RESPONSES_END_EVENTS if kind == "responses" else None,
                       observer=None if kind == "responses" else ResponseObserver(state.metrics, tools=wants_tools(doc)),
                       default_budget=None if not features.budget_defaulted else
                       "engine" if limits.default_max_tokens is None else str(features.max_new_tokens),
                       trace=trace, span=context.span, extra={"dispatch": dispatch, "spec_stats": spec_stats},
                       caveats=_caveats(runtime, doc), pool_bodies=pool_bodies,
                       ticket=ticket, headers=ticket.headers if ticket is not None else ())
    except BaseException:
        lease.release()
        state.limiter.finish(ticket)
        raise

    def redecide(excluded: frozenset[str], excluded_pools: frozenset[str] = frozenset()) -> Redecision:
        rt = runtime
        if excluded_pools:  # a pool that refused for capacity is skipped whole
            excluded = excluded | {u for p in rt.pools if p.name in excluded_pools for u in p.endpoints}
        d = rt.decide(features, state.clock(), exclude=excluded, chain=chain, matches=matches)
        if d.outcome is not Outcome.ROUTED:
            return Redecision(d)
        assert d.endpoint is not None  # routed: it is set
        if chain is not None:
            _note_prefix(state, rt, d, chain, matches, prompt_tokens)
        return Redecision(d, rt.endpoint(d.endpoint).lease(features.temperature_class, bool(features.adapters)))

    return ProxyResponse(job, session=state.session, upstream=cfg.upstream, redecide=redecide,
                         on_done=lambda j: _finish(state, j, runtime), spawn=state.spawn,
                         retry_after_s=cfg.health.retry_after_s, fresh_session=state.fresh_session,
                         clock=state.clock, tracing=tracing)


def _caveats(runtime: Runtime, doc: dict[str, Any]) -> dict[str, str]:
    """``{speculative pool: its x-specgate-sampling-fields value}`` when the request sets a
    field whose guarantee differs there (:func:`router.sampling.speculative_caveats`)."""
    fields = speculative_caveats(doc)
    if not fields:
        return {}
    value = ",".join(fields)
    return {p.name: value for p in runtime.pools if p.speculative}


def _unserved_message(kind: str, doc: dict[str, Any]) -> str:
    field = trigger_param(doc, kind)
    return (f"no pool of this deployment serves `{kind}` (needed by `{field}`); every pool that "
            f"could is a speculative pool without it in its `capabilities` (docs/operator-guide.md)")


def _note_prefix(state: AppState, runtime: Runtime, decision: Decision, chain: PrefixChain,
                 matches: dict[str, dict[str, int]] | None, prompt_tokens: int) -> None:
    """After a routed decision: record ``chain`` at its endpoint, observe the matched share."""
    assert decision.pool is not None and decision.endpoint is not None  # routed: both are set
    runtime.record_prefix(decision, chain)
    cached = (matches or {}).get(decision.pool, {}).get(decision.endpoint, 0)
    state.metrics.prefix_match_ratio.observe(
        (decision.pool, decision.endpoint_reason or "least_load"), cached / prompt_tokens if prompt_tokens else 0.0)


def _abort_rids(doc: dict[str, Any], features: RequestFeatures, request_id: str,
                fields: dict[str, Any]) -> tuple[str, ...]:
    """The engine request ids that can stop this request (:attr:`ProxyJob.abort_rids`).

    SGLang 0.5.23 names one prompt's request by its ``rid`` and a batch of prompts' by
    ``<rid>_<i>`` (or the client's list of rids); with ``n > 1`` it gives every sample a fresh
    id (``regenerate_rid``) that no abort can name, so nothing is returned (and no ``rid``
    added) then. Without a client ``rid``, ``specgate-<request id>`` is added to ``fields``, so
    a single prompt's response id is the router's request id.
    """
    if features.n != 1:
        return ()
    rid = doc.get("rid")
    if rid is None and "rid" not in doc:
        rid = fields["rid"] = f"specgate-{request_id}"
    if isinstance(rid, str):
        return (rid,) if features.num_prompts == 1 else tuple(f"{rid}_{i}" for i in range(features.num_prompts))
    if isinstance(rid, list) and all(isinstance(r, str) for r in rid):
        return tuple(rid)
    return ()


def _finish(state: AppState, job: ProxyJob, runtime: Runtime) -> None:
    m = state.metrics
    pool = job.decision.pool or "none"
    model = runtime.model_name
    m.requests.inc((model, pool, job.decision.reason.value, str(job.status)))
    duration = time.perf_counter() - job.received_at
    m.request_duration.observe((pool,), duration)
    if job.ttfb_s is not None:
        m.time_to_first_byte.observe((pool,), job.ttfb_s)
    if job.outcome != "ok":
        m.upstream_failures.inc((pool, job.outcome))
    if "aborted" in job.extra:
        m.upstream_aborts.inc((pool,))
    for stale_pool in job.stale_retries:
        m.upstream_stale_retries.inc((stale_pool,))
    for refused in job.rejections:
        m.engine_rejections.inc(refused)
    _learn(runtime, state, job, duration)
    state.limiter.finish(job.ticket, job.observer.usage if job.observer is not None else None)
    if job.span is not None:
        end_span(job.span, job.status, None if job.outcome == "ok" else job.outcome,
                          final_pool=job.decision.pool, attempts=job.attempts, outcome=job.outcome)
    if runtime.config.server.log_requests:
        access_log.info(orjson.dumps({
            "request_id": job.request_id, "model": model, "pool": pool, "endpoint": job.lease.endpoint.url,
            "reason": job.decision.reason.value, "endpoint_reason": job.decision.endpoint_reason,
            "status": job.status, "outcome": job.outcome,
            "prompt_tokens": job.features.prompt_tokens, "prompt_tokens_exact": job.features.prompt_exact,
            "max_tokens": job.features.max_new_tokens,
            "n": job.features.n, "stream": job.features.stream, "attempts": job.attempts,
            "temperature_class": job.features.temperature_class,
            "predicted_s": {p: round(t, 4) for p, t in job.decision.predicted} or None,
            "ttfb_s": None if job.ttfb_s is None else round(job.ttfb_s, 6),
            "duration_s": round(duration, 6)}).decode())


def _spec_stats(runtime: Runtime, decision: Decision, kind: str, doc: dict[str, Any],
                fields: dict[str, Any]) -> str | None:
    """Ask a speculative engine for the request's own statistics (:mod:`router.specstats`):
    ``strip`` when the router set the field (the relay cuts them out again), ``read`` when the
    client asked for them itself, None when not read (a plain pool, ``/v1/responses``, or
    learning off)."""
    pool = runtime.pool(decision.pool)
    if kind == "responses" or pool is None or not pool.speculative or pool.fit is None:
        return None
    if doc.get(SPEC_STATS_FIELD) is True:
        return "read"
    if SPEC_STATS_FIELD in doc:
        return None
    fields[SPEC_STATS_FIELD] = True
    return "strip"


def _learn(runtime: Runtime, state: AppState, job: ProxyJob, duration_s: float) -> None:
    """Feed a chat or completions request answered in full, on the endpoint it was dispatched to,
    that did not wait in the engine, to its pool's fit (:meth:`Runtime.learn`); its ``n * prompts``
    sequences as one of the longest prompt with the mean output, in a batch that holds them all."""
    usage = job.observer.usage if job.observer is not None else None
    dispatch = job.extra.get("dispatch")
    if (job.status != 200 or job.outcome != "ok" or not isinstance(usage, dict) or dispatch is None
            or job.features.adapters  # an adapter's speed and acceptance are not the base model's
            or job.decision.pool is None):
        return
    url, load, waits, context = dispatch
    output = usage.get("completion_tokens")
    sequences = job.features.n * job.features.num_prompts
    if url != job.lease.endpoint.url or waits or type(output) is not int or output < sequences:
        return
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    runtime.learn(job.decision.pool, url, prompt_tokens=job.features.prompt_tokens,
                        cached_tokens=cached // job.features.num_prompts if type(cached) is int else 0,
                        output_tokens=round(output / sequences), dispatch_load=load, duration_s=duration_s,
                        temperature=job.features.temperature_class, now=state.clock(),
                        accept_length=job.extra.get("spec_accept_length"), context=context, sequences=sequences)


_REJECT_REASON = {
    ModelNotFound: "model_not_found",
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


#: The generation routes served by :func:`serve_generate` (path -> request kind).
GENERATE_ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
                   "/v1/responses": "responses"}

#: Each generation kind's parser (:mod:`router.features`, :mod:`router.responses`).
_PARSERS = {"chat": parse_chat, "completions": parse_completions, "responses": parse_responses}


async def serve_generate(scope: dict[str, Any], receive: Any, send: Any, kind: str) -> None:
    """ASGI handler of ``POST /v1/chat/completions`` (``kind="chat"``), ``/v1/completions`` and
    ``/v1/responses`` (:mod:`router.responses`).

    Called by :class:`router.app.RouterApp` ahead of FastAPI's middleware stack and router,
    which cost about a sixth of the proxy's CPU per request (the profile in docs/performance.md); errors get the
    same OpenAI envelope as every other route. ``scope["app"]`` must be the router app.
    A client that disconnects while its body is being read gets no answer (nothing to send to).
    """
    request = Request(scope, receive)
    try:
        response = await _generate(request, kind)
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
        return await _generate(request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _generate(request, "completions")

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await _generate(request, "responses")

    @app.get("/health")
    async def health() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready(request: Request) -> Response:
        """Ready while some model has a healthy endpoint (router.readiness)."""
        state = _state(request)
        drain = getattr(request.app, "drain", None)  # router.drain: not ready from the drain's start
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
        if exc.status_code == 405:
            return _error_response(request, MethodNotAllowed(f"method {request.method} not allowed"))
        return _error_response(request, SpecgateError(str(exc.detail), status=exc.status_code))

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> Response:
        logging.getLogger("specgate").exception("internal error")
        return _error_response(request, SpecgateError("internal router error"))

    del chat_completions, completions, responses, health, ready, metrics  # registered
    install_admin_routes(app)
    install_model_routes(app)
    install_passthrough_routes(app)
