"""``GET /ready``: whether this router takes traffic, with every model's pools.

200 while some model has a healthy endpoint and the drain has not started (:mod:`router.front.drain`),
else 503. The body: ``ready``, ``draining``, ``pools`` (every pool of every model: healthy and
total endpoints, warming and wrong-model endpoints, ``unhealthy`` (each unroutable endpoint's
reason and detail: ``identity_mismatch`` for one serving another model, ``state`` otherwise),
the context limit now and as configured, the engines' reported limits, LoRA adapters, bypass
flags, signal ages, acceptance estimates, speed model), ``models`` (each model's ``ready`` and pool names: a model
without a healthy endpoint answers its own requests 503 ``no_healthy_upstream`` while the
others are served, :meth:`router.state.fleet.Fleet.ready`) and ``shared_state``. A degraded shared
state is shown, not fatal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from router.decision.acceptance import CLASSES
from router.decision.learn import bucket_label
from router.state.models import pool_adapters

if TYPE_CHECKING:
    from router.state.endpoint import Endpoint
    from router.state.fleet import Fleet
    from router.state.pool import Pool

__all__ = ["ready_view"]


def _age(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _why(e: Endpoint) -> dict[str, str]:
    """Why ``e`` gets no request: ``identity_mismatch`` (serves another model), else its state."""
    if e.identity_error is not None:
        return {"reason": "identity_mismatch", "detail": e.identity_error}
    return {"reason": "draining" if e.draining else e.state, "detail": ""}


def _pool_view(p: Pool, now: float, max_age: float) -> dict[str, Any]:
    return {"healthy_endpoints": sum(e.healthy for e in p.endpoints.values()),
            "endpoints": len(p.endpoints),
            "warming": {e.url: e.warm_detail for e in p.endpoints.values() if e.warming},
            "wrong_model": {e.url: e.identity_error for e in p.endpoints.values() if e.identity_error},
            "unhealthy": {e.url: _why(e) for e in p.endpoints.values() if not e.healthy and not e.warming},
            "max_context_tokens": p.limit,
            "configured_max_context_tokens": p.configured_limit,
            "engine_context_tokens": {e.url: e.engine_context for e in p.endpoints.values()
                                      if e.engine_context is not None},
            "lora_adapters": sorted(pool_adapters(p.endpoints.values())),
            "saturated": p.saturated,
            "low_acceptance": p.low_acceptance,
            "low_acceptance_classes": sorted(p.bypass.low_classes()),
            "signal_age_s": {"scrape": _age(p.scrape_age_s(now)),
                             **{f"acceptance_{c}": _age(p.signal_age_s(c, now)) for c in CLASSES}},
            "accept_length_estimate": {c: p.estimated_accept_length(c, now, max_age) for c in CLASSES},
            "speed_model": None if p.fit is None else p.fit.status(now),
            "prediction": None if p.check is None else p.check.status(now),
            "accept_length_check": _accept_check(p, now, max_age)}


def _accept_check(p: Pool, now: float, max_age: float) -> dict[str, Any] | None:
    """A speculative pool's learned accept lengths against its engines' live gauge, per class:
    ``learned`` (the fit's decayed mean of the requests' own tau, :meth:`router.decision.learn.SpeedFit.accept_length`),
    ``cells`` (its per-bucket table), ``gauge`` (the live estimate from ``sglang:spec_accept_length``,
    :mod:`router.decision.acceptance`) and ``relative_error`` ``(learned - gauge) / gauge``; None for a
    pool that is not learning or not speculative. The gauge is the engine's batch mean, so a
    class whose requests the gauge's window mixed with the other's reads apart by that much."""
    if p.fit is None or not p.speculative:
        return None
    table = p.fit.accept_table()
    out: dict[str, Any] = {}
    for cls in CLASSES:
        learned, gauge = p.fit.accept_length(cls), p.estimated_accept_length(cls, now, max_age)
        out[cls] = {"learned": None if learned is None else round(learned, 3),
                    "cells": {bucket_label(b): round(t, 3) for (c, b), t in sorted(table.items()) if c == cls},
                    "gauge": None if gauge is None else round(gauge, 3),
                    "relative_error": None if learned is None or not gauge else round((learned - gauge) / gauge, 4)}
    return out


def ready_view(fleet: Fleet, now: float, draining: bool) -> tuple[bool, dict[str, Any]]:
    """``(ready, body without shared_state)`` of ``GET /ready`` at monotonic time ``now`` (s)."""
    pools: dict[str, Any] = {}
    for rt in fleet:
        max_age = rt.routing.acceptance.max_age_s
        for p in rt.pools:
            pools[p.name] = _pool_view(p, now, max_age)
    models = fleet.ready()
    ok = any(models.values()) and not draining
    return ok, {"ready": ok, "draining": draining, "pools": pools,
                "models": {name: {"ready": r, "pools": [p.name for p in fleet.runtimes[name].pools]}
                           for name, r in models.items()}}
