"""Router cost per request, side by side: direct, the bare stack, specgate at a base revision,
specgate now, and SGLang's Rust router (docs/performance.md).

    .venv/bin/python benchmarks/router_overhead.py [--duration 6] [--runs 3] [--base REV]
        [--targets direct,bare,bare-aiohttp,base,specgate,traced,no-prefix,no-learning,no-acceptance,rust]
        [--check 0.10] [--out bench.json]

``make bench`` runs it with its defaults; ``make bench-check`` runs ``base`` against
``specgate`` only and exits 1 when specgate's CPU per request is more than ``--check`` (10%)
above the base revision's in any cell at concurrency > 1.

Setup (all on 127.0.0.1): ``benchmarks/fast_backend.py`` (canned answers, SSE events 1 ms
apart) pinned with its load generator ``wrk`` to the last core; each router under test pinned
alone to core 0 (``taskset``): specgate now (``specgate router`` from this checkout: one
process, uvloop + httptools, token counting with a real tokenizer, the decision, prefix
choice and metrics included, access log off); ``base``: the same command from a temporary
``git worktree`` of ``--base`` (default: the merge base of ``HEAD`` and ``origin/main``, else
of ``main``; removed at the end); ``sglang-router`` 0.3.2 from PyPI (``--policy round_robin``),
installed by this script into ``.bench/rust-venv`` (skipped with a message when it cannot be
installed) and run with TCP_NODELAY on its sockets through ``benchmarks/nodelay_shim.c``
(LD_PRELOAD, compiled with gcc; ``--rust-as-shipped`` runs it without); and
``benchmarks/bare_proxy.py`` (``bare``: the floor, specgate's server and client stack doing
none of specgate's work; ``bare-aiohttp``, asked for by name: the same with aiohttp as the
upstream client instead of :mod:`router.upstream.transport_h1`); ``traced`` (not in the default targets): specgate now with
``tracing.enabled`` at ``sampler_ratio: 1.0``, exporting over OTLP/HTTP to a stub receiver
on the load core that answers 200 to every export (the SDK's batch export thread is in the
router process, so its CPU is counted); ``no-prefix``, ``no-learning``, ``no-acceptance``
(asked for by name, :data:`FEATURE_OFF`): specgate now with ``routing.prefix_cache``,
``routing.learning`` or ``routing.acceptance`` off, so that each feature's cost is printed
(specgate over the target, paired per round; the pool is plain, so acceptance tracking has
little to do here). For every (mode, concurrency) cell the targets run interleaved,
``--runs`` rounds; medians are reported. Measured per run:

- req/s and latency p50/p99 (ms) from ``wrk --latency`` (for streams: the whole stream);
- router CPU per request (us): the router process's utime+stime (``/proc/PID/stat``) during
  the run divided by the requests wrk completed (co-tenants on the machine disturb it less
  than req/s); specgate/base is the median over the rounds of each round's ratio (the two
  ran back to back in a round, so a round is a pair);
- time to first body byte at concurrency 1 (ms, median of 200 sequential requests on a
  kept-alive connection, from a small socket client pinned with ``wrk`` to the last core; for
  streams the first ``data:`` event, see :func:`ttfb_ms`), for the added-TTFB figures.

Prints, per cell, every target's req/s and CPU per request, the ratios specgate/base (CPU)
and specgate/Rust (req/s, CPU), the added latencies at concurrency 1 (each target minus
direct), and writes JSON.
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
sys.path.insert(0, str(ROOT))

from serving.ports import free_port

CHAT_BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello in one word."}],
                        "max_tokens": 8})
STREAM_BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello in one word."}],
                          "max_tokens": 8, "stream": True})


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
            p.wait(5)


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
    refusal still becomes a real HTTP status (``router/upstream/proxy.py``), so a header-only TTFB
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


def git_base(rev: str | None) -> str:
    """The commit to compare against: ``rev``, else the merge base of ``HEAD`` and
    ``origin/main`` (else ``main``), as a full hash."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    if rev:
        return git("rev-parse", "--verify", f"{rev}^{{commit}}")
    for ref in ("origin/main", "main"):
        try:
            return git("merge-base", "HEAD", ref)
        except subprocess.CalledProcessError:
            continue
    raise SystemExit("no --base given and neither origin/main nor main exists")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    ap.add_argument("--runs", type=int, default=3, help="interleaved rounds per cell")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--out", default="bench-router.json")
    ap.add_argument("--modes", default="nonstream,stream", help="comma-separated: nonstream, stream")
    ap.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                    help=f"comma-separated subset of {','.join(TARGETS)}")
    ap.add_argument("--base", default=None,
                    help="git revision of the base target (default: merge base with origin/main, else main); "
                         "comma-separated revisions add targets base2, base3, ... (each run side by side)")
    ap.add_argument("--check", type=float, default=None, metavar="TOL",
                    help="exit 1 when specgate's CPU per request exceeds (1 + TOL) x base's in a cell at c > 1")
    ap.add_argument("--rust-as-shipped", action="store_true",
                    help="run the Rust router without the TCP_NODELAY shim (its streams stall on delayed ACK)")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--no-ttfb", action="store_true", help="skip the concurrency-1 TTFB probe")
    args = ap.parse_args()
    wanted = [t for t in args.targets.split(",") if t]
    unknown = set(wanted) - set(TARGETS)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}")
    if args.check is not None and not {"base", "specgate"} <= set(wanted):
        ap.error("--check needs the base and specgate targets")
    ncpu = os.cpu_count() or 2
    router_cpu, load_cpu = "0", str(ncpu - 1)
    wrk = ensure_wrk()
    rust_py = None
    if "rust" in wanted:
        try:
            rust_py = ensure_rust_router()
        except (subprocess.CalledProcessError, OSError) as exc:
            print(f"sglang-router could not be installed from the package registry ({exc}); "
                  "the rust target is skipped", flush=True)
            wanted.remove("rust")
    work = Path(tempfile.mkdtemp(prefix="specgate-bench-"))
    tokenizer = Path(args.tokenizer)
    if not (tokenizer / "tokenizer.json").exists():
        sys.path.insert(0, str(ROOT))
        from tests.support import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    procs: list[subprocess.Popen[bytes]] = []
    base_trees: list[Path] = []

    def spawn(cmd: list[str], cpu: str, log: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=open(work / log, "wb"),  # noqa: SIM115  the child owns it
                             stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                             env={**os.environ, **env} if env else None)
        procs.append(p)
        return p

    try:
        backend_port = free_port()
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)],
              load_cpu, "backend.log")
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        backend = f"http://127.0.0.1:{backend_port}"
        cfg = work / "router.yaml"
        cfg.write_text(json.dumps({
            "model": {"name": "bench", "tokenizer": str(tokenizer)},
            "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
            "pools": [{"name": "plain", "speculative": False, "endpoints": [backend]}],
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
            "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
            "server": {"log_requests": False}}))
        targets: dict[str, tuple[int, int | None]] = {}
        health: dict[str, str] = {}
        if "direct" in wanted:
            targets["direct"] = (backend_port, None)
        if "bare" in wanted:
            port = free_port()
            p = spawn([sys.executable, str(ROOT / "benchmarks" / "bare_proxy.py"), "--port", str(port),
                       "--upstream", backend], router_cpu, "bare.log")
            targets["bare"], health["bare"] = (port, p.pid), f"http://127.0.0.1:{port}/health"
        if "bare-aiohttp" in wanted:
            port = free_port()
            p = spawn([sys.executable, str(ROOT / "benchmarks" / "bare_proxy.py"), "--port", str(port),
                       "--upstream", backend, "--client", "aiohttp"], router_cpu, "bare-aiohttp.log")
            targets["bare-aiohttp"], health["bare-aiohttp"] = (port, p.pid), f"http://127.0.0.1:{port}/health"

        def specgate(name: str, tree: Path, config: Path = cfg) -> None:
            port = free_port()
            # -m from the tree's root with it on PYTHONPATH: that tree's router package is run,
            # not whatever checkout the venv was installed from
            p = spawn([sys.executable, "-m", "router.cli", "router", "--config", str(config), "--port", str(port)],
                      router_cpu, f"{name}.log", env={"PYTHONPATH": str(tree)}, cwd=tree)
            targets[name], health[name] = (port, p.pid), f"http://127.0.0.1:{port}/ready"

        base_rev = None
        base_revs: dict[str, str] = {}
        if "base" in wanted:
            for i, rev in enumerate((args.base or "").split(",") if args.base else [None]):
                name = "base" if i == 0 else f"base{i + 1}"
                base_revs[name] = git_base(rev)
                tree = work / f"{name}-tree"
                subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree),
                                base_revs[name]], check=True)
                base_trees.append(tree)
                specgate(name, tree)
                print(f"{name}: {base_revs[name][:12]} ({tree})", flush=True)
            base_rev = base_revs["base"]
        if "specgate" in wanted:
            specgate("specgate", ROOT)
        if "traced" in wanted:
            otlp_port = free_port()
            stub = work / "otlp_stub.py"
            stub.write_text(OTLP_STUB)
            spawn([sys.executable, str(stub), str(otlp_port)], load_cpu, "otlp.log")
            traced = work / "router-traced.yaml"
            traced.write_text(json.dumps({**json.loads(cfg.read_text()), "tracing": {
                "enabled": True, "sampler_ratio": 1.0, "endpoint": f"http://127.0.0.1:{otlp_port}/v1/traces"}}))
            specgate("traced", ROOT, traced)
        for name, section in FEATURE_OFF.items():
            if name in wanted:
                doc = json.loads(cfg.read_text())
                doc["routing"][section] = {"enabled": False}
                (work / f"router-{name}.yaml").write_text(json.dumps(doc))
                specgate(name, ROOT, work / f"router-{name}.yaml")
        if "rust" in wanted and rust_py is not None:
            port = free_port()
            p = spawn([str(rust_py), "-m", "sglang_router.launch_router", "--worker-urls", backend,
                       "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(port)],
                      router_cpu, "rust.log",
                      env=None if args.rust_as_shipped else {"LD_PRELOAD": str(ensure_nodelay_shim())})
            targets["rust"], health["rust"] = (port, p.pid), f"http://127.0.0.1:{port}/health"
        for url in health.values():  # the routers start together on one core: minutes on a loaded machine
            wait_http(url, 300)
        lua = {}
        for mode, body in (("nonstream", CHAT_BODY), ("stream", STREAM_BODY)):
            path = work / f"{mode}.lua"
            path.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(body)}\n'
                            'wrk.headers["Content-Type"] = "application/json"\n')
            lua[mode] = path
        for name, (port, _) in targets.items():  # warm-up: connections, caches, first-call paths
            subprocess.run(["taskset", "-c", load_cpu, wrk, "-t1", "-c4", "-d1s", "-s", str(lua["nonstream"]),
                            f"http://127.0.0.1:{port}/v1/chat/completions"], capture_output=True, check=True)
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
        ttfb: dict[str, dict[str, float]] = {}
        if not args.no_ttfb:
            os.sched_setaffinity(0, {int(load_cpu)})  # the TTFB client shares wrk's core, not the router's
            for mode, body in (("nonstream", CHAT_BODY), ("stream", STREAM_BODY)):
                if mode in modes:
                    ttfb[mode] = {name: ttfb_ms(port, body) for name, (port, _) in targets.items()}
        summary = summarise(results, ttfb)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"base": base_rev, "bases": base_revs, "results": results, "ttfb_ms": ttfb,
                                              "summary": summary}, indent=2))
        print_table(summary, list(targets))
        print(f"JSON written to {args.out}")
        if args.check is not None:
            return check_cpu(summary, args.check)
        return 0
    finally:
        stop_processes(procs)
        for tree in base_trees:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


