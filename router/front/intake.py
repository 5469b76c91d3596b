"""Reading a client request: its ``x-request-id``, its headers, its body and its JSON.

Shared by the generation handlers (:mod:`router.front.api`) and the pass-through ones
(:mod:`router.front.passthrough`), so neither imports the other. The body is read from the ASGI
``receive`` channel with a byte cap and its ``Content-Encoding`` undone (below); the JSON is parsed by :func:`router.front.body.loads_unique` (400
``invalid_json`` / ``duplicate_key``).

Compressed request bodies: ``Content-Encoding`` decoded with the body cap on decoded bytes.

One policy for every route that reads a body (generation, pass-through):

================================  ==========================================================
``Content-Encoding``              router's answer
================================  ==========================================================
absent, ``identity``              the body as sent
``gzip`` (``x-gzip``)             decoded (RFC 1952; concatenated members too)
``deflate``                       decoded: the zlib format (RFC 1950) as RFC 9110 section
                                  8.4.1.2 defines it, or raw deflate (RFC 1951), which some
                                  clients send under this name
``zstd``                          decoded (RFC 8878; window at most :data:`ZSTD_MAX_WINDOW`)
a list (``gzip, identity``)       each coding undone, last applied first
anything else (``br``...)         415 ``{"error":{"message":"Content-Encoding br is not
                                  supported","type":"invalid_request_error","param":null,
                                  "code":"unsupported_content_encoding"}}`` with
                                  ``Accept-Encoding: gzip, deflate, zstd, identity`` (RFC 7694
                                  section 3), before the body is read
================================  ==========================================================

``limits.max_request_bytes`` bounds both the bytes on the wire and the decoded bytes: the
decoders are asked for at most :data:`STEP` bytes at a time and for no more than the cap
allows, so a decompression bomb (a few KB inflating to gigabytes) stops at the cap with 413
``request_too_large`` after allocating at most the cap. Between steps the event loop runs
other requests, so one large body does not stall them. A body that is not valid data of its
coding (corrupt, truncated, trailing bytes) is 400 ``invalid_content_encoding``, never
``invalid_json``. The engine receives the decoded JSON and no ``Content-Encoding`` (the
proxy writes its own upstream headers).
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Iterable, MutableMapping
from typing import Any

import zstandard
from starlette.requests import ClientDisconnect, Request

from router.errors import (
    InvalidRequest,
    RequestTooLarge,
    UnsupportedContentEncoding,
    UnsupportedMediaType,
)
from router.front.body import loads_unique

__all__ = ["ACCEPT_ENCODING", "STEP", "ZSTD_MAX_WINDOW", "client_request_id", "content_codings", "decode_body", "header", "header_map", "header_values", "parse_json", "read_body"]


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
    the decoded bytes (:mod:`router.front.intake`: 413, 415, 400 ``invalid_content_encoding``).

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


#: The codings the router decodes, as its ``Accept-Encoding`` answer lists them.
ACCEPT_ENCODING = "gzip, deflate, zstd, identity"
_ALIASES = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate", "zstd": "zstd"}
#: Decoded bytes asked of a decoder per step; the loop runs other tasks between steps.
STEP = 1 << 20
#: Largest zstd window a frame may need (bytes; the decoder's memory): 8 MiB, the limit of
#: the ``zstd`` HTTP content coding (RFC 9659).
ZSTD_MAX_WINDOW = 1 << 23


def content_codings(values: Iterable[str]) -> tuple[str, ...]:
    """The codings of the request's ``Content-Encoding`` header values, in the order they were
    applied, ``identity`` left out (``()``: the body is not encoded).

    Raises:
        UnsupportedContentEncoding: a coding the router does not decode (415).
    """
    codings = []
    for value in values:
        for item in value.split(","):
            name = item.strip().lower()
            if not name or name == "identity":
                continue
            coding = _ALIASES.get(name)
            if coding is None:
                shown = name if len(name) <= 40 and name.isprintable() else name[:40].encode("ascii", "replace").decode()
                raise UnsupportedContentEncoding(f"Content-Encoding {shown} is not supported",
                                                 headers={"accept-encoding": ACCEPT_ENCODING})
            codings.append(coding)
    return tuple(codings)


def _too_large(cap: int) -> RequestTooLarge:
    return RequestTooLarge(f"the decoded request body exceeds the {cap}-byte limit",
                           headers={"connection": "close"})


def _invalid(coding: str) -> InvalidRequest:
    return InvalidRequest(f"the request body is not valid {coding} data (Content-Encoding: {coding})",
                          code="invalid_content_encoding")


async def _inflate(data: bytes, coding: str, cap: int) -> bytes:
    """gzip or deflate ``data`` decoded, at most ``cap`` bytes (module docstring)."""
    if coding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    else:  # the zlib header: CM 8 and a check value making CMF*256+FLG a multiple of 31
        zlib_format = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        wbits = zlib.MAX_WBITS if zlib_format else -zlib.MAX_WBITS
    out: list[bytes] = []
    total = 0
    d = zlib.decompressobj(wbits)
    pending = data
    try:
        while True:
            piece = d.decompress(pending, min(STEP, cap - total + 1))
            total += len(piece)
            if total > cap:
                raise _too_large(cap)
            out.append(piece)
            pending = d.unconsumed_tail
            if d.eof:
                if not d.unused_data:
                    break
                if coding != "gzip":  # bytes after the end of the deflate data
                    raise _invalid(coding)
                pending = d.unused_data  # RFC 1952 section 2.2: a member follows
                d = zlib.decompressobj(wbits)
            elif not pending and not piece:
                raise _invalid(coding)  # the data ended before its end marker
            if len(piece) >= STEP:
                await asyncio.sleep(0)  # let other requests run between large steps
    except zlib.error:
        raise _invalid(coding) from None
    return b"".join(out)


async def _unzstd(data: bytes, cap: int) -> bytes:
    """zstd ``data`` decoded (every frame), at most ``cap`` bytes."""
    out: list[bytes] = []
    total = 0
    try:
        reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(
            data, read_across_frames=True)
        while True:
            piece = reader.read(min(STEP, cap - total + 1))
            if not piece:
                break
            total += len(piece)
            if total > cap:
                raise _too_large(cap)
            out.append(piece)
            await asyncio.sleep(0)
    except zstandard.ZstdError:
        raise _invalid("zstd") from None
    if not out and data:
        raise _invalid("zstd")
    return b"".join(out)


async def decode_body(data: bytes, codings: tuple[str, ...], cap: int) -> bytes:
    """``data`` with ``codings`` (from :func:`content_codings`) undone, last applied first.

    Raises:
        RequestTooLarge: the decoded body exceeds ``cap`` bytes (413).
        InvalidRequest: ``invalid_content_encoding``, the data is not valid for its coding.
    """
    for coding in reversed(codings):
        data = await (_unzstd(data, cap) if coding == "zstd" else _inflate(data, coding, cap))
    return data
