"""The admin API: read, change and clear routing thresholds at run time.

``GET /admin/config`` shows the YAML values, the overrides and the effective values;
``PUT /admin/config`` replaces the overrides with the body
``{"routing": {"long_prompt_tokens": N, "saturation": {"enter": E, "exit": X}}}`` (every key
optional; a missing key keeps the YAML value); ``DELETE /admin/config`` clears them, back to the
YAML. Every call needs ``Authorization: Bearer <admin key>`` (:mod:`router.access.auth`: 401 without a
valid key, 403 with a client key or when no admin key is configured).

A change is validated like the YAML (strict integers, unknown keys refused,
``saturation.exit < saturation.enter`` after merging: 400 ``invalid_value``), stored in the
shared state so that every replica applies it at its next sync (:mod:`router.shared.state`; with the
memory backend it applies to this process), then applied here at once. When Redis cannot take
the write the answer is 503 ``shared_state_unavailable`` and nothing changes. The YAML stays
the base: a config reload keeps the overrides on top of the new YAML.

``GET /admin/plan/window[?model=NAME]`` serves the window of recent finished requests and each
pool's learned speed model that ``specgate plan`` sizes the pools from
(:func:`router.front.planwindow.window_view`; default model: the first; an unknown one is 404
``model_not_found``).

``GET /drain`` (loopback clients only, else 403) starts the graceful drain of
:mod:`router.front.drain`: the preStop hook of the router pods.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from router.config.tree import ConfigError, Overrides, RoutingConfig, parse_overrides
from router.errors import InvalidRequest, ModelNotFound, PermissionDenied, RequestTooLarge
from router.front.body import loads_unique
from router.front.drain import is_loopback
from router.front.intake import content_codings, decode_body
from router.front.planwindow import window_view

if TYPE_CHECKING:
    from router.front.appstate import FrontState as AppState

__all__ = ["install_admin_routes"]

log = logging.getLogger("specgate.admin")

_MAX_BODY = 64 * 1024


def _thresholds(routing: RoutingConfig) -> dict[str, Any]:
    return {"routing": {"long_prompt_tokens": routing.long_prompt_tokens,
                        "saturation": {"enter": routing.saturation.enter,
                                       "exit": routing.saturation.exit}}}


def _model_view(runtime: Any) -> dict[str, Any]:
    return {
        "yaml": _thresholds(runtime.config.routing),
        "overrides": runtime.overrides.model_dump(exclude_none=True),
        "effective": _thresholds(runtime.routing),
        "override_error": runtime.override_error,
    }


def _view(state: Any) -> dict[str, Any]:
    """The first model's view at the top level (the only model of a one-model config), every
    model's under ``models`` (by name), and the shared state."""
    return {**_model_view(state.runtime),
            "models": {name: _model_view(rt) for name, rt in state.fleet.runtimes.items()},
            "shared_state": state.shared.status()}


def _authorize(request: Request) -> Any:
    state = request.app.state.specgate
    auth = state.runtime.auth
    if auth is None:
        raise PermissionDenied("the admin API is disabled (no auth.admin_api_key configured)")
    auth.check_admin(request.headers.get("authorization"))
    return state


async def _read_overrides(request: Request) -> Overrides:
    codings = content_codings(request.headers.getlist("content-encoding"))  # router.front.intake: 415
    body = await request.body()
    if len(body) > _MAX_BODY:
        raise RequestTooLarge(f"request body exceeds the {_MAX_BODY}-byte limit")
    if codings:
        body = await decode_body(body, codings, _MAX_BODY)
    doc = loads_unique(body)  # one rule for duplicate keys on every route (router.front.body)
    try:
        return parse_overrides(doc)
    except ConfigError as exc:
        raise InvalidRequest(str(exc)) from None


async def _store(state: AppState, overrides: Overrides) -> None:
    several = len(state.fleet) > 1
    for name, rt in state.fleet.runtimes.items():  # one override set, valid for every model
        try:
            overrides.apply(rt.config.routing)
        except ConfigError as exc:
            raise InvalidRequest(f"model {name}: {exc}" if several else str(exc)) from None
    await state.shared.store_overrides(overrides)
    for runtime in state.fleet:   # re-read: a reload may have swapped the fleet meanwhile
        runtime.set_overrides(overrides)
        state.refresh_gauges(runtime)
    log.warning("routing overrides %s", overrides.flat() or "cleared")


def _plan_window(state: Any, model: str | None) -> dict[str, Any]:
    runtime = state.fleet.default if model is None else state.fleet.runtimes.get(model)
    if runtime is None:
        raise ModelNotFound(f"no served model is called {model!r}", param="model")
    return window_view(state.plan_window, runtime, state.clock())


def install_admin_routes(app: FastAPI) -> None:
    """Register ``GET/PUT/DELETE /admin/config``, ``GET /admin/plan/window`` and ``GET /drain``
    on ``app``."""

    @app.get("/admin/config")
    async def get_config(request: Request) -> Response:
        return JSONResponse(_view(_authorize(request)))

    @app.put("/admin/config")
    async def put_config(request: Request) -> Response:
        state = _authorize(request)
        await _store(state, await _read_overrides(request))
        return JSONResponse(_view(state))

    @app.delete("/admin/config")
    async def delete_config(request: Request) -> Response:
        state = _authorize(request)
        await _store(state, Overrides())
        return JSONResponse(_view(state))

    @app.get("/admin/plan/window")
    async def plan_window(request: Request) -> Response:
        state = _authorize(request)
        return JSONResponse(_plan_window(state, request.query_params.get("model")))

    @app.get("/drain")
    async def drain(request: Request) -> Response:
        """Start the graceful drain (router/front/drain.py; the Kubernetes preStop hook runs
        ``specgate drain``). Loopback clients only, so nobody outside the pod can drain it:
        anyone else gets 403. Idempotent; answers the drain's state at once."""
        if not is_loopback(request.scope):
            raise PermissionDenied("GET /drain is accepted from the pod itself (loopback) only")
        drainer = request.app.drain
        drainer.begin("GET /drain")
        return JSONResponse(drainer.status())

    del get_config, put_config, delete_config, plan_window, drain  # registered
