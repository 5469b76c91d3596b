"""One request's context: what the error path knows of it, and the generation pipeline's trip.

A handler (:func:`router.front.api.serve_generate`, :func:`router.front.passthrough.serve_passthrough`)
attaches one :class:`RequestContext` as soon as it has the request's id
(:func:`attach_context`) and fills in what it learns later; the error envelope
(``router.front.api._error_response``), which gets only the request, reads it back with
:func:`request_context` for the ``x-request-id`` header, the rejection reason and the prompt
size in the access log. It lives under the scope key :data:`CONTEXT_KEY`, like the drain's
keys (:mod:`router.front.drain`), so a FastAPI exception handler, which builds its own ``Request``
on the same scope, sees it too.

A generation request (:func:`router.front.pipeline.generate`) attaches a
:class:`GenerationContext`, the same object with every field its steps read and fill: a step
takes the context (and at most one value more) and returns nothing or one value, so the
request's trip is one object from arrival to the relay (as sgl-model-gateway's
``RequestContext`` carries a request through its stages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request

    from router.access.admission import PriorityOutcome
    from router.access.limit_rules import Ticket
    from router.decision.policy import Decision
    from router.decision.prefix import PrefixChain
    from router.front.appstate import FrontState
    from router.front.request_kinds import RequestKind
    from router.request.features import ParsedRequest, Rendered, RequestFeatures
    from router.state.endpoint import Lease
    from router.state.fleet import Fleet
    from router.state.models import Resolved
    from router.state.runtime import Runtime
    from router.upstream.proxy_job import Dispatch

__all__ = ["CONTEXT_KEY", "GenerationContext", "RequestContext", "attach", "attach_context", "end_disconnected", "request_context"]

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


#: ``{pool: {endpoint: cached tokens}}`` of a prefix chain (:meth:`Runtime.prefix_matches`).
Matches = dict[str, dict[str, int]]


# kw_only: its fields without a default may follow RequestContext's defaulted ones; init=False:
# the positional __init__ below
@dataclass(slots=True, kw_only=True, init=False, repr=False, eq=False)
class GenerationContext(RequestContext):
    """A generation request's trip through the steps of :mod:`router.front.pipeline`: one object
    per request, attached to the scope as the error path's :class:`RequestContext`.

    ``_admit`` builds it with the fields up to ``received``, positionally (one call per
    request: the keyword ``__init__`` a dataclass would write costs about twice as much for
    these eleven); each later field is filled by the step named: the optional ones start as
    None, the others are unset (reading one raises ``AttributeError``) until their step ran.

    Attributes:
        path: the request's path (``/v1/chat/completions``, ...). Not the request itself: the
            context sits on the request's scope, and a reference back would make each request
            a cycle that only the garbage collector frees.
        state: the process's state (:class:`router.front.appstate.FrontState`).
        fleet: the fleet at arrival: this request's models, even if a reload swaps it.
        kind: the route's :class:`~router.front.request_kinds.RequestKind`.
        own_id: the router's own id; the engine's ``rid`` (a client may reuse its
            ``x-request-id`` on retries, and SGLang refuses a rid that is already running).
        headers: the request's headers (:func:`router.front.intake.header_map`).
        authorization: the ``Authorization`` header, or None.
        trace: the W3C trace headers to forward (:func:`router.ops.trace.trace_headers`).
        tracing: the tracer this request's spans come from (kept even if a reload swaps it).
        received: ``time.perf_counter()`` at arrival (s).
        body: the body as read (``read_body``), without the client's engine-internal fields
            (``_engine_fields``), then the engine's body (``_engine_body``).
        runtime: the :class:`~router.state.runtime.Runtime` of the request's model (``_model``).
        doc: the body's JSON document (``_model``), changed as ``body`` is.
        parsed: the kind's parse of ``doc`` (``_model``).
        resolved: the model name resolved (``_model``): what to forward, the adapters.
        priority: the engine priority and its source (``_controls``).
        hint: the speculation hint (``_controls``).
        rendered: the rendered prompt (``_features``, from ``size_prompt``).
        ticket: the key's rate-limit ticket (``_limit``); None: no key limited.
        decision: the routing decision (``_route``).
        chain: the prompt's prefix chain (``_route``); None: prefix routing off or no chain.
        matches: the chain's cached tokens per pool and endpoint (``_route``), or None.
        lease: the decided endpoint's lease (``_lease``).
        dispatch: the endpoint's state at dispatch, ``(url, load, waits, context, sent_at)``,
            when the request is measured for the speed model (``_lease``), else None.
        pool_bodies: ``{pool: body}`` for pools that read ``priority`` the other way round
            (``_engine_body``).
        abort_rids: the engine ids to abort the request by (``_engine_body``).
        spec_stats: ``strip`` / ``read`` / None: the speculative statistics asked of the
            engine (``_engine_body``).
    """

    path: str
    state: FrontState
    fleet: Fleet
    kind: RequestKind
    own_id: str
    headers: dict[bytes, bytes]
    authorization: str | None
    trace: dict[str, str]
    tracing: Any
    received: float
    body: bytes
    runtime: Runtime
    doc: dict[str, Any]
    parsed: ParsedRequest
    resolved: Resolved
    priority: PriorityOutcome
    hint: str
    rendered: Rendered
    ticket: Ticket | None
    decision: Decision
    chain: PrefixChain | None
    matches: Matches | None
    lease: Lease
    dispatch: Dispatch | None
    pool_bodies: dict[str, bytes]
    abort_rids: tuple[str, ...]
    spec_stats: str | None

    def __init__(self, request_id: str, path: str, state: FrontState, fleet: Fleet, kind: RequestKind,
                 own_id: str, headers: dict[bytes, bytes], authorization: str | None, trace: dict[str, str],
                 tracing: Any, received: float) -> None:
        self.request_id = request_id
        self.path = path
        self.state = state
        self.fleet = fleet
        self.kind = kind
        self.own_id = own_id
        self.headers = headers
        self.authorization = authorization
        self.trace = trace
        self.tracing = tracing
        self.received = received
        self.features = self.reject_reason = self.span = self.model = None  # RequestContext's
        self.ticket = self.chain = self.matches = self.dispatch = self.spec_stats = None


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
