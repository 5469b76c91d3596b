"""Router overhead, side by side: direct vs specgate vs SGLang's Rust router (docs/performance.md).

    .venv/bin/python benchmarks/router_overhead.py [--duration 8] [--runs 3] [--out bench.json]

Setup (all on 127.0.0.1): ``benchmarks/fast_backend.py`` (canned answers, SSE events 1 ms
apart) pinned with its load generator ``wrk`` to the last core; the router under test pinned
alone to core 0: specgate (``specgate router``, one process, uvloop + httptools, token counting
with a real tokenizer, the decision and metrics included) or ``sglang-router`` 0.3.2 from PyPI
(``--policy round_robin``), installed by this script into ``.bench/rust-venv`` and run with
TCP_NODELAY on its sockets through ``benchmarks/nodelay_shim.c`` (LD_PRELOAD, compiled with
gcc; ``--rust-as-shipped`` runs it without), or ``benchmarks/bare_proxy.py`` (``bare``: the
floor, specgate's server and client stack doing none of specgate's work). For every
(mode, concurrency) cell the four targets (direct, bare, specgate, rust) run interleaved,
``--runs`` times; medians are reported. Measured per run:

- req/s and latency p50/p99 (ms) from ``wrk --latency`` (for streams: the whole stream);
- router CPU per request (us): the router process's utime+stime (``/proc/PID/stat``) during
  the run divided by the requests wrk completed;
- time to first body byte at concurrency 1 (ms, median of 200 sequential requests on a
  kept-alive connection, from a small socket client pinned with ``wrk`` to the last core; for
  streams the first ``data:`` event, see :func:`ttfb_ms`), for the added-TTFB figures.

Prints the ratios specgate/Rust, bare/Rust and specgate/direct, the added latencies at
concurrency 1 (each target minus direct), and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAT_BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello in one word."}],
                        "max_tokens": 8})
STREAM_BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello in one word."}],
                          "max_tokens": 8, "stream": True})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_wrk() -> str:
    path = shutil.which("wrk")
    if path:
        return path
    subprocess.run(["apt-get", "install", "-y", "wrk"], check=True, stdout=subprocess.DEVNULL)
    return shutil.which("wrk") or "wrk"


def ensure_rust_router() -> Path:
    venv = ROOT / ".bench" / "rust-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(py), "-c", "import sglang_router"], capture_output=True, check=False)
    if probe.returncode != 0:
        subprocess.run([str(py), "-m", "pip", "install", "-q", "sglang-router==0.3.2"], check=True)
    return py


def ensure_nodelay_shim() -> Path:
    """Compile ``benchmarks/nodelay_shim.c`` (LD_PRELOAD: TCP_NODELAY on accepted/connected
    TCP sockets) into ``.bench/`` once; the Rust router runs with it (the baseline
    of docs/performance.md)."""
    src = ROOT / "benchmarks" / "nodelay_shim.c"
    out = ROOT / ".bench" / "nodelay_shim.so"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(out), str(src), "-ldl"], check=True)
    return out


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process group (started with ``start_new_session=True``), wait up to 10 s
    each, then SIGKILL the groups still alive."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def wait_http(url: str, timeout_s: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except OSError:  # refused, reset, timed out (URLError is an OSError)
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_wrk(out: str) -> dict[str, float]:
    def ms(v: str) -> float:
        num, unit = re.match(r"([\d.]+)(\w+)", v).groups()  # type: ignore[union-attr]
        return float(num) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.MULTILINE))
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "requests": total, "p50_ms": ms(lat["50"]), "p99_ms": ms(lat["99"]),
            "errors": errors + (int(non2xx.group(1)) if non2xx else 0)}


def ttfb_ms(port: int, body: str, n: int = 200) -> float:
    """Median time (ms) from sending a request to receiving its first *body* byte.

    For a stream that is the first ``data:`` event (the first token), not the response
    headers: specgate holds its headers until the engine's first event so that an engine
    refusal still becomes a real HTTP status (``router/proxy.py``), so a header-only TTFB
    would charge it for the engine's time to first token while a router that forwards
    headers at once would look free. For a non-streamed answer it is the first byte after
    the headers.
    """
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
           f"content-length: {len(body)}\r\n\r\n{body}").encode()
    stream = '"stream": true' in body
    samples = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            t0 = time.perf_counter()
            s.sendall(req)
            buf = b""
            while True:
                buf += s.recv(65536)
                _, sep, rest = buf.partition(b"\r\n\r\n")
                if sep and ((b"data:" in rest) if stream else rest):
                    break
            samples.append((time.perf_counter() - t0) * 1e3)
            # drain the rest of the response (chunked end or content-length)
            while not (buf.endswith(b"0\r\n\r\n") or (b"content-length" in buf.lower() and _complete(buf))):
                buf += s.recv(65536)
    return statistics.median(samples)


def _complete(buf: bytes) -> bool:
    head, _, body = buf.partition(b"\r\n\r\n")
    m = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
    return bool(m) and len(body) >= int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--out", default="bench-router.json")
    ap.add_argument("--modes", default="nonstream,stream", help="comma-separated: nonstream, stream")
    ap.add_argument("--rust-as-shipped", action="store_true",
                    help="run the Rust router without the TCP_NODELAY shim (its streams stall on delayed ACK)")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    args = ap.parse_args()
    ncpu = os.cpu_count() or 2
    router_cpu, load_cpu = "0", str(ncpu - 1)
    wrk = ensure_wrk()
    rust_py = ensure_rust_router()
    work = Path(tempfile.mkdtemp(prefix="specgate-bench-"))
    tokenizer = Path(args.tokenizer)
    if not (tokenizer / "tokenizer.json").exists():
        sys.path.insert(0, str(ROOT))
        from tests.helpers import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], cpu: str, log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=open(work / log, "wb"),  # noqa: SIM115  the child owns it
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, **env} if env else None)
        procs.append(p)
        return p

    try:
        backend_port = free_port()
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)],
              load_cpu, "backend.log")
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        backend = f"http://127.0.0.1:{backend_port}"
        sg_port, rust_port = free_port(), free_port()
        cfg = work / "router.yaml"
        cfg.write_text(json.dumps({
            "model": {"name": "bench", "tokenizer": str(tokenizer)},
            "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
            "pools": [{"name": "plain", "speculative": False, "endpoints": [backend]}],
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
            "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
            "server": {"log_requests": False}}))
        sg = spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(sg_port)],
                   router_cpu, "specgate.log")
        rust = spawn([str(rust_py), "-m", "sglang_router.launch_router", "--worker-urls", backend,
                      "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(rust_port)],
                     router_cpu, "rust.log",
                     env=None if args.rust_as_shipped else {"LD_PRELOAD": str(ensure_nodelay_shim())})
        bare_port = free_port()
        bare = spawn([sys.executable, str(ROOT / "benchmarks" / "bare_proxy.py"), "--port", str(bare_port),
                      "--upstream", backend], router_cpu, "bare.log")
        wait_http(f"http://127.0.0.1:{sg_port}/ready")
        wait_http(f"http://127.0.0.1:{rust_port}/health")
        wait_http(f"http://127.0.0.1:{bare_port}/health")
        targets = {"direct": (backend_port, None), "bare": (bare_port, bare.pid), "specgate": (sg_port, sg.pid),
                   "rust": (rust_port, rust.pid)}
        lua = {}
        for mode, body in (("nonstream", CHAT_BODY), ("stream", STREAM_BODY)):
            path = work / f"{mode}.lua"
            path.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n'
                            'wrk.headers["Content-Type"] = "application/json"\n')
            lua[mode] = path
        results: dict[str, dict[str, dict[str, list[dict[str, float]]]]] = {}
        levels = [int(c) for c in args.concurrency.split(",")]
        modes = args.modes.split(",")
        for mode in modes:
            for c in levels:
                cell = results.setdefault(mode, {}).setdefault(str(c), {})
                for run in range(args.runs):
                    for name, (port, pid) in targets.items():
                        cpu0 = cpu_seconds(pid) if pid else 0.0
                        out = subprocess.run(["taskset", "-c", load_cpu, wrk, "-t1", f"-c{c}", f"-d{args.duration}s",
                                              "--latency", "-s", str(lua[mode]), f"http://127.0.0.1:{port}/v1/chat/completions"],
                                             capture_output=True, text=True, check=True).stdout
                        res = parse_wrk(out)
                        if pid:
                            res["cpu_us_per_req"] = (cpu_seconds(pid) - cpu0) / max(res["requests"], 1) * 1e6
                        cell.setdefault(name, []).append(res)
                        print(f"{mode:9} c={c:<3} run {run + 1} {name:8} {res['rps']:9.0f} req/s "
                              f"p50 {res['p50_ms']:.2f} ms p99 {res['p99_ms']:.2f} ms"
                              + (f" cpu {res['cpu_us_per_req']:.0f} us/req" if pid else "")
                              + (f" errors {res['errors']}" if res["errors"] else ""), flush=True)
        ttfb = {}
        os.sched_setaffinity(0, {int(load_cpu)})  # the TTFB client shares wrk's core, not the router's
        for mode, body in (("nonstream", CHAT_BODY), ("stream", STREAM_BODY)):
            if mode not in modes:
                continue
            ttfb[mode] = {name: ttfb_ms(port, body) for name, (port, _) in targets.items()}
        summary = summarise(results, ttfb)
        Path(args.out).write_text(json.dumps({"results": results, "ttfb_ms": ttfb, "summary": summary}, indent=2))
        print_table(summary)
        print(f"JSON written to {args.out}")
        return 0
    finally:
        stop_processes(procs)


def summarise(results: dict, ttfb: dict) -> list[dict]:  # type: ignore[type-arg]
    rows = []
    for mode, cells in results.items():
        for c, by in cells.items():
            med = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in by.items()}
            row = {"mode": mode, "concurrency": int(c), **{f"{n}_{k}": v for n, m in med.items() for k, v in m.items()}}
            row["rps_specgate_over_rust"] = med["specgate"]["rps"] / med["rust"]["rps"]
            row["rps_specgate_over_direct"] = med["specgate"]["rps"] / med["direct"]["rps"]
            row["rps_bare_over_rust"] = med["bare"]["rps"] / med["rust"]["rps"]
            row["cpu_specgate_over_rust"] = med["specgate"]["cpu_us_per_req"] / med["rust"]["cpu_us_per_req"]
            row["cpu_bare_over_rust"] = med["bare"]["cpu_us_per_req"] / med["rust"]["cpu_us_per_req"]
            row["p99_over_p50_specgate"] = med["specgate"]["p99_ms"] / med["specgate"]["p50_ms"]
            if int(c) == 1 and mode in ttfb:
                row["added_p50_ms_specgate"] = med["specgate"]["p50_ms"] - med["direct"]["p50_ms"]
                row["added_p50_ms_rust"] = med["rust"]["p50_ms"] - med["direct"]["p50_ms"]
                row["added_ttfb_ms_specgate"] = ttfb[mode]["specgate"] - ttfb[mode]["direct"]
                row["added_ttfb_ms_rust"] = ttfb[mode]["rust"] - ttfb[mode]["direct"]
                row["added_p50_ms_bare"] = med["bare"]["p50_ms"] - med["direct"]["p50_ms"]
                row["added_ttfb_ms_bare"] = ttfb[mode]["bare"] - ttfb[mode]["direct"]
            rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:  # type: ignore[type-arg]
    """Two tables: throughput and CPU per cell, then the added latencies at concurrency 1 (ms)."""
    print(f"{'mode':9} {'c':>3} {'direct':>8} {'bare':>8} {'specgate':>9} {'rust':>8} {'sg/rust':>8} {'bare/rust':>9} "
          f"{'sg/direct':>9} {'sg cpu us':>9} {'bare cpu':>8} {'rust cpu':>8} {'sg p50':>7} {'sg p99':>7}")
    for r in rows:
        print(f"{r['mode']:9} {r['concurrency']:>3} {r['direct_rps']:8.0f} {r['bare_rps']:8.0f} {r['specgate_rps']:9.0f} "
              f"{r['rust_rps']:8.0f} {r['rps_specgate_over_rust']:8.2f} {r['rps_bare_over_rust']:9.2f} "
              f"{r['rps_specgate_over_direct']:9.2f} {r['specgate_cpu_us_per_req']:9.0f} "
              f"{r['bare_cpu_us_per_req']:8.0f} {r['rust_cpu_us_per_req']:8.0f} "
              f"{r['specgate_p50_ms']:7.2f} {r['specgate_p99_ms']:7.2f}")
    print(f"\n{'mode':9} {'c':>3} {'+p50 sg':>8} {'+p50 bare':>9} {'+p50 rust':>9} {'+ttfb sg':>8} {'+ttfb bare':>10} "
          f"{'+ttfb rust':>10}")
    for r in rows:
        if "added_p50_ms_specgate" in r:
            print(f"{r['mode']:9} {r['concurrency']:>3} {r['added_p50_ms_specgate']:8.2f} {r['added_p50_ms_bare']:9.2f} "
                  f"{r['added_p50_ms_rust']:9.2f} {r['added_ttfb_ms_specgate']:8.2f} {r['added_ttfb_ms_bare']:10.2f} "
                  f"{r['added_ttfb_ms_rust']:10.2f}")


if __name__ == "__main__":
    sys.exit(main())
