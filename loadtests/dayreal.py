"""A short day-shaped workload on real SGLang CPU pools, for correctness (not speed).

    /work/main/.venv/bin/python benchmarks/day.py --real [--config examples/demo.yaml] [--out runs/day-real]

Starts the demo stack (:func:`serving.demo.start_stack`: the router, one real EAGLE-3
speculative pool and one real plain pool of the tiny local model) and sends one compressed day
through the official ``openai`` client (:func:`plan`, seeded):

- ``morning``: Poisson arrivals for 20 s, greedy (temperature 0) and sampled (0.8) requests
  on short prompts, streamed or not;
- ``long``: three prompts over ``routing.long_prompt_tokens``;
- ``idle``: 14 s without a request (longer than ``routing.acceptance.max_age_s``, 10 s: the
  acceptance estimates expire);
- ``burst``: 12 concurrent streams (past ``routing.saturation.enter``);
- ``evening``: Poisson arrivals again for 15 s;
- ``lossless``: each of four greedy prompts once pinned to each pool (``x-specgate-speculation:
  on`` / ``off``).

Every response is checked (:func:`check`): HTTP 200 with the ``x-specgate-pool`` /
``x-specgate-reason`` headers, a ``finish_reason`` (``stop``, or ``length`` with exactly
``max_tokens`` tokens) and full usage (``prompt_tokens``, ``completion_tokens``,
``total_tokens`` = their sum; streamed: the ``include_usage`` chunk). Greedy outputs of the same
prompt and budget must be identical whichever pool served them (speculative decoding is
lossless; the pools run float32). Decisions are counted by reason and phase. Timings on this
CPU say nothing about speed (``docs/performance.md`` takes speed from the simulator only).

Written under ``--out``: ``real-day.json`` (every request and the summary); the server logs go
to ``<out>/logs``. Every process started is stopped on the way out.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["RealRequest", "check", "lossless", "main", "plan", "run_real_day"]

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n\ndef main():",
    "class Stack:\n    def __init__(self):",
    "for i in range(10):",
    "def parse_args(argv):",
    "with open(path) as f:",
    "class Node:\n    def __init__(self, value):",
    "def quicksort(items):",
]


@dataclass
class RealRequest:
    """One planned request and what came back (seconds from the day's start; tokens).

    ``temperature`` None leaves it out (the OpenAI default, sampled); ``hint`` is the
    ``x-specgate-speculation`` header (None: not sent).
    """

    name: str
    phase: str
    at_s: float
    prompt: str
    temperature: float | None
    stream: bool
    max_tokens: int
    hint: str | None = None
    status: int = 0
    pool: str | None = None
    reason: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    text: str = ""
    error: str | None = None
    latency_s: float | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _long_prompt(long_prompt_tokens: int) -> str:
    return "\n".join(f"def function_{i}(x):\n    return x * {i}\n" for i in range(long_prompt_tokens // 6))


def plan(seed: int, long_prompt_tokens: int) -> list[RealRequest]:
    """The day's requests in arrival order (module docstring); the same seed, the same day."""
    rng = random.Random(seed)
    out: list[RealRequest] = []

    def poisson(phase: str, start: float, end: float, rate: float) -> None:
        t = start + rng.expovariate(rate)
        while t < end:
            greedy = rng.random() < 0.5
            out.append(RealRequest(f"{phase}-{len(out)}", phase, round(t, 3), rng.choice(PROMPTS),
                                   0.0 if greedy else 0.8, rng.random() < 0.5, 32))
            t += rng.expovariate(rate)

    poisson("morning", 0.0, 20.0, 0.8)
    long_text = _long_prompt(long_prompt_tokens)
    for i, (temp, stream) in enumerate([(0.0, False), (0.0, True), (0.8, False)]):
        out.append(RealRequest(f"long-{i}", "long", 20.0 + 1.5 * i, long_text, temp, stream, 24))
    # idle 24 s .. 38 s
    for i in range(12):
        out.append(RealRequest(f"burst-{i}", "burst", 38.0, PROMPTS[i % len(PROMPTS)], 0.0 if i % 2 == 0 else 0.8,
                               True, 32))
    poisson("evening", 40.0, 55.0, 0.6)
    return out


def lossless_plan() -> list[RealRequest]:
    """Each of four greedy prompts pinned to each pool (sent after the day, one at a time)."""
    return [RealRequest(f"pinned-{hint}-{i}", "lossless", 0.0, p, 0.0, i % 2 == 1, 32, hint=hint)
            for i, p in enumerate(PROMPTS[:4]) for hint in ("on", "off")]


async def _send(client: Any, model: str, r: RealRequest) -> RealRequest:
    import openai

    kw: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": r.prompt}],
                          "max_tokens": r.max_tokens}
    if r.temperature is not None:
        kw["temperature"] = r.temperature
    if r.hint is not None:
        kw["extra_headers"] = {"x-specgate-speculation": r.hint}
    t0 = time.perf_counter()
    try:
        if r.stream:
            raw = await client.chat.completions.with_raw_response.create(
                stream=True, stream_options={"include_usage": True}, **kw)
            r.status = raw.http_response.status_code
            r.pool, r.reason = raw.headers.get("x-specgate-pool"), raw.headers.get("x-specgate-reason")
            parts = []
            async for chunk in raw.parse():
                for c in chunk.choices:
                    if c.delta.content:
                        parts.append(c.delta.content)
                    if c.finish_reason:
                        r.finish_reason = c.finish_reason
                if chunk.usage is not None:
                    u = chunk.usage
                    r.prompt_tokens, r.completion_tokens, r.total_tokens = (
                        u.prompt_tokens, u.completion_tokens, u.total_tokens)
            r.text = "".join(parts)
        else:
            raw = await client.chat.completions.with_raw_response.create(**kw)
            r.status = raw.http_response.status_code
            r.pool, r.reason = raw.headers.get("x-specgate-pool"), raw.headers.get("x-specgate-reason")
            resp = raw.parse()
            r.finish_reason = resp.choices[0].finish_reason
            r.text = resp.choices[0].message.content or ""
            if resp.usage is not None:
                u = resp.usage
                r.prompt_tokens, r.completion_tokens, r.total_tokens = (
                    u.prompt_tokens, u.completion_tokens, u.total_tokens)
    except openai.APIStatusError as exc:
        r.status = exc.status_code
        r.pool, r.reason = exc.response.headers.get("x-specgate-pool"), exc.response.headers.get("x-specgate-reason")
        r.error = str(exc.body)[:300]
    except (TimeoutError, openai.APIError, OSError) as exc:
        r.error = f"{type(exc).__name__}: {exc}"[:300]
    r.latency_s = round(time.perf_counter() - t0, 3)
    return r


