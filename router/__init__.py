"""specgate's router: the public surface other folders (``serving/``, ``loadtests/``,
``benchmarks/``, ``drafters/``) and users import.

Import these names from ``router`` itself; every other module of the package is internal and
may change. The names load on first use (``import router`` alone imports nothing heavy)::

    from router import create_app, load_config
    app = create_app("config.yaml")            # an ASGI app; the lifespan builds the runtime

========================  ======================================================================
group                     names
========================  ======================================================================
the app                   :func:`create_app`, :class:`RouterApp`, :class:`AppState`,
                          :func:`serve` (uvicorn with the router's protocol and signals),
                          :func:`tune_interpreter` (what ``specgate router`` sets process-wide)
the config                :func:`load_config`, :func:`parse_config`, :class:`Config`,
                          :class:`PoolConfig`, :class:`RoutingConfig`, :class:`ConfigError`
a runtime outside the     :func:`build_runtime`, :func:`load_runtime_inputs`,
app (scripts, benches)    :class:`RuntimeInputs`, :class:`Runtime`, :func:`build_fleet` and
                          :class:`Fleet` (one runtime per model of ``models:``)
the pure decision         :func:`decide`, :class:`Decision`, :class:`Outcome`, :class:`Reason`,
(simulators)              :func:`request_features`, :class:`RequestFeatures`, :func:`flip_points`,
                          :class:`PoolSnapshot`, :class:`EndpointSnapshot`, :class:`Rules`,
                          :class:`BypassState`, :class:`AcceptanceTracker`, :class:`SpeedModel`,
                          :class:`SpeedFit`, :class:`Observation`
requests                  :func:`parse_chat`, :func:`parse_completions`, :class:`PromptCounter`
engine metrics            :func:`parse_sglang_metrics`, :class:`EngineLoad`
errors                    :class:`SpecgateError` (the root of the OpenAI-shaped error tree)
========================  ======================================================================
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from router.acceptance import AcceptanceTracker
    from router.app import AppState, RouterApp, create_app, tune_interpreter
    from router.bypass import BypassState
    from router.config import (
        Config,
        ConfigError,
        PoolConfig,
        RoutingConfig,
        load_config,
        parse_config,
    )
    from router.engine_metrics import EngineLoad, parse_sglang_metrics
    from router.errors import SpecgateError
    from router.features import PromptCounter, RequestFeatures, parse_chat, parse_completions
    from router.fleet import Fleet, build_fleet
    from router.learn import Observation, SpeedFit
    from router.policy import (
        Decision,
        EndpointSnapshot,
        Outcome,
        PoolSnapshot,
        Rules,
        decide,
        flip_points,
        request_features,
    )
    from router.pools import Runtime
    from router.predict import SpeedModel
    from router.reasons import Reason
    from router.runtime_inputs import RuntimeInputs, build_runtime, load_runtime_inputs
    from router.server import serve

#: Each public name and the module that defines it (read-only).
_SURFACE = MappingProxyType({
    "create_app": "router.app", "RouterApp": "router.app", "AppState": "router.app",
    "tune_interpreter": "router.app", "serve": "router.server",
    "load_config": "router.config", "parse_config": "router.config", "Config": "router.config",
    "PoolConfig": "router.config", "RoutingConfig": "router.config", "ConfigError": "router.config",
    "build_runtime": "router.runtime_inputs", "load_runtime_inputs": "router.runtime_inputs",
    "RuntimeInputs": "router.runtime_inputs", "Runtime": "router.pools",
    "Fleet": "router.fleet", "build_fleet": "router.fleet",
    "decide": "router.policy", "Decision": "router.policy", "Outcome": "router.policy",
    "request_features": "router.policy", "flip_points": "router.policy",
    "PoolSnapshot": "router.policy", "EndpointSnapshot": "router.policy", "Rules": "router.policy",
    "Reason": "router.reasons", "RequestFeatures": "router.features",
    "BypassState": "router.bypass", "AcceptanceTracker": "router.acceptance",
    "SpeedModel": "router.predict", "SpeedFit": "router.learn", "Observation": "router.learn",
    "parse_chat": "router.features", "parse_completions": "router.features",
    "PromptCounter": "router.features",
    "parse_sglang_metrics": "router.engine_metrics", "EngineLoad": "router.engine_metrics",
    "SpecgateError": "router.errors",
})

__all__ = [  # the names of _SURFACE (tests/unit/test_public_surface.py)
    "AcceptanceTracker", "AppState", "BypassState", "Config", "ConfigError", "Decision",
    "EndpointSnapshot", "EngineLoad", "Fleet", "Observation", "Outcome", "PoolConfig", "PoolSnapshot",
    "PromptCounter", "Reason", "RequestFeatures", "RouterApp", "RoutingConfig", "Rules", "Runtime",
    "RuntimeInputs", "SpecgateError", "SpeedFit", "SpeedModel", "build_fleet", "build_runtime", "create_app",
    "decide", "flip_points", "load_config", "load_runtime_inputs", "parse_chat",
    "parse_completions", "parse_config", "parse_sglang_metrics", "request_features", "serve",
    "tune_interpreter",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module 'router' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_SURFACE})
