"""One exception tree, mapped to OpenAI-style error JSON in one place.

::

    SpecgateError                       status  error.type             error.code
    ├── InvalidRequest                  400     invalid_request_error  (per case) e.g. invalid_value
    │   ├── ContextLengthExceeded       400     invalid_request_error  context_length_exceeded
    │   └── UnsupportedMediaType        400     invalid_request_error  invalid_content_type
    ├── RequestTooLarge                 413     invalid_request_error  request_too_large
├── UnsupportedContentEncoding      415     invalid_request_error  unsupported_content_encoding
    ├── NotFound                        404     invalid_request_error  not_found
    ├── UnsupportedEndpoint             404     invalid_request_error  unsupported_endpoint
    ├── MethodNotAllowed                405     invalid_request_error  method_not_allowed
    ├── AuthenticationError             401     invalid_request_error  invalid_api_key
    ├── PermissionDenied                403     invalid_request_error  permission_denied
    ├── RateLimited                     429     requests | tokens      rate_limit_exceeded (+ Retry-After)
    ├── UpstreamClientError             4xx     invalid_request_error  (the engine's 4xx, normalised)
    ├── NoHealthyUpstream               503     server_error           no_healthy_upstream (+ Retry-After)
    ├── SharedStateUnavailable          503     server_error           shared_state_unavailable
    ├── EngineOverloaded                503     server_error           engine_overloaded (+ Retry-After)
    ├── UpstreamError                   502     server_error           upstream_error
    │   └── UpstreamConnectionError     502     server_error           upstream_connection_error
    └── UpstreamTimeout                 504     server_error           upstream_timeout

The envelope is OpenAI's: ``{"error": {"message", "type", "param", "code"}}`` with
``Content-Type: application/json`` even for ``stream: true`` requests. Client errors carry
``x-should-retry: false`` so the official SDKs do not retry them (openai-python retries 5xx).
Messages never echo the request body, and never an API key.
"""

from __future__ import annotations

import orjson

__all__ = [
    "AuthenticationError",
    "ContextLengthExceeded",
    "EngineOverloaded",
    "InvalidRequest",
    "MethodNotAllowed",
    "ModelNotFound",
    "NoHealthyUpstream",
    "NotFound",
    "PermissionDenied",
    "RateLimited",
    "RequestTooLarge",
    "SharedStateUnavailable",
    "SpecgateError",
    "UnsupportedContentEncoding",
    "UnsupportedEndpoint",
    "UnsupportedMediaType",
    "UpstreamClientError",
    "UpstreamConnectionError",
    "UpstreamError",
    "UpstreamTimeout",
    "error_body",
    "map_engine_error",
]


class SpecgateError(Exception):
    """Base of every error the router turns into an HTTP response.

    Attributes:
        status: HTTP status code.
        type: OpenAI ``error.type``.
        code: OpenAI ``error.code`` (string or None).
        param: the offending request field, or None.
        headers: extra response headers.
    """

    status = 500
    type = "server_error"
    code: str | None = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = dict(headers or {})

    def body(self) -> bytes:
        """The OpenAI error envelope as JSON bytes."""
        return error_body(self.message, self.type, self.param, self.code)

    def response_headers(self) -> dict[str, str]:
        """Headers for the error response (client errors are marked not retryable)."""
        headers = {"content-type": "application/json"}
        if self.status < 500 and self.status != 429:
            headers["x-should-retry"] = "false"
        headers.update(self.headers)
        return headers


class InvalidRequest(SpecgateError):
    """The request is malformed or violates a limit (HTTP 400)."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_value"


class ContextLengthExceeded(InvalidRequest):
    """Prompt plus output budget exceed the validated safe context (HTTP 400)."""

    code = "context_length_exceeded"


class UnsupportedMediaType(InvalidRequest):
    """The body is not ``application/json`` (HTTP 400, as OpenAI answers)."""

    code = "invalid_content_type"


class RequestTooLarge(SpecgateError):
    """The body exceeds ``limits.max_request_bytes`` (HTTP 413)."""

    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedContentEncoding(SpecgateError):
    """A ``Content-Encoding`` the router does not decode (HTTP 415 with ``Accept-Encoding``,
    RFC 7694 section 3)."""

    status = 415
    type = "invalid_request_error"
    code = "unsupported_content_encoding"


class ModelNotFound(SpecgateError):
    """The request's ``model`` is not a name this router serves (HTTP 404, as OpenAI answers)."""

    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFound(SpecgateError):
    """Unknown path (HTTP 404)."""

    status = 404
    type = "invalid_request_error"
    code = "not_found"


class UnsupportedEndpoint(SpecgateError):
    """No configured pool serves this endpoint (HTTP 404; ``router.front.passthrough``)."""

    status = 404
    type = "invalid_request_error"
    code = "unsupported_endpoint"


