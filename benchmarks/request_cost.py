"""The router's CPU per generation request in process, without the HTTP server: checkouts
side by side, interleaved (docs/performance.md).

    .venv/bin/python benchmarks/request_cost.py [--trees .,/tmp/base] [--rounds 5]
        [--requests 3000] [--concurrency 16] [--stream] [--calls] [--models 1,3]
        [--traffic first|spread] [--others-models 1] [--without prefix_cache,learning,acceptance]

Each round runs, for every checkout in ``--trees`` in turn, a child process pinned to core 0
(``taskset``) that builds that checkout's app (``router.app.asgi.create_app`` on the config of
``benchmarks/router_overhead.py``: one plain pool on ``benchmarks/fast_backend.py``, token
counting, the decision, prefix choice, learning and metrics on, access log off), runs its
lifespan, and drives ``POST /v1/chat/completions`` straight into the ASGI app
(``--concurrency`` requests at a time, ``--requests`` after 300 of warm-up): the app's own
work and its upstream aiohttp client, with no uvicorn in front and nothing of the load
generator on that core. The backend runs on the last core. Measured per child: process CPU
(``time.process_time``, every thread) over the requests, in microseconds per request.

``--models 1,3`` runs every checkout once per model count in each round (interleaved): with
N > 1 the config is a ``models:`` list of N models (``bench``, ``bench-2``, ...), each with
one plain pool on its own backend (``fast_backend.py --model <name>``, all on the last core),
so the router scrapes, health-checks and holds state for every model; the requests all name
``bench`` (``--traffic first``) or go round robin over the models (``--traffic spread``). With
N = 1 the config is the one-model file above, so an older checkout runs it unchanged
(``--others-models 1``: the checkouts after the first run only those counts, e.g. a revision
from before ``models:``).

Prints every round's figures, the median per checkout with its range, and each checkout's
median ratio to the first over the rounds (a round's children ran back to back, so the
ratio of a round is a pair). ``--calls`` also counts the function calls per request (cProfile
over the measured requests, background tasks included): a deterministic figure for a step too
small for CPU time to resolve on a shared machine. ``--without learning`` (and
``prefix_cache``, ``acceptance``) runs the first checkout once more per feature with that
``routing`` section off: its ratio to the first line is what the feature costs per request. Less noisy than the whole server under ``wrk`` (the work of
uvicorn and of the client is not there to vary), so it resolves smaller steps; the
end-to-end figures are ``benchmarks/router_overhead.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import inspect
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


async def _drive(config: Path, requests: int, concurrency: int, stream: bool,
                 models: list[str] | None = None, calls: bool = False,
                 pstats_out: str | None = None) -> dict[str, float]:
    import router  # the checkout's public surface (router.__all__)

    if hasattr(router, "create_app"):
        create_app = router.create_app
    else:  # a revision from before router/__init__.py named its surface: its internal module
        create_app = importlib.import_module("router.app").create_app
    if hasattr(router, "tune_interpreter"):  # as `specgate router` runs (the GC thresholds)
        router.tune_interpreter()
    params = inspect.signature(create_app).parameters
    kwargs = {k: v for k, v in (("watch", False),) if k in params}
    app = create_app(config, **kwargs)
    bodies = [json.dumps({"model": name, "messages": [{"role": "user", "content": "Say hello in one word."}],
                          "max_tokens": 8, **({"stream": True} if stream else {})}).encode()
              for name in models or ["bench"]]
    turn = iter(range(1 << 62))
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def one() -> int:
        body = bodies[next(turn) % len(bodies)]
        headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
            "root_path": "", "query_string": b"", "headers": list(headers),
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000), "state": {}}
        sent = False
        status = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never  # the disconnect watcher waits here until the response is done
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await app(scope, receive, send)
        return status

    async def batch(n: int) -> list[int]:
        out: list[int] = []

        async def worker(k: int) -> None:
            for _ in range(k):
                out.append(await one())

        per = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
        await asyncio.gather(*(worker(k) for k in per))
        return out

    async with app.router.lifespan_context(app):
        deadline = time.monotonic() + 30
        while True:  # ready: the first scrape found every model's backend healthy
            if (await batch(len(bodies))) == [200] * len(bodies):
                break
            if time.monotonic() > deadline:
                raise SystemExit("the router did not become ready")
            await asyncio.sleep(0.2)
        await batch(300)
        cpu0, t0 = time.process_time(), time.perf_counter()
        profile = cProfile.Profile() if calls else None
        if profile is not None:
            profile.enable()
        statuses = await batch(requests)
        if profile is not None:
            profile.disable()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    bad = sum(s != 200 for s in statuses)
    out = {"cpu_us_per_req": cpu / requests * 1e6, "req_s": requests / wall, "non_200": bad}
    if profile is not None:  # every Python and C function call, background tasks included
        out["calls_per_req"] = pstats.Stats(profile).total_calls / requests
        if pstats_out:
            profile.dump_stats(pstats_out)
    return out


def _child(args: argparse.Namespace) -> int:
    import uvloop

    names = args.names.split(",") if args.names else None
    result = uvloop.run(_drive(Path(args.config), args.requests, args.concurrency, args.stream, names, args.calls,
                                args.pstats))
    print(json.dumps(result))
    return 0


def _config(names: list[str], ports: list[int], tokenizer: str) -> dict[str, Any]:
    """The router config: one model (the one-model form) or a ``models:`` list, each model with
    one plain pool on its own backend; scrape and logging as the benchmark needs them."""
    limits = {"max_context_tokens": 4096, "default_max_tokens": 64}
    routing = {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}}
    pools = [[{"name": "plain" if i == 0 else f"plain-{i + 1}", "speculative": False,
               "endpoints": [f"http://127.0.0.1:{port}"]}] for i, port in enumerate(ports)]
    common = {"scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
              "server": {"log_requests": False}}
    if len(names) == 1:
        return {"model": {"name": names[0], "tokenizer": tokenizer}, "limits": limits, "pools": pools[0],
                "routing": routing, **common}
    return {"models": [{"name": name, "tokenizer": tokenizer, "limits": limits, "pools": p, "routing": routing}
                       for name, p in zip(names, pools, strict=True)], **common}


#: ``--without`` names: the ``routing`` section each switches off (``enabled: false``).
FEATURES = {"prefix_cache": "prefix_cache", "learning": "learning", "acceptance": "acceptance"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default=str(ROOT), help="comma-separated checkouts (the first is the reference)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--calls", action="store_true",
                    help="also count function calls per request (cProfile: deterministic where CPU time is "
                         "noisy; the CPU figures of such a run are the profiler's, not the router's)")
    ap.add_argument("--pstats", default=None,
                    help="with --calls: write each child's cProfile stats to <PSTATS>.<round>.<i> "
                         "(read with python -m pstats)")
    ap.add_argument("--without", default="",
                    help="features to switch off one at a time in the first checkout (comma-separated: "
                         "prefix_cache, learning, acceptance): each runs as one more variant, so its "
                         "ratio to the first is what the feature costs")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--models", default="1", help="model counts configured, comma-separated (default 1)")
    ap.add_argument("--others-models", default=None,
                    help="model counts for the checkouts after the first (default: --models)")
    ap.add_argument("--traffic", choices=("first", "spread"), default="first",
                    help="requests name the first model, or go round robin over the models")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--names", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args)
    sys.path.insert(0, str(ROOT))
    from benchmarks.router_overhead import free_port, stop_processes, wait_http

    trees = [Path(t).resolve() for t in args.trees.split(",") if t]
    counts = [int(n) for n in args.models.split(",")]
    others = [int(n) for n in args.others_models.split(",")] if args.others_models else counts
    counts_of = {tree: counts if i == 0 else others for i, tree in enumerate(trees)}
    if min(counts + others) < 1:
        raise SystemExit("--models: every count must be >= 1")
    ncpu = os.cpu_count() or 2
    work = Path(tempfile.mkdtemp(prefix="specgate-cost-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        every = sorted(set(counts + others))
        names = ["bench", *(f"bench-{i}" for i in range(2, max(every) + 1))]
        ports = [free_port() for _ in names]
        for name, port in zip(names, ports, strict=True):
            procs.append(subprocess.Popen(
                ["taskset", "-c", str(ncpu - 1), sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"),
                 "--port", str(port), "--model", name],
                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True))
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/health")
        off = [f for f in args.without.split(",") if f]
        unknown = set(off) - set(FEATURES)
        if unknown:
            raise SystemExit(f"--without: unknown feature(s) {sorted(unknown)}; known: {', '.join(FEATURES)}")
        configs: dict[tuple[int, str | None], Path] = {}
        for n in every:
            for feature in [None, *off]:
                doc = _config(names[:n], ports[:n], args.tokenizer)
                for model in doc.get("models", [doc]):
                    if feature is not None:
                        model["routing"][FEATURES[feature]] = {"enabled": False}
                path = configs[(n, feature)] = work / f"router-{n}-{feature or 'all'}.yaml"
                path.write_text(json.dumps(doc))
        # the first checkout also runs once per feature switched off (--without), each model count
        variants = [(tree, n, None) for tree in trees for n in counts_of[tree]]
        variants[1:1] = [(trees[0], n, f) for n in counts_of[trees[0]] for f in off]
        results: dict[tuple[Path, int, str | None], list[dict[str, float]]] = {v: [] for v in variants}

        def label(v: tuple[Path, int, str | None]) -> str:
            return (f"{v[0]}" + (f" [{v[1]} model{'s' if v[1] > 1 else ''}]" if len(every) > 1 else "")
                    + (f" [without {v[2]}]" if v[2] else ""))

        for rnd in range(args.rounds):
            for tree, n, feature in variants:
                traffic = names[:n] if args.traffic == "spread" else names[:1]
                cmd = ["taskset", "-c", "0", sys.executable, str(Path(__file__).resolve()), "--child",
                       "--config", str(configs[(n, feature)]), "--requests", str(args.requests), "--names", ",".join(traffic),
                       "--concurrency", str(args.concurrency), *(["--stream"] if args.stream else []),
                       *(["--calls"] if args.calls else []),
                       *(["--pstats", f"{args.pstats}.{rnd + 1}.{variants.index((tree, n, feature))}"]
                         if args.pstats and args.calls else [])]
                out = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, check=False,
                                     env={**os.environ, "PYTHONPATH": str(tree)})
                if out.returncode != 0:
                    raise SystemExit(f"{label((tree, n, feature))}: {out.stderr[-2000:]}")
                res = json.loads(out.stdout.strip().splitlines()[-1])
                results[(tree, n, feature)].append(res)
                print(f"round {rnd + 1} {label((tree, n, feature))}: {res['cpu_us_per_req']:.1f} us/req, "
                      f"{res['req_s']:.0f} req/s"
                      + (f", {res['calls_per_req']:.1f} calls/req" if "calls_per_req" in res else "")
                      + (f", {res['non_200']} non-200" if res["non_200"] else ""),
                      flush=True)
        ref = results[variants[0]]
        print(f"\nCPU per request (us; median [min-max] of {args.rounds} rounds), ratio to {label(variants[0])} "
              "(median of the rounds' pairs [min-max])")
        for v in variants:
            cpu = [r["cpu_us_per_req"] for r in results[v]]
            pairs = [a["cpu_us_per_req"] / b["cpu_us_per_req"] for a, b in zip(results[v], ref, strict=True)]
            print(f"{statistics.median(cpu):8.1f} [{min(cpu):.1f}-{max(cpu):.1f}]  "
                  f"{statistics.median(pairs):.3f} [{min(pairs):.3f}-{max(pairs):.3f}]  {label(v)}")
        return 0
    finally:
        stop_processes(procs)


if __name__ == "__main__":
    sys.exit(main())
