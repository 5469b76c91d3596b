"""Per-request speculative statistics from SGLang, read and taken out of the relayed response.

SGLang (0.5.23, ``sglang/srt/entrypoints/openai/protocol.py``: ``SpecTokensDetails``,
``SglExt``) answers a chat or completions request that sets ``return_spec_tokens_details:
true`` with ``sglext.spec_tokens_details`` (``spec_accept_length``: the request's tokens per
verify step, bonus included; ``spec_verify_ct``, histograms; a list when ``n > 1``): at the
top level of a whole response, and in a stream in one event of its own near the end
(``{"id": ..., "choices": [], "model": ..., "sglext": {...}}``). The router sets the field on
requests to speculative pools so that the live speed model (:mod:`router.decision.learn`) learns
acceptance per request, per temperature class and context bucket, and, unless the client
asked for it, cuts it out again so that the client receives what SGLang would have sent
without it, byte for byte (:func:`strip_body`, :func:`strip_event`): the ``sglext`` member
when it held nothing else (SGLang omits a null ``sglext``), else its
``spec_tokens_details`` member; a stream event that carried only it is dropped.

The cut works on the bytes (a scanner for JSON strings and brackets), so any JSON spacing is
handled and nothing else in the body is re-serialised. Pure functions; never raise on a
malformed body (it is then relayed as it came).
"""

from __future__ import annotations

import orjson

__all__ = ["FIELD", "accept_length", "strip_body", "strip_event"]

#: The request field that asks SGLang for the statistics.
FIELD = "return_spec_tokens_details"

_WS = b" \t\r\n"
_SGLEXT = b'"sglext"'
_DETAILS = b'"spec_tokens_details"'


def _skip_ws(b: bytes, i: int) -> int:
    n = len(b)
    while i < n and b[i] in _WS:
        i += 1
    return i


def _string_end(b: bytes, i: int) -> int:
    """``b[i]`` is a string's opening quote: the index after its closing quote."""
    i += 1
    n = len(b)
    while i < n:
        c = b[i]
        if c == 0x5C:  # backslash: skip the escaped byte
            i += 2
            continue
        if c == 0x22:
            return i + 1
        i += 1
    raise ValueError("unterminated string")


def _value_end(b: bytes, i: int) -> int:
    """The index after the JSON value starting at ``b[i]``."""
    c = b[i]
    if c == 0x22:
        return _string_end(b, i)
    if c in b"{[":
        depth, n = 0, len(b)
        while i < n:
            c = b[i]
            if c == 0x22:
                i = _string_end(b, i)
                continue
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        raise ValueError("unterminated value")
    n = len(b)
    while i < n and b[i] not in b",}] \t\r\n":
        i += 1
    return i


def _members(b: bytes, start: int) -> list[tuple[int, int, int, int]]:
    """The members of the object opening at ``b[start]``: ``(key start, key end, value
    start, value end)`` each."""
    out: list[tuple[int, int, int, int]] = []
    i = _skip_ws(b, start + 1)
    if b[i] == 0x7D:
        return out
    while True:
        if b[i] != 0x22:
            raise ValueError("object key expected")
        ke = _string_end(b, i)
        j = _skip_ws(b, ke)
        if b[j] != 0x3A:
            raise ValueError("colon expected")
        vs = _skip_ws(b, j + 1)
        ve = _value_end(b, vs)
        out.append((i, ke, vs, ve))
        i = _skip_ws(b, ve)
        if b[i] == 0x2C:
            i = _skip_ws(b, i + 1)
            continue
        if b[i] == 0x7D:
            return out
        raise ValueError("comma or closing brace expected")


def _cut(b: bytes, members: list[tuple[int, int, int, int]], k: int) -> bytes:
    """``b`` without member ``k`` of ``members`` and the comma that joined it."""
    ks, _, _, ve = members[k]
    if k > 0:  # from the end of the previous value (its comma included) to the end of this one
        return b[:members[k - 1][3]] + b[ve:]
    if len(members) > 1:  # the first of several: up to the next key
        return b[:ks] + b[members[1][0]:]
    return b[:ks] + b[_skip_ws(b, ve):]


def _strip(doc: bytes, start: int) -> tuple[bytes, bytes | None, bool]:
    """``(doc without the details, the details' JSON or None, sglext removed whole)``."""
    top = _members(doc, start)
    for k, (ks, ke, vs, _) in enumerate(top):
        if doc[ks:ke] != _SGLEXT or doc[vs] != 0x7B:
            continue
        inner = _members(doc, vs)
        for j, (iks, ike, ivs, ive) in enumerate(inner):
            if doc[iks:ike] == _DETAILS:
                details = doc[ivs:ive]
                if len(inner) == 1:
                    return _cut(doc, top, k), details, True
                return _cut(doc, inner, j), details, False
    return doc, None, False


def accept_length(details: bytes | None) -> float | None:
    """``spec_accept_length`` of the details' JSON (the mean over choices for ``n > 1``),
    None when absent, zero or unreadable."""
    if details is None:
        return None
    try:
        value = orjson.loads(details)
    except orjson.JSONDecodeError:
        return None
    items = value if isinstance(value, list) else [value]
    taus = [float(v["spec_accept_length"]) for v in items if isinstance(v, dict)
            and isinstance(v.get("spec_accept_length"), int | float) and not isinstance(v["spec_accept_length"], bool)
            and v["spec_accept_length"] > 0]
    return sum(taus) / len(taus) if taus else None


def strip_body(body: bytes) -> tuple[bytes, float | None]:
    """A whole response without ``sglext.spec_tokens_details``, and its accept length."""
    if _DETAILS not in body:
        return body, None
    try:
        start = _skip_ws(body, 0)
        if body[start] != 0x7B:
            return body, None
        out, details, _ = _strip(body, start)
    except (ValueError, IndexError):
        return body, None
    return out, accept_length(details)


def strip_event(events: bytes) -> tuple[bytes, float | None]:
    """Whole SSE events (``data: <json>`` blocks ending ``\\n\\n``) without the details; an
    event whose ``sglext`` held only them and whose ``choices`` are empty is dropped."""
    if events.find(_DETAILS) < 0:  # find, not ``in``: per relayed chunk (router.upstream.relay.next_event)
        return events, None
    out: list[bytes] = []
    tau: float | None = None
    for event in events.split(b"\n\n"):
        at = event.find(b"data:")
        if at < 0 or event.find(_DETAILS) < 0:
            out.append(event)
            continue
        try:
            start = _skip_ws(event, at + 5)
            stripped, details, whole = _strip(event, start)
            if whole and _empty_choices(stripped, start):
                tau = accept_length(details) or tau
                continue
        except (ValueError, IndexError):
            out.append(event)
            continue
        tau = accept_length(details) or tau
        out.append(stripped)
    return b"\n\n".join(out), tau


def _empty_choices(doc: bytes, start: int) -> bool:
    for ks, ke, vs, ve in _members(doc, start):
        if doc[ks:ke] == b'"choices"':
            return doc[vs] == 0x5B and _skip_ws(doc, vs + 1) == ve - 1
    return True