def check(r: RealRequest, pools: set[str]) -> list[str]:
    """What is wrong with one response (empty: nothing)."""
    bad = []
    if r.status != 200:
        bad.append(f"status {r.status} {r.error or ''}".strip())
        return bad
    if r.pool not in pools or not r.reason:
        bad.append(f"headers pool={r.pool!r} reason={r.reason!r}")
    if r.finish_reason not in ("stop", "length"):
        bad.append(f"finish_reason {r.finish_reason!r}")
    if not r.prompt_tokens or r.completion_tokens is None or r.total_tokens is None:
        bad.append(f"usage {r.prompt_tokens}/{r.completion_tokens}/{r.total_tokens}")
    elif r.total_tokens != r.prompt_tokens + r.completion_tokens:
        bad.append(f"total_tokens {r.total_tokens} != {r.prompt_tokens} + {r.completion_tokens}")
    elif r.completion_tokens > r.max_tokens or (r.finish_reason == "length" and r.completion_tokens != r.max_tokens):
        bad.append(f"{r.completion_tokens} tokens for max_tokens {r.max_tokens}, finish {r.finish_reason}")
    return bad


def lossless(results: list[RealRequest]) -> dict[str, Any]:
    """Greedy outputs by (prompt, budget): compared across the pools that served them.

    Returns ``{"keys_on_both_pools", "identical", "mismatches": [{"prompt", "by_pool"}]}``.
    """
    by_key: dict[tuple[str, int], dict[str, set[str]]] = {}
    for r in results:
        if r.greedy and r.status == 200 and r.pool:
            by_key.setdefault((r.prompt, r.max_tokens), {}).setdefault(r.pool, set()).add(r.text)
    both = {k: v for k, v in by_key.items() if len(v) > 1}
    mismatches = [{"prompt": k[0][:40], "max_tokens": k[1], "by_pool": {p: sorted(t) for p, t in v.items()}}
                  for k, v in both.items() if len(set().union(*v.values())) > 1]
    return {"keys_on_both_pools": len(both), "identical": len(both) - len(mismatches), "mismatches": mismatches}


