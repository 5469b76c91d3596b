"""What the proxy (:mod:`router.upstream.proxy`) is given about one admitted request: :class:`ProxyJob`,
and the failover seam (:data:`Redecide`, :class:`Redecision`). Re-exported by
:mod:`router.upstream.proxy`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from router.access.limit_rules import Ticket
from router.decision.policy import Decision
from router.request.features import RequestFeatures
from router.state.endpoint import Lease

__all__ = ["Dispatch", "JobNotes", "ProxyJob", "Redecide", "Redecision"]

#: An endpoint's state when a request was sent to it: ``(url, load, waits, context, sent_at)``:
#: its base URL, its load (requests), whether the request waits in the engine, the mean context
#: of the batch it joins (tokens; None: unknown) and ``time.perf_counter()`` at dispatch (s)
#: (``router.state.runtime.Runtime.dispatch_state``).
Dispatch = tuple[str, int, bool, float | None, float, float, float]


class JobNotes(TypedDict, total=False):
    """What the router notes on a request on its way (:attr:`ProxyJob.extra`).

    Keys:
        dispatch: the endpoint's :data:`Dispatch` state, for the live speed model (absent or
            None: the request does not feed it).
        spec_stats: the speculative statistics asked of the engine: ``strip`` (asked by the
            router, removed before the client), ``read`` (asked by the client) or None
            (:mod:`router.upstream.specstats`).
        spec_accept_length: the request's own accept length read from the engine's answer
            (tokens per verify step; None: not reported).
        aborted: the URL of the endpoint whose generation the router aborted.
    """

    dispatch: Dispatch | None
    spec_stats: str | None
    spec_accept_length: float | None
    aborted: str


@dataclass(frozen=True, slots=True)
class Redecision:
    """A failover's new decision (:data:`Redecide`) and the lease taken on its endpoint; no
    lease when the policy found nowhere left to go (the proxy answers with its failure)."""

    decision: Decision
    lease: Lease | None = None


#: ``redecide(excluded_urls, excluded_pools)``: re-run the routing decision without those
#: endpoints and pools, taking the lease when it routes (``router.front.api`` builds it).
Redecide = Callable[[frozenset[str], frozenset[str]], Redecision]


@dataclass(slots=True)
class ProxyJob:
    """Everything the proxy needs about one admitted request.

    Attributes:
        request_id: the router's request id (``x-request-id``).
        path: upstream path, e.g. ``/v1/chat/completions``.
        body: the JSON body to send (bytes).
        features: the request's features (prompt tokens drive the first-byte timeout).
        decision: the current routing decision (updated on failover).
        lease: the in-flight lease on the chosen endpoint (replaced on failover).
        abort_rids: the engine request ids that ``/abort_request`` must name to stop every
            sample of this request: the body's ``rid`` for one prompt, ``<rid>_<i>`` for a batch
            of prompts (SGLang's ``_normalize_rid``); empty when none can be named (``n > 1``:
            SGLang gives each sample a fresh id, ``regenerate_rid``).
        received_at: ``time.perf_counter()`` when the request arrived (s).
        stale_retries: the pool of each resend after a stale keep-alive connection.
        rejections: ``(pool, reason)`` of each engine capacity refusal (reason ``http_503``,
            ``http_429``, ``stream_error``, ``stream_abort`` or ``body_abort``).
        end_events: for a stream that does not end with ``data: [DONE]`` (``/v1/responses``):
            the byte strings of which one must appear for the stream to count as complete;
            None: the ``[DONE]`` rule.
        observer: sees the relayed bytes (a :class:`router.upstream.observe.ResponseObserver`: usage
            and ending metrics) and is told the pool when the response ends; None: none.
        default_budget: the output budget the router chose for a request that set none, as the
            ``x-specgate-max-tokens`` response header (tokens, or ``engine`` when
            ``limits.default_max_tokens`` is null); None: the client set it.
        pool_bodies: ``{pool: body}``: the body to send to that pool instead of :attr:`body`
            (one whose engines read ``priority`` the other way round, router/access/admission.py).
        trace: the W3C trace headers sent on every attempt (:func:`router.ops.trace.trace_headers`).
        span: the request's server span (:mod:`router.ops.tracing`), None with tracing off.
        extra: per-request notes of the router (:class:`JobNotes`).
        caveats: ``{pool: fields}``: served by one of these pools, the response carries
            ``x-specgate-degraded: sampling`` and ``x-specgate-sampling-fields: <fields>``
            (:mod:`router.request.sampling`).
        ticket: the request's admission by its key's limits (:mod:`router.access.limits`), finished
            when the response ends; None when the key is not limited.
        headers: extra response headers (a limited key's ``x-ratelimit-*``), on success and
            error responses alike.
    """

    request_id: str
    path: str
    body: bytes
    features: RequestFeatures
    decision: Decision
    lease: Lease
    abort_rids: tuple[str, ...]
    received_at: float
    end_events: tuple[bytes, ...] | None = None
    observer: Any = None
    default_budget: str | None = None
    caveats: dict[str, str] = field(default_factory=dict)
    pool_bodies: dict[str, bytes] = field(default_factory=dict)
    ticket: Ticket | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    trace: dict[str, str] = field(default_factory=dict)
    span: Any = None
    status: int = 0
    outcome: str = "ok"
    ttfb_s: float | None = None
    attempts: int = 1
    extra: JobNotes = field(default_factory=JobNotes)
    stale_retries: list[str] = field(default_factory=list)
    rejections: list[tuple[str, str]] = field(default_factory=list)
