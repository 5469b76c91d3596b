"""The whole responses the router's HTTP/1.1 protocol (:mod:`router.front.http_limits`) writes
itself, before any app sees the request, and the check of a request's ``Transfer-Encoding``.

Each answer is the OpenAI error envelope (``router.errors.error_body``) with ``connection:
close``: the router closes the connection after it.

``Transfer-Encoding`` (RFC 9112 sections 6.1 and 6.3): the router decodes only ``chunked``,
so a request is framed by it only when its codings, over all its ``Transfer-Encoding`` field
lines, are exactly ``chunked`` (any case, surrounding whitespace allowed). Otherwise:

- the final coding is not ``chunked`` (``gzip``, ``br``, the obsolete ``identity``,
  ``chunked, gzip``), or ``chunked`` appears twice: the body's length cannot be determined,
  ``400 invalid_http_request`` (section 6.3 item 4: MUST answer 400 and close);
- another coding before a final ``chunked`` (``gzip, chunked``): a coding the router does not
  implement, ``501 unsupported_transfer_coding`` (section 6.1: SHOULD answer 501); serving the
  body as if it were not encoded would hand the engine compressed bytes;
- any ``Transfer-Encoding`` in an HTTP/1.0 request: its framing is faulty (section 6.1: MUST
  treat it so, and close), ``400``.

A request with both ``Content-Length`` and ``Transfer-Encoding`` never reaches this check:
llhttp refuses it (``400``, and the close section 6.3 item 3 requires).
"""

from __future__ import annotations

from router.config.server import HeaderLimitsConfig
from router.errors import error_body

__all__ = ["bad_request_response", "body_timeout_response", "rejection_response", "transfer_coding_error",
           "version_response"]


def _response(status_line: bytes, body: bytes) -> bytes:
    return (status_line + b"\r\ncontent-type: application/json\r\ncontent-length: " + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n" + body)


def bad_request_response(detail: str) -> bytes:
    """The whole 400 response for bytes that are no valid HTTP/1.1 request (``detail``: why)."""
    return _response(b"HTTP/1.1 400 Bad Request", error_body(
        f"invalid HTTP request: {detail}", "invalid_request_error", None, "invalid_http_request"))


def body_timeout_response(timeout_s: float, min_rate: int) -> bytes:
    """The whole 408 response for a body that did not arrive within ``timeout_s`` seconds and
    one more per ``min_rate`` bytes received."""
    return _response(b"HTTP/1.1 408 Request Timeout", error_body(
        f"the request body did not arrive within {timeout_s:g} s (and 1 s more per {min_rate} bytes received)",
        "invalid_request_error", None, "request_timeout"))


def version_response(version: str) -> bytes:
    """The whole 505 response for a request line of another major version than 1 (``HTTP/2.0``,
    ``HTTP/0.9``: llhttp parses them as HTTP/1.x heads; RFC 9110 section 15.6.6)."""
    return _response(b"HTTP/1.1 505 HTTP Version Not Supported", error_body(
        f"HTTP/{version} is not supported: send HTTP/1.1 or HTTP/1.0 (no HTTP/2 on this port)",
        "invalid_request_error", None, "http_version_not_supported"))


def rejection_response(limit: str, limits: HeaderLimitsConfig) -> bytes:
    """The whole 431 response for a head over ``limit`` (``bytes``, ``fields``, ``field_bytes``),
    or the 408 for ``head_timeout``."""
    if limit == "head_timeout":
        return _response(b"HTTP/1.1 408 Request Timeout", error_body(
            f"the request head did not arrive within {limits.head_timeout_s:g} s",
            "invalid_request_error", None, "request_timeout"))
    what = {"bytes": f"{limits.max_bytes} bytes", "fields": f"{limits.max_fields} fields",
            "field_bytes": f"{limits.max_field_bytes} bytes per field"}[limit]
    body = error_body(f"request header fields too large (limit: {what})", "invalid_request_error", None,
                      "request_header_fields_too_large")
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n"
            b"x-should-retry: false\r\n\r\n" + body)


def transfer_coding_error(value: bytes, http_version: str) -> tuple[str, bytes, str] | None:
    """Check a request's ``Transfer-Encoding`` (module docstring). ``value``: its field lines'
    values joined by commas; ``http_version``: ``"1.1"`` or ``"1.0"``. Returns None when the
    body is framed by ``chunked`` alone, else ``(detail, whole response, reason)``: the detail
    for the log, the 400 or 501 to write, the framing-rejection reason to count
    (``malformed`` or ``transfer_coding``)."""
    codings = [c.strip(b" \t").lower() for c in value.split(b",")]
    codings = [c for c in codings if c]
    if codings == [b"chunked"] and http_version != "1.0":
        return None
    if http_version == "1.0":
        detail = "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 section 6.1)"
    elif not codings or codings[-1] != b"chunked" or codings.count(b"chunked") > 1:
        detail = "the final transfer coding must be chunked, applied once (RFC 9112 section 6.3)"
    else:
        coding = next(c for c in codings if c != b"chunked").decode("latin-1")
        return (f"transfer coding {coding!r} not implemented", _response(b"HTTP/1.1 501 Not Implemented", error_body(
            f"transfer coding {coding!r} is not supported: send the body with Content-Length, or with "
            "Transfer-Encoding: chunked alone", "invalid_request_error", None, "unsupported_transfer_coding")),
            "transfer_coding")
    return detail, bad_request_response(detail), "malformed"
