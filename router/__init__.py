"""specgate's router: the public surface other folders (``serving/``, ``loadtests/``,
``benchmarks/``, ``drafters/``, ``scripts/``) and users import.

Import these names from ``router`` itself; every other module of the package is internal and
may change (``tests/unit/test_outside_imports.py`` holds the other folders to this). The names load on first use (``import router`` alone imports nothing heavy)::

    from router import create_app, load_config
    app = create_app("config.yaml")            # an ASGI app; the lifespan builds the runtime

========================  ======================================================================
group                     names
========================  ======================================================================
the app                   :func:`create_app`, :class:`RouterApp`, :class:`AppState`,
                          :func:`serve` (uvicorn with the router's protocol and signals),
                          :func:`limited_protocol` and :class:`ConnectionLimits` (that protocol:
                          uvicorn's httptools one with the ``server`` section's head limits),
                          :func:`tune_interpreter` (what ``specgate router`` sets process-wide),
                          :func:`tokenizer_executor` (the tokeniser threads),
                          :class:`H1Transport` and :class:`AiohttpTransport` (the upstream
                          clients the proxy sends generation requests through)
the config                :func:`load_config`, :func:`parse_config`, :func:`resolve_paths` (a raw
                          mapping's relative paths, as the loader reads them), :class:`Config`,
                          :class:`PoolConfig`, :class:`ServerConfig`, :class:`RoutingConfig`, :class:`AcceptanceConfig`,
                          :class:`SaturationConfig`, :class:`StateConfig`, :class:`PriorityGrant`,
                          :class:`RateLimitConfig`, :class:`KeyLimits`, :class:`ConfigError`
a runtime outside the     :func:`build_runtime`, :func:`load_runtime_inputs`,
app (scripts, benches)    :class:`RuntimeInputs`, :class:`Runtime`, :func:`size_prompt` (the
                          request path's sizing step), :func:`check_engine_paths` (the pools'
                          model files, as ``specgate serve`` checks them), :func:`build_fleet` and
                          :class:`Fleet` (one runtime per model of ``models:``)
the pure decision         :func:`decide`, :class:`Decision`, :class:`Outcome`, :class:`Reason`,
(simulators)              :func:`request_features`, :class:`RequestFeatures`, :func:`flip_points`,
                          :class:`PoolSnapshot`, :class:`EndpointSnapshot`, :class:`Rules`,
                          :func:`batch_context`, :class:`BypassState`, :class:`AcceptanceTracker`,
                          :data:`CLASSES` (the temperature classes), :data:`SPECULATION_MODES`
                          (a client's speculation hints), :class:`SpeedModel`,
                          :func:`completion_s` (a request's predicted seconds),
                          :class:`SpeedFit`, :class:`Observation`, :data:`DEFAULT_PRIOR`,
                          :func:`share_priors`, :func:`context_bucket`,
                          :func:`predict_request` (a decision's prediction, evaluated again),
                          :class:`PredictionCheck`, :func:`next_prediction_fallback` and
                          :func:`advance_prediction_check` (the predictions checked, and the
                          fallback's hysteresis step)
snapshots (the one door   :func:`pool_snapshot`, :func:`endpoint_values` (:class:`EndpointValues`),
from engine signals)      :func:`accept_lengths` (``router.state.snapshots``: what
                          ``Runtime.snapshots`` and the day simulator build the policy's inputs
                          with); :class:`PrefillMeter` (an endpoint's prompt tokens sent)
requests                  :func:`parse_chat`, :func:`parse_completions`, :class:`PromptCounter`
request controls          :func:`resolve_priority`, :func:`validate_sampling`,
(benchmarks)              :func:`check_min_tokens`, :func:`speculative_caveats`,
                          :class:`KeyLimiter`, :class:`Auth`, :class:`KeyRing`,
                          :class:`RouterMetrics`
engine metrics            :func:`parse_sglang_metrics`, :class:`EngineLoad`, :func:`accept_length`
                          (a response's own acceptance length, :mod:`router.upstream.specstats`)
errors                    :class:`SpecgateError` (the root of the OpenAI-shaped error tree)
========================  ======================================================================
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.access.admission import resolve_priority
    from router.access.auth import Auth, KeyRing
    from router.access.limits import KeyLimiter
    from router.app.appstate import AppState
    from router.app.asgi import (
        RouterApp,
        create_app,
        tokenizer_executor,
        tune_interpreter,
    )
    from router.app.commands import check_engine_paths
    from router.app.runtime_inputs import RuntimeInputs, build_runtime, load_runtime_inputs
    from router.app.server import serve
    from router.config.limits import KeyLimits, RateLimitConfig
    from router.config.server import PriorityGrant, ServerConfig
    from router.config.tree import (
        AcceptanceConfig,
        Config,
        ConfigError,
        PoolConfig,
        RoutingConfig,
        SaturationConfig,
        StateConfig,
        load_config,
        parse_config,
        resolve_paths,
    )
    from router.decision.acceptance import CLASSES, AcceptanceTracker
    from router.decision.bypass import BypassState
    from router.decision.learn import DEFAULT_PRIOR, Observation, SpeedFit, share_priors
    from router.decision.policy import (
        Decision,
        Outcome,
        batch_context,
        decide,
        flip_points,
        request_features,
    )
    from router.decision.predict import SpeedModel, completion_s
    from router.decision.snapshot import EndpointSnapshot, PoolSnapshot, Rules
    from router.errors import SpecgateError
    from router.front.http_limits import ConnectionLimits, limited_protocol
    from router.front.pipeline import size_prompt
    from router.ops.metrics import RouterMetrics
    from router.reasons import Reason
    from router.request.capabilities import SPECULATION_MODES
    from router.request.features import PromptCounter, RequestFeatures
    from router.request.parsing import parse_chat, parse_completions
    from router.request.sampling import check_min_tokens, speculative_caveats, validate_sampling
    from router.state.engine_metrics import EngineLoad, parse_sglang_metrics
    from router.state.fleet import Fleet, build_fleet
    from router.state.runtime import Runtime
    from router.upstream.specstats import accept_length
    from router.upstream.transport_aiohttp import AiohttpTransport
    from router.upstream.transport_h1 import H1Transport

#: Each public name and the module that defines it (read-only).
_SURFACE = MappingProxyType({
    "create_app": "router.app.asgi", "RouterApp": "router.app.asgi", "AppState": "router.app.appstate",
    "tune_interpreter": "router.app.asgi", "tokenizer_executor": "router.app.asgi", "serve": "router.app.server",
    "limited_protocol": "router.front.http_limits", "ConnectionLimits": "router.front.http_limits",
    "ServerConfig": "router.config.server",
    "load_config": "router.config.tree", "parse_config": "router.config.tree", "resolve_paths": "router.config.tree",
    "Config": "router.config.tree", "PoolConfig": "router.config.tree", "RoutingConfig": "router.config.tree",
    "AcceptanceConfig": "router.config.tree", "SaturationConfig": "router.config.tree", "StateConfig": "router.config.tree",
    "PriorityGrant": "router.config.server", "RateLimitConfig": "router.config.limits",
    "KeyLimits": "router.config.limits", "ConfigError": "router.config.tree",
    "build_runtime": "router.app.runtime_inputs", "load_runtime_inputs": "router.app.runtime_inputs",
    "RuntimeInputs": "router.app.runtime_inputs", "Runtime": "router.state.runtime", "Fleet": "router.state.fleet", "build_fleet": "router.state.fleet",
    "size_prompt": "router.front.pipeline",
    "check_engine_paths": "router.app.commands", "decide": "router.decision.policy", "Decision": "router.decision.policy",
    "Outcome": "router.decision.policy", "request_features": "router.decision.policy", "flip_points": "router.decision.policy",
    "batch_context": "router.decision.policy", "PoolSnapshot": "router.decision.snapshot", "EndpointSnapshot": "router.decision.snapshot",
    "Rules": "router.decision.snapshot", "Reason": "router.reasons", "RequestFeatures": "router.request.features",
    "BypassState": "router.decision.bypass", "AcceptanceTracker": "router.decision.acceptance", "CLASSES": "router.decision.acceptance",
    "SpeedModel": "router.decision.predict", "completion_s": "router.decision.predict", "SpeedFit": "router.decision.learn", "Observation": "router.decision.learn",
    "DEFAULT_PRIOR": "router.decision.learn", "share_priors": "router.decision.learn", "context_bucket": "router.decision.learn",
    "predict_request": "router.decision.policy", "PredictionCheck": "router.decision.prediction_check",
    "next_prediction_fallback": "router.decision.hysteresis", "advance_prediction_check": "router.decision.hysteresis",
    "pool_snapshot": "router.state.snapshots", "EndpointValues": "router.state.snapshots", "PrefillMeter": "router.state.prefill_meter",
    "endpoint_values": "router.state.snapshots", "accept_lengths": "router.state.snapshots", "parse_chat": "router.request.parsing",
    "parse_completions": "router.request.parsing", "PromptCounter": "router.request.features",
    "resolve_priority": "router.access.admission", "validate_sampling": "router.request.sampling",
    "check_min_tokens": "router.request.sampling", "speculative_caveats": "router.request.sampling",
    "KeyLimiter": "router.access.limits", "Auth": "router.access.auth", "KeyRing": "router.access.auth",
    "RouterMetrics": "router.ops.metrics", "parse_sglang_metrics": "router.state.engine_metrics",
    "EngineLoad": "router.state.engine_metrics", "accept_length": "router.upstream.specstats",
    "SpecgateError": "router.errors", "SPECULATION_MODES": "router.request.capabilities",
    "H1Transport": "router.upstream.transport_h1", "AiohttpTransport": "router.upstream.transport_aiohttp",
})

__all__ = [  # the names of _SURFACE (tests/unit/test_public_surface.py)
    "CLASSES",
    "DEFAULT_PRIOR",
    "SPECULATION_MODES",
    "AcceptanceConfig",
    "AcceptanceTracker",
    "AiohttpTransport",
    "AppState",
    "Auth",
    "BypassState",
    "Config",
    "ConfigError",
    "ConnectionLimits",
    "Decision",
    "EndpointSnapshot",
    "EndpointValues",
    "EngineLoad",
    "Fleet",
    "H1Transport",
    "KeyLimiter",
    "KeyLimits",
    "KeyRing",
    "Observation",
    "Outcome",
    "PoolConfig",
    "PoolSnapshot",
    "PredictionCheck",
    "PrefillMeter",
    "PriorityGrant",
    "PromptCounter",
    "RateLimitConfig",
    "Reason",
    "RequestFeatures",
    "RouterApp",
    "RouterMetrics",
    "RoutingConfig",
    "Rules",
    "Runtime",
    "RuntimeInputs",
    "SaturationConfig",
    "ServerConfig",
    "SpecgateError",
    "SpeedFit",
    "SpeedModel",
    "StateConfig",
    "accept_length",
    "accept_lengths",
    "advance_prediction_check",
    "batch_context",
    "build_fleet",
    "build_runtime",
    "check_engine_paths",
    "check_min_tokens",
    "completion_s",
    "context_bucket",
    "create_app",
    "decide",
    "endpoint_values",
    "flip_points",
    "limited_protocol",
    "load_config",
    "load_runtime_inputs",
    "next_prediction_fallback",
    "parse_chat",
    "parse_completions",
    "parse_config",
    "parse_sglang_metrics",
    "pool_snapshot",
    "predict_request",
    "request_features",
    "resolve_paths",
    "resolve_priority",
    "serve",
    "share_priors",
    "size_prompt",
    "speculative_caveats",
    "tokenizer_executor",
    "tune_interpreter",
    "validate_sampling",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module 'router' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_SURFACE})
