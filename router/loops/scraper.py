"""Live load: one background task scrapes every endpoint's SGLang ``/metrics``.

:func:`router.state.engine_metrics.parse_sglang_metrics` turns the text into an :class:`EngineLoad`
(pure; SGLang's gauges and how data-parallel ranks are combined are described there).

:class:`Scraper` runs the loop: every ``scrape.interval_s`` it fetches all endpoints
concurrently, each with ``scrape.timeout_s``; a success feeds the endpoint's load and health,
a failure feeds health only (the load becomes unknown once ``stale_after_s`` passes, and the
router's in-flight count stands in). A refused connection is a *dead* failure; a timeout is a
*slow* one, which never ejects the last healthy endpoint of a pool (sgl-project/sglang#22511: SGLang's
``/health`` stalls during long chunked prefills).

Before a scrape can admit an endpoint (it is not healthy yet), every
``scrape.models_interval_s`` while it is, and in the same round as soon as the engine may be
another one (:func:`router.state.identity.recheck_reason`: its ``/metrics`` name another model, another
context length or KV pool, a counter went back; or the last scrape failed, or the proxy saw its
connection break: :attr:`Endpoint.recheck`), the round also reads the engine's ``/v1/models``
and ``/server_info`` (:mod:`router.loops.engine_reads`): the model it serves, its LoRA adapters, its
context length and KV pool. A failed read changes nothing (the last known identity stays), but
the ``model_name`` label of every scrape is judged too. After the round the pools' limits
follow the engines (:meth:`router.state.runtime.Runtime.follow_engine_limits`, from ``on_round``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from router.loops.engine_reads import expected_of, read_identity
from router.loops.tasks import LoopTask
from router.state.engine_metrics import EngineLoad, parse_sglang_metrics
from router.state.identity import recheck_reason
from router.upstream.transport import TransportError

if TYPE_CHECKING:
    from router.config.tree import Config
    from router.state.endpoint import Endpoint
    from router.state.fleet import Fleet
    from router.state.runtime import Runtime
    from router.upstream.transport import Transport

__all__ = ["EngineLoad", "Scraper", "parse_sglang_metrics"]  # the first and last from router.state.engine_metrics


class Scraper(LoopTask):
    """The background scrape loop (one asyncio task).

    Args:
        transport: the app's :class:`router.upstream.transport.Transport` (every engine call goes
            through it: :meth:`~router.upstream.transport.Transport.fetch`).
        get_fleet: returns the current :class:`router.state.fleet.Fleet` (re-read every round, so
            reloads apply); every model's endpoints are scraped in one concurrent round, each
            checked against its own model's name (:mod:`router.state.identity`).
        on_round: called after each round with every model's runtime (metrics, bypass update).
        clock: monotonic clock (seconds).
        on_failure: called with the endpoint after each failed scrape (metrics).
        on_recheck: called with the endpoint and the trigger (``served_model``,
            ``context_length``, ``kv_tokens``, ``restart``, ``reconnect``) when a change made
            the round read its identity again (metrics).
    """

    _name = "specgate-scraper"

    def __init__(self, transport: Transport, get_fleet: Callable[[], Fleet],
                 on_round: Callable[[list[Runtime]], None], clock: Callable[[], float] = time.monotonic,
                 on_failure: Callable[[Endpoint], None] = lambda endpoint: None,
                 on_recheck: Callable[[Endpoint, str], None] = lambda endpoint, why: None) -> None:
        self._transport = transport
        self._on_failure = on_failure
        self._on_recheck = on_recheck
        self._get_fleet = get_fleet
        self._on_round = on_round
        self._clock = clock

    async def run_once(self) -> None:
        """Scrape every endpoint of every model's runtime once, concurrently."""
        runtimes = list(self._get_fleet())
        await asyncio.gather(*(self._scrape(ep, rt.config) for rt in runtimes for ep in rt.all_endpoints()))
        self._on_round(runtimes)

    async def _loop(self) -> None:
        while True:
            started = self._clock()
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one round must not stop scraping
                import logging

                logging.getLogger("specgate.scraper").exception("scrape round failed")
            interval = self._get_fleet().config.scrape.interval_s
            await asyncio.sleep(max(0.0, interval - (self._clock() - started)))

    async def _scrape(self, endpoint: Endpoint, cfg: Config) -> None:
        timeout_s = cfg.scrape.timeout_s
        try:
            # identity: the transport does not decompress (the proxy relays bytes), and
            # prometheus_client gzips /metrics for clients that accept it.
            got = await self._transport.fetch("GET", endpoint.url + "/metrics", timeout_s=timeout_s,
                                              headers={"accept-encoding": "identity"})
        except TimeoutError:
            endpoint.record_failure(slow=True, now=self._clock(), reason=f"no answer within {timeout_s} s")
            self._on_failure(endpoint)
            return
        except TransportError as exc:
            endpoint.record_failure(slow=False, now=self._clock(), reason=str(exc) or type(exc).__name__)
            self._on_failure(endpoint)
            return
        if got.status != 200:
            endpoint.record_failure(slow=False, now=self._clock(), reason=f"/metrics answered HTTP {got.status}")
            self._on_failure(endpoint)
            return
        text = got.body.decode("utf-8", "replace")
        engine = parse_sglang_metrics(text)
        expected = expected_of(cfg, endpoint)
        why = endpoint.recheck or recheck_reason(endpoint.engine, engine)
        if why is not None and endpoint.engine is not None:
            self._on_recheck(endpoint, why)
        if why is not None or endpoint.state != "healthy" or endpoint.identity_error is not None or (
                endpoint.models_at is None or self._clock() - endpoint.models_at >= cfg.scrape.models_interval_s):
            # an endpoint held out for what it is is read every round: it is back within one
            read, restarted = await read_identity(self._transport, endpoint, expected, timeout_s, self._clock)
            if restarted:
                self._on_recheck(endpoint, "restart")
            endpoint.recheck = None if read else why  # an unread change is read again next round
        endpoint.record_success(engine, now=self._clock())
        endpoint.record_labels(engine, expected)