#: Every target, in the order each round runs them.
#: Targets that are specgate now with one feature switched off (the config section whose
#: ``enabled`` is set false): what the feature costs is specgate's CPU per request minus theirs.
FEATURE_OFF = {"no-prefix": "prefix_cache", "no-learning": "learning", "no-acceptance": "acceptance"}

TARGETS = ("direct", "bare", "bare-aiohttp", "base", "specgate", "traced", *FEATURE_OFF, "rust")

#: The default targets (``traced`` and the ``FEATURE_OFF`` ones are asked for by name).
DEFAULT_TARGETS = ("direct", "bare", "bare-aiohttp", "base", "specgate", "rust")

#: A stub OTLP/HTTP receiver (``python -c`` it with a port): 200 to every export, body dropped.
OTLP_STUB = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


#: ``(row key, numerator target, denominator target, measure)`` of the ratios of medians.
_RATIOS = (("rps_specgate_over_base", "specgate", "base", "rps"),
           ("rps_specgate_over_rust", "specgate", "rust", "rps"),
           ("cpu_specgate_over_rust", "specgate", "rust", "cpu_us_per_req"),
           ("rps_base_over_rust", "base", "rust", "rps"),
           ("rps_bare_over_rust", "bare", "rust", "rps"),
           ("cpu_bare_over_rust", "bare", "rust", "cpu_us_per_req"),
           ("rps_specgate_over_direct", "specgate", "direct", "rps"),
           ("cpu_traced_over_specgate", "traced", "specgate", "cpu_us_per_req"),
           ("rps_traced_over_specgate", "traced", "specgate", "rps"))


