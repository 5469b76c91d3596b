"""Sample the target pools' SGLang ``/metrics`` while a run is in progress.

Every ``interval_s`` seconds (and once at the start and once at the end of the run) all
metrics URLs are fetched concurrently (each with ``timeout_s``) and parsed with the router's
pure parser (:func:`router.loops.scraper.parse_sglang_metrics`: ``num_running_reqs`` and
``num_queue_reqs`` summed over data-parallel ranks, ``spec_accept_length`` averaged over the
ranks that report a positive value, 0 meaning "not yet known"). A page with no ``sglang``
series (a router's own ``/metrics``) or a failed fetch yields no sample.

:func:`summarize_samples` turns the samples into the report's per-pool figures: accept length
(tokens per verify step, positive samples only), queue depth and running requests (requests;
mean and max), and the engine load ``running + queued`` (the quantity the router's
saturation hysteresis compares with ``routing.saturation.enter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Self

import aiohttp

from router import parse_sglang_metrics

__all__ = ["MetricSample", "MetricsSampler", "summarize_samples"]


@dataclass(frozen=True)
class MetricSample:
    """One scrape of one pool endpoint: time (seconds since run start) and its gauges."""

    url: str
    t: float
    running: int
    queued: int
    accept_length: float | None


class MetricsSampler:
    """Background sampling of ``/metrics`` URLs for the duration of an ``async with`` block.

    Args:
        session: the shared aiohttp session.
        urls: full ``/metrics`` URLs to sample (may be empty: then it does nothing).
        interval_s: seconds between two sampling rounds.
        timeout_s: one fetch's limit (seconds).

    ``samples`` holds the :class:`MetricSample` s gathered so far; ``failures`` counts failed
    fetches.
    """

    def __init__(self, session: aiohttp.ClientSession, urls: tuple[str, ...], *,
                 interval_s: float = 0.5, timeout_s: float = 1.0) -> None:
        self.session = session
        self.urls = urls
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples: list[MetricSample] = []
        self.failures = 0
        self._t0 = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _fetch(self, url: str) -> None:
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as r:
                text = await r.text()
                if r.status != 200:
                    self.failures += 1
                    return
        except (aiohttp.ClientError, OSError, TimeoutError):
            self.failures += 1
            return
        if "sglang" not in text:
            return
        load = parse_sglang_metrics(text)
        self.samples.append(MetricSample(url, time.perf_counter() - self._t0, load.num_running_reqs,
                                         load.num_queue_reqs, load.spec_accept_length))

    async def sample_once(self) -> None:
        """One round over every URL."""
        if self.urls:
            await asyncio.gather(*(self._fetch(u) for u in self.urls))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.sample_once()

    async def __aenter__(self) -> Self:
        self._t0 = time.perf_counter()
        if self.urls:
            await self.sample_once()
            self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            await self.sample_once()


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize_samples(samples: list[MetricSample]) -> dict[str, Any]:
    """Per-URL and overall figures of a set of samples (see the module docstring).

    Returns:
        ``{"samples": n, "accept_length": {"mean","min","max","n"} | None,
        "queue_depth": {"mean","max"} | None, "running": {"mean","max"} | None,
        "engine_load": {"mean","max"} | None, "per_pool": {url: {...same keys...}}}``.
        Overall figures average the pools (accept length over positive samples of all pools).
    """
    def block(ss: list[MetricSample]) -> dict[str, Any]:
        acc = [s.accept_length for s in ss if s.accept_length is not None and s.accept_length > 0]
        q = [float(s.queued) for s in ss]
        run = [float(s.running) for s in ss]
        load = [float(s.running + s.queued) for s in ss]
        return {
            "samples": len(ss),
            "accept_length": None if not acc else
            {"mean": _mean(acc), "min": min(acc), "max": max(acc), "n": len(acc)},
            "queue_depth": None if not q else {"mean": _mean(q), "max": max(q)},
            "running": None if not run else {"mean": _mean(run), "max": max(run)},
            "engine_load": None if not load else {"mean": _mean(load), "max": max(load)},
        }

    out = block(samples)
    urls = sorted({s.url for s in samples})
    out["per_pool"] = {u: block([s for s in samples if s.url == u]) for u in urls}
    return out
