"""Request bodies: read (bounded), and parse JSON with one rule for duplicate keys.

**Duplicate keys.** RFC 8259 section 4 says object names SHOULD be unique and leaves what a
parser does with a repeated name to the implementation; orjson (the router's parser) and
Python's ``json`` both keep the last value, other parsers keep the first or fail. The router
checks one reading of the body (``model``, ``max_tokens``, ``stream``, the counted messages)
and forwards the client's bytes, so a body whose meaning depends on the next parser is
refused: a key that appears twice in one object, at any depth and compared after JSON
unescaping (``"max_\\u0074okens"`` is ``max_tokens``), answers 400 before any engine call::

    {"error": {"message": "duplicate key `messages[0].content` in the request body",
               "type": "invalid_request_error", "param": "messages[0].content",
               "code": "duplicate_key"}}

``param`` is the key's path: object keys joined by ``.``, array positions as ``[i]``
(truncated to :data:`MAX_PATH_CHARS`). The rule holds for every route that parses a JSON
body (generation, pass-through, admin).

**How it is checked, exactly and without a second parse.** orjson parses the body into
``doc`` (keeping the last duplicate). A colon outside a JSON string is exactly one per
object member, and a colon inside a string is the same character in the raw bytes and in the
decoded string unless it was written as the escape ``\\u003a``. ``orjson.dumps(doc)`` writes
each surviving member with one colon and never escapes ``:``. So when the body holds no
``\\u003a``/``\\u003A`` escape, ``body.count(b":") == orjson.dumps(doc).count(b":")`` exactly
when no member was dropped, i.e. when no key repeats: a dropped member takes at least its own
colon with it. Both sides run in C (about 0.5 us for a 1 KB body, 0.3 ms for 1 MB; orjson's
parse itself is 2 us and 0.7 ms). A body with such an escape, or a document deeper than
orjson's writer allows (254 levels), is checked by Python's ``json`` with an
``object_pairs_hook`` instead (slower, equally exact); that same walk names the key path of a
duplicate once one is known.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import orjson

from router.errors import InvalidRequest

__all__ = ["MAX_PATH_CHARS", "add_fields", "find_duplicate_key", "has_duplicate_keys", "loads_unique"]

#: Longest key path an error names (characters); longer ones are cut with ``...``.
MAX_PATH_CHARS = 200

_ESCAPED_COLON = re.compile(rb"\\u003[aA]")
#: Up to these sizes (bytes) a body is scanned with ``bytes`` methods, above with numpy
#: (whose ~3-5 us per call beat ``bytes.count``'s ~0.8 ns and ``bytes.find``'s ~0.5 ns a byte
#: there; CPU time on the development machine, Python 3.11).
_COUNT_SMALL = 4 * 1024
_FIND_SMALL = 16 * 1024


class _Members(tuple[tuple[str, Any], ...]):
    """One JSON object's members in document order, duplicates kept (``object_pairs_hook``)."""

    __slots__ = ()


def _members(pairs: list[tuple[str, Any]]) -> _Members:
    return _Members(pairs)


def find_duplicate_key(text: str | bytes) -> str | None:
    """The path of the first repeated key in the JSON ``text`` (document order of the second
    occurrence), e.g. ``max_tokens`` or ``messages[0].content``; None when every object's keys
    are unique. Keys are compared decoded (after JSON unescaping).

    Raises:
        ValueError: ``text`` is not JSON (``json.JSONDecodeError``).
        RecursionError: it nests deeper than the interpreter's recursion limit.
    """
    root = json.loads(text, object_pairs_hook=_members)
    stack: list[tuple[str, Any]] = [("", root)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _Members):
            seen: set[str] = set()
            children = []
            for key, value in node:
                where = f"{path}.{key}" if path else key
                if key in seen:
                    return where
                seen.add(key)
                children.append((where, value))
            stack.extend(reversed(children))
        elif isinstance(node, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(node)]))
    return None


#: Bytes per numpy window: the compares' temporary arrays stay this small for any body.
_WINDOW = 1 << 20


