"""The router's check of a request's ``Transfer-Encoding`` (router.front.http_answers, RFC 9112
sections 6.1 and 6.3): chunked alone frames the body; anything else is a 400 or a 501."""

from __future__ import annotations

import json

import pytest

from router.front.http_answers import transfer_coding_error

LAST = "the final transfer coding must be chunked, applied once (RFC 9112 section 6.3)"


@pytest.mark.parametrize(("value", "version", "want"), [
    (b"chunked", "1.1", None),
    (b"  Chunked ", "1.1", None),
    (b"CHUNKED", "1.1", None),
    (b"gzip, chunked", "1.1", (501, "transfer_coding", "gzip")),
    (b"gzip,deflate,chunked", "1.1", (501, "transfer_coding", "gzip")),
    (b"br,chunked", "1.1", (501, "transfer_coding", "br")),  # two field lines, joined
    (b"chunked, gzip", "1.1", (400, "malformed", LAST)),
    (b"br", "1.1", (400, "malformed", LAST)),
    (b"identity", "1.1", (400, "malformed", LAST)),
    (b"chunked,chunked", "1.1", (400, "malformed", LAST)),
    (b" , ", "1.1", (400, "malformed", LAST)),
    (b"chunked", "1.0", (400, "malformed", "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 section 6.1)")),
])
def test_transfer_codings(value: bytes, version: str, want: tuple[int, str, str] | None) -> None:
    got = transfer_coding_error(value, version)
    if want is None:
        assert got is None
        return
    assert got is not None
    detail, answer, reason = got
    status, counted, what = want
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ", 2)[1] == str(status).encode()
    assert b"\r\nconnection: close" in head and reason == counted
    error = json.loads(body)["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", None)
    if status == 501:
        assert detail == f"transfer coding '{what}' not implemented"
        assert error["code"] == "unsupported_transfer_coding"
    else:
        assert detail == what and error == {"message": f"invalid HTTP request: {what}", "type": "invalid_request_error",
                                            "param": None, "code": "invalid_http_request"}
