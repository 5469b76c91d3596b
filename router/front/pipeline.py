"""The request pipeline of the generation routes: one named step per stage, top to bottom.

:func:`generate` runs, for ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/responses``
alike (the differences are the kind's hooks, :mod:`router.front.request_kinds`):

================  ==========================================================================
step              what it does (the status it may answer)
================  ==========================================================================
``_admit``        request ids, the :class:`~router.front.context.RequestContext`, the W3C trace
                  context and the server span, the client's API key (401),
                  ``kind.check_served`` (404) when one model is served
``read_body``     the body, up to the largest ``limits.max_request_bytes`` of the models
                  (413; :mod:`router.front.intake`: its ``model`` is not known while it is read)
``_model``        its JSON (415 / 400), then the :class:`~router.state.runtime.Runtime` of its
                  model (:class:`router.state.fleet.Fleet`, :mod:`router.state.models`), which
                  every later step uses: that model's body cap (413), ``kind.check_served``
                  with several models (404), ``kind.parse`` (400) and
                  :func:`router.state.models.resolve_request` (404 ``model_not_found``; an
                  unknown adapter after one more read of the engines' lists)
``_controls``     the engine priority (:func:`router.access.admission.resolve_priority`, 400) and the
                  speculation hint (:func:`router.request.capabilities.speculation_hint`)
``_engine_fields`` engine-internal fields (:mod:`router.access.engine_fields`): placement directives
                  stripped, execution controls refused (400 ``unsupported_parameter``)
``size_prompt``   the prompt's tokens, exact or bounded, and the rendered prompt
``_features``     :func:`router.decision.policy.request_features` in one call (with the hint and the
                  adapters), :func:`router.request.sampling.check_min_tokens` (400)
``_limit``        the key's limits (:meth:`router.access.limits.KeyLimiter.check_request`, 429),
                  only when some key is limited
``_route``        the prefix chain and :meth:`Runtime.decide`
``_refuse``       a decision that did not route: 400 ``unsupported_feature`` /
                  ``context_length_exceeded``, 503 ``no_healthy_upstream``
``_routed``       the decision's span attributes and metrics, the prefix record
``_lease``        the endpoint's :class:`~router.state.endpoint.Lease` and its dispatch state
``_job``          the :class:`~router.upstream.proxy_job.ProxyJob`, with ``_engine_body``: the fields
                  the router adds (``model``, ``max_tokens``, ``kind.engine_ids``, the
                  speculative statistics, ``priority``), the fields it strips, one body per
                  pool whose engines read ``priority`` the other way round
``_relay``        the :class:`~router.upstream.proxy.ProxyResponse`, with the re-decision for failover
``record``        when the response ends (:mod:`router.front.record`): counters, the prediction's
                  check, the speed model's sample, the key's ticket, the span, the access log
================  ==========================================================================

Only steps that wait are coroutines (``read_body``, ``size_prompt``, ``_limit``, ``_refuse``'s
exact recount): a step that does not wait is a plain call, no coroutine object per request.

The model step is where a request's runtime is chosen (one per served model): the steps
after it take ``runtime`` as an argument and never read the fleet again, except
:func:`_live_runtime` (failover and the record, which follow a reload to the model's new
runtime).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from router.access.admission import (
    PRIORITY_FIELD,
    PRIORITY_HEADER,
    engine_priority,
    resolve_priority,
)
from router.access.engine_fields import FIELD_NAMES, apply
from router.decision.policy import Outcome, Reason, over_length_message, request_features
from router.decision.prefix import chain_for_request
from router.errors import ContextLengthExceeded, InvalidRequest, NoHealthyUpstream
from router.front.body import add_fields
from router.front.context import RequestContext, attach
from router.front.intake import (
    client_request_id,
    header,
    header_map,
    header_values,
    parse_json,
    read_body,
)
from router.front.record import record
from router.ops.trace import trace_headers
from router.request.capabilities import HINT_FIELD, HINT_HEADER, speculation_hint, trigger_param
from router.request.features import needs_exact
from router.request.sampling import check_min_tokens, speculative_caveats
from router.request.template_shapes import SLACK_TOKENS
from router.state.models import UnknownAdapter, check_model_body, model_runtime, resolve_request
from router.upstream.proxy import ProxyJob, ProxyResponse, Redecision
from router.upstream.specstats import FIELD as SPEC_STATS_FIELD

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Executor

    from starlette.requests import Request

    from router.access.admission import PriorityOutcome
    from router.access.limit_rules import Ticket
    from router.decision.policy import Decision
    from router.decision.prefix import PrefixChain
    from router.front.appstate import FrontState as AppState
    from router.front.request_kinds import RequestKind
    from router.request.features import ParsedRequest, PromptCounter, Rendered, RequestFeatures
    from router.state.endpoint import Lease
    from router.state.fleet import Fleet
    from router.state.models import Resolved
    from router.state.runtime import Runtime

__all__ = ["generate", "size_prompt"]


#: :data:`router.request.capabilities.HINT_HEADER` as an ASGI header name (lower-case bytes).
_HINT_HEADER = HINT_HEADER.lower().encode("latin-1")
_PRIORITY_HEADER = PRIORITY_HEADER.lower().encode("latin-1")

#: Bodies up to this size are rendered on the event loop (a chat template over a few KB takes
#: tens of microseconds, less than a thread hop); larger ones are rendered in a worker thread.
_INLINE_RENDER_BYTES = 16 * 1024

#: ``{pool: {endpoint: cached tokens}}`` of a prefix chain (:meth:`Runtime.prefix_matches`).
Matches = dict[str, dict[str, int]]


@dataclass(slots=True, kw_only=True)
class Admission(RequestContext):
    """The request's context (the error path's, :mod:`router.front.context`) with what :func:`_admit`
    learned for the later steps: one object per request.

    Attributes:
        own_id: the router's own id; the engine's ``rid`` (a client may reuse its
            ``x-request-id`` on retries, and SGLang refuses a rid that is already running).
        headers: the request's headers (:func:`router.front.intake.header_map`).
        authorization: the ``Authorization`` header, or None.
        trace: the W3C trace headers to forward (:func:`router.ops.trace.trace_headers`).
        tracing: the tracer this request's spans come from (kept even if a reload swaps it).
        received: ``time.perf_counter()`` at arrival (s).
    """

    own_id: str
    headers: dict[bytes, bytes]
    authorization: str | None
    trace: dict[str, str]
    tracing: Any
    received: float


async def generate(request: Request, kind: RequestKind) -> ProxyResponse:
    """Serve one generation request of ``kind`` (the steps of the module docstring).

    Raises:
        SpecgateError: a client or upstream error before the response starts (the handler
            writes the OpenAI envelope).
    """
    state: AppState = request.app.state.specgate
    fleet = state.fleet  # this request's models, even if a reload swaps the fleet
    admitted = _admit(request, state, fleet, kind)
    body = await read_body(request, fleet.config.max_request_bytes, admitted.headers)  # 413
    try:
        runtime, doc, parsed, resolved = _model(request, fleet, kind, body, admitted)
    except UnknownAdapter as exc:  # loaded since the last read? look once more (router/loops/engine_reads.py)
        if exc.model not in fleet.runtimes or not await state.model_refresh.refresh(fleet.runtimes[exc.model]):
            raise
        runtime, doc, parsed, resolved = _model(request, fleet, kind, body, admitted)
    priority, hint = _controls(state, runtime, doc, admitted)
    body, doc = _engine_fields(state, runtime, body, doc, admitted)
    prompt_tokens, lower, rendered = await size_prompt(runtime, parsed, len(body), state.executor)
    features = _features(state, runtime, doc, parsed, prompt_tokens, lower, rendered, resolved, hint, admitted)
    ticket = await _limit(state, runtime, features, admitted) if runtime.config.auth.rate_limits.enabled else None
    try:  # until the job holds the ticket: a refusal or an error here gives it back
        decision, chain, matches = _route(state, runtime, kind, doc, features, rendered, resolved)
        if decision.outcome is not Outcome.ROUTED:
            await _refuse(state, runtime, decision, parsed, len(body), features, admitted)
        _routed(state, runtime, decision, chain, matches, features, admitted)
    except BaseException:
        state.limiter.finish(ticket)
        raise
    lease, dispatch = _lease(state, runtime, decision, features)
    try:
        job = _job(request, state, runtime, kind, body, doc, features, resolved, priority, decision,
                   lease, dispatch, ticket, admitted)
    except BaseException:
        lease.release()
        state.limiter.finish(ticket)
        raise
    return _relay(state, runtime, job, chain, matches, admitted)


def _admit(request: Request, state: AppState, fleet: Fleet, kind: RequestKind) -> Admission:
    """Ids, context, trace and span; then the client's key (401) and, with one model, whether
    the route is served (404), before the body is read (the global sections are every
    model's: the first model's runtime holds them)."""
    runtime, received = fleet.default, time.perf_counter()
    own_id = state.next_request_id()
    headers = header_map(request.scope)
    baggage = runtime.config.tracing.forward_baggage  # trace context: every value of a repeated header
    trace = trace_headers(header_values(request.scope, headers, b"traceparent"),  # (one allowed; none without)
                          header_values(request.scope, headers, b"tracestate"),
                          header(headers, b"baggage") if baggage else None) if baggage or b"traceparent" in headers else {}
    rid, key = headers.get(b"x-request-id"), headers.get(b"authorization")  # header(), inline: no call when absent
    admitted = Admission(rid is not None and client_request_id(rid.decode("latin-1")) or own_id, own_id=own_id,
                         headers=headers, authorization=None if key is None else key.decode("latin-1"), trace=trace,
                         tracing=state.tracing, received=received)
    attach(request, admitted)
    if admitted.tracing is not None:  # router.ops.tracing: the server span, ended by _record or the error path
        admitted.span = admitted.tracing.start_request(request.scope["path"], trace, admitted.request_id)
    if runtime.auth is not None:
        runtime.auth.check_client(admitted.authorization)
    if fleet.single:
        kind.check_served(runtime)
    return admitted


def _model(request: Request, fleet: Fleet, kind: RequestKind, body: bytes,
           admitted: Admission) -> tuple[Runtime, Any, ParsedRequest, Resolved]:
    """The body's JSON (415 / 400, :func:`router.front.intake.parse_json`) and the runtime of its
    model (:func:`router.state.models.model_runtime`), which the steps after this one use
    alone; then, with that model's rules: its body cap (413), whether it serves the route
    (404), the kind's parser (400) and the name resolved (404 ``model_not_found`` before any
    work for an unknown name). Returns ``(runtime, doc, parsed, resolved)``."""
    doc = parse_json(request, body, admitted.headers)
    runtime = model_runtime(fleet, doc)
    check_model_body(fleet, runtime, len(body))
    if not fleet.single:
        kind.check_served(runtime)
    parsed = kind.parse(doc, runtime.config)
    resolved = resolve_request(runtime, doc)
    admitted.model = runtime.model_name
    return runtime, doc, parsed, resolved


def _live_runtime(state: AppState, runtime: Runtime) -> Runtime:
    """The current runtime of the model ``runtime`` served: failover re-decides on it and a
    finished request is recorded on it (a reload may have swapped it since the request came);
    ``runtime`` itself when a reload removed the model (its in-flight requests finish there)."""
    return state.fleet.runtimes.get(runtime.model_name, runtime)


def _controls(state: AppState, runtime: Runtime, doc: dict[str, Any],
              admitted: Admission) -> tuple[PriorityOutcome, str]:
    """The engine priority (400 ``invalid_priority``; counted by source) and the speculation
    hint (body field, header, the key's default)."""
    auth, authorization = runtime.auth, admitted.authorization
    asked, hint = admitted.headers.get(_PRIORITY_HEADER), admitted.headers.get(_HINT_HEADER)  # header(), inline
    priority = resolve_priority(doc, None if asked is None else asked.decode("latin-1"),
                                auth.priority_grant(authorization) if auth else None,
                                auth.priority_default if auth else None)
    state.metrics.priority_requests.inc((priority.source,))
    key_default = auth.speculation_default(authorization) if auth else None
    return priority, speculation_hint(doc, None if hint is None else hint.decode("latin-1"), key_default)


def _engine_fields(state: AppState, runtime: Runtime, body: bytes, doc: dict[str, Any],
                   admitted: Admission) -> tuple[bytes, dict[str, Any]]:
    """The body and document without a client's engine-internal placement fields, or a 400
    ``unsupported_parameter`` for an execution control (:func:`router.access.engine_fields.apply`; a
    caller in ``auth.engine_fields`` sends its own through)."""
    if FIELD_NAMES.isdisjoint(doc):  # the usual request: one pass over its top-level keys
        return body, doc
    auth, allow = runtime.auth, runtime.config.auth.engine_fields.allow
    keyed = auth.engine_fields(admitted.authorization) if auth is not None else frozenset()
    return apply(body, doc, keyed.union(allow), state.metrics.engine_fields.inc)


def _features(state: AppState, runtime: Runtime, doc: dict[str, Any], parsed: ParsedRequest,
              prompt_tokens: int, lower: int | None, rendered: Rendered, resolved: Resolved, hint: str,
              admitted: Admission) -> RequestFeatures:
    """The request's :class:`RequestFeatures` in one call (the sized prompt, the hint, the
    adapters; the context's too), then the ``min_tokens`` check against its budget (400). A
    bounded text prompt gets its expected P from the model's tokens per byte
    (:class:`router.request.features.TokensPerByte`), which an exact count teaches."""
    state.metrics.prompt_tokens.observe(("exact" if lower is None else "upper_bound",), prompt_tokens)
    size, estimate, counter = 0, None, runtime.counter
    if rendered.media_tokens or rendered.ids_len is not None:
        pass  # token ids, or parts counted by their bounds: no bytes to relate
    elif lower is not None:  # the bytes from the bound itself (the common case: no second pass)
        size = counter.text_bytes_of_bound(prompt_tokens, rendered)
        estimate = runtime.prompt_ratio.estimate(size, lower, prompt_tokens)
    else:  # counted exactly (already milliseconds of BPE): one pass more over the text
        size = counter.text_bytes(rendered)
        runtime.prompt_ratio.observe(prompt_tokens, size)
    features = request_features(parsed, prompt_tokens, runtime.rules, prompt_tokens_lower=lower,
                                speculation=hint, adapters=resolved.adapters, estimate=estimate, prompt_bytes=size)
    admitted.features = features
    check_min_tokens(doc, features.max_new_tokens)
    return features


async def size_prompt(runtime: Runtime, parsed: ParsedRequest, body_bytes: int,
                      executor: Executor) -> tuple[int, int | None, Rendered]:
    """Prompt tokens for the decision and the rendered prompt: ``(P, None, rendered)`` exact,
    or ``(hi, lo, rendered)`` when no decision threshold lies between the byte-length bounds
    (then ``hi`` decides as P would).

    Rendering runs on the loop for bodies up to 16 KiB (a plain chat spliced from its shape's
    pieces, :mod:`router.request.template_shapes`; rendered for real when a threshold lies within
    :data:`~router.request.template_shapes.SLACK_TOKENS` of its bounds), in ``executor`` (the tokeniser threads,
    :func:`router.app.asgi.tokenizer_executor`) for larger ones; exact BPE encoding always runs in the threads, and only when a
    decision threshold falls inside the byte-length bounds (:class:`router.request.features.PromptCounter`).
    Never an under-count: the value used is exact or ``hi >= P``. With image/audio parts the
    text is counted exactly and each part by its bound: ``(exact + media, exact)``.
    """
    counter = runtime.counter
    loop = asyncio.get_running_loop()
    if body_bytes <= _INLINE_RENDER_BYTES:
        rendered = counter.render(parsed, splice=True)
        lo, hi = counter.bounds(rendered)
    else:
        rendered, (lo, hi) = await loop.run_in_executor(executor, _render_bounds, counter, parsed)
    if lo == hi:  # token-id prompts
        return hi, None, rendered
    flips = runtime.flip_points(parsed.max_new_tokens, parsed.n)
    if rendered.spliced:  # not rendered: decided only away from every threshold
        if not needs_exact(max(0, lo - SLACK_TOKENS), hi + SLACK_TOKENS, flips):
            return hi, lo, rendered
        rendered = counter.render(parsed)
        lo, hi = counter.bounds(rendered)
    if not needs_exact(lo, hi, flips):
        return hi, lo, rendered
    exact = await loop.run_in_executor(executor, counter.exact, rendered)
    media = rendered.media_tokens
    return (exact + media, exact, rendered) if media else (exact, None, rendered)


def _render_bounds(counter: PromptCounter, parsed: ParsedRequest) -> tuple[Rendered, tuple[int, int]]:
    rendered = counter.render(parsed)
    return rendered, counter.bounds(rendered)


async def _limit(state: AppState, runtime: Runtime, features: RequestFeatures,
                 admitted: Admission) -> Ticket | None:
    """The key's limits (:mod:`router.access.limits`; called only when ``auth.rate_limits`` limits
    some key): a 429 before the decision and any engine call; the ticket (None: this key is
    not limited) is finished exactly once from here on."""
    rl = runtime.config.auth.rate_limits
    return await state.limiter.check_request(rl, admitted.authorization, runtime.auth, features)


def _route(state: AppState, runtime: Runtime, kind: RequestKind, doc: dict[str, Any], features: RequestFeatures,
           rendered: Rendered, resolved: Resolved) -> tuple[Decision, PrefixChain | None, Matches | None]:
    """The prefix chain and its matches (when ``routing.prefix_cache.enabled``), then
    :meth:`Runtime.decide` (pure; routed or not)."""
    chain = matches = None
    pc = runtime.config.routing.prefix_cache
    if pc.enabled:
        chain = chain_for_request(rendered, doc, kind.name, block_chars=pc.block_chars, max_blocks=pc.max_blocks,
                                  anchor_blocks=pc.anchor_blocks, adapters=resolved.adapters)
        if chain is not None:
            matches = runtime.prefix_matches(chain, features.predicted_prompt_tokens)
    return runtime.decide(features, state.clock(), chain=chain, matches=matches), chain, matches


async def _refuse(state: AppState, runtime: Runtime, decision: Decision, parsed: ParsedRequest,
                  body_bytes: int, features: RequestFeatures, admitted: Admission) -> None:
    """Raise the error of a decision that did not route: a kind no pool serves (400
    ``unsupported_feature``), over the context (400; a small prompt refused on its byte bound
    is counted exactly for the message: no flip point lies between the bounds, so the exact
    count refuses too), nothing healthy (503 with ``Retry-After``)."""
    if decision.outcome is Outcome.REFUSED and decision.reason is not Reason.CONTEXT_CAP:
        kind = decision.reason.value
        admitted.reject_reason = kind
        field = trigger_param(parsed, kind)
        raise InvalidRequest(_unserved_message(kind, field), code="unsupported_feature", param=field)
    if decision.outcome is Outcome.REFUSED:
        if not features.prompt_exact and body_bytes <= _INLINE_RENDER_BYTES and not parsed.media_tokens:
            exact = await asyncio.get_running_loop().run_in_executor(state.executor, runtime.counter.count, parsed)
            features = request_features(parsed, exact, runtime.rules, speculation=features.speculation,
                                        adapters=features.adapters)
            admitted.features = features
        raise ContextLengthExceeded(over_length_message(features, runtime.rules), param=parsed.param)
    raise NoHealthyUpstream("no healthy upstream can serve this request",
                            headers={"retry-after": str(runtime.config.health.retry_after_s)})


def _unserved_message(kind: str, field: str | None) -> str:
    return (f"no pool of this deployment serves `{kind}` (needed by `{field}`); every pool that "
            f"could is a speculative pool without it in its `capabilities` (docs/operator-guide.md)")


def _routed(state: AppState, runtime: Runtime, decision: Decision, chain: PrefixChain | None,
            matches: Matches | None, features: RequestFeatures, admitted: Admission) -> None:
    """A routed decision on the request's span, in the predicted-completion histogram and (with
    a chain) in the prefix index."""
    assert decision.pool is not None and decision.endpoint is not None  # routed: both are set
    span = admitted.span
    if span is not None:
        span.set_attributes({
            "specgate.pool": decision.pool, "specgate.reason": decision.reason.value,
            "specgate.endpoint_reason": decision.endpoint_reason or "least_load",
            "specgate.prompt_tokens": features.prompt_tokens, "specgate.prompt_tokens_exact": features.prompt_exact,
            **({"specgate.predicted_s": dict(decision.predicted)[decision.pool]} if decision.predicted else {})})
    if decision.predicted:
        state.metrics.predicted_completion.observe((decision.pool,), dict(decision.predicted)[decision.pool])
    if chain is not None:
        _note_prefix(state, runtime, decision, chain, matches, features)


def _note_prefix(state: AppState, runtime: Runtime, decision: Decision, chain: PrefixChain,
                 matches: Matches | None, features: RequestFeatures) -> None:
    """After a routed decision (the first one or a failover's): record ``chain`` at its
    endpoint, observe the matched share of the predicted prompt tokens (what the matches were
    computed for, :attr:`RequestFeatures.predicted_prompt_tokens`)."""
    assert decision.pool is not None and decision.endpoint is not None  # routed: both are set
    runtime.record_prefix(decision, chain)
    pool = matches.get(decision.pool) if matches else None  # no throwaway {} per request
    cached = pool.get(decision.endpoint, 0) if pool else 0
    prompt_tokens = features.predicted_prompt_tokens
    state.metrics.prefix_match_ratio.observe(
        (decision.pool, decision.endpoint_reason or "least_load"), cached / prompt_tokens if prompt_tokens else 0.0)


def _lease(state: AppState, runtime: Runtime, decision: Decision,
           features: RequestFeatures) -> tuple[Lease, tuple[Any, ...] | None]:
    """The lease on the decided endpoint (in-flight +1 until the response ends) and, when the
    request is measured for the speed model (:meth:`Runtime.measures`), the endpoint's state at
    dispatch, ``(url, load, waits, context, sent_at)`` (``sent_at``: ``time.perf_counter()``
    now, the clock of ``ProxyJob.received_at``; None: not measured)."""
    assert decision.endpoint is not None  # routed: it is set
    lease = runtime.endpoint(decision.endpoint).lease(features.temperature_class, bool(features.adapters))
    now = state.clock()
    if not runtime.measures(decision.pool, now):
        return lease, None
    return lease, (decision.endpoint, *runtime.dispatch_state(decision.endpoint, now, features), time.perf_counter())


def _job(request: Request, state: AppState, runtime: Runtime, kind: RequestKind, body: bytes,
         doc: dict[str, Any], features: RequestFeatures, resolved: Resolved, priority: PriorityOutcome,
         decision: Decision, lease: Lease, dispatch: tuple[Any, ...] | None, ticket: Ticket | None,
         admitted: Admission) -> ProxyJob:
    """The :class:`ProxyJob` of a routed request: its engine body(ies) and what the relay and
    the record need."""
    limits = runtime.config.limits
    body, pool_bodies, doc, abort_rids, spec_stats = _engine_body(runtime, kind, body, doc, features, resolved,
                                                                  priority, decision, admitted.own_id,
                                                                  measured=dispatch is not None)
    return ProxyJob(request_id=admitted.request_id, path=request.scope["path"], body=body,
                    features=features, decision=decision, lease=lease, abort_rids=abort_rids,
                    received_at=admitted.received, end_events=kind.end_events,
                    observer=kind.observer(state.metrics, doc),
                    default_budget=None if not features.budget_defaulted else
                    "engine" if limits.default_max_tokens is None else str(features.max_new_tokens),
                    trace=admitted.trace, span=admitted.span,
                    extra={"dispatch": dispatch, "spec_stats": spec_stats},
                    caveats=_caveats(runtime, doc), pool_bodies=pool_bodies,
                    ticket=ticket, headers=ticket.headers if ticket is not None else ())


def _engine_body(runtime: Runtime, kind: RequestKind, body: bytes, doc: dict[str, Any],
                 features: RequestFeatures, resolved: Resolved, priority: PriorityOutcome, decision: Decision,
                 own_id: str, *, measured: bool = True
                 ) -> tuple[bytes, dict[str, bytes], dict[str, Any], tuple[str, ...], str | None]:
    """The body the engine gets: ``(body, {pool: body}, doc, abort ids, spec_stats)``
    (``measured``: the request feeds its pool's fit, :meth:`Runtime.measures`).

    Added, in this order: ``model`` (an alias, a bare adapter, or none: SGLang's "default"),
    the defaulted ``max_tokens``, the speculative statistics (:func:`_spec_stats`), the kind's
    own fields (``rid`` / ``request_id``, :meth:`RequestKind.engine_ids`), the engine
    ``priority`` (replacing the client's, :mod:`router.access.admission`); stripped: the router's
    hint field and an untrusted priority (the body is then dumped again). Spliced in by
    :func:`router.front.body.add_fields`; a pool whose ``priority_order`` is not ``larger_first``
    gets its own body. ``doc`` is the document after the strip.
    """
    fields: dict[str, Any] = {}
    if resolved.forward is not None:
        fields["model"] = resolved.forward
    if features.budget_defaulted and runtime.config.limits.default_max_tokens is not None:
        fields["max_tokens"] = features.max_new_tokens
    spec_stats = _spec_stats(runtime, decision, kind, doc, fields) if measured else None
    abort_rids = kind.engine_ids(doc, features, own_id, fields)
    if priority.value is not None and doc.get(PRIORITY_FIELD) != priority.value:
        fields[PRIORITY_FIELD] = priority.value
    drop = (HINT_FIELD,) if priority.value is not None else (HINT_FIELD, PRIORITY_FIELD)
    if any(k in doc for k in drop):  # the router's own field, an untrusted priority
        doc = {k: v for k, v in doc.items() if k not in drop}
        body = orjson.dumps(doc)
    pool_bodies = {} if priority.value is None else {
        p.name: add_fields(body, doc, {**fields, PRIORITY_FIELD: engine_priority(priority.value, order)})
        for p in runtime.config.pools if (order := p.priority_order) != "larger_first"}
    return add_fields(body, doc, fields), pool_bodies, doc, abort_rids, spec_stats


def _spec_stats(runtime: Runtime, decision: Decision, kind: RequestKind, doc: dict[str, Any],
                fields: dict[str, Any]) -> str | None:
    """Ask a speculative engine for the request's own statistics (:mod:`router.upstream.specstats`):
    ``strip`` when the router set the field (the relay cuts them out again), ``read`` when the
    client asked for them itself, None when not read (a plain pool, a kind without them such
    as ``/v1/responses``, learning off, or a request not measured: the client's own field then
    goes to the engine as it is)."""
    pool = runtime.pool(decision.pool)
    if not kind.spec_stats or pool is None or not pool.speculative or pool.fit is None:
        return None
    if doc.get(SPEC_STATS_FIELD) is True:
        return "read"
    if SPEC_STATS_FIELD in doc:
        return None
    fields[SPEC_STATS_FIELD] = True
    return "strip"


def _caveats(runtime: Runtime, doc: dict[str, Any]) -> dict[str, str]:
    """``{speculative pool: its x-specgate-sampling-fields value}`` when the request sets a
    field whose guarantee differs there (:func:`router.request.sampling.speculative_caveats`)."""
    fields = speculative_caveats(doc)
    if not fields:
        return {}
    value = ",".join(fields)
    return {p.name: value for p in runtime.pools if p.speculative}


def _relay(state: AppState, runtime: Runtime, job: ProxyJob, chain: PrefixChain | None,
           matches: Matches | None, admitted: Admission) -> ProxyResponse:
    """The response: the proxy relays ``job`` (failover through :func:`_redecider`), then
    :func:`router.front.record.record` runs once when it ends (on the model's live runtime)."""
    cfg = runtime.config
    return ProxyResponse(job, transport=state.transport, upstream=cfg.upstream,
                         redecide=_redecider(state, runtime, job.features, chain, matches),
                         on_done=lambda j: record(state, _live_runtime(state, runtime), j), spawn=state.spawn,
                         retry_after_s=cfg.health.retry_after_s,
                         clock=state.clock, tracing=admitted.tracing)


def _redecider(state: AppState, runtime: Runtime, features: RequestFeatures, chain: PrefixChain | None,
               matches: Matches | None) -> Callable[..., Redecision]:
    """The proxy's re-decision after a failed attempt: :meth:`Runtime.decide` on the live
    runtime with the failed endpoints (and whole pools that refused for capacity) excluded,
    and the new lease; a :class:`Redecision` without a lease when nothing routes."""

    def redecide(excluded: frozenset[str], excluded_pools: frozenset[str] = frozenset()) -> Redecision:
        rt = _live_runtime(state, runtime)
        if excluded_pools:
            excluded = excluded | {u for p in rt.pools if p.name in excluded_pools for u in p.endpoints}
        d = rt.decide(features, state.clock(), exclude=excluded, chain=chain, matches=matches)
        if d.outcome is not Outcome.ROUTED:
            return Redecision(d)
        assert d.endpoint is not None  # routed: it is set
        if chain is not None:
            _note_prefix(state, rt, d, chain, matches, features)
        return Redecision(d, rt.endpoint(d.endpoint).lease(features.temperature_class, bool(features.adapters)))

    return redecide