def _colons(body: bytes) -> int:
    """How many ``:`` bytes ``body`` holds."""
    if len(body) <= _COUNT_SMALL:
        return body.count(b":")
    arr = np.frombuffer(body, np.uint8)
    return sum(int(np.count_nonzero(arr[i:i + _WINDOW] == 0x3A)) for i in range(0, len(arr), _WINDOW))


def _escaped_colon(body: bytes) -> bool:
    """Whether ``body`` may hold the escape ``\\u003a``/``\\u003A`` (also true for an escaped
    backslash followed by ``u003a``: then the exact walk decides)."""
    if body.find(b"\\") < 0:  # one-byte search: memchr
        return False
    if len(body) <= _FIND_SMALL:
        return b"\\u003" in body and _ESCAPED_COLON.search(body) is not None
    arr = np.frombuffer(body, np.uint8)
    for i in range(0, len(arr) - 5, _WINDOW):  # windows overlapping by the pattern's 5 more bytes
        w = arr[i:i + _WINDOW + 5]
        # whole-window compares (~0.03 ns a byte each); np.flatnonzero would cost ~0.5 ns a byte
        hit = (w[:-5] == 0x5C) & (w[1:-4] == 0x75)  # "\\u"
        if not hit.any():
            continue
        hit &= (w[2:-3] == 0x30) & (w[3:-2] == 0x30) & (w[4:-1] == 0x33) & ((w[5:] | 0x20) == 0x61)
        if hit.any():
            return True
    return False


def has_duplicate_keys(body: bytes, doc: Any) -> bool:
    """Whether the JSON ``body`` (already parsed by orjson into ``doc``) repeats a key in
    some object (the colon-count identity of the module docstring; exact)."""
    if _escaped_colon(body):
        return find_duplicate_key(body.decode("utf-8")) is not None
    try:
        out = orjson.dumps(doc)
    except orjson.JSONEncodeError:  # deeper than orjson writes
        return find_duplicate_key(body.decode("utf-8")) is not None
    return _colons(body) != _colons(out)


def _cut(path: str) -> str:
    return path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS - 3] + "..."


def loads_unique(body: bytes) -> Any:
    """Parse a request body as JSON, refusing duplicate keys (module docstring).

    Raises:
        InvalidRequest: ``invalid_json`` when the body is not JSON (or nests too deeply);
            ``duplicate_key`` with ``param`` set to the repeated key's path.
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequest("the request body is not valid JSON", code="invalid_json") from None
    if len(body) <= _COUNT_SMALL and (body.find(b"\\") < 0 or b"\\u003" not in body):  # inline, small bodies
        try:
            if body.count(b":") == orjson.dumps(doc).count(b":"):
                return doc
        except orjson.JSONEncodeError:  # deeper than orjson writes: the exact walk below
            pass
    try:
        if not has_duplicate_keys(body, doc):
            return doc
        path = find_duplicate_key(body.decode("utf-8"))
    except (RecursionError, ValueError):
        raise InvalidRequest("the request body nests too deeply", code="invalid_json") from None
    if path is None:  # (not reached: the identity and the walk agree)
        raise InvalidRequest("a key repeats in the request body", code="duplicate_key")
    where = _cut(path)
    raise InvalidRequest(f"duplicate key `{where}` in the request body", param=where, code="duplicate_key")


def add_fields(body: bytes, doc: dict[str, Any], fields: dict[str, Any]) -> bytes:
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
    if end < 2 or body[end - 1] != 0x7D or not doc.keys().isdisjoint(fields):  # 0x7D: "}"
        return orjson.dumps({**doc, **fields})
    extra = orjson.dumps(fields)[1:-1]  # '"k":v,...' (orjson writes no whitespace): one call for all
    # One copy of the body (a memoryview slice is not a copy; `body[:end - 1] + ...` was two).
    return b"".join((memoryview(body)[:end - 1], b"," if doc else b"", extra, b"}"))