def summarise(results: dict, ttfb: dict) -> list[dict]:  # type: ignore[type-arg]
    """One row per (mode, concurrency): each target's medians over the rounds as
    ``<target>_<key>``, the ratios of those present, and at concurrency 1 the added p50 and
    TTFB of each router over ``direct`` (ms)."""
    rows = []
    for mode, cells in results.items():
        for c, by in cells.items():
            med = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in by.items()}
            row: dict[str, float | str | int] = {
                "mode": mode, "concurrency": int(c), **{f"{n}_{k}": v for n, m in med.items() for k, v in m.items()}}
            for key, a, b, what in _RATIOS:
                if a in med and b in med and med[b].get(what):
                    row[key] = med[a][what] / med[b][what]
            for base in (t for t in by if t.startswith("base")):
                if "specgate" not in by:
                    break
                # The rounds run the targets back to back, so round i of each is a pair that met
                # the same machine: the median of the paired ratios cancels slow drift.
                paired = [s["cpu_us_per_req"] / b["cpu_us_per_req"] for s, b in zip(by["specgate"], by[base])]
                row[f"cpu_specgate_over_{base}"] = statistics.median(paired)
                row[f"cpu_specgate_over_{base}_rounds"] = ", ".join(f"{x:.2f}" for x in paired)
            if "traced" in by and "specgate" in by:  # tracing on at 100% over off, paired per round
                paired = [t["cpu_us_per_req"] / s["cpu_us_per_req"] for t, s in zip(by["traced"], by["specgate"])]
                row["cpu_traced_over_specgate"] = statistics.median(paired)
                row["cpu_traced_over_specgate_rounds"] = ", ".join(f"{x:.2f}" for x in paired)
            for name in FEATURE_OFF:  # a feature's cost: specgate (all on) over specgate without it
                if name in by and "specgate" in by:
                    paired = [s["cpu_us_per_req"] / f["cpu_us_per_req"] for s, f in zip(by["specgate"], by[name])]
                    row[f"cpu_specgate_over_{name}"] = statistics.median(paired)
                    row[f"cpu_specgate_over_{name}_rounds"] = ", ".join(f"{x:.2f}" for x in paired)
            if int(c) == 1 and "direct" in med:
                for name in med:
                    if name == "direct":
                        continue
                    row[f"added_p50_ms_{name}"] = med[name]["p50_ms"] - med["direct"]["p50_ms"]
                    if mode in ttfb:
                        row[f"added_ttfb_ms_{name}"] = ttfb[mode][name] - ttfb[mode]["direct"]
            rows.append(row)
    return rows


