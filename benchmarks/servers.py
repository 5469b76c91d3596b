"""HTTP servers as candidates for the router's front: the same pass-through on each, and the whole router.

    .venv/bin/python benchmarks/servers.py [--candidates uvicorn-httptools,uvicorn-limits,uvicorn-h11,
        aiohttp-web,granian,specgate] [--modes nonstream,stream] [--concurrency 16] [--runs 3]
        [--duration 5] [--out bench-servers.json]

Every candidate but ``specgate`` serves ``benchmarks/bare_proxy.py``'s pass-through (read the
body, one aiohttp request to the backend, relay the answer; no counting, decision or metrics),
so the differences are the servers': ``uvicorn-httptools`` (what ``specgate router`` runs, with
uvloop), ``uvicorn-limits`` (the same with the router's head-limit protocol,
:func:`router.limited_protocol`, at the ``server`` section's defaults), ``uvicorn-h11``,
``aiohttp-web`` (aiohttp's own server and an ``aiohttp.web`` handler, no ASGI) and ``granian``
(Granian 2.8.9, a Rust HTTP server for ASGI, one worker, single-threaded runtime, uvloop;
installed by this script into ``.bench/granian`` with ``pip install --target``, not a
dependency of the project). ``specgate`` is the whole router on the config of
``benchmarks/router_overhead.py``, for scale.

The set-up of ``router_overhead.py``: ``benchmarks/fast_backend.py`` and ``wrk`` on the last
core, each candidate alone on core 0 (``taskset``; Granian's worker process and threads
inherit it), the candidates interleaved per round. Measured per run: req/s (``wrk``) and CPU
per request: the candidate's whole process tree (``/proc/<pid>/stat`` utime + stime of the
process and its descendants, so Granian's worker counts) over the requests completed. Prints
the medians of the rounds and each candidate's CPU per request over ``uvicorn-httptools``'s
(median of the rounds' pairs), and writes JSON.

What each server enforces of the limits the router needs (per connection, as bytes arrive),
from the versions pinned here (docs/performance.md, "HTTP servers as candidates"):

==================  ===========================================  ======================================
server              request head                                 head / body read timeouts
==================  ===========================================  ======================================
uvicorn-httptools   none settable (llhttp's own caps)            keep-alive only (restarts per byte)
uvicorn-limits      bytes, fields, field bytes (settable)        head and body timeouts (settable)
uvicorn-h11         ``h11_max_incomplete_event_size`` (head)     keep-alive only
aiohttp-web         ``max_line_size``, ``max_field_size``,       keep-alive only
                    ``max_headers``
granian             ``--http1-buffer-size`` (whole buffer)       ``--http1-header-read-timeout``
==================  ===========================================  ======================================
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.router_overhead import (  # after the path set-up
    CHAT_BODY,
    STREAM_BODY,
    ensure_wrk,
    free_port,
    parse_wrk,
    stop_processes,
    wait_http,
)

CANDIDATES = ("uvicorn-httptools", "uvicorn-limits", "uvicorn-h11", "aiohttp-web", "granian", "specgate")
GRANIAN = "granian==2.8.9"


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime (s) of ``pid`` and every live descendant (``/proc``)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(c for c, parent in parents.items() if parent == p)
    return total / os.sysconf("SC_CLK_TCK")


def ensure_granian() -> Path:
    """``.bench/granian`` with Granian installed (``pip install --target``): a path for
    ``PYTHONPATH``, so Granian runs in this interpreter, beside the project's packages."""
    target = ROOT / ".bench" / "granian"
    if not (target / "granian").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), GRANIAN], check=True)
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--modes", default="nonstream,stream")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds per run")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--out", default="bench-servers.json")
    args = ap.parse_args()
    wanted = [c for c in args.candidates.split(",") if c]
    if set(wanted) - set(CANDIDATES):
        raise SystemExit(f"unknown candidates {sorted(set(wanted) - set(CANDIDATES))}; known: {CANDIDATES}")
    wrk = ensure_wrk()
    ncpu = os.cpu_count() or 2
    load_cpu, server_cpu = str(ncpu - 1), "0"
    work = Path(tempfile.mkdtemp(prefix="specgate-servers-"))
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], cpu: str, log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=(work / log).open("wb"), stderr=subprocess.STDOUT,
                             start_new_session=True, cwd=ROOT, env={**os.environ, **(env or {})})
        procs.append(p)
        return p

    try:
        backend_port = free_port()
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)],
              load_cpu, "backend.log")
        backend = f"http://127.0.0.1:{backend_port}"
        wait_http(f"{backend}/health")
        targets: dict[str, tuple[int, int]] = {}
        for name in wanted:
            port = free_port()
            if name == "granian":
                env = {"PYTHONPATH": f"{ensure_granian()}:{ROOT}", "SPECGATE_BARE_UPSTREAM": backend}
                p = spawn([sys.executable, "-m", "granian", "--interface", "asgi", "--factory", "--loop", "uvloop",
                           "--workers", "1", "--runtime-mode", "st", "--host", "127.0.0.1", "--port", str(port),
                           "--log-level", "warning", "--no-access-log", "benchmarks.bare_proxy:granian_app"],
                          server_cpu, f"{name}.log", env)
            elif name == "specgate":
                cfg = work / "router.yaml"
                cfg.write_text(json.dumps({
                    "model": {"name": "bench", "tokenizer": args.tokenizer},
                    "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
                    "pools": [{"name": "plain", "speculative": False, "endpoints": [backend]}],
                    "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
                    "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
                    "server": {"log_requests": False}}))
                p = spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(port)],
                          server_cpu, f"{name}.log", {"PYTHONPATH": str(ROOT)})
            else:
                p = spawn([sys.executable, str(ROOT / "benchmarks" / "bare_proxy.py"), "--port", str(port),
                           "--upstream", backend, "--server", name], server_cpu, f"{name}.log")
            targets[name] = (port, p.pid)
        lua = {}
        for mode, body in (("nonstream", CHAT_BODY), ("stream", STREAM_BODY)):
            lua[mode] = work / f"{mode}.lua"
            lua[mode].write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n'
                                 'wrk.headers["Content-Type"] = "application/json"\n')
        for name, (port, _) in targets.items():
            wait_http(f"http://127.0.0.1:{port}/" + ("ready" if name == "specgate" else "health"), 300)
            subprocess.run(["taskset", "-c", load_cpu, wrk, "-t1", "-c4", "-d1s", "-s", str(lua["nonstream"]),
                            f"http://127.0.0.1:{port}/v1/chat/completions"], capture_output=True, check=True)
        results: dict[str, dict[str, list[dict[str, float]]]] = {}
        for mode in args.modes.split(","):
            for run in range(args.runs):
                for name, (port, pid) in targets.items():
                    cpu0 = tree_cpu_seconds(pid)
                    out = subprocess.run(
                        ["taskset", "-c", load_cpu, wrk, "-t1", f"-c{args.concurrency}", f"-d{args.duration}s",
                         "--latency", "-s", str(lua[mode]), f"http://127.0.0.1:{port}/v1/chat/completions"],
                        capture_output=True, text=True, check=True).stdout
                    res = parse_wrk(out)
                    res["cpu_us_per_req"] = (tree_cpu_seconds(pid) - cpu0) / max(res["requests"], 1) * 1e6
                    results.setdefault(mode, {}).setdefault(name, []).append(res)
                    print(f"{mode:9} run {run + 1} {name:18} {res['rps']:8.0f} req/s  cpu {res['cpu_us_per_req']:6.0f} "
                          f"us/req" + (f"  errors {res['errors']:.0f}" if res.get("errors") else ""), flush=True)
        print(f"\nmedians of {args.runs} rounds (c={args.concurrency}); CPU over uvicorn-httptools: median of paired rounds")
        print(f"{'mode':9} {'candidate':18} {'req/s':>8} {'cpu us/req':>11} {'cpu / httptools':>16}")
        for mode, by in results.items():
            ref = by.get("uvicorn-httptools")
            for name, runs in by.items():
                pairs = ([r["cpu_us_per_req"] / b["cpu_us_per_req"] for r, b in zip(runs, ref, strict=True)]
                         if ref else [])
                print(f"{mode:9} {name:18} {statistics.median(r['rps'] for r in runs):8.0f} "
                      f"{statistics.median(r['cpu_us_per_req'] for r in runs):11.0f} "
                      f"{statistics.median(pairs) if pairs else float('nan'):16.2f}")
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(f"JSON written to {args.out}")
        return 0
    finally:
        stop_processes(procs)


if __name__ == "__main__":
    sys.exit(main())