class MethodNotAllowed(SpecgateError):
    """Known path, wrong method (HTTP 405)."""

    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class AuthenticationError(SpecgateError):
    """No or an unknown ``Authorization: Bearer`` key (HTTP 401, OpenAI's shape)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDenied(SpecgateError):
    """A valid key without the right to this route, or the admin API is off (HTTP 403)."""

    status = 403
    type = "invalid_request_error"
    code = "permission_denied"


class RateLimited(SpecgateError):
    """A per-key limit refuses the request (router/access/limits.py): HTTP 429 with OpenAI's
    ``code: rate_limit_exceeded`` and ``error.type`` ``requests`` or ``tokens`` (the kind of
    limit, as OpenAI sends it), ``Retry-After`` and the ``x-ratelimit-*`` headers."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, kind: str, headers: dict[str, str]) -> None:
        super().__init__(message, headers=headers)
        self.type = kind


class SharedStateUnavailable(SpecgateError):
    """A change that must reach every replica could not be stored (Redis down, HTTP 503)."""

    status = 503
    code = "shared_state_unavailable"


class UpstreamClientError(SpecgateError):
    """The engine answered 4xx before the first byte; same status, normalised envelope."""

    type = "invalid_request_error"
    code = None


class NoHealthyUpstream(SpecgateError):
    """No healthy pool can take the request (HTTP 503 with ``Retry-After``)."""

    status = 503
    code = "no_healthy_upstream"


class UpstreamError(SpecgateError):
    """The engine failed (5xx, reset, refused) and no failover was possible (HTTP 502)."""

    status = 502
    code = "upstream_error"


class UpstreamConnectionError(UpstreamError):
    """The connection to the engine broke before any response byte, also on the one retry on a
    fresh connection (HTTP 502, message ``upstream connection failed``)."""

    code = "upstream_connection_error"


class EngineOverloaded(SpecgateError):
    """Every pool tried refused for capacity (queue full: 503, 429, or a queue-full event in a
    200 stream, sgl-project/sglang#28175): HTTP 503 ``all pools are at capacity`` with
    ``Retry-After`` (503 rather than 429: the server, not the client's rate, is the limit)."""

    status = 503
    code = "engine_overloaded"


class UpstreamTimeout(SpecgateError):
    """The engine sent nothing within the first-byte timeout (HTTP 504)."""

    status = 504
    code = "upstream_timeout"


def error_body(message: str, type_: str, param: str | None, code: str | None) -> bytes:
    """Serialise OpenAI's error envelope ``{"error": {message, type, param, code}}``."""
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


#: Wordings SGLang uses for over-length input (0.5.23 tokenizer_manager.py and older).
_OVERLENGTH_MARKERS = (
    "longer than the model's context length",
    "exceeds the model's maximum context length",
    "exceeds the maximum allowed length",
    "maximum context length",
)


#: SGLang 0.5.23's 400 for an adapter it does not hold (``lora_registry.acquire``,
#: ``tokenizer_manager._validate_and_resolve_lora``): one unloaded after the router last read
#: the engine's ``/v1/models``. The client gets the router's own 404 ``model_not_found``.
_ADAPTER_MARKERS = (
    "requested lora adapters are not loaded",
    "but lora is not enabled",
)


def map_engine_error(status: int, body: bytes, *, param: str) -> SpecgateError:
    """Normalise an engine's error response (before the first byte) into our tree.

    SGLang answers with a flat ``{"object": "error", "message", "type", "code": 400}`` body
    (0.5.23) or a nested ``{"error": {...}}`` one (newer); both are accepted. Over-length
    wordings become :class:`ContextLengthExceeded` with ``param``, a LoRA adapter the engine
    does not hold :class:`ModelNotFound` (404, ``param: "model"``); other 4xx keep their
    status; 5xx become :class:`UpstreamError` (502).

    Args:
        status: the engine's HTTP status.
        body: the engine's response body (bytes, possibly not JSON).
        param: ``messages`` or ``prompt``, used for over-length errors.
    """
    message = ""
    doc: object
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error")
        inner = err if isinstance(err, dict) else doc
        raw = inner.get("message")
        message = raw if isinstance(raw, str) else ""
    elif body:
        message = body[:500].decode("utf-8", "replace")
    message = message[:1000]
    if status >= 500:
        return UpstreamError("upstream worker failed")
    lowered = message.lower()
    if any(marker in lowered for marker in _OVERLENGTH_MARKERS):
        return ContextLengthExceeded(message or "context length exceeded", param=param, status=400)
    if any(marker in lowered for marker in _ADAPTER_MARKERS):  # unloaded since the router last read it
        return ModelNotFound(message, param="model")
    return UpstreamClientError(message or f"upstream returned HTTP {status}", status=status)
