"""Live load: one background task scrapes every endpoint's SGLang ``/metrics``.

:func:`parse_sglang_metrics` is pure (text in, :class:`EngineLoad` out). It reads SGLang's
gauges (``python/sglang/srt/metrics/collector.py``, 0.5.23): ``num_running_reqs``,
``num_queue_reqs``, ``token_usage``, ``spec_accept_length``, ``spec_accept_rate``, under the
``sglang:`` prefix or the ``sglang_`` spelling some versions emit. Data-parallel ranks emit one
series each: running and queued requests are summed, token usage is the maximum, accept
length and rate are averaged over the series that report a positive value (the spec gauges
read 0 until 40 decode steps have run, ``decode_log_interval``; 0 means unknown).

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
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp

from router.identity import expected_name, parse_model_list
from router.tasks import LoopTask

if TYPE_CHECKING:
    from router.config import Config
    from router.endpoint import Endpoint
    from router.pools import Runtime

__all__ = ["EngineLoad", "Scraper", "parse_sglang_metrics"]

_WANTED = {
    "num_running_reqs": "sum",
    "num_queue_reqs": "sum",
    "token_usage": "max",
    "max_total_num_tokens": "min",
    "kv_used_tokens": "max",
    "spec_accept_length": "mean",
    "spec_accept_rate": "mean",
    "generation_tokens_total": "sum",
}


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One scrape of an SGLang server.

    Attributes:
        num_running_reqs: requests in the running batch (summed over DP ranks).
        num_queue_reqs: requests waiting (summed over DP ranks).
        token_usage: KV-cache usage fraction in [0, 1] (max over ranks).
        spec_accept_length: mean accepted tokens per verify step, None when unknown.
        spec_accept_rate: mean acceptance rate, None when unknown.
        max_total_num_tokens: the KV pool's capacity in tokens (the smallest over ranks),
            None when not exported.
        kv_used_tokens: KV tokens in use (the largest over ranks); None when not exported
            (then ``token_usage * max_total_num_tokens``, :attr:`kv_used`).
        generation_tokens_total: tokens generated since the engine started (the tokenizer
            counter, summed over its label sets and ranks), None when not exported. It tells a
            fresh ``spec_accept_length`` from the last value of an idle engine, which SGLang
            keeps while nothing decodes.
    """

    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    token_usage: float = 0.0
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    generation_tokens_total: float | None = None
    max_total_num_tokens: int | None = None
    kv_used_tokens: int | None = None

    @property
    def kv_used(self) -> int:
        """KV tokens in use: ``kv_used_tokens``, else ``token_usage`` of the capacity (0 unknown)."""
        if self.kv_used_tokens is not None:
            return self.kv_used_tokens
        cap = self.max_total_num_tokens
        return 0 if cap is None else round(self.token_usage * cap)

    @property
    def load(self) -> int:
        """Running plus queued requests."""
        return self.num_running_reqs + self.num_queue_reqs


def parse_sglang_metrics(text: str) -> EngineLoad:
    """Parse SGLang's Prometheus exposition text into an :class:`EngineLoad`.

    Unknown series, comments, histograms and malformed lines are ignored; missing gauges
    read 0 (running/queued/usage) or None (accept length/rate).
    """
    values: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.startswith("sglang"):
            continue
        name_end = len(line)
        for i, ch in enumerate(line):
            if ch in "{ ":
                name_end = i
                break
        name = line[:name_end]
        if len(name) < 8 or name[6] not in ":_":
            continue
        key = name[7:]
        if key not in _WANTED:
            continue
        rest = line[name_end:]
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                continue
            rest = rest[close + 1:]
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        values.setdefault(key, []).append(value)

    def agg(key: str) -> float | None:
        vals = values.get(key)
        if not vals:
            return None
        how = _WANTED[key]
        if how == "sum":
            return sum(vals)
        if how == "max":
            return max(vals)
        if how == "min":
            return min(vals)
        positive = [v for v in vals if v > 0]
        return sum(positive) / len(positive) if positive else None

    return EngineLoad(
        num_running_reqs=int(agg("num_running_reqs") or 0),
        num_queue_reqs=int(agg("num_queue_reqs") or 0),
        token_usage=float(agg("token_usage") or 0.0),
        spec_accept_length=agg("spec_accept_length"),
        spec_accept_rate=agg("spec_accept_rate"),
        generation_tokens_total=agg("generation_tokens_total"),
        max_total_num_tokens=_int(agg("max_total_num_tokens")),
        kv_used_tokens=_int(agg("kv_used_tokens")),
    )


class Scraper(LoopTask):
    """The background scrape loop (one asyncio task).

    Args:
        session: the shared aiohttp session (all outbound HTTP goes through it).
        get_runtime: returns the current runtime (re-read every round, so reloads apply).
        on_round: called after each round with the runtime (metrics, bypass update).
        clock: monotonic clock (seconds).
        on_failure: called with the endpoint after each failed scrape (metrics).
    """

    _name = "specgate-scraper"

    def __init__(self, session: aiohttp.ClientSession, get_runtime: Callable[[], Runtime],
                 on_round: Callable[[Runtime], None], clock: Callable[[], float] = time.monotonic,
                 on_failure: Callable[[Endpoint], None] = lambda endpoint: None) -> None:
        self._session = session
        self._on_failure = on_failure
        self._get_runtime = get_runtime
        self._on_round = on_round
        self._clock = clock

    async def run_once(self) -> None:
        """Scrape every endpoint of the current runtime once, concurrently."""
        runtime = self._get_runtime()
        cfg = runtime.config
        endpoints = runtime.all_endpoints()
        await asyncio.gather(*(self._scrape(ep, cfg) for ep in endpoints))
        self._on_round(runtime)

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
            interval = self._get_runtime().config.scrape.interval_s
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


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
