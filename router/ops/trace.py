"""W3C Trace Context (https://www.w3.org/TR/trace-context/) of a client request, validated
and forwarded to the engine on every upstream attempt.

SGLang builds a request's root span from exactly the ``traceparent`` and ``tracestate``
headers it receives (``sglang/srt/observability/trace.py`` in 0.5.23), so forwarding them
joins the engine's spans to the client's trace. What is forwarded:

- ``traceparent`` (section 3.2): one header of the form ``version-traceid-parentid-flags``;
  version ``00``: exactly ``00-<32 hex>-<16 hex>-<2 hex>``, lowercase, trace id and parent id
  not all zeros. A higher version (not ``ff``) is accepted when its first 55 characters parse
  as version 00 and the next one, if any, is ``-`` (section 4.3). Anything else (uppercase,
  wrong lengths, ``ff``, two ``traceparent`` headers) is malformed: it is dropped, and the
  engine starts a new trace, as the spec says a receiver does.
- ``tracestate`` (section 3.3): forwarded only with a valid ``traceparent``; the header's
  values are joined with ``,`` (section 3.3.1.1 allows it) and forwarded unchanged when every
  member is ``key=value`` per the grammar, keys are unique and there are at most 32 members;
  otherwise it is dropped.
- ``baggage`` is forwarded only with ``tracing.forward_baggage`` (it can carry user data),
  unchanged, up to 8192 bytes.

Neither the trace id nor the client's ``x-request-id`` becomes the engine's request id: a
trace id is shared by many requests (the router's own id names the engine request).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["MAX_BAGGAGE_BYTES", "MAX_TRACESTATE_MEMBERS", "trace_headers", "valid_traceparent", "valid_tracestate"]

#: Most list members a ``tracestate`` may have (section 3.3.1.1).
MAX_TRACESTATE_MEMBERS = 32

_V00 = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16
# key = simple-key / multi-tenant-key; value = 0*255(chr) nblk-chr (section 3.3.1.3)
_MEMBER = re.compile(
    r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


def valid_traceparent(values: Sequence[str]) -> str | None:
    """The request's ``traceparent`` (its header values) when valid (module docstring), else None."""
    if len(values) != 1:
        return None
    value = values[0].strip(" \t")
    m = _V00.match(value)
    if m is None:
        return None
    version, trace_id, parent_id, _flags = m.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return None
    if version == "00":
        return value if len(value) == 55 else None
    return value if len(value) == 55 or value[55] == "-" else None


def valid_tracestate(values: Sequence[str]) -> str | None:
    """The request's ``tracestate`` (its header values joined with ``,``) when every member
    is valid, keys are unique and there are at most 32 members; else None. Empty members
    (``a=1,,b=2``) and spaces around members are allowed, and kept as sent."""
    if not values:
        return None
    joined = ",".join(values)
    keys = set()
    members = 0
    for member in joined.split(","):
        member = member.strip(" \t")
        if not member:
            continue
        if _MEMBER.fullmatch(member) is None:
            return None
        key = member.split("=", 1)[0]
        if key in keys:
            return None
        keys.add(key)
        members += 1
    return joined if 0 < members <= MAX_TRACESTATE_MEMBERS else None


#: Longest ``baggage`` forwarded (bytes; W3C Baggage: "at least 8192 bytes" must be propagated).
MAX_BAGGAGE_BYTES = 8192


def trace_headers(traceparent: Sequence[str], tracestate: Sequence[str],
                  baggage: str | None = None) -> dict[str, str]:
    """The trace headers to send upstream from the client's ``traceparent`` and ``tracestate``
    header values: ``{}``, ``{"traceparent": ...}`` or both (module docstring); plus
    ``baggage`` when given (``tracing.forward_baggage``) and at most 8192 bytes."""
    out: dict[str, str] = {}
    if baggage and len(baggage.encode()) <= MAX_BAGGAGE_BYTES:
        out["baggage"] = baggage
    parent = valid_traceparent(traceparent) if traceparent else None
    if parent is None:
        return out
    out["traceparent"] = parent
    state = valid_tracestate(tracestate)
    if state is not None:
        out["tracestate"] = state
    return out
