"""Safe-context probe: find, by bisection with real requests, the longest prompt an engine serves.

Why: an endpoint measured in production advertised 1M tokens, served 244,689, and crashed the engine
process (HTTP 500, ``cudaErrorIllegalAddress``) on ~300,000. The advertised context is not the
validated one; this tool measures the validated one on a **staging** engine (it may crash it).

Each probe sends ``POST /v1/completions`` with a prompt of exactly ``P`` token ids (so no
tokenizer is needed and the length is exact) and ``max_tokens`` (default 1), then checks
``/health``. Outcomes:

- ``ok``: HTTP 200 and the engine still healthy;
- ``rejected``: HTTP 4xx (a clean refusal, e.g. over ``--context-length``): not servable,
  but the engine is fine;
- ``crashed``: HTTP 5xx, a reset or timeout, or a dead ``/health`` afterwards. The probe then
  waits up to ``recovery_timeout_s`` for ``/health`` (an orchestrator may restart the engine);
  if it does not come back, the search stops.

Bisection assumes servability is monotone in P: it keeps ``lo`` (largest P seen ``ok``) and
``hi`` (smallest P seen failing), and stops when ``hi - lo <= resolution``. The suggested cap
is ``floor(lo * (1 - margin))`` tokens, to put in ``limits.max_context_tokens`` (prompt +
output budget), leaving margin for what the probe did not exercise (longer outputs,
concurrency, KV fragmentation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field

import aiohttp

__all__ = ["Probe", "ProbeReport", "add_commands", "probe_context"]


@dataclass(frozen=True)
class Probe:
    """One probe: prompt tokens, outcome, HTTP status (0 when none), seconds taken."""

    prompt_tokens: int
    outcome: str
    status: int
    seconds: float
    detail: str = ""


@dataclass
class ProbeReport:
    """The result: every probe in order, the largest ``ok`` length and the suggested cap (tokens)."""

    endpoint: str
    low: int
    high: int
    probes: list[Probe] = field(default_factory=list)
    largest_ok: int | None = None
    smallest_failing: int | None = None
    suggested_cap: int | None = None
    stopped_early: bool = False


async def _healthy(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    try:
        async with session.get(url + "/health", timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            return r.status == 200
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


async def _wait_healthy(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if await _healthy(session, url, 5.0):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.5)


async def _probe_once(session: aiohttp.ClientSession, url: str, model: str | None, n: int, *,
                      max_tokens: int, token_id: int, timeout_s: float) -> Probe:
    body = {"prompt": [token_id] * n, "max_tokens": max_tokens, "temperature": 0}
    if model:
        body["model"] = model
    t0 = time.monotonic()
    status, detail = 0, ""
    try:
        async with session.post(url + "/v1/completions", json=body,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            status = r.status
            text = await r.text()
            detail = text[:200]
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        detail = type(exc).__name__
    seconds = time.monotonic() - t0
    alive = await _healthy(session, url, 10.0)
    if status == 200 and alive:
        outcome = "ok"
    elif 400 <= status < 500 and alive:
        outcome = "rejected"
    else:
        outcome = "crashed"
    return Probe(n, outcome, status, round(seconds, 3), detail)


async def probe_context(url: str, low: int, high: int, *, model: str | None = None, max_tokens: int = 1,
                        resolution: int = 1, margin: float = 0.05, token_id: int = 100,
                        request_timeout_s: float = 600.0, recovery_timeout_s: float = 60.0,
                        on_probe: callable | None = None) -> ProbeReport:  # type: ignore[valid-type]
    """Bisect ``[low, high]`` (prompt tokens) for the largest prompt served ``ok``.

    Args:
        url: the engine's base URL (staging only).
        low, high: search bounds (tokens); ``low`` is probed first and should be servable.
        resolution: stop when the bracket is this narrow (tokens).
        margin: fraction taken off the largest ``ok`` length for the suggested cap.
        on_probe: called with each :class:`Probe` as it completes.

    Raises:
        ValueError: on bounds that are not ``1 <= low <= high`` or a margin outside [0, 1).
    """
    if not (1 <= low <= high) or not (0 <= margin < 1) or resolution < 1:
        raise ValueError("need 1 <= low <= high, 0 <= margin < 1, resolution >= 1")
    url = url.rstrip("/")
    report = ProbeReport(url, low, high)
    lo, hi = None, None
    async with aiohttp.ClientSession() as session:
        async def run(n: int) -> Probe | None:
            p = await _probe_once(session, url, model, n, max_tokens=max_tokens, token_id=token_id,
                                  timeout_s=request_timeout_s)
            report.probes.append(p)
            if on_probe is not None:
                on_probe(p)
            if p.outcome == "crashed" and not await _wait_healthy(session, url, recovery_timeout_s):
                report.stopped_early = True
                return None
            return p

        first = await run(low)
        if first is None or first.outcome != "ok":
            report.smallest_failing = low
            return report
        lo = low
        last = await run(high)
        if last is None:
            hi = high
        elif last.outcome == "ok":
            lo = high
        else:
            hi = high
        while hi is not None and hi - lo > resolution and not report.stopped_early:
            mid = (lo + hi) // 2
            p = await run(mid)
            if p is None:
                hi = mid
                break
            if p.outcome == "ok":
                lo = mid
            else:
                hi = mid
    report.largest_ok = lo
    report.smallest_failing = hi
    report.suggested_cap = math.floor(lo * (1 - margin)) if lo is not None else None
    return report


def _cmd(args: argparse.Namespace) -> int:
    if not args.i_know_this_is_staging:
        print("specgate probe-context: this sends requests that may crash the engine; run it only "
              "against a staging endpoint and pass --i-know-this-is-staging", file=sys.stderr)
        return 2

    def show(p: Probe) -> None:
        print(f"probe {p.prompt_tokens:>9} tokens: {p.outcome:<8} HTTP {p.status or '-'} in {p.seconds:.2f} s",
              flush=True)

    try:
        report = asyncio.run(probe_context(args.endpoint, args.low, args.high, model=args.model,
                                           resolution=args.resolution, margin=args.margin,
                                           max_tokens=args.max_tokens,
                                           recovery_timeout_s=args.recovery_timeout, on_probe=show))
    except ValueError as exc:
        print(f"specgate probe-context: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    if report.largest_ok is None:
        print(f"no servable length found: {args.low} tokens already fails", file=sys.stderr)
        return 1
    print(f"largest prompt served: {report.largest_ok} tokens; smallest failing: "
          f"{report.smallest_failing if report.smallest_failing is not None else 'none up to --high'}")
    print(f"suggested config: limits.max_context_tokens: {report.suggested_cap}   "
          f"# {args.margin:.0%} below the largest served prompt")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``probe-context``."""
    p = sub.add_parser("probe-context", help="find the largest prompt a staging engine serves (bisection)")
    p.add_argument("--endpoint", required=True, help="engine base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--low", type=int, required=True, help="prompt tokens known to be served")
    p.add_argument("--high", type=int, required=True, help="largest prompt tokens to try")
    p.add_argument("--model", default=None, help="model name to send (default: the engine's first served model)")
    p.add_argument("--resolution", type=int, default=1, help="stop when the bracket is this narrow (tokens)")
    p.add_argument("--margin", type=float, default=0.05, help="fraction below the largest served length")
    p.add_argument("--max-tokens", type=int, default=1, help="max_tokens of each probe request (default 1)")
    p.add_argument("--recovery-timeout", type=float, default=60.0, help="seconds to wait for a crashed engine")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--i-know-this-is-staging", action="store_true", help="required: the probe may crash the engine, never point it at production")
    p.set_defaults(func=_cmd)
