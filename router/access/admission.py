"""Who may set the engine's scheduling ``priority``, and what the engine receives.

SGLang (0.5.23) reads a per-request ``priority`` on ``/v1/chat/completions``,
``/v1/completions`` and ``/v1/responses`` (sgl-project/sglang#8746). With
``--enable-priority-scheduling`` and a bounded waiting queue it aborts a queued request of
lower priority in favour of a newcomer (sgl-project/sglang#16369), so a client that may set it
freely can jump the queue and evict other tenants' requests. The router therefore decides
the value itself (:func:`resolve_priority`):

1. The client's value: the body field ``priority``, else the header ``x-specgate-priority``
   (the header is never sent upstream: the router builds its own upstream headers). ``null``
   or an absent field is no value.
2. A value that is present must be an integer (JSON integer for the body, decimal digits for
   the header; not ``true``, ``"high"``, ``1.5``) within [-2^31, 2^31 - 1]
   (:data:`router.config.server.PRIORITY_MIN` / ``PRIORITY_MAX``); otherwise HTTP 400
   ``invalid_request_error`` with ``param: "priority"`` (code ``invalid_priority``), from every
   caller, before any engine call. A malformed value is a client bug whether or not the key
   may use it.
3. A key with a grant (``auth.priority.keys``): its value, clamped into the grant's
   ``[min, max]``; with no value, the grant's ``default`` (None: no ``priority`` is sent).
4. Any other caller (no grant, or client auth off): the client's value is dropped and
   ``auth.priority.default`` is sent (None: the field is removed and the engine applies its
   own default).

Pools declare their engines' convention (``pools[].priority_order``): the value above is in
SGLang's default one (larger first); a ``smaller_first`` pool (SGLang's
``--schedule-low-priority-values-first``, vLLM) receives its negation
(:func:`engine_priority`), so a tier keeps its rank on every pool (ai-dynamo/dynamo#6348).

The outcome's ``source`` (``client``, ``clamped``, ``default``, ``ignored``, ``none``) is a
bounded metric label (``specgate_priority_requests_total{source}``); the raw value never is.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from router.config.server import PRIORITY_MAX, PRIORITY_MIN, PriorityGrant
from router.errors import InvalidRequest

__all__ = ["PRIORITY_FIELD", "PRIORITY_HEADER", "PRIORITY_SOURCES", "PriorityOutcome", "engine_priority",
           "resolve_priority"]

#: The request-body field (SGLang's name for it).
PRIORITY_FIELD = "priority"
#: The request header a trusted caller may use instead of the body field.
PRIORITY_HEADER = "x-specgate-priority"
#: The values of :attr:`PriorityOutcome.source` (a metric label).
PRIORITY_SOURCES = ("client", "clamped", "default", "ignored", "none")


@dataclass(frozen=True, slots=True)
class PriorityOutcome:
    """The engine's ``priority`` for one request.

    Attributes:
        value: the integer to send, or None to send no ``priority`` field.
        source: ``client`` (the trusted client's own value), ``clamped`` (the trusted client's
            value moved into its grant's range), ``default`` (a configured default, the
            client named none or may not set one), ``ignored`` (an untrusted client's value
            dropped, nothing sent), ``none`` (nothing named, nothing sent).
    """

    value: int | None
    source: str


#: The outcomes without a value, shared (the class is frozen): no instance per request.
_NONE = PriorityOutcome(None, "none")
_IGNORED = PriorityOutcome(None, "ignored")


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(message, param=PRIORITY_FIELD, code="invalid_priority")


def _client_value(doc: Mapping[str, Any], header: str | None) -> int | None:
    value = doc.get(PRIORITY_FIELD)
    if value is not None:
        if type(value) is not int:
            raise _bad(f"`priority` must be an integer, got {type(value).__name__}")
        if not PRIORITY_MIN <= value <= PRIORITY_MAX:
            raise _bad(f"`priority` must lie within [{PRIORITY_MIN}, {PRIORITY_MAX}]")
        return value
    if header is None:
        return None
    text = header.strip()
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits.isascii() or not digits.isdigit() or len(digits) > 10:
        raise _bad(f"header {PRIORITY_HEADER} must be a decimal integer")
    number = int(text)
    if not PRIORITY_MIN <= number <= PRIORITY_MAX:
        raise _bad(f"header {PRIORITY_HEADER} must lie within [{PRIORITY_MIN}, {PRIORITY_MAX}]")
    return number


def resolve_priority(doc: Mapping[str, Any], header: str | None, grant: PriorityGrant | None,
                     default: int | None) -> PriorityOutcome:
    """The ``priority`` the engine receives (the rules in the module docstring).

    Args:
        doc: the request body (a JSON object).
        header: the ``x-specgate-priority`` header, or None.
        grant: the caller's key's grant (``auth.priority.keys``), or None.
        default: ``auth.priority.default`` for callers without a grant.

    Raises:
        InvalidRequest: the body field or the header is not an integer in range
            (``param: "priority"``, ``code: "invalid_priority"``).
    """
    asked = _client_value(doc, header)
    if grant is None:
        if default is not None:
            return PriorityOutcome(default, "default")
        return _NONE if asked is None else _IGNORED
    if asked is None:
        return _NONE if grant.default is None else PriorityOutcome(grant.default, "default")
    bounded = min(max(asked, grant.min), grant.max)
    return PriorityOutcome(bounded, "client" if bounded == asked else "clamped")


def engine_priority(value: int, order: str) -> int:
    """``value`` (larger first) as a pool with ``priority_order`` ``order`` reads it: itself for
    ``larger_first``, its negation for ``smaller_first`` (bounded to the signed 32-bit range,
    so ``-2**31`` becomes ``2**31 - 1``)."""
    if order == "larger_first":
        return value
    return min(-value, PRIORITY_MAX)
