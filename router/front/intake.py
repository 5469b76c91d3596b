"""Reading a client request: its ``x-request-id``, its headers, its body and its JSON.

Shared by the generation handlers (:mod:`router.front.api`) and the pass-through ones
(:mod:`router.front.passthrough`), so neither imports the other. The body is read from the ASGI
``receive`` channel with a byte cap and its ``Content-Encoding`` undone
(:mod:`router.front.encoding`); the JSON is parsed by :func:`router.front.body.loads_unique` (400
``invalid_json`` / ``duplicate_key``).
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

from starlette.requests import ClientDisconnect, Request

from router.errors import InvalidRequest, RequestTooLarge, UnsupportedMediaType
from router.front.body import loads_unique
from router.front.encoding import content_codings, decode_body

__all__ = ["client_request_id", "header", "header_map", "header_values", "parse_json", "read_body"]

#: A client ``x-request-id`` the router adopts: a token of at most 128 characters.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def client_request_id(value: str | None) -> str | None:
    """The client's ``x-request-id`` when it is a sane token (letters, digits, ``._:@/+=-``,
    1-128 characters), else None (the router then uses its own id). The adopted id is echoed
    in the response's ``x-request-id``, sent upstream and written in the access log."""
    if value is not None and _REQUEST_ID.fullmatch(value):
        return value
    return None


def header_map(scope: MutableMapping[str, Any]) -> dict[bytes, bytes]:
    """The request's headers as one dict (ASGI names are lower-case bytes; the first of repeated
    headers wins, as in Starlette's ``Headers.get``): one pass, then O(1) look-ups, where each
    ``Headers.get`` scans the list again and a missing name costs a caught ``KeyError``."""
    return dict(reversed(scope["headers"]))


def header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    """The header ``name`` (lower-case bytes) of a :func:`header_map`, decoded, or None."""
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


def header_values(scope: MutableMapping[str, Any], headers: dict[bytes, bytes], name: bytes) -> list[str]:
    """Every value of header ``name`` in order (Starlette's ``Headers.getlist``), without a
    scan of the list when :func:`header_map` lacks the name (the usual case)."""
    if name not in headers:
        return []
    return [v.decode("latin-1") for k, v in scope["headers"] if k == name]


async def read_body(request: Request, cap: int, headers: dict[bytes, bytes] | None = None) -> bytes:
    """The request body, its ``Content-Encoding`` undone; ``cap`` bounds the bytes read and
    the decoded bytes (:mod:`router.front.encoding`: 413, 415, 400 ``invalid_content_encoding``).

    Raises:
        InvalidRequest: a ``Content-Length`` that is not an integer (400 ``invalid_header``).
        RequestTooLarge: more than ``cap`` bytes declared, read or decoded (413).
        ClientDisconnect: the client went away before the body was whole.
    """
    headers = headers if headers is not None else header_map(request.scope)
    codings = content_codings(request.headers.getlist("content-encoding")) if b"content-encoding" in headers else ()
    length = headers.get(b"content-length")
    if length is not None:
        try:
            declared = int(length.decode("latin-1"))  # as header() would give it
        except ValueError:
            raise InvalidRequest("invalid Content-Length header", code="invalid_header") from None
        if declared > cap:
            raise RequestTooLarge(f"request body of {declared} bytes exceeds the {cap}-byte limit",
                                  headers={"connection": "close"})
    chunks: list[bytes] = []
    total = 0
    receive = request.receive
    while True:  # the ASGI receive channel directly (Request.stream() costs a generator per request)
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > cap:
            raise RequestTooLarge(f"request body exceeds the {cap}-byte limit", headers={"connection": "close"})
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return await decode_body(body, codings, cap) if codings else body


def parse_json(request: Request, body: bytes, headers: dict[bytes, bytes] | None = None) -> Any:
    """The body as JSON; 400 ``invalid_content_type`` unless the ``Content-Type`` is
    ``application/json`` (parameters and case aside), 400 ``invalid_json`` / ``duplicate_key``
    (:mod:`router.front.body`)."""
    raw = (headers if headers is not None else header_map(request.scope)).get(b"content-type")
    if raw != b"application/json":  # the usual value decides without decoding; any other is parsed
        ctype = "" if raw is None else raw.decode("latin-1")
        if ctype.split(";", 1)[0].strip().lower() != "application/json":
            raise UnsupportedMediaType("Content-Type must be application/json", param=None)
    return loads_unique(body)  # 400 invalid_json, or duplicate_key naming the key (router.front.body)
