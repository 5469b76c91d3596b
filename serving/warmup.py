"""Warm-up and readiness of one SGLang endpoint.

An endpoint is ready only after ``/health`` answers 200 **and** it has served ``count``
warm-up generations (default 3). On GPUs the first real generation captures CUDA graphs and
is ~10x slower (one long-context GPU measurement: first run 15.3 s, later 1.3 s), so traffic and timings must not
start before it. Each warm-up is a ``POST /generate`` of ``max_new_tokens`` greedy tokens.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

__all__ = ["WarmupError", "WarmupResult", "wait_ready"]


class WarmupError(RuntimeError):
    """The endpoint did not become healthy, or a warm-up generation failed, in time."""


@dataclass(frozen=True)
class WarmupResult:
    """Timings of one endpoint's warm-up.

    Attributes:
        url: the endpoint.
        health_s: seconds until ``/health`` first answered 200.
        generation_s: seconds of each warm-up generation, in order.
    """

    url: str
    health_s: float
    generation_s: tuple[float, ...]


async def wait_ready(url: str, *, count: int = 3, timeout_s: float = 600.0, max_new_tokens: int = 8,
                     poll_s: float = 0.5, alive: callable | None = None) -> WarmupResult:  # type: ignore[valid-type]
    """Wait for ``url`` to be healthy, then send ``count`` warm-up generations.

    Args:
        url: base URL of the SGLang server.
        count: warm-up generations (>= 0).
        timeout_s: overall deadline (s).
        max_new_tokens: tokens per warm-up generation.
        poll_s: ``/health`` polling period (s).
        alive: optional callable returning False once the server process has died.

    Raises:
        WarmupError: on deadline, on a dead process, or on a failed warm-up generation.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    url = url.rstrip("/")
    async with aiohttp.ClientSession() as session:
        while True:
            if alive is not None and not alive():
                raise WarmupError(f"{url}: the server process exited before becoming healthy")
            try:
                async with session.get(url + "/health", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 200:
                        break
            except (TimeoutError, aiohttp.ClientError, OSError):
                pass
            if time.monotonic() > deadline:
                raise WarmupError(f"{url}: /health not ready after {timeout_s:.0f} s")
            await asyncio.sleep(poll_s)
        health_s = time.monotonic() - start
        times = []
        for i in range(count):
            t0 = time.monotonic()
            body = {"text": f"warm-up {i}: def main():", "sampling_params": {
                "max_new_tokens": max_new_tokens, "temperature": 0}}
            try:
                async with session.post(url + "/generate", json=body,
                                        timeout=aiohttp.ClientTimeout(total=max(1.0, deadline - t0))) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise WarmupError(f"{url}: warm-up generation {i} got HTTP {resp.status}")
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise WarmupError(f"{url}: warm-up generation {i} failed: {exc!r}") from None
            times.append(time.monotonic() - t0)
    return WarmupResult(url, health_s, tuple(times))
