"""Compressed request bodies (router.front.intake): each coding decoded, the cap on decoded bytes."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib

import pytest
import zstandard

from router.errors import InvalidRequest, RequestTooLarge, UnsupportedContentEncoding
from router.front.intake import ACCEPT_ENCODING, content_codings, decode_body

BODY = b'{"model":"MODEL","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def decode(data: bytes, header: str, cap: int = 1 << 20) -> bytes:
    return asyncio.run(decode_body(data, content_codings([header]), cap))


@pytest.mark.parametrize(("header", "encode"), [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("GZIP", gzip.compress),
    ("deflate", zlib.compress), ("deflate", raw_deflate),
    ("zstd", zstandard.ZstdCompressor().compress),
    ("gzip, identity", gzip.compress), ("identity", lambda b: b),
    ("deflate, gzip", lambda b: gzip.compress(zlib.compress(b))),
    ("gzip", lambda b: gzip.compress(b[:30]) + gzip.compress(b[30:])),  # two gzip members
    ("zstd", lambda b: zstandard.ZstdCompressor().compress(b[:30]) + zstandard.ZstdCompressor().compress(b[30:])),
])
def test_each_coding_is_decoded(header, encode):
    assert decode(encode(BODY), header) == BODY


@pytest.mark.parametrize("header", ["br", "compress", "gzip, br", "aes128gcm"])
def test_unknown_codings_are_415_with_accept_encoding(header):
    with pytest.raises(UnsupportedContentEncoding) as exc:
        content_codings([header])
    err = exc.value
    assert (err.status, err.type, err.code, err.param) == (415, "invalid_request_error",
                                                          "unsupported_content_encoding", None)
    assert err.message == f"Content-Encoding {header.split(', ')[-1]} is not supported"
    assert err.response_headers()["accept-encoding"] == ACCEPT_ENCODING == "gzip, deflate, zstd, identity"


@pytest.mark.parametrize(("header", "data"), [
    ("gzip", BODY), ("gzip", gzip.compress(BODY)[:-12]), ("gzip", gzip.compress(BODY) + b"junk"),
    ("deflate", zlib.compress(BODY) + b"x"), ("deflate", b""), ("zstd", BODY), ("gzip", b""),
])
def test_invalid_data_is_400_invalid_content_encoding(header, data):
    with pytest.raises(InvalidRequest) as exc:
        decode(data, header)
    assert (exc.value.status, exc.value.code) == (400, "invalid_content_encoding")


@pytest.mark.parametrize("header", ["gzip", "deflate", "zstd"])
def test_a_bomb_stops_at_the_cap_with_bounded_memory(header):
    """48 MiB of text compressed to ~50 KB, under an 8 MiB cap: 413 after allocating about the cap."""
    text = b'{"model":"MODEL","messages":[{"role":"user","content":"' + b"a" * (48 << 20) + b'"}]}'
    bomb = {"gzip": gzip.compress, "deflate": zlib.compress,
            "zstd": zstandard.ZstdCompressor().compress}[header](text)
    del text
    assert len(bomb) < 2 << 20
    cap = 8 << 20
    tracemalloc.start()
    try:
        with pytest.raises(RequestTooLarge) as exc:
            decode(bomb, header, cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exc.value.status == 413 and exc.value.code == "request_too_large"
    assert peak < cap + (4 << 20)  # the decoded pieces up to the cap, never the 48 MiB
    assert decode(gzip.compress(b"x" * cap), "gzip", cap) == b"x" * cap  # exactly the cap passes
