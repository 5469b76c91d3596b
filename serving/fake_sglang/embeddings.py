"""``/v1/embeddings`` and ``/v1/rerank`` (with ``FakeConfig.is_embedding``; else SGLang's 400).

Embedding ``k`` of input ``i`` is ``sin(i * 1000 + k + 1)``; rerank scores document ``i`` as
``1 / (i + 1)`` (so the order is the input order).
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from serving.fake_sglang.errors import ClientError, json_response, sglang_error
from serving.fake_sglang.protocol import read_json
from serving.fake_sglang.state import FakeState

__all__ = ["embeddings", "rerank"]


def _embedding_input(doc: Any) -> list[Any]:
    """The inputs of an embeddings body (a text, token ids, or a list); ``ClientError``."""
    if not isinstance(doc, dict):
        raise ClientError("1 validation error: body: Input should be a valid dictionary", "Bad Request")
    value = doc.get("input")
    if not value or (isinstance(value, str) and not value.strip()):
        raise ClientError("Input cannot be empty")
    if isinstance(value, str) or (isinstance(value, list) and all(type(t) is int for t in value)):
        return [value]
    if isinstance(value, list) and all(isinstance(v, (str, list)) for v in value):
        return list(value)
    raise ClientError("1 validation error: input: Input should be a valid string or list", "Bad Request")


def _input_tokens(state: FakeState, value: Any) -> int:
    """Prompt tokens of one input (token ids: their count)."""
    return len(value) if isinstance(value, list) else state.counter.text(value)



def _require_embedding(is_embedding: bool) -> None:
    """SGLang's refusal of an embedding route on a generation model (``ClientError``, 400)."""
    if not is_embedding:
        raise ClientError(
            "This model does not appear to be an embedding model by default. Please add "
            "`--is-embedding` when launching the server or try another model.")

async def embeddings(state: FakeState, request: Request) -> Response:
    """``POST /v1/embeddings``: one deterministic embedding per input."""
    cfg = state.launch_config
    entry = state.log_request(request, None)
    try:
        doc = await read_json(request, entry)
        inputs = _embedding_input(doc)
        _require_embedding(cfg.is_embedding)
    except ClientError as e:
        entry["status"], entry["outcome"] = e.status, "error"
        return sglang_error(e.message, e.kind, e.status)
    dim = doc.get("dimensions") if type(doc.get("dimensions")) is int else cfg.embedding_dim
    tokens = sum(_input_tokens(state, v) for v in inputs)
    entry["status"], entry["outcome"] = 200, "ok"
    return json_response({
        "data": [{"embedding": [math.sin(i * 1000 + k + 1) for k in range(dim)], "index": i,
                  "object": "embedding"} for i in range(len(inputs))],
        "model": doc.get("model") or cfg.model_name, "object": "list",
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                  "prompt_tokens_details": None}})


async def rerank(state: FakeState, request: Request) -> Response:
    """``POST|PUT /v1/rerank``: documents scored ``1 / (i + 1)``, best first."""
    cfg = state.launch_config
    entry = state.log_request(request, None)
    try:
        doc = await read_json(request, entry)
        if not isinstance(doc, dict) or not isinstance(doc.get("documents"), list) or "query" not in doc:
            raise ClientError("1 validation error: query, documents: Field required", "Bad Request")
        _require_embedding(cfg.is_embedding)
    except ClientError as e:
        entry["status"], entry["outcome"] = e.status, "error"
        return sglang_error(e.message, e.kind, e.status)
    docs = doc["documents"]
    scored = sorted(({"score": 1.0 / (i + 1), "document": d, "index": i} for i, d in enumerate(docs)),
                    key=lambda r: -r["score"])
    entry["status"], entry["outcome"] = 200, "ok"
    return json_response(scored)