def print_table(rows: list[dict], targets: list[str]) -> None:  # type: ignore[type-arg]
    """Three tables: req/s per cell, CPU per request per cell (with the ratios), then the
    added latencies at concurrency 1 (ms)."""
    routers = [t for t in targets if t != "direct"]
    print("\nreq/s (median of the rounds)")
    print(f"{'mode':9} {'c':>3} " + " ".join(f"{t:>9}" for t in targets) + f" {'sg/base':>8} {'sg/rust':>8}")
    for r in rows:
        print(f"{r['mode']:9} {r['concurrency']:>3} " + " ".join(
            f"{r[f'{t}_rps']:9.0f}" if f"{t}_rps" in r else f"{'-':>9}" for t in targets)
            + f" {_fmt(r.get('rps_specgate_over_base')):>8} {_fmt(r.get('rps_specgate_over_rust')):>8}")
    print("\nrouter CPU per request, us (median of the rounds)")
    print(f"{'mode':9} {'c':>3} " + " ".join(f"{t:>9}" for t in routers)
          + f" {'sg/base':>8} {'sg/rust':>8}  sg/base per round")
    for r in rows:
        print(f"{r['mode']:9} {r['concurrency']:>3} " + " ".join(
            f"{r[f'{t}_cpu_us_per_req']:9.0f}" if f"{t}_cpu_us_per_req" in r else f"{'-':>9}" for t in routers)
            + f" {_fmt(r.get('cpu_specgate_over_base')):>8} {_fmt(r.get('cpu_specgate_over_rust')):>8}"
            f"  {r.get('cpu_specgate_over_base_rounds', '')}"
            + "".join(f"  sg/{t} {_fmt(r.get(f'cpu_specgate_over_{t}'))} ({r.get(f'cpu_specgate_over_{t}_rounds')})"
                      for t in routers if t.startswith("base") and t != "base"))
    if any("cpu_traced_over_specgate" in r for r in rows):
        print("\ntracing on (100% sampled) over off, router CPU per request (median of paired rounds)")
        for r in rows:
            if "cpu_traced_over_specgate" in r:
                extra = r["traced_cpu_us_per_req"] - r["specgate_cpu_us_per_req"]
                print(f"{r['mode']:9} {r['concurrency']:>3} {r['cpu_traced_over_specgate']:.2f}x "
                      f"(+{extra:.0f} us/req)  per round {r['cpu_traced_over_specgate_rounds']}")
    features = [n for n in FEATURE_OFF if any(f"cpu_specgate_over_{n}" in r for r in rows)]
    if features:
        print("\nwhat a feature costs: specgate (all on) over specgate with it off, router CPU per request "
              "(median of paired rounds; us/req: the medians' difference)")
        for r in rows:
            cells = [f"{n[3:]} {_fmt(r.get(f'cpu_specgate_over_{n}'))}x "
                     f"({r['specgate_cpu_us_per_req'] - r[f'{n}_cpu_us_per_req']:+.0f} us; "
                     f"{r.get(f'cpu_specgate_over_{n}_rounds')})" for n in features if f"{n}_cpu_us_per_req" in r]
            print(f"{r['mode']:9} {r['concurrency']:>3} " + "  ".join(cells))
    added = [r for r in rows if any(k.startswith("added_") for k in r)]
    if added:
        print("\nadded latency at c=1 over direct, ms (p50 of the whole request; time to first body byte)")
        print(f"{'mode':9} " + " ".join(f"{'+p50 ' + t:>14} {'+ttfb ' + t:>15}" for t in routers))
        for r in added:
            print(f"{r['mode']:9} " + " ".join(
                f"{_fmt(r.get(f'added_p50_ms_{t}')):>14} {_fmt(r.get(f'added_ttfb_ms_{t}')):>15}" for t in routers))


def _fmt(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "-"


def check_cpu(rows: list[dict], tolerance: float) -> int:  # type: ignore[type-arg]
    """0 when specgate's CPU per request is at most ``(1 + tolerance)`` x the base revision's
    (the median over the rounds of the paired ratios) in every cell at concurrency > 1, else 1
    (every checked cell is printed)."""
    failed = 0
    for r in rows:
        ratio = r.get("cpu_specgate_over_base")
        if r["concurrency"] <= 1 or not isinstance(ratio, float):
            continue
        ok = ratio <= 1 + tolerance
        failed += not ok
        print(f"check {r['mode']} c={r['concurrency']}: specgate/base CPU per request {ratio:.3f} "
              f"{'<=' if ok else '>'} {1 + tolerance:.2f}: {'ok' if ok else 'REGRESSION'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
