"""SGLang 0.5.23's error bodies and the fake's JSON helpers.

``ClientError`` is a request SGLang refuses (400 unless told otherwise); the handlers turn it
into SGLang's flat ``ErrorResponse`` (``create_error_response``:
``{"object":"error","message","type","param":null,"code"}``), or ``{"error":{"message"}}`` for
``/generate``.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

__all__ = [
    "ClientError",
    "default_error_type",
    "dumps",
    "json_response",
    "overlength_body",
    "sglang_error",
    "sglang_error_body",
]


class ClientError(Exception):
    """A request SGLang refuses with 400; ``kind`` picks the body's ``type``."""

    def __init__(self, message: str, kind: str = "BadRequestError", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes (``orjson``: no spaces after ``:`` and ``,``)."""
    return orjson.dumps(obj)


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """An ``application/json`` response of ``dumps(obj)``."""
    return Response(dumps(obj), status_code=status, media_type="application/json", headers=headers)


def sglang_error_body(
    message: str, kind: str = "BadRequestError", code: int = 400
) -> dict[str, Any]:
    """SGLang 0.5.23's flat error body, e.g. for ``Behaviour(status=400, body=...)``."""
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def overlength_body(input_tokens: int, context_length: int) -> dict[str, Any]:
    """SGLang's 400 body for an input of ``input_tokens`` >= ``context_length`` (tokens)."""
    return sglang_error_body(
        f"The input ({input_tokens} tokens) is longer than the model's context length "
        f"({context_length} tokens)."
    )


def sglang_error(message: str, kind: str = "BadRequestError", status: int = 400) -> Response:
    """SGLang's flat ``ErrorResponse`` body (``create_error_response``)."""
    return json_response(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status}, status
    )


def default_error_type(status: int) -> str:
    """The ``type`` SGLang's ``HTTPException`` handler puts in a body for ``status``."""
    return {400: "BadRequestError", 500: "InternalServerError"}.get(status, str(status))
