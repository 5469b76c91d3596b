"""Reading what an engine is: its ``/v1/models`` and ``/server_info``, for the scraper and for
a request that names an adapter the router does not know yet.

:func:`read_identity` reads both of one endpoint concurrently (each within the scrape timeout)
and stores them (:meth:`router.state.endpoint.Endpoint.record_models`,
:meth:`~router.state.endpoint.Endpoint.record_server_info`; the parsing is :mod:`router.state.identity`).
``/server_info`` is SGLang 0.5.23's name; an engine that answers 404 there is asked at the
deprecated ``/get_server_info`` (older engines), then no more (:attr:`Endpoint.startup` stays
None). A failed or malformed read changes nothing.

:class:`ModelRefresh` answers "is this adapter loaded somewhere now?" for the request path
(adapters are loaded at run time through SGLang's ``/load_lora_adapter``, and the scraper reads
``/v1/models`` only every ``scrape.models_interval_s`` while nothing changes). Before a request
naming an unknown adapter is answered 404 ``model_not_found``, the router reads the
``/v1/models`` of every generation endpoint of that model once more:

- **bounded**: the request waits at most :data:`MIN_REFRESH_S` plus ``scrape.timeout_s`` (the
  reads' own timeout);
- **rate-limited**: one refresh per model at a time (concurrent requests wait for the same
  one), and none within :data:`MIN_REFRESH_S` of the last one's start (a request then waits
  for that second to pass and reads again, so an adapter loaded just after a refresh is still
  found): a client sending unknown names costs each engine at most one ``/v1/models`` read per
  second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from router.state.identity import expected_name, parse_model_list, parse_server_info
from router.upstream.transport import TransportError

if TYPE_CHECKING:
    from router.config.tree import Config
    from router.state.endpoint import Endpoint
    from router.state.runtime import Runtime
    from router.upstream.transport import Transport

__all__ = ["MIN_REFRESH_S", "ModelRefresh", "expected_of", "read_identity"]

#: Seconds between the starts of two adapter refreshes of one model (:class:`ModelRefresh`).
MIN_REFRESH_S = 1.0

_IDENTITY = {"accept-encoding": "identity"}

log = logging.getLogger("specgate")


def expected_of(cfg: Config, endpoint: Endpoint) -> str | None:
    """The model ``endpoint`` must serve (:func:`router.state.identity.expected_name`); None when its
    pool left the config in a reload (not checked)."""
    try:
        return expected_name(cfg, cfg.pool(endpoint.pool))
    except KeyError:
        return None


async def _get(transport: Transport, url: str, timeout_s: float) -> tuple[int, bytes] | None:
    try:
        got = await transport.fetch("GET", url, headers=_IDENTITY, timeout_s=timeout_s)
    except (TimeoutError, TransportError):
        return None
    return got.status, (got.body if got.status == 200 else b"")


async def _server_info(transport: Transport, base: str, timeout_s: float) -> bytes | None:
    got = await _get(transport, base + "/server_info", timeout_s)
    if got is not None and got[0] == 404:
        got = await _get(transport, base + "/get_server_info", timeout_s)
    return got[1] if got is not None and got[0] == 200 else None


async def read_identity(transport: Transport, endpoint: Endpoint, expected: str | None,
                        timeout_s: float, clock: Callable[[], float] = time.monotonic,
                        server_info: bool = True) -> tuple[bool, bool]:
    """Read ``endpoint``'s ``/v1/models`` (and ``/server_info`` with ``server_info``, at the same
    time; each within ``timeout_s`` seconds, through ``transport``) and store them, judged against
    ``expected``. Returns ``(models read, restarted)``: whether the model list was read, and
    whether ``/server_info`` showed a new ``startup_time``. Never raises for an engine's failure."""
    models_read = _get(transport, endpoint.url + "/v1/models", timeout_s)
    if server_info:
        got, info_body = await asyncio.gather(models_read, _server_info(transport, endpoint.url, timeout_s))
    else:
        got, info_body = await models_read, None
    models = parse_model_list(got[1]) if got is not None and got[0] == 200 else None
    if models is not None:
        endpoint.record_models(models, expected, clock())
    info = parse_server_info(info_body) if info_body is not None else None
    restarted = endpoint.record_server_info(info, expected) if info is not None else False
    return models is not None, restarted


class ModelRefresh:
    """Re-read the generation endpoints' ``/v1/models`` for a request naming an unknown adapter
    (module docstring: bounded, one at a time per model, at most one start per
    :data:`MIN_REFRESH_S`).

    Args:
        transport: the app's :class:`router.upstream.transport.Transport`.
        clock: monotonic clock (s).
    """

    def __init__(self, transport: Transport, clock: Callable[[], float] = time.monotonic) -> None:
        self._transport = transport
        self._clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}
        self._started: dict[str, float] = {}

    async def refresh(self, runtime: Runtime) -> bool:
        """Re-read the lists of ``runtime``'s generation endpoints (or wait for the refresh in
        flight); when the last refresh of this model started less than :data:`MIN_REFRESH_S`
        ago, first wait for that second to pass. Returns True once the read has ended. Never
        raises for an engine's failure."""
        name = runtime.model_name
        task = self._running.get(name)
        while task is None:
            now = self._clock()
            last = self._started.get(name)
            if last is not None and now - last < MIN_REFRESH_S:
                await asyncio.sleep(last + MIN_REFRESH_S - now)
                task = self._running.get(name)  # another request's wait may have started it
                continue
            self._started[name] = now
            task = self._running[name] = asyncio.get_running_loop().create_task(self._read(runtime))
            task.add_done_callback(lambda _t: self._running.pop(name, None))
        await asyncio.shield(task)
        return True

    async def _read(self, runtime: Runtime) -> None:
        cfg = runtime.config
        eps = [e for p in runtime.pools if "generate" in p.config.serves for e in p.endpoints.values()
               if e.state != "unhealthy"]
        try:
            await asyncio.gather(*(read_identity(self._transport, e, expected_of(cfg, e), cfg.scrape.timeout_s, self._clock,
                                                 server_info=False) for e in eps))
        except Exception:  # a bug here must not fail the request: it gets its 404
            log.exception("refreshing the model lists of %s failed", runtime.model_name)
