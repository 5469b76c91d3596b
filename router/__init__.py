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
                          :data:`CLASSES` (the temperature classes), :class:`SpeedModel`,
                          :func:`completion_s` (a request's predicted seconds),
                          :class:`SpeedFit`, :class:`Observation`, :data:`DEFAULT_PRIOR`,
                          :func:`share_priors`, :func:`context_bucket`,
                          :func:`predict_request` (a decision's prediction, evaluated again),
                          :class:`PredictionCheck`, :func:`next_prediction_fallback` and
                          :func:`advance_prediction_check` (the predictions checked, and the
                          fallback's hysteresis step)
snapshots (the one door   :func:`pool_snapshot`, :func:`endpoint_values`, :func:`accept_lengths`
from engine signals)      (``router.snapshots``: what ``Runtime.snapshots`` and the day
                          simulator build the policy's inputs with)
requests                  :func:`parse_chat`, :func:`parse_completions`, :class:`PromptCounter`
request controls          :func:`resolve_priority`, :func:`validate_sampling`,
(benchmarks)              :func:`check_min_tokens`, :func:`speculative_caveats`,
                          :class:`KeyLimiter`, :class:`Auth`, :class:`KeyRing`,
                          :class:`RouterMetrics`
engine metrics            :func:`parse_sglang_metrics`, :class:`EngineLoad`, :func:`accept_length`
                          (a response's own acceptance length, :mod:`router.specstats`)
errors                    :class:`SpecgateError` (the root of the OpenAI-shaped error tree)
========================  ======================================================================
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.acceptance import CLASSES, AcceptanceTracker
    from router.admission import resolve_priority
    from router.app import AppState, RouterApp, create_app, tokenizer_executor, tune_interpreter
    from router.auth import Auth, KeyRing
    from router.bypass import BypassState
    from router.commands import check_engine_paths
    from router.config import (
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
    from router.config_limits import KeyLimits, RateLimitConfig
    from router.config_server import PriorityGrant, ServerConfig
    from router.engine_metrics import EngineLoad, parse_sglang_metrics
    from router.errors import SpecgateError
    from router.features import PromptCounter, RequestFeatures
    from router.fleet import Fleet, build_fleet
    from router.http_limits import ConnectionLimits, limited_protocol
    from router.learn import DEFAULT_PRIOR, Observation, SpeedFit, share_priors
    from router.limits import KeyLimiter
    from router.metrics import RouterMetrics
    from router.parsing import parse_chat, parse_completions
    from router.pipeline import size_prompt
    from router.policy import (
        Decision,
        EndpointSnapshot,
        Outcome,
        PoolSnapshot,
        Rules,
        batch_context,
        decide,
        flip_points,
        request_features,
    )
    from router.pools import Runtime
    from router.predict import SpeedModel, completion_s
    from router.reasons import Reason
    from router.runtime_inputs import RuntimeInputs, build_runtime, load_runtime_inputs
    from router.sampling import check_min_tokens, speculative_caveats, validate_sampling
    from router.server import serve
    from router.specstats import accept_length
    from router.transport_aiohttp import AiohttpTransport
    from router.transport_h1 import H1Transport

#: Each public name and the module that defines it (read-only).
_SURFACE = MappingProxyType({
    "create_app": "router.app", "RouterApp": "router.app", "AppState": "router.app",
    "tune_interpreter": "router.app", "tokenizer_executor": "router.app", "serve": "router.server",
    "limited_protocol": "router.http_limits", "ConnectionLimits": "router.http_limits",
    "ServerConfig": "router.config_server",
    "load_config": "router.config", "parse_config": "router.config", "resolve_paths": "router.config",
    "Config": "router.config", "PoolConfig": "router.config", "RoutingConfig": "router.config",
    "AcceptanceConfig": "router.config", "SaturationConfig": "router.config", "StateConfig": "router.config",
    "PriorityGrant": "router.config_server", "RateLimitConfig": "router.config_limits",
    "KeyLimits": "router.config_limits", "ConfigError": "router.config",
    "build_runtime": "router.runtime_inputs", "load_runtime_inputs": "router.runtime_inputs",
    "RuntimeInputs": "router.runtime_inputs", "Runtime": "router.pools", "Fleet": "router.fleet", "build_fleet": "router.fleet",
    "size_prompt": "router.pipeline",
    "check_engine_paths": "router.commands", "decide": "router.policy", "Decision": "router.policy",
    "Outcome": "router.policy", "request_features": "router.policy", "flip_points": "router.policy",
    "batch_context": "router.policy", "PoolSnapshot": "router.policy", "EndpointSnapshot": "router.policy",
    "Rules": "router.policy", "Reason": "router.reasons", "RequestFeatures": "router.features",
    "BypassState": "router.bypass", "AcceptanceTracker": "router.acceptance", "CLASSES": "router.acceptance",
    "SpeedModel": "router.predict", "completion_s": "router.predict", "SpeedFit": "router.learn", "Observation": "router.learn",
    "DEFAULT_PRIOR": "router.learn", "share_priors": "router.learn", "context_bucket": "router.learn",
    "predict_request": "router.policy", "PredictionCheck": "router.prediction_check",
    "next_prediction_fallback": "router.hysteresis", "advance_prediction_check": "router.hysteresis",
    "pool_snapshot": "router.snapshots",
    "endpoint_values": "router.snapshots", "accept_lengths": "router.snapshots", "parse_chat": "router.parsing",
    "parse_completions": "router.parsing", "PromptCounter": "router.features",
    "resolve_priority": "router.admission", "validate_sampling": "router.sampling",
    "check_min_tokens": "router.sampling", "speculative_caveats": "router.sampling",
    "KeyLimiter": "router.limits", "Auth": "router.auth", "KeyRing": "router.auth",
    "RouterMetrics": "router.metrics", "parse_sglang_metrics": "router.engine_metrics",
    "EngineLoad": "router.engine_metrics", "accept_length": "router.specstats",
    "SpecgateError": "router.errors",
    "H1Transport": "router.transport_h1", "AiohttpTransport": "router.transport_aiohttp",
})

__all__ = [  # the names of _SURFACE (tests/unit/test_public_surface.py)
    "CLASSES",
    "DEFAULT_PRIOR",
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
