"""Sizing a 234,063-token prompt without stalling the router (docs/performance.md).

    .venv/bin/python benchmarks/huge_prompt.py [--tokens 234063] [--duration 8] [--out huge.json]

Three measurements, against ``benchmarks/fast_backend.py`` (canned answers) with the
router configured like a long-context deployment (``limits.max_context_tokens`` 262,144,
``routing.long_prompt_tokens`` 32,768, a speculative pool limited to 65,536 tokens and a
plain pool), and a chat prompt of exactly ``--tokens`` tokens as the router's tokenizer and
chat template count them (the tiny local model's tokenizer; words drawn with a fixed seed):

1. **Sizing on the loop thread** (:func:`sizing_cpu`): the loop thread's CPU time
   (``time.thread_time``) to parse, validate, size and decide the big request; the tokenizer
   thread's work is not on the loop.
2. **Time on the event loop, whole request.** The router runs in this process on asyncio's own loop in
   debug mode with ``slow_callback_duration = 0``, so the loop reports the duration of every
   callback it runs (``asyncio`` logger, "Executing ... took ... seconds"). With nothing else
   in flight, the sum of those durations from the big request's arrival to its answer is
   the loop time its sizing and proxying cost; the longest one is the worst single stall.
   Debug mode adds its own overhead to every callback, so both figures are upper bounds.
3. **Small requests while it is sized.** The router runs as in production (``specgate
   router``: uvloop, httptools, one process pinned to core 0). ``wrk`` sends small chat
   requests at concurrency 4 for ``--duration`` seconds, once alone and once while a client
   sends the big prompt back to back; the p50/p99 of the small requests are compared.

Prints both and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.router_overhead import (
    CHAT_BODY,
    ensure_wrk,
    free_port,
    parse_wrk,
    stop_processes,
    wait_http,
)

_WORDS = ["speculative", "decoding", "router", "token", "context", "engine", "prefill", "decode", "cache", "drafter", "verify", "accept", "reject", "batch", "queue", "latency", "throughput", "kernel", "tensor", "layer", "attention"]


def make_prompt(tokenizer: Path, tokens: int, seed: int = 0) -> str:
    """A user message whose chat-templated prompt has exactly ``tokens`` tokens.

    Random words (seeded) until the count passes ``tokens``, then trimmed word by word and
    padded with single characters; counted with :class:`router.request.features.PromptCounter`.
    """
    from router import PromptCounter, parse_chat

    counter = PromptCounter(tokenizer)
    rng = random.Random(seed)

    def count(text: str) -> int:
        return counter.count(parse_chat({"messages": [{"role": "user", "content": text}]}, max_n=1))

    words = [rng.choice(_WORDS) for _ in range(tokens)]
    text = " ".join(words)
    n = count(text)
    while n > tokens:  # cut by an estimate, then refine
        cut = max(1, int((n - tokens) * len(words) / n))
        words = words[:-cut]
        text = " ".join(words)
        n = count(text)
    while n < tokens:
        text += " a" * max(1, (tokens - n) // 2)
        n = count(text)
    while n > tokens:
        text = text[:-1]
        n = count(text)
    assert n == tokens, (n, tokens)
    return text


def write_config(path: Path, tokenizer: Path, backend: str) -> None:
    path.write_text(json.dumps({
        "model": {"name": "bench", "tokenizer": str(tokenizer)},
        "limits": {"max_context_tokens": 262144, "default_max_tokens": 256, "max_request_bytes": 64 * 2**20},
        "pools": [
            {"name": "spec", "speculative": True, "endpoints": [backend], "max_context_tokens": 65536,
             "drafter_cost_ratio": 0.05},
            # the same backend under another host name (a URL may belong to one pool only)
            {"name": "plain", "speculative": False, "endpoints": [backend.replace("127.0.0.1", "localhost")]}],
        "routing": {"long_prompt_tokens": 32768, "saturation": {"enter": 100000, "exit": 99999}},
        "scrape": {"interval_s": 30.0, "timeout_s": 1.0, "stale_after_s": 60.0},
        "upstream": {"first_byte_timeout_s": 60},
        "server": {"log_requests": False}}))


def post(port: int, body: bytes, timeout: float = 120) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()
        return r.status, dict(r.headers)


class _LoopLog(logging.Handler):
    """Collects asyncio debug-mode callback durations (s)."""

    def __init__(self) -> None:
        super().__init__()
        self.durations: list[float] = []
        self.top: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("Executing") and record.args:
            took = float(record.args[-1])
            self.durations.append(took)
            self.top.append((took, str(record.args[0])[:160]))


def loop_time(cfg: Path, big: bytes, repeats: int, verbose: bool = False) -> dict[str, float]:
    """Measurement 1: loop time of the big request, router in-process on a debug loop."""
    import uvicorn

    from router import create_app, tune_interpreter

    tune_interpreter()  # as `specgate router` does
    port = free_port()
    handler = _LoopLog()
    alog = logging.getLogger("asyncio")
    alog.setLevel(logging.CRITICAL)  # only the measured window is collected
    server = uvicorn.Server(uvicorn.Config(create_app(cfg), host="127.0.0.1", port=port, loop="asyncio",
                                           http="httptools", log_level="warning", access_log=False))
    loop = asyncio.new_event_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.0
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        post(port, big)  # warm-up: thread pool, template, connection
        totals, worst, wall = [], [], []
        for _ in range(repeats):
            handler.durations, handler.top = [], []
            alog.addHandler(handler)
            alog.setLevel(logging.WARNING)
            alog.propagate = False
            t0 = time.perf_counter()
            status, headers = post(port, big)
            wall.append(time.perf_counter() - t0)
            alog.removeHandler(handler)
            alog.setLevel(logging.CRITICAL)
            if verbose:
                for took, what in sorted(handler.top, reverse=True)[:6]:
                    print(f"  {took * 1e3:7.2f} ms  {what}")
            assert status == 200, (status, headers)  # 234,063 tokens: plain pool, reason long_context
            totals.append(sum(handler.durations))
            worst.append(max(handler.durations))
        return {"loop_ms": 1e3 * sorted(totals)[len(totals) // 2], "loop_ms_max": 1e3 * max(totals),
                "longest_callback_ms": 1e3 * max(worst), "request_wall_ms": 1e3 * sorted(wall)[len(wall) // 2]}
    finally:
        server.should_exit = True
        thread.join(15)


def sizing_cpu(cfg: Path, big: bytes, repeats: int) -> dict[str, float]:
    """Measurement 1b: the event-loop thread's CPU time (``time.thread_time``) to admit the big
    request: parse the JSON, validate, size the prompt (:func:`router.size_prompt`: render
    and bounds in the tokenizer thread, exact count there when a threshold falls inside the
    bounds) and decide. The tokenizer thread's own work is not on the loop and not counted."""

    import orjson

    from router import (
        build_runtime,
        load_config,
        parse_chat,
        request_features,
        size_prompt,
        tokenizer_executor,
    )

    config = load_config(cfg)
    runtime = build_runtime(config)
    executor = tokenizer_executor()
    limits = config.limits

    async def admit() -> tuple[float, int]:
        t0 = time.thread_time()
        doc = orjson.loads(big)
        parsed = parse_chat(doc, max_n=limits.max_n)
        tokens, _lower, _rendered = await size_prompt(runtime, parsed, len(big), executor)
        features = request_features(parsed, tokens, runtime.rules)
        runtime.decide(features, time.monotonic())
        return time.thread_time() - t0, tokens

    samples = []
    for _ in range(repeats + 1):
        cpu, tokens = asyncio.run(admit())
        samples.append(cpu)
    samples = sorted(samples[1:])
    executor.shutdown()
    return {"sizing_loop_cpu_ms": 1e3 * samples[len(samples) // 2], "sizing_loop_cpu_ms_max": 1e3 * samples[-1],
            "counted_tokens": tokens}


def small_p99(cfg: Path, big: bytes, backend_port: int, duration: int) -> dict[str, float]:
    """Measurement 2: small requests' latency alone and while the big prompt is sized."""
    wrk = ensure_wrk()
    ncpu = os.cpu_count() or 2
    port = free_port()
    router = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-m", "router.cli", "router", "--config",
                               str(cfg), "--port", str(port)], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lua = Path(tempfile.mkstemp(suffix=".lua")[1])
    lua.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(CHAT_BODY)}\n'
                   'wrk.headers["Content-Type"] = "application/json"\n')
    try:
        wait_http(f"http://127.0.0.1:{port}/ready")
        post(port, big)

        def run_wrk() -> dict[str, float]:
            out = subprocess.run(["taskset", "-c", str(ncpu - 1), wrk, "-t1", "-c4", f"-d{duration}s", "--latency",
                                  "-s", str(lua), f"http://127.0.0.1:{port}/v1/chat/completions"],
                                 capture_output=True, text=True, check=True).stdout
            return parse_wrk(out)

        alone = run_wrk()
        stop, sized = threading.Event(), []

        def pound() -> None:
            while not stop.is_set():
                t0 = time.perf_counter()
                post(port, big)
                sized.append(time.perf_counter() - t0)

        t = threading.Thread(target=pound, daemon=True)
        t.start()
        loaded = run_wrk()
        stop.set()
        t.join(120)
        return {"alone_p50_ms": alone["p50_ms"], "alone_p99_ms": alone["p99_ms"], "alone_rps": alone["rps"],
                "with_big_p50_ms": loaded["p50_ms"], "with_big_p99_ms": loaded["p99_ms"],
                "with_big_rps": loaded["rps"], "big_requests_sized": len(sized),
                "big_request_ms_median": 1e3 * sorted(sized)[len(sized) // 2] if sized else float("nan"),
                "p99_ratio": loaded["p99_ms"] / alone["p99_ms"]}
    finally:
        stop_processes([router])
        lua.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=234063)
    ap.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    ap.add_argument("--repeats", type=int, default=5, help="big requests timed on the debug loop")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--verbose", action="store_true", help="print the longest loop callbacks")
    ap.add_argument("--loop-only", action="store_true", help="skip the wrk measurement")
    ap.add_argument("--out", default="bench-huge-prompt.json")
    args = ap.parse_args()
    tokenizer = Path(args.tokenizer)
    work = Path(tempfile.mkdtemp(prefix="specgate-huge-"))
    t0 = time.perf_counter()
    text = make_prompt(tokenizer, args.tokens)
    big = json.dumps({"model": "bench", "messages": [{"role": "user", "content": text}], "max_tokens": 8}).encode()
    print(f"prompt: {args.tokens} tokens, {len(big)} body bytes (built in {time.perf_counter() - t0:.1f} s)", flush=True)
    ncpu = os.cpu_count() or 2
    backend_port = free_port()
    backend = subprocess.Popen(["taskset", "-c", str(ncpu - 1), sys.executable,
                                str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        cfg = work / "router.yaml"
        write_config(cfg, tokenizer, f"http://127.0.0.1:{backend_port}")
        sizing = sizing_cpu(cfg, big, args.repeats)
        print(f"sizing on the loop thread: {sizing['sizing_loop_cpu_ms']:.2f} ms CPU (median of {args.repeats}, max "
              f"{sizing['sizing_loop_cpu_ms_max']:.2f}); counted {sizing['counted_tokens']} tokens", flush=True)
        loop = loop_time(cfg, big, args.repeats, args.verbose)
        if args.loop_only:
            return 0
        print(f"event loop: {loop['loop_ms']:.2f} ms per big request (median of {args.repeats}, max "
              f"{loop['loop_ms_max']:.2f}), longest single callback {loop['longest_callback_ms']:.2f} ms, "
              f"request wall time {loop['request_wall_ms']:.0f} ms (debug loop)", flush=True)
        small = small_p99(cfg, big, backend_port, args.duration)
        print(f"small requests, c=4: alone p50 {small['alone_p50_ms']:.2f} ms p99 {small['alone_p99_ms']:.2f} ms; "
              f"while sizing ({small['big_requests_sized']} big requests, median {small['big_request_ms_median']:.0f} ms "
              f"each) p50 {small['with_big_p50_ms']:.2f} ms p99 {small['with_big_p99_ms']:.2f} ms "
              f"(p99 ratio {small['p99_ratio']:.2f})", flush=True)
        Path(args.out).write_text(json.dumps({"tokens": args.tokens, "body_bytes": len(big), "sizing": sizing, "loop": loop,
                                              "small_requests": small}, indent=2))
        print(f"JSON written to {args.out}")
        return 0
    finally:
        stop_processes([backend])


if __name__ == "__main__":
    sys.exit(main())
