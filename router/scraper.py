"""Live load: one background task scrapes every endpoint's SGLang ``/metrics``.

:func:`router.engine_metrics.parse_sglang_metrics` turns the text into an :class:`EngineLoad`
(pure; SGLang's gauges and how data-parallel ranks are combined are described there).

:class:`Scraper` runs the loop: every ``scrape.interval_s`` it fetches all endpoints
concurrently, each with ``scrape.timeout_s``; a success feeds the endpoint's load and health,
a failure feeds health only (the load becomes unknown once ``stale_after_s`` passes, and the
router's in-flight count stands in). A refused connection is a *dead* failure; a timeout is a
*slow* one, which never ejects the last healthy endpoint of a pool (sgl-project/sglang#22511: SGLang's
``/health`` stalls during long chunked prefills).

Before a scrape can admit an endpoint (it is not healthy yet), and every
``scrape.models_interval_s`` while it is, the round also reads the engine's ``/v1/models``
(:mod:`router.identity`): the model it serves and its LoRA adapters. A failed read changes
nothing (the last known identity stays).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp

from router.engine_metrics import EngineLoad, parse_sglang_metrics
from router.identity import expected_name, parse_model_list
from router.tasks import LoopTask

if TYPE_CHECKING:
    from router.config import Config
    from router.endpoint import Endpoint
    from router.fleet import Fleet
    from router.pools import Runtime

__all__ = ["EngineLoad", "Scraper", "parse_sglang_metrics"]  # the first and last from router.engine_metrics


class Scraper(LoopTask):
    """The background scrape loop (one asyncio task).

    Args:
        session: the shared aiohttp session (all outbound HTTP goes through it).
        get_fleet: returns the current :class:`router.fleet.Fleet` (re-read every round, so
            reloads apply); every model's endpoints are scraped in one concurrent round, each
            checked against its own model's name (:mod:`router.identity`).
        on_round: called after each round with every model's runtime (metrics, bypass update).
        clock: monotonic clock (seconds).
        on_failure: called with the endpoint after each failed scrape (metrics).
    """

    _name = "specgate-scraper"

    def __init__(self, session: aiohttp.ClientSession, get_fleet: Callable[[], Fleet],
                 on_round: Callable[[list[Runtime]], None], clock: Callable[[], float] = time.monotonic,
                 on_failure: Callable[[Endpoint], None] = lambda endpoint: None) -> None:
        self._session = session
        self._on_failure = on_failure
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
        timeout = aiohttp.ClientTimeout(total=cfg.scrape.timeout_s)
        try:
            # identity: the shared session does not decompress (the proxy relays bytes), and
            # prometheus_client gzips /metrics for clients that accept it.
            async with self._session.get(endpoint.url + "/metrics", timeout=timeout,
                                         headers={"accept-encoding": "identity"}) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status)
                text = (await resp.read()).decode("utf-8", "replace")
        except (TimeoutError, aiohttp.ServerTimeoutError):
            endpoint.record_failure(slow=True, now=self._clock(),
                                    reason=f"no answer within {cfg.scrape.timeout_s} s")
            self._on_failure(endpoint)
            return
        except (aiohttp.ClientError, OSError) as exc:
            endpoint.record_failure(slow=False, now=self._clock(), reason=str(exc) or type(exc).__name__)
            self._on_failure(endpoint)
            return
        if endpoint.state != "healthy" or endpoint.models_at is None or (
                self._clock() - endpoint.models_at >= cfg.scrape.models_interval_s):
            await self._read_models(endpoint, cfg, timeout)
        endpoint.record_success(parse_sglang_metrics(text), now=self._clock())

    async def _read_models(self, endpoint: Endpoint, cfg: Config, timeout: aiohttp.ClientTimeout) -> None:
        """Read the engine's ``/v1/models`` into the endpoint (:meth:`Endpoint.record_models`);
        any failure leaves it as it was."""
        try:
            async with self._session.get(endpoint.url + "/v1/models", timeout=timeout,
                                         headers={"accept-encoding": "identity"}) as resp:
                body = await resp.read() if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, OSError):
            return
        models = parse_model_list(body) if body is not None else None
        if models is None:
            return
        try:
            expected = expected_name(cfg, cfg.pool(endpoint.pool))
        except KeyError:  # the pool left the config in a reload
            return
        endpoint.record_models(models, expected, self._clock())

