"""The request pipeline of the generation routes: one named step per stage, top to bottom.

:func:`generate` runs, for ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/responses``
alike (the differences are the kind's hooks, :mod:`router.front.request_kinds`):

================  ==========================================================================
step              what it does (the status it may answer)
================  ==========================================================================
``_admit``        request ids, the :class:`~router.front.context.GenerationContext`, the W3C trace
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

Every step takes the request's :class:`~router.front.context.GenerationContext` (``ctx``; the
steps after ``_features`` also the request's features), reads the fields earlier steps filled
and fills its own (the context's docstring names which step fills which field). Only steps
that wait are coroutines (``read_body``, ``size_prompt``, ``_limit``, ``_refuse``'s exact
recount): a step that does not wait is a plain call, no coroutine object per request; a step
with nothing to do (``_engine_fields`` for a body without such fields, ``_limit`` with no key
limited) is not called.

The model step is where a request's runtime is chosen (one per served model): the steps
after it read ``ctx.runtime`` and never read the fleet again, except :func:`_live_runtime`
(failover and the record, which follow a reload to the model's new runtime).
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
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
from router.front.context import CONTEXT_KEY, GenerationContext
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
    from concurrent.futures import Executor

    from starlette.requests import Request

    from router.decision.policy import Decision
    from router.front.appstate import FrontState as AppState
    from router.front.request_kinds import RequestKind
    from router.request.features import ParsedRequest, PromptCounter, Rendered, RequestFeatures
    from router.state.runtime import Runtime

__all__ = ["generate", "size_prompt"]


#: :data:`router.request.capabilities.HINT_HEADER` as an ASGI header name (lower-case bytes).
_HINT_HEADER = HINT_HEADER.lower().encode("latin-1")
_PRIORITY_HEADER = PRIORITY_HEADER.lower().encode("latin-1")

#: Bodies up to this size are rendered on the event loop (a chat template over a few KB takes
#: tens of microseconds, less than a thread hop); larger ones are rendered in a worker thread.
_INLINE_RENDER_BYTES = 16 * 1024

#: The router's own body fields the engine never gets: its hint, and the client's ``priority``
#: unless trusted (:func:`_engine_body`).
_DROP_TRUSTED, _DROP_UNTRUSTED = frozenset((HINT_FIELD,)), frozenset((HINT_FIELD, PRIORITY_FIELD))


async def generate(request: Request, kind: RequestKind) -> ProxyResponse:
    """Serve one generation request of ``kind`` (the steps of the module docstring).

    Raises:
        SpecgateError: a client or upstream error before the response starts (the handler
            writes the OpenAI envelope).
    """
    state: AppState = request.app.state.specgate
    ctx = _admit(request, state, kind)
    ctx.body = await read_body(request, ctx.fleet.config.max_request_bytes, ctx.headers)  # 413
    try:
        _model(ctx, request)
    except UnknownAdapter as exc:  # loaded since the last read? look once more (router/loops/engine_reads.py)
        runtimes = ctx.fleet.runtimes
        if exc.model not in runtimes or not await state.model_refresh.refresh(runtimes[exc.model]):
            raise
        _model(ctx, request)
    _controls(ctx)
    if not FIELD_NAMES.isdisjoint(ctx.doc):  # the usual request has none: one pass over its top-level keys
        _engine_fields(ctx)
    features = _features(ctx, await size_prompt(ctx.runtime, ctx.parsed, len(ctx.body), state.executor))
    if ctx.runtime.config.auth.rate_limits.enabled:
        await _limit(ctx, features)
    try:  # until the job holds the ticket: a refusal or an error here gives it back
        _route(ctx, features)
        if ctx.decision.outcome is not Outcome.ROUTED:
            await _refuse(ctx, features)
        _routed(ctx, features)
    except BaseException:
        state.limiter.finish(ctx.ticket)
        raise
    _lease(ctx, features)
    try:
        job = _job(ctx, features)
    except BaseException:
        ctx.lease.release()
        state.limiter.finish(ctx.ticket)
        raise
    return _relay(ctx, job)


def _admit(request: Request, state: AppState, kind: RequestKind) -> GenerationContext:
    """The request's context (ids, headers, trace) on its scope and its span; then the client's
    key (401) and, with one model, whether the route is served (404), before the body is read
    (the global sections are every model's: the first model's runtime holds them)."""
    fleet = state.fleet  # this request's models, even if a reload swaps the fleet
    runtime, received = fleet.default, time.perf_counter()
    own_id = state.next_request_id()
    headers = header_map(request.scope)
    baggage = runtime.config.tracing.forward_baggage  # trace context: every value of a repeated header
    trace = trace_headers(header_values(request.scope, headers, b"traceparent"),  # (one allowed; none without)
                          header_values(request.scope, headers, b"tracestate"),
                          header(headers, b"baggage") if baggage else None) if baggage or b"traceparent" in headers else {}
    rid, key = headers.get(b"x-request-id"), headers.get(b"authorization")  # header(), inline: no call when absent
    ctx = GenerationContext(rid is not None and client_request_id(rid.decode("latin-1")) or own_id,
                            request.scope["path"], state, fleet, kind, own_id, headers,
                            None if key is None else key.decode("latin-1"), trace, state.tracing, received)
    request.scope[CONTEXT_KEY] = ctx  # router.front.context.attach, inline
    if ctx.tracing is not None:  # router.ops.tracing: the server span, ended by _record or the error path
        ctx.span = ctx.tracing.start_request(ctx.path, trace, ctx.request_id)
    if runtime.auth is not None:
        runtime.auth.check_client(ctx.authorization)
    if fleet.single:
        kind.check_served(runtime)
    return ctx


def _model(ctx: GenerationContext, request: Request) -> None:
    """The body's JSON (415 / 400, :func:`router.front.intake.parse_json`) and the runtime of its
    model (:func:`router.state.models.model_runtime`), which the steps after this one use
    alone; then, with that model's rules: its body cap (413), whether it serves the route
    (404), the kind's parser (400) and the name resolved (404 ``model_not_found`` before any
    work for an unknown name). Fills ``doc``, ``runtime``, ``parsed``, ``resolved``, then ``model``."""
    fleet, kind = ctx.fleet, ctx.kind
    ctx.doc = doc = parse_json(request, ctx.body, ctx.headers)
    ctx.runtime = runtime = model_runtime(fleet, doc)
    check_model_body(fleet, runtime, len(ctx.body))
    if not fleet.single:
        kind.check_served(runtime)
    ctx.parsed = kind.parse(doc, runtime.config)
    ctx.resolved = resolve_request(runtime, doc)
    ctx.model = runtime.model_name


def _live_runtime(ctx: GenerationContext) -> Runtime:
    """The current runtime of the request's model: failover re-decides on it and a finished
    request is recorded on it (a reload may have swapped it since the request came);
    ``ctx.runtime`` itself when a reload removed the model (its in-flight requests finish there)."""
    return ctx.state.fleet.runtimes.get(ctx.runtime.model_name, ctx.runtime)


def _controls(ctx: GenerationContext) -> None:
    """The engine priority (400 ``invalid_priority``; counted by source) and the speculation
    hint (body field, header, the key's default). Fills ``priority`` and ``hint``."""
    auth, authorization, doc = ctx.runtime.auth, ctx.authorization, ctx.doc
    asked, hint = ctx.headers.get(_PRIORITY_HEADER), ctx.headers.get(_HINT_HEADER)  # header(), inline
    ctx.priority = priority = resolve_priority(doc, None if asked is None else asked.decode("latin-1"),
                                               auth.priority_grant(authorization) if auth else None,
                                               auth.priority_default if auth else None)
    ctx.state.metrics.priority_requests.inc((priority.source,))
    key_default = auth.speculation_default(authorization) if auth else None
    ctx.hint = speculation_hint(doc, None if hint is None else hint.decode("latin-1"), key_default)


def _engine_fields(ctx: GenerationContext) -> None:
    """The body and document without a client's engine-internal placement fields, or a 400
    ``unsupported_parameter`` for an execution control (:func:`router.access.engine_fields.apply`; a
    caller in ``auth.engine_fields`` sends its own through). Called only when ``doc`` has one
    of :data:`router.access.engine_fields.FIELD_NAMES`; replaces ``body`` and ``doc``."""
    auth, allow = ctx.runtime.auth, ctx.runtime.config.auth.engine_fields.allow
    keyed = auth.engine_fields(ctx.authorization) if auth is not None else frozenset()
    ctx.body, ctx.doc = apply(ctx.body, ctx.doc, keyed.union(allow), ctx.state.metrics.engine_fields.inc)


def _features(ctx: GenerationContext, sized: tuple[int, int | None, Rendered]) -> RequestFeatures:
    """The request's :class:`RequestFeatures` in one call (``sized``: :func:`size_prompt`'s
    prompt tokens, lower bound and rendered prompt; the hint, the adapters), then the
    ``min_tokens`` check against its budget (400). A bounded text prompt gets its expected P
    from the model's tokens per byte (:class:`router.request.features.TokensPerByte`), which an
    exact count teaches. Fills ``rendered`` and ``features``."""
    prompt_tokens, lower, ctx.rendered = sized
    rendered, runtime = ctx.rendered, ctx.runtime
    ctx.state.metrics.prompt_tokens.observe(("exact" if lower is None else "upper_bound",), prompt_tokens)
    size, estimate, counter = 0, None, runtime.counter
    if rendered.media_tokens or rendered.ids_len is not None:
        pass  # token ids, or parts counted by their bounds: no bytes to relate
    elif lower is not None:  # the bytes from the bound itself (the common case: no second pass)
        size = counter.text_bytes_of_bound(prompt_tokens, rendered)
        estimate = runtime.prompt_ratio.estimate(size, lower, prompt_tokens)
    else:  # counted exactly (already milliseconds of BPE): one pass more over the text
        size = counter.text_bytes(rendered)
        runtime.prompt_ratio.observe(prompt_tokens, size)
    features = request_features(ctx.parsed, prompt_tokens, runtime.rules, prompt_tokens_lower=lower,
                                speculation=ctx.hint, adapters=ctx.resolved.adapters, estimate=estimate,
                                prompt_bytes=size)
    ctx.features = features
    check_min_tokens(ctx.doc, features.max_new_tokens)
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



async def _limit(ctx: GenerationContext, features: RequestFeatures) -> None:
    """The key's limits (:mod:`router.access.limits`; called only when ``auth.rate_limits`` limits
    some key): a 429 before the decision and any engine call; fills ``ticket`` (None: this key
    is not limited), finished exactly once from here on."""
    runtime = ctx.runtime
    ctx.ticket = await ctx.state.limiter.check_request(runtime.config.auth.rate_limits, ctx.authorization,
                                                       runtime.auth, features)


def _route(ctx: GenerationContext, features: RequestFeatures) -> None:
    """The prefix chain and its matches (when ``routing.prefix_cache.enabled``), then
    :meth:`Runtime.decide` (pure; routed or not). Fills ``chain``, ``matches``, ``decision``."""
    runtime = ctx.runtime
    pc = runtime.config.routing.prefix_cache
    if pc.enabled:
        ctx.chain = chain = chain_for_request(ctx.rendered, ctx.doc, ctx.kind.name, block_chars=pc.block_chars,
                                              max_blocks=pc.max_blocks, anchor_blocks=pc.anchor_blocks,
                                              adapters=ctx.resolved.adapters)
        if chain is not None:
            ctx.matches = runtime.prefix_matches(chain, features.predicted_prompt_tokens)
    ctx.decision = runtime.decide(features, ctx.state.clock(), chain=ctx.chain, matches=ctx.matches)


async def _refuse(ctx: GenerationContext, features: RequestFeatures) -> None:
    """Raise the error of a decision that did not route: a kind no pool serves (400
    ``unsupported_feature``), over the context (400; a small prompt refused on its byte bound
    is counted exactly for the message: no flip point lies between the bounds, so the exact
    count refuses too), nothing healthy (503 with ``Retry-After``)."""
    decision, parsed, runtime = ctx.decision, ctx.parsed, ctx.runtime
    if decision.outcome is Outcome.REFUSED and decision.reason is not Reason.CONTEXT_CAP:
        kind = decision.reason.value
        ctx.reject_reason = kind
        field = trigger_param(parsed, kind)
        raise InvalidRequest(_unserved_message(kind, field), code="unsupported_feature", param=field)
    if decision.outcome is Outcome.REFUSED:
        if not features.prompt_exact and len(ctx.body) <= _INLINE_RENDER_BYTES and not parsed.media_tokens:
            exact = await asyncio.get_running_loop().run_in_executor(ctx.state.executor, runtime.counter.count,
                                                                     parsed)
            features = request_features(parsed, exact, runtime.rules, speculation=features.speculation,
                                        adapters=features.adapters)
            ctx.features = features
        raise ContextLengthExceeded(over_length_message(features, runtime.rules), param=parsed.param)
    raise NoHealthyUpstream("no healthy upstream can serve this request",
                            headers={"retry-after": str(runtime.config.health.retry_after_s)})


def _unserved_message(kind: str, field: str | None) -> str:
    return (f"no pool of this deployment serves `{kind}` (needed by `{field}`); every pool that "
            f"could is a speculative pool without it in its `capabilities` (docs/operator-guide.md)")


def _routed(ctx: GenerationContext, features: RequestFeatures) -> None:
    """A routed decision on the request's span, in the predicted-completion histogram and (with
    a chain) in the prefix index."""
    decision = ctx.decision
    assert decision.pool is not None and decision.endpoint is not None  # routed: both are set
    span = ctx.span
    if span is not None:
        span.set_attributes({
            "specgate.pool": decision.pool, "specgate.reason": decision.reason.value,
            "specgate.endpoint_reason": decision.endpoint_reason or "least_load",
            "specgate.prompt_tokens": features.prompt_tokens, "specgate.prompt_tokens_exact": features.prompt_exact,
            **({"specgate.predicted_s": dict(decision.predicted)[decision.pool]} if decision.predicted else {})})
    if decision.predicted:
        ctx.state.metrics.predicted_completion.observe((decision.pool,), dict(decision.predicted)[decision.pool])
    if ctx.chain is not None:
        _note_prefix(ctx, ctx.runtime, decision)


def _note_prefix(ctx: GenerationContext, runtime: Runtime, decision: Decision) -> None:
    """After a routed ``decision`` on ``runtime`` (the first one or a failover's, on the live
    runtime), with a prefix chain: record the chain at its endpoint, observe the matched share
    of the predicted prompt tokens (what the matches were computed for,
    :attr:`RequestFeatures.predicted_prompt_tokens`)."""
    chain, features = ctx.chain, ctx.features
    assert decision.pool is not None and decision.endpoint is not None  # routed: both are set
    assert chain is not None and features is not None  # called with a chain, after _features
    runtime.record_prefix(decision, chain)
    cached = _cached(ctx, decision)
    prompt_tokens = features.predicted_prompt_tokens
    ctx.state.metrics.prefix_match_ratio.observe(
        (decision.pool, decision.endpoint_reason or "least_load"), cached / prompt_tokens if prompt_tokens else 0.0)


def _lease(ctx: GenerationContext, features: RequestFeatures) -> None:
    """The lease on the decided endpoint (in-flight +1 until the response ends) and, when the
    request is measured for the speed model (:meth:`Runtime.measures`), the endpoint's state at
    dispatch, ``(url, load, waits, context, sent_at, backlog, prompts_sent)`` (``sent_at``:
    ``time.perf_counter()`` now, the clock of ``ProxyJob.received_at``; the last two from
    :meth:`Runtime.note_prompt`). Fills ``lease`` and ``dispatch`` (None: not measured)."""
    decision, runtime = ctx.decision, ctx.runtime
    assert decision.endpoint is not None  # routed: it is set
    ctx.lease = runtime.endpoint(decision.endpoint).lease(features.temperature_class, bool(features.adapters))
    now = ctx.state.clock()
    sent = runtime.note_prompt(decision, features, _cached(ctx, decision), now)
    ctx.lease.prompts_sent = sent[1]
    if runtime.measures(decision.pool, now):
        ctx.dispatch = (decision.endpoint, *runtime.dispatch_state(decision.endpoint, now, features),
                        time.perf_counter(), *sent)


def _cached(ctx: GenerationContext, decision: Decision) -> int:
    """Prompt tokens of the request the prefix index expects cached at the decided endpoint
    (0 without prefix routing)."""
    pool = ctx.matches.get(decision.pool) if ctx.matches and decision.pool is not None else None
    return pool.get(decision.endpoint, 0) if pool and decision.endpoint is not None else 0


def _job(ctx: GenerationContext, features: RequestFeatures) -> ProxyJob:
    """The :class:`ProxyJob` of a routed request: its engine body(ies) (:func:`_engine_body`) and
    what the relay and the record need."""
    limits = ctx.runtime.config.limits
    _engine_body(ctx, features)
    ticket = ctx.ticket
    return ProxyJob(request_id=ctx.request_id, path=ctx.path, body=ctx.body,
                    features=features, decision=ctx.decision, lease=ctx.lease, abort_rids=ctx.abort_rids,
                    received_at=ctx.received, end_events=ctx.kind.end_events,
                    observer=ctx.kind.observer(ctx.state.metrics, ctx.doc),
                    default_budget=None if not features.budget_defaulted else
                    "engine" if limits.default_max_tokens is None else str(features.max_new_tokens),
                    trace=ctx.trace, span=ctx.span,
                    extra={"dispatch": ctx.dispatch, "spec_stats": ctx.spec_stats},
                    caveats=_caveats(ctx), pool_bodies=ctx.pool_bodies,
                    ticket=ticket, headers=ticket.headers if ticket is not None else ())


def _engine_body(ctx: GenerationContext, features: RequestFeatures) -> None:
    """The body the engine gets: fills ``body``, ``pool_bodies`` (``{pool: body}``), ``doc``
    (the document after the strip), ``abort_rids`` and ``spec_stats`` (asked only when the
    request feeds its pool's fit: ``dispatch`` is set, :meth:`Runtime.measures`).

    Added, in this order: ``model`` (an alias, a bare adapter, or none: SGLang's "default"),
    the defaulted ``max_tokens``, the speculative statistics (:func:`_spec_stats`), the kind's
    own fields (``rid`` / ``request_id``, :meth:`RequestKind.engine_ids`), the engine
    ``priority`` (replacing the client's, :mod:`router.access.admission`); stripped: the router's
    hint field and an untrusted priority (the body is then dumped again). Spliced in by
    :func:`router.front.body.add_fields`; a pool whose ``priority_order`` is not ``larger_first``
    gets its own body.
    """
    runtime, doc, body, priority = ctx.runtime, ctx.doc, ctx.body, ctx.priority.value
    fields: dict[str, Any] = {}
    if ctx.resolved.forward is not None:
        fields["model"] = ctx.resolved.forward
    if features.budget_defaulted and runtime.config.limits.default_max_tokens is not None:
        fields["max_tokens"] = features.max_new_tokens
    if ctx.dispatch is not None:
        ctx.spec_stats = _spec_stats(ctx, fields)
    ctx.abort_rids = ctx.kind.engine_ids(doc, features, ctx.own_id, fields)
    if priority is not None and doc.get(PRIORITY_FIELD) != priority:
        fields[PRIORITY_FIELD] = priority
    drop = _DROP_TRUSTED if priority is not None else _DROP_UNTRUSTED
    if not drop.isdisjoint(doc):  # the router's own field, an untrusted priority
        ctx.doc = doc = {k: v for k, v in doc.items() if k not in drop}
        body = orjson.dumps(doc)
    ctx.pool_bodies = {} if priority is None else {
        p.name: add_fields(body, doc, {**fields, PRIORITY_FIELD: engine_priority(priority, order)})
        for p in runtime.config.pools if (order := p.priority_order) != "larger_first"}
    ctx.body = add_fields(body, doc, fields)


def _spec_stats(ctx: GenerationContext, fields: dict[str, Any]) -> str | None:
    """Ask a speculative engine for the request's own statistics (:mod:`router.upstream.specstats`):
    ``strip`` when the router set the field in ``fields`` (the relay cuts them out again),
    ``read`` when the client asked for them itself, None when not read (a plain pool, a kind
    without them such as ``/v1/responses``, or learning off: the client's own field then goes
    to the engine as it is)."""
    pool, doc = ctx.runtime.pool(ctx.decision.pool), ctx.doc
    if not ctx.kind.spec_stats or pool is None or not pool.speculative or pool.fit is None:
        return None
    if doc.get(SPEC_STATS_FIELD) is True:
        return "read"
    if SPEC_STATS_FIELD in doc:
        return None
    fields[SPEC_STATS_FIELD] = True
    return "strip"


def _caveats(ctx: GenerationContext) -> dict[str, str]:
    """``{speculative pool: its x-specgate-sampling-fields value}`` when the request sets a
    field whose guarantee differs there (:func:`router.request.sampling.speculative_caveats`)."""
    fields = speculative_caveats(ctx.doc)
    if not fields:
        return {}
    value = ",".join(fields)
    return {p.name: value for p in ctx.runtime.pools if p.speculative}


def _relay(ctx: GenerationContext, job: ProxyJob) -> ProxyResponse:
    """The response: the proxy relays ``job`` (failover through :func:`_redecide`), then
    :func:`_done` runs once when it ends."""
    state, cfg = ctx.state, ctx.runtime.config
    return ProxyResponse(job, transport=state.transport, upstream=cfg.upstream,
                         redecide=partial(_redecide, ctx), on_done=partial(_done, ctx), spawn=state.spawn,
                         retry_after_s=cfg.health.retry_after_s, clock=state.clock, tracing=ctx.tracing)


def _done(ctx: GenerationContext, job: ProxyJob) -> None:
    """:func:`router.front.record.record` of a finished ``job``, on the model's live runtime
    (:func:`_live_runtime`, inline: one call less per request)."""
    state, runtime = ctx.state, ctx.runtime
    record(state, state.fleet.runtimes.get(runtime.model_name, runtime), job)


def _redecide(ctx: GenerationContext, excluded: frozenset[str],
              excluded_pools: frozenset[str] = frozenset()) -> Redecision:
    """The proxy's re-decision after a failed attempt: :meth:`Runtime.decide` on the live
    runtime with the failed endpoints (and whole pools that refused for capacity) excluded,
    and the new lease; a :class:`Redecision` without a lease when nothing routes."""
    rt, features = _live_runtime(ctx), ctx.features
    assert features is not None  # set by _features, before any attempt
    if excluded_pools:
        excluded = excluded | {u for p in rt.pools if p.name in excluded_pools for u in p.endpoints}
    d = rt.decide(features, ctx.state.clock(), exclude=excluded, chain=ctx.chain, matches=ctx.matches)
    if d.outcome is not Outcome.ROUTED:
        return Redecision(d)
    assert d.endpoint is not None  # routed: it is set
    if ctx.chain is not None:
        _note_prefix(ctx, rt, d)
    lease = rt.endpoint(d.endpoint).lease(features.temperature_class, bool(features.adapters))
    lease.prompts_sent = rt.note_prompt(d, features, _cached(ctx, d), ctx.state.clock())[1]
    return Redecision(d, lease)
