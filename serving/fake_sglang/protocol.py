"""Request parsing: SGLang 0.5.23's validation of generation bodies, partly.

The token-limit precedence, the length checks 1-4 and the request ids are the module docstring
of :mod:`serving.fake_sglang` ("Token limit", "Over-length", "Request ids"); errors are
``ClientError`` (a 400 in SGLang's body shape).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from starlette.requests import Request

from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.errors import ClientError

__all__ = [
    "ROLES",
    "as_int",
    "check_lengths",
    "effective_limit",
    "include_usage",
    "make_rids",
    "read_json",
    "stop_list",
]

ROLES = frozenset({"system", "user", "assistant", "tool", "function", "developer"})


def as_int(value: Any, name: str) -> int | None:
    """Pydantic-lax int coercion as SGLang's request models do; bad values: ``ClientError``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ClientError(
        f"1 validation error: {name}: Input should be a valid integer", "Bad Request"
    )


# --------------------------------------------------------------------------------------------
# Request parsing (SGLang's validation, partly)
# --------------------------------------------------------------------------------------------


def stop_list(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise ClientError(
        "1 validation error: stop: Input should be a valid string or list", "Bad Request"
    )


def include_usage(body: dict[str, Any]) -> bool:
    so = body.get("stream_options")
    return bool(isinstance(so, dict) and so.get("include_usage"))


def make_rids(rid: Any, batch: int, n: int, single: bool) -> list[str]:
    """Sample ids as SGLang 0.5.23 assigns them (module docstring, "Request ids")."""
    if n > 1:
        return [uuid.uuid4().hex for _ in range(batch * n)]
    if single:
        if rid is None:
            return [uuid.uuid4().hex]
        if isinstance(rid, str):
            return [rid]
        raise ClientError("The rid should be a string or a list of strings.")
    if rid is None:
        return [uuid.uuid4().hex for _ in range(batch)]
    if isinstance(rid, str):
        return [f"{rid}_{i}" for i in range(batch)]
    if isinstance(rid, list) and all(isinstance(r, str) for r in rid):
        if len(rid) != batch:
            raise ClientError(
                "The specified rids length mismatch with the batch_size for batch processing."
            )
        return list(rid)
    raise ClientError("The rid should be a string or a list of strings.")


def check_lengths(cfg: FakeConfig, prompt_tokens: int, limit: int | None) -> None:
    """SGLang's tokenizer-manager checks 2 and 3 (module docstring); raise ``ClientError``."""
    c = cfg.context_length
    num = prompt_tokens + cfg.num_reserved_tokens
    if num >= c:
        raise ClientError(
            f"The input ({num} tokens) is longer than the model's context length ({c} tokens)."
        )
    if limit is not None and limit + num > c:
        raise ClientError(
            f"Requested token count exceeds the model's maximum context length of {c} tokens. "
            f"You requested a total of {limit + num} tokens: {num} tokens from the input messages "
            f"and {limit} tokens for the completion. Please reduce the number of tokens in the "
            f"input messages or the completion to fit within the limit."
        )
    if limit is not None and limit < 0:
        raise ClientError(f"max_new_tokens must be at least 0, got {limit}.")


def effective_limit(
    cfg: FakeConfig, prompt_tokens: int, limit: int | None, behaviour: Behaviour | None
) -> int:
    """Scheduler clipping: min(limit, max_req_len - P - 1), then the behaviour's cap."""
    room = max(0, cfg.max_req_len - prompt_tokens - 1)
    eff = room if limit is None else max(0, min(limit, room))
    if behaviour is not None and behaviour.max_tokens is not None:
        eff = min(eff, behaviour.max_tokens)
    return eff


# --------------------------------------------------------------------------------------------
# The app
# --------------------------------------------------------------------------------------------


async def read_json(request: Request, entry: dict[str, Any] | None = None) -> Any:
    raw = await request.body()
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as e:
        if entry is not None:
            entry["body"] = raw.decode("utf-8", "replace")
        raise ClientError(f"JSON decode error: {e}", "Bad Request") from e
    if entry is not None:
        entry["body"] = body
    return body
