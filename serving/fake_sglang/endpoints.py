"""SGLang's other endpoints: models, health, server/model info, loads, abort, flush, responses.

Each handler takes the server's ``FakeState`` and the request; ``logged`` wraps one as a
Starlette endpoint that records it in the access log (``/_fake/requests``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from serving.fake_sglang.errors import ClientError, dumps, json_response, sglang_error
from serving.fake_sglang.lora import adapter_cards
from serving.fake_sglang.protocol import read_json
from serving.fake_sglang.state import FakeState

__all__ = [
    "SGLANG_VERSION",
    "abort_request",
    "flush_cache",
    "health",
    "loads",
    "logged",
    "model_info",
    "model_one",
    "models",
    "responses",
    "server_info",
]

SGLANG_VERSION = "0.5.23"


def logged(
    state: FakeState, handler: Callable[[FakeState, Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` as a Starlette endpoint that logs the request (``FakeState.log``)."""

    async def wrapped(request: Request) -> Response:
        entry = state.log_request(request, None)
        if request.method == "POST":
            raw = await request.body()
            try:
                entry["body"] = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                entry["body"] = raw.decode("utf-8", "replace")
        resp = await handler(state, request)
        entry["status"] = resp.status_code
        entry["outcome"] = "completed"
        return resp

    return wrapped


async def health(state: FakeState, request: Request) -> Response:
    """``GET /health`` and ``/health_generate``: 200 (or ``/_fake/health``'s status)."""
    cfg = state.launch_config
    delay = state.health.get("delay_s")
    delay = cfg.health_delay_s if delay is None else float(delay)
    if delay > 0:
        await asyncio.sleep(delay)
    status = state.health.get("status") or 200
    return Response(status_code=int(status))


async def models(state: FakeState, request: Request) -> Response:
    """``GET /v1/models``: the served model, then its loaded LoRA adapters (``parent`` set)."""
    cfg = state.launch_config
    return json_response({"object": "list",
                          "data": [_model_card(state, cfg.model_name), *adapter_cards(cfg)]})


def _model_card(state: FakeState, name: str) -> dict[str, Any]:
    """SGLang's ``ModelCard`` of ``name`` (``max_model_len`` = the context length)."""
    cfg = state.launch_config
    return {
        "id": name,
        "object": "model",
        "created": int(state.started),
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": cfg.context_length,
    }


async def model_one(state: FakeState, request: Request) -> Response:
    """``GET /v1/models/{model}``: its card, or 404 ``model_not_found``."""
    cfg = state.launch_config
    name = request.path_params["model"]
    if name != cfg.model_name:
        return json_response(
            {
                "error": {
                    "message": f"The model '{name}' does not exist",
                    "type": "invalid_request_error",
                    "param": "model",
                    "code": "model_not_found",
                }
            },
            404,
        )
    return json_response(_model_card(state, name))


def _server_args(state: FakeState) -> dict[str, Any]:
    """The ``ServerArgs`` fields of ``/server_info`` a router reads."""
    cfg = state.launch_config
    return {
        "model_path": cfg.tokenizer_path or cfg.model_name,
        "tokenizer_path": cfg.tokenizer_path or cfg.model_name,
        "served_model_name": cfg.model_name,
        "context_length": cfg.context_length if cfg.context_length_flag else None,
        "device": "cpu",
        "tp_size": 1,
        "pp_size": 1,
        "dp_size": cfg.dp_size,
        "enable_metrics": cfg.enable_metrics,
        "max_running_requests": cfg.max_running_requests,
        "max_total_tokens": cfg.max_total_num_tokens,
        "speculative_algorithm": cfg.speculative_algorithm,
        "speculative_num_steps": cfg.speculative_num_steps
        if cfg.speculative_algorithm
        else None,
        "speculative_eagle_topk": cfg.speculative_eagle_topk
        if cfg.speculative_algorithm
        else None,
        "speculative_num_draft_tokens": (
            cfg.speculative_num_draft_tokens if cfg.speculative_algorithm else None
        ),
        "weight_version": cfg.weight_version,
    }


async def server_info(state: FakeState, request: Request) -> Response:
    """``GET /server_info``: server args, limits and one internal state per dp rank."""
    cfg = state.launch_config
    internal = []
    for rank, g in enumerate(state.gauges()):
        st: dict[str, Any] = {
            **_server_args(state),
            "dp_rank": rank,
            "world_size": cfg.dp_size,
            "startup_time": state.started,
            "effective_max_running_requests_per_dp": cfg.max_running_requests,
            "last_gen_throughput": g["gen_throughput"],
            "memory_usage": {
                "weight": 0.0,
                "kvcache": 0.0,
                "token_capacity": cfg.max_total_num_tokens,
            },
        }
        override = state.metrics_override.get("avg_spec_accept_length")
        if override is not None:
            st["avg_spec_accept_length"] = float(override)
        elif cfg.speculative_algorithm and state.avg_spec_accept_length is not None:
            st["avg_spec_accept_length"] = state.avg_spec_accept_length
        internal.append(st)
    return json_response(
        {
            **_server_args(state),
            "status": "ready",
            "max_total_num_tokens": cfg.max_total_num_tokens,
            "max_req_input_len": cfg.max_req_input_len,
            "startup_time": state.started,
            "internal_states": internal,
            "version": SGLANG_VERSION,
            "frontend": "python",
        }
    )


