"""``/metrics``: SGLang 0.5.23's scheduler gauges and tokenizer counters as Prometheus text.

Names, labels, HELP texts and order are the module docstring of :mod:`serving.fake_sglang`
("Metrics"); values are live (``FakeState.gauges``) after the overrides posted to
``/_fake/metrics``.
"""

from __future__ import annotations

import asyncio
import math

from starlette.requests import Request
from starlette.responses import Response

from serving.fake_sglang.errors import json_response
from serving.fake_sglang.state import FakeState

__all__ = ["GAUGES", "metrics", "render_metrics"]

GAUGES = (
    "num_running_reqs",
    "num_queue_reqs",
    "token_usage",
    "spec_accept_length",
    "spec_accept_rate",
    "gen_throughput",
    "cache_hit_rate",
)


async def metrics(state: FakeState, request: Request) -> Response:
    """``GET /metrics``: Prometheus text (404 without ``enable_metrics``; overrides first)."""
    cfg = state.launch_config
    if not cfg.enable_metrics:
        return json_response({"detail": "Not Found"}, 404)
    o = state.metrics_override
    if o.get("delay_s"):
        await asyncio.sleep(float(o["delay_s"]))
    if o.get("status"):
        return Response(
            o.get("body_text") or "Internal Server Error",
            status_code=int(o["status"]),
            media_type="text/plain",
        )
    if o.get("body_text") is not None:
        return Response(o["body_text"], media_type="text/plain; version=0.0.4; charset=utf-8")
    return Response(render_metrics(state), media_type="text/plain; version=0.0.4; charset=utf-8")


def render_metrics(state: FakeState) -> str:
    """The Prometheus text of the gauges and counters (module docstring)."""
    cfg = state.launch_config
    px = cfg.metrics_prefix
    lines: list[str] = []
    per_rank = state.gauges()
    docs = {
        "num_running_reqs": "The number of running requests.",
        "num_queue_reqs": "The number of requests in the waiting queue.",
        "token_usage": "The token usage.",
        "spec_accept_length": "Mean acceptance length of speculative decoding (accepted "
        "drafts + bonus token per forward).",
        "spec_accept_rate": "Speculative acceptance rate (`accepted drafts / proposed drafts` "
        "in batch).",
        "gen_throughput": "The generation throughput (token/s).",
        "cache_hit_rate": "The prefix cache hit rate.",
        "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
        "context_len": "Maximum context length.",
    }

    def labels(rank: int) -> str:
        lab = {
            "engine_type": "unified",
            "model_name": cfg.model_name,
            "moe_ep_rank": "0",
            "pp_rank": "0",
            "tp_rank": "0",
        }
        if cfg.dp_size > 1:
            lab["dp_rank"] = str(rank)
        return ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(lab.items()))

    for name in (*GAUGES, "max_total_num_tokens", "context_len"):
        lines.append(f"# HELP {px}{name} {docs[name]}")
        lines.append(f"# TYPE {px}{name} gauge")
        for rank in range(cfg.dp_size):
            if name == "max_total_num_tokens":
                v = float(cfg.max_total_num_tokens if state.stepper is None
                          else state.stepper.engine.gauges().capacity_tokens)
            elif name == "context_len":
                v = float(cfg.context_length)
            else:
                v = per_rank[rank][name]
            lines.append(f"{px}{name}{{{labels(rank)}}} {_fmt(v)}")
    model = _esc(cfg.model_name)
    for name, value, doc in (
        ("prompt_tokens", state.prompt_tokens_total, "Number of prefill tokens processed."),
        (
            "generation_tokens",
            state.generation_tokens_total,
            "Number of generation tokens processed.",
        ),
        ("num_requests", state.num_requests_total, "Number of requests processed."),
        (
            "num_aborted_requests",
            state.num_aborted_requests_total,
            "Number of requests aborted.",
        ),
    ):
        lines.append(f"# HELP {px}{name}_total {doc}")
        lines.append(f"# TYPE {px}{name}_total counter")
        if isinstance(value, dict):
            for streaming, v in value.items():
                lines.append(
                    f'{px}{name}_total{{engine_type="unified",is_streaming="{streaming}",'
                    f'model_name="{model}"}} {_fmt(float(v))}'
                )
        else:
            lines.append(
                f'{px}{name}_total{{engine_type="unified",model_name="{model}"}} '
                f"{_fmt(float(value))}"
            )
    return "\n".join(lines) + "\n"


def _esc(v: str) -> str:
    """A Prometheus label value, escaped."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(v: float) -> str:
    """A sample value as prometheus_client prints it (``repr`` of a float, ``+Inf``, ``NaN``)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))