async def _day(router_url: str, model: str, requests: list[RealRequest]) -> list[RealRequest]:
    import openai

    client = openai.AsyncOpenAI(base_url=router_url + "/v1", api_key="day", max_retries=0, timeout=300)
    t0 = time.monotonic()

    async def at(r: RealRequest) -> RealRequest:
        await asyncio.sleep(max(0.0, t0 + r.at_s - time.monotonic()))
        return await _send(client, model, r)

    done = list(await asyncio.gather(*(at(r) for r in requests)))
    for r in lossless_plan():
        done.append(await _send(client, model, r))
    await client.close()
    return done


def summarize_real(results: list[RealRequest], pools: set[str]) -> dict[str, Any]:
    """Counts, failed checks, decisions by reason and by phase, the lossless comparison."""
    failures = {r.name: bad for r in results if (bad := check(r, pools))}
    by_phase: dict[str, Counter[str]] = {}
    for r in results:
        by_phase.setdefault(r.phase, Counter())[f"{r.pool}/{r.reason}"] += 1
    return {
        "requests": len(results), "ok": sum(r.status == 200 for r in results),
        "greedy": sum(r.greedy for r in results), "sampled": sum(not r.greedy for r in results),
        "streamed": sum(r.stream for r in results),
        "failed_checks": failures,
        "by_reason": dict(Counter(str(r.reason) for r in results).most_common()),
        "by_phase": {k: dict(v.most_common()) for k, v in by_phase.items()},
        "lossless": lossless(results),
    }


def run_real_day(config: Path, out: Path, *, seed: int = 0) -> int:
    """Run the day on the real stack (module docstring); 0 when every check held, else 1."""
    from router import load_config
    from serving.demo import start_stack

    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(config)
    requests = plan(seed, cfg.routing.long_prompt_tokens)
    t_start = time.monotonic()
    print(f"starting the stack of {config} (real SGLang CPU pools; logs in {out / 'logs'})", flush=True)
    stack = start_stack(config, out / "logs")
    try:
        started = time.monotonic() - t_start
        print(f"stack ready after {started:.0f} s; sending {len(requests)} requests over "
              f"{max(r.at_s for r in requests):.0f} s, then {len(lossless_plan())} pinned ones", flush=True)
        t_day = time.monotonic()
        results = asyncio.run(_day(stack.router_url, cfg.model.name, requests))
        day_s = time.monotonic() - t_day
    finally:
        stack.stop()
    pools = {p.name for p in cfg.pools}
    summary = {**summarize_real(results, pools), "seed": seed, "stack_start_s": round(started, 1),
               "day_wall_s": round(day_s, 1), "config": str(config)}
    (out / "real-day.json").write_text(json.dumps({"summary": summary, "requests": [asdict(r) for r in results]},
                                                  indent=1) + "\n")
    print(f"{'phase':<10} decisions (pool/reason)")
    for phase, counts in summary["by_phase"].items():
        print(f"{phase:<10} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    ll = summary["lossless"]
    print(f"requests {summary['requests']} (greedy {summary['greedy']}, sampled {summary['sampled']}, streamed "
          f"{summary['streamed']}): {summary['ok']} HTTP 200, {len(summary['failed_checks'])} failed checks; "
          f"greedy prompts served by both pools {ll['keys_on_both_pools']}, identical {ll['identical']}")
    for name, bad in summary["failed_checks"].items():
        print(f"  {name}: {'; '.join(bad)}")
    for m in ll["mismatches"]:
        print(f"  greedy mismatch on {m['prompt']!r}: {m['by_pool']}")
    print(f"wrote {out / 'real-day.json'}; stack start {started:.0f} s, day {day_s:.0f} s")
    ok = not summary["failed_checks"] and not ll["mismatches"] and ll["keys_on_both_pools"] > 0
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """``benchmarks/day.py --real`` (argument parsing lives there)."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/demo.yaml")
    ap.add_argument("--out", default="runs/day-real")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    return run_real_day(Path(args.config), Path(args.out), seed=args.seed)