async def model_info(state: FakeState, request: Request) -> Response:
    """``GET /model_info``: SGLang's model info (a Llama generation model)."""
    cfg = state.launch_config
    return json_response(
        {
            "model_path": cfg.tokenizer_path or cfg.model_name,
            "served_model_name": cfg.model_name,
            "tokenizer_path": cfg.tokenizer_path or cfg.model_name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": cfg.weight_version,
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
        }
    )


async def loads(state: FakeState, request: Request) -> Response:
    """``GET /v1/loads``: per dp rank, running/waiting samples and token usage."""
    cfg = state.launch_config
    out = []
    for rank, g in enumerate(state.gauges()):
        d: dict[str, Any] = {
            "timestamp": time.time(),
            "dp_rank": rank,
            "num_running_reqs": int(g["num_running_reqs"]),
            "num_waiting_reqs": int(g["num_queue_reqs"]),
            "num_used_tokens": int(g["token_usage"] * cfg.max_total_num_tokens),
            "max_total_num_tokens": cfg.max_total_num_tokens,
            "max_running_requests": cfg.max_running_requests or 0,
            "token_usage": g["token_usage"],
            "gen_throughput": g["gen_throughput"],
            "cache_hit_rate": g["cache_hit_rate"],
        }
        if cfg.speculative_algorithm:
            d["speculative"] = {
                "accept_length": g["spec_accept_length"],
                "accept_rate": g["spec_accept_rate"],
            }
        out.append(d)
    return json_response(
        {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "version": SGLANG_VERSION,
            "accelerator": None,
            "num_accelerators": 1,
            "loads": out,
        }
    )


async def abort_request(state: FakeState, request: Request) -> Response:
    """``POST /abort_request``: abort ``rid`` (exact match) or all; always 200."""
    raw = await request.body()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as e:
        return sglang_error(f"1 validation error: JSON decode error: {e}", "Bad Request")
    if not isinstance(body, dict):
        return sglang_error(
            "1 validation error: body: Input should be a valid dictionary", "Bad Request"
        )
    rid = body.get("rid") or ""
    if body.get("abort_all"):
        for s in list(state.running.values()):
            state.abort(s.rid)
    elif isinstance(rid, str) and rid:
        state.abort(rid)
    return Response(status_code=200)


async def flush_cache(state: FakeState, request: Request) -> Response:
    """``GET|POST /flush_cache``: empty the prefix cache; SGLang's 200 text."""
    state.flushes += 1
    if state.prefix_cache is not None:
        state.prefix_cache.clear()
    return Response(
        "Cache flushed.\nPlease check backend logs for more details. (When there are running "
        "or waiting requests, the operation will not be performed.)\n",
        status_code=200,
    )


async def responses(state: FakeState, request: Request) -> Response:
    """A minimal ``/v1/responses``: ``max_output_tokens`` (default 16) tokens ``tok{i}``;
    streamed as ``event: <type>`` + ``data:`` events ending with ``response.completed``."""
    cfg = state.launch_config
    entry = state.log_request(request, None)
    try:
        doc = await read_json(request, entry)
        if not isinstance(doc, dict) or not isinstance(doc.get("input"), (str, list)):
            raise ClientError("1 validation error: input: Field required", "Bad Request")
    except ClientError as e:
        entry["status"], entry["outcome"] = e.status, "error"
        return sglang_error(e.message, e.kind, e.status)
    n = doc.get("max_output_tokens") if type(doc.get("max_output_tokens")) is int else 16
    rid = doc.get("request_id") or f"resp_{uuid.uuid4().hex}"
    entry["rids"] = [rid]
    text = " ".join(f"tok{i}" for i in range(n))
    body = {"id": rid, "object": "response", "created_at": int(time.time()),
            "model": doc.get("model") or cfg.model_name, "status": "completed",
            "output": [{"type": "message", "id": f"msg_{rid}", "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 1, "output_tokens": n, "total_tokens": n + 1}}
    entry["status"], entry["outcome"] = 200, "ok"
    if not doc.get("stream"):
        return json_response(body)

    def event(kind: str, **payload: Any) -> bytes:
        return f"event: {kind}\ndata: ".encode() + dumps({"type": kind, **payload}) + b"\n\n"

    events = [event("response.created", response={**body, "status": "in_progress", "output": []})]
    events += [event("response.output_text.delta", item_id=f"msg_{rid}", output_index=0,
                     content_index=0, delta=("" if i == 0 else " ") + f"tok{i}") for i in range(n)]
    events.append(event("response.completed", response=body))

    async def gen() -> AsyncIterator[bytes]:
        for e in events:
            yield e

    return StreamingResponse(gen(), media_type="text/event-stream")
