"""Engine-internal request fields a client must not set: stripped or refused before any engine call.

SGLang 0.5.23 accepts on its chat, completions and responses requests (``protocol.py``) fields
that exist so that a router can steer the engine (:data:`router.config.server.ENGINE_FIELDS`):

- placement directives: the disaggregation bootstrap (``bootstrap_host``, ``bootstrap_port``,
  ``bootstrap_room``) and the data-parallel ranks (``routed_dp_rank``, its deprecated alias
  ``data_parallel_rank``, ``disagg_prefill_dp_rank``; sgl-project/sglang#19268). A
  client-chosen room reused by two requests crashes a disaggregated deployment's schedulers
  (sgl-project/sglang#40125), and a client-chosen rank pins work to one replica behind the
  router's back. The router owns placement, so a client's value is **stripped**: the answer
  is the same generation wherever it runs.
- execution and debug controls: ``custom_logit_processor`` (a dill-serialised callable, a
  remote-code-execution route on an engine started with ``--enable-custom-logit-processor``,
  sgl-project/sglang#2396 and #30798) with its ``custom_params``, ``return_hidden_states``
  (up to 17 times slower, responses that grow with sequence length times hidden size,
  sgl-project/sglang#8003) and ``return_routed_experts``. Dropping one would silently answer
  a different request, so a request that sets one (any value but null, false or empty) is
  **refused**: HTTP 400 ``{"error": {"type": "invalid_request_error", "code":
  "unsupported_parameter", "param": <field>}}``, before any engine call.
- engine sessions: ``session_id`` and ``session_params`` continue a session opened on one
  engine with ``/open_session``, which the router does not serve (and a session lives on one
  engine, which the router's placement does not follow): **refused** the same way.
- the engine request's id: ``rid`` (chat, completions) and ``request_id`` (responses) name the
  generation for ``/abort_request`` and SGLang refuses a second request with an id still in
  flight ("Duplicate request ID detected"). A client's own id passes through; one in the
  router's namespace (:data:`OWN_ID_PREFIXES`: the ids the router gives requests without one,
  sequential and seen by every client as its responses' ``id``) could take the id of another
  client's next request, so it is **refused**: 400 ``invalid_value`` naming the field.

A caller the operator trusts (``auth.engine_fields``: ``allow`` for every caller, ``keys`` per
API key) sends its own fields unchanged. Every field met is counted by the pipeline in
``specgate_engine_fields_total{field, action}`` (``stripped``, ``refused``, ``forwarded``).

Engine-internal *headers* (SGLang's ``X-Data-Parallel-Rank``, which overrides the body field,
and ``x-smg-routing-key``; ``serving_base.py``) never reach an engine: the proxy builds the
engine request's headers itself (content type, request id, trace context) and forwards none
of the client's.

Pure: no I/O; the cost for a request without any of these fields is one ``isdisjoint`` over
the body's top-level keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from router.config.server import ENGINE_FIELDS
from router.errors import InvalidRequest

__all__ = ["ACTIONS", "FIELD_NAMES", "OWN_ID_PREFIXES", "Screened", "apply", "screen", "unsupported"]

#: The names of :data:`router.config.server.ENGINE_FIELDS` (one set test per request).
FIELD_NAMES = frozenset(ENGINE_FIELDS)
#: The values of the metric's ``action`` label.
ACTIONS = ("stripped", "refused", "forwarded")
#: The prefixes of the engine request ids the router gives requests without a client id
#: (``specgate-<request id>`` for chat and completions' ``rid``, ``resp_specgate-<request id>``
#: for a response's ``request_id``; router/front/request_kinds.py, router/front/responses.py).
OWN_ID_PREFIXES = ("specgate-", "resp_specgate-")


@dataclass(frozen=True, slots=True)
class Screened:
    """What :func:`screen` found in one request body.

    Attributes:
        strip: fields to drop before forwarding (placement directives of an untrusted caller).
        refuse: the first field that makes the request a 400, or None.
        forwarded: fields a trusted caller sends through unchanged.
        reserved: the first engine request id (``rid``, ``request_id``) whose value is in the
            router's own namespace (:data:`OWN_ID_PREFIXES`), or None.
    """

    strip: tuple[str, ...] = ()
    refuse: str | None = None
    forwarded: tuple[str, ...] = ()
    reserved: str | None = None


def _reserved(value: Any) -> bool:
    """Whether an engine request id (a string, or a batch's list of strings) names an id the
    router gives its own requests (:data:`OWN_ID_PREFIXES`)."""
    values = value if isinstance(value, list) else (value,)
    return any(isinstance(v, str) and v.startswith(OWN_ID_PREFIXES) for v in values)


def _set(value: Any) -> bool:
    """Whether a refused field's value asks for something: not null, false or empty."""
    if value is None or value is False:
        return False
    return not (isinstance(value, (str, list, dict)) and not value)


def screen(doc: dict[str, Any], allowed: frozenset[str]) -> Screened | None:
    """The engine-internal fields of ``doc`` (a request body) for a caller that may send
    ``allowed``; None when it has none (the usual case).

    A strip field is stripped whenever its key is present (null included); a refuse field
    refuses the request only when set (:func:`_set`): ``"return_hidden_states": false`` is
    the engine's default and passes through.
    """
    if FIELD_NAMES.isdisjoint(doc):
        return None
    strip: list[str] = []
    forwarded: list[str] = []
    refuse = reserved = None
    for name, value in doc.items():
        action = ENGINE_FIELDS.get(name)
        if action is None:
            continue
        if name in allowed:
            forwarded.append(name)
        elif action == "strip":
            strip.append(name)
        elif action == "own":
            if reserved is None and _reserved(value):
                reserved = name
        elif refuse is None and _set(value):
            refuse = name
    return Screened(tuple(strip), refuse, tuple(forwarded), reserved)


def unsupported(field: str) -> InvalidRequest:
    """The 400 for a refused engine-internal field."""
    return InvalidRequest(
        f"`{field}` is an engine-internal field that this router does not forward "
        "(docs/operator-guide.md, \"Engine-internal fields\")", param=field, code="unsupported_parameter")


def apply(body: bytes, doc: dict[str, Any], allowed: frozenset[str],
          count: Callable[[tuple[str, str]], None]) -> tuple[bytes, dict[str, Any]]:
    """``(body, doc)`` to forward: without the stripped fields (the body dumped again only
    then), each field met counted as ``count((field, action))`` (:data:`ACTIONS`).

    Raises:
        InvalidRequest: a refused field (:func:`unsupported`), after counting it.
    """
    found = screen(doc, allowed)
    if found is None:
        return body, doc
    for name in found.forwarded:
        count((name, "forwarded"))
    for name in found.strip:
        count((name, "stripped"))
    if found.refuse is not None:
        count((found.refuse, "refused"))
        raise unsupported(found.refuse)
    if found.reserved is not None:
        count((found.reserved, "refused"))
        raise InvalidRequest(
            f"`{found.reserved}` values starting with `specgate-` or `resp_specgate-` are the router's own "
            "engine request ids (docs/operator-guide.md, \"Engine-internal fields\")",
            param=found.reserved, code="invalid_value")
    if not found.strip:
        return body, doc
    doc = {k: v for k, v in doc.items() if k not in found.strip}
    return orjson.dumps(doc), doc
