"""The ``tracing`` section applied on a config reload (:mod:`router.app.reload`).

When the reloaded ``tracing`` section differs from the one in use, :func:`apply_tracing`
builds a new :class:`router.ops.tracing.Tracing` (its own ``TracerProvider``: endpoint, sampler,
service name and resource attributes are fixed per provider in the OpenTelemetry SDK, so a
change means a new provider) or none (``enabled: false``), and swaps ``state.tracing`` in one
event-loop step: requests that arrive afterwards use the new one. A request already in
flight keeps the tracer its server span came from (its client spans too) and ends its spans
there (:func:`router.ops.spans.end_span`), so no span is cut by the swap. The replaced tracer is
*retired*: :func:`retire_when_idle` waits until its provider has no open span (checked every
``poll_s``) and then shuts it down in a worker thread, which flushes its last spans to its
old endpoint (bounded by its ``export_timeout_s``). The app's shutdown shuts down every
tracer still retiring. ``forward_baggage`` is read per request and applies at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from router.config.server import TracingConfig

if TYPE_CHECKING:
    from router.app.appstate import AppState

__all__ = ["apply_tracing", "retire_when_idle", "shutdown_all"]

log = logging.getLogger("specgate.tracing")


def apply_tracing(state: AppState, cfg: TracingConfig) -> bool:
    """Swap ``state.tracing`` for one built from ``cfg`` when the exporter-side settings
    changed; returns True when it swapped. Raises what the SDK raises building the provider
    (the caller keeps the old one then)."""
    current: TracingConfig = state.tracing_config
    if _provider_settings(current) == _provider_settings(cfg):
        state.tracing_config = cfg
        return False
    new: Any = None
    if cfg.enabled:
        from router.ops.tracing import Tracing

        new = Tracing(cfg, state.span_exporter)
    old, state.tracing, state.tracing_config = state.tracing, new, cfg
    if old is not None:  # not in state.tasks: the drain waits on those
        state.retiring[old] = asyncio.get_running_loop().create_task(
            retire_when_idle(state, old), name="specgate-tracing-retire")
    log.info("tracing reloaded: enabled=%s endpoint=%s sampler_ratio=%s", cfg.enabled, cfg.endpoint,
             cfg.sampler_ratio)
    return True


def _provider_settings(cfg: TracingConfig) -> TracingConfig:
    return cfg.model_copy(update={"forward_baggage": False})


async def retire_when_idle(state: AppState, tracing: Any, poll_s: float = 0.5) -> None:
    """Shut ``tracing`` down (in a worker thread) once none of its spans is open."""
    while tracing.open_spans > 0:
        await asyncio.sleep(poll_s)
    await asyncio.get_running_loop().run_in_executor(None, tracing.shutdown)
    state.retiring.pop(tracing, None)


async def shutdown_all(state: AppState) -> None:
    """At app shutdown: flush and stop the current tracer and every one still retiring."""
    loop = asyncio.get_running_loop()
    retiring = dict(state.retiring)
    state.retiring.clear()
    for task in retiring.values():
        task.cancel()
    await asyncio.gather(*retiring.values(), return_exceptions=True)
    for tracing in [*retiring, *([state.tracing] if state.tracing is not None else [])]:
        await loop.run_in_executor(None, tracing.shutdown)
