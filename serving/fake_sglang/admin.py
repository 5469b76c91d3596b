"""The fake's control API (``/_fake/...``): scripting, the access log, reset, overrides, state.

Bodies: ``/_fake/script`` takes ``Behaviour`` objects (one, a list, or
``{"behaviours": [...]}``); ``/_fake/health`` ``{"status": int|null, "delay_s": float|null}``;
``/_fake/metrics`` the override keys listed in ``c_metrics`` (null removes one);
``/_fake/relaunch`` ``{"flags": {<FakeConfig field>: value, ...}, "restart": bool}``
(``FakeState.relaunch``: the same address relaunched with other flags, or told them at run
time). A malformed body answers 400 ``{"error": message}``. These requests are never logged as traffic.
"""

from __future__ import annotations

from dataclasses import asdict

import orjson
from starlette.requests import Request
from starlette.responses import Response

from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.errors import json_response
from serving.fake_sglang.faults import CYCLE_KEY
from serving.fake_sglang.metrics import GAUGES
from serving.fake_sglang.state import FakeState

__all__ = ["c_health", "c_metrics", "c_relaunch", "c_requests", "c_reset", "c_script", "c_state"]


async def c_script(state: FakeState, request: Request) -> Response:
    """POST ``/_fake/script``: queue behaviours; 200 ``{"queued": N}`` (the queue length)."""
    try:
        data = orjson.loads(await request.body() or b"null")
        items = (
            data.get("behaviours") if isinstance(data, dict) and "behaviours" in data else data
        )
        if isinstance(items, dict):
            items = [items]
        if not isinstance(items, list):
            raise TypeError('expected a behaviour object, a list, or {"behaviours": [...]}')
        parsed = [Behaviour.from_dict(x) for x in items]
    except (ValueError, TypeError, orjson.JSONDecodeError) as e:
        return json_response({"error": str(e)}, 400)
    return json_response({"queued": state.script(parsed)})


async def c_requests(state: FakeState, request: Request) -> Response:
    """GET ``/_fake/requests[?path=P]``: the access log (``FakeState.requests``)."""
    return json_response(state.requests(request.query_params.get("path")))


async def c_reset(state: FakeState, request: Request) -> Response:
    """POST ``/_fake/reset``: ``FakeState.reset``; 200 ``{"ok": true}``."""
    state.reset()
    return json_response({"ok": True})


async def c_health(state: FakeState, request: Request) -> Response:
    """POST ``/_fake/health``: override ``/health``'s status and delay (null: back to normal)."""
    try:
        data = orjson.loads(await request.body() or b"{}")
        if not isinstance(data, dict) or set(data) - {"status", "delay_s"}:
            raise TypeError('expected {"status": int|null, "delay_s": float|null}')
    except (ValueError, TypeError, orjson.JSONDecodeError) as e:
        return json_response({"error": str(e)}, 400)
    for k, v in data.items():
        if v is None:
            state.health.pop(k, None)
        else:
            state.health[k] = v
    return json_response({"health": state.health})


async def c_metrics(state: FakeState, request: Request) -> Response:
    """POST ``/_fake/metrics``: merge overrides of ``/metrics``, ``/server_info`` and gauges."""
    allowed = {
        "status",
        "delay_s",
        "body_text",
        "gauges",
        "decoding_gauges",
        "dp_gauges",
        "avg_spec_accept_length",
    }
    try:
        data = orjson.loads(await request.body() or b"{}")
        if not isinstance(data, dict) or set(data) - allowed:
            raise ValueError(f"allowed keys: {sorted(allowed)}")
        for key in ("gauges", "decoding_gauges"):
            if data.get(key) is not None and set(data[key]) - set(GAUGES):
                raise ValueError(f"gauges must be among {list(GAUGES)}")
    except (ValueError, TypeError, orjson.JSONDecodeError) as e:
        return json_response({"error": str(e)}, 400)
    for k, v in data.items():
        if v is None:
            state.metrics_override.pop(k, None)
        elif k == "gauges":
            merged = dict(state.metrics_override.get("gauges") or {})
            for gk, gv in v.items():
                if gv is None:
                    merged.pop(gk, None)
                else:
                    merged[gk] = gv
            state.metrics_override["gauges"] = merged
        else:
            state.metrics_override[k] = v
    return json_response({"metrics": state.metrics_override})


async def c_relaunch(state: FakeState, request: Request) -> Response:
    """POST ``/_fake/relaunch``: new launch flags, with or without a restart; 200 ``{"config":
    {...}}`` (the new flags)."""
    try:
        data = orjson.loads(await request.body() or b"{}")
        if not isinstance(data, dict) or set(data) - {"flags", "restart"} or not isinstance(
                data.get("flags", {}), dict) or not isinstance(data.get("restart", True), bool):
            raise TypeError('expected {"flags": {...}, "restart": bool}')
        flags = dict(data.get("flags", {}))
        if isinstance(flags.get("lora_paths"), list):
            flags["lora_paths"] = tuple(flags["lora_paths"])
        cycle = request.scope.get(CYCLE_KEY)
        new = state.relaunch(flags, restart=data.get("restart", True),
                             keep=getattr(cycle, "transport", None))
    except (ValueError, TypeError, orjson.JSONDecodeError) as e:
        return json_response({"error": str(e)}, 400)
    return json_response({"config": asdict(new)})


async def c_state(state: FakeState, request: Request) -> Response:
    """GET ``/_fake/state``: running and queued samples, the script queue, live gauges."""
    return json_response(
        {
            "running": [
                {
                    "rid": s.rid,
                    "index": s.index,
                    "generated": s.generated,
                    "prompt_tokens": s.prompt_tokens,
                }
                for s in state.running.values()
            ],
            "queued": [s.rid for job, _ in state.queued for s in job.samples],
            "script_queue": [asdict(b) for b in state.script_queue],
            "gauges": state.gauges(),
        }
    )
