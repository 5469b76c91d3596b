"""Sampling profile of ``specgate router`` under load (py-spy), summarised per function.

    .venv/bin/python benchmarks/profile_router.py [--seconds 15] [--rate 200] [--stream]
        [--concurrency 16] [--top 40] [--out runs/profile] [--tree PATH] [--native]

The setup of ``benchmarks/router_overhead.py``: ``benchmarks/fast_backend.py`` and ``wrk``
pinned to the last core, the router alone on core 0, the same config (one plain pool, the
prefix choice, token counting and metrics on, access log off). ``py-spy record`` (installed
with ``pip install py-spy``) samples the router for ``--seconds`` at ``--rate`` Hz while
``wrk`` keeps it busy; the collapsed stacks are written to ``<out>/specgate.folded`` (a flame
graph tool reads them) and the script prints the functions with the largest *inclusive* share
of the samples (a function counted once per sample however often it appears in the stack)
and the largest *self* share (the innermost frame), each also as microseconds of the router's
CPU per request. ``--tree`` profiles the router package of another checkout (e.g. ``git
worktree add /tmp/base <rev>``), with this checkout's backend and config.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.router_overhead import (  # after the path set-up
    CHAT_BODY,
    ROOT,
    STREAM_BODY,
    cpu_seconds,
    ensure_wrk,
    free_port,
    stop_processes,
    wait_http,
)


def summarise(folded: Path, top: int, us_per_request: float | None = None) -> None:
    """Print the ``top`` functions by inclusive and by self share of the samples; with
    ``us_per_request`` (the router's CPU per request), each share also as microseconds per
    request (share x CPU per request: an estimate, the samples include the loop's waits)."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [f.split(" (", 1)[0] + " (" + f.split(" (", 1)[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in f else f for f in stack.split(";")]
        for name in set(frames):
            inclusive[name] += n
        own[frames[-1]] += n
    print(f"{total} samples")
    for title, counter in (("inclusive", inclusive), ("self", own)):
        print(f"\n{title}:")
        for name, n in counter.most_common(top):
            us = f"{us_per_request * n / total:7.1f} us  " if us_per_request else ""
            print(f"{100 * n / total:6.1f}%  {us}{name}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--rate", type=int, default=200, help="samples per second")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--stream", action="store_true", help="streamed requests (default: non-streamed)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--native", action="store_true",
                    help="py-spy --native: C frames too (uvloop, httptools, builtins); py-spy then stops the "
                         "process for each sample, so the CPU per request it prints is inflated")
    ap.add_argument("--out", default="runs/profile")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    ap.add_argument("--tree", default=str(ROOT),
                    help="checkout whose router package is profiled (e.g. a `git worktree` of an older revision)")
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        raise SystemExit("py-spy not found: pip install py-spy")
    ncpu = os.cpu_count() or 2
    router_cpu, load_cpu = "0", str(ncpu - 1)
    wrk = ensure_wrk()
    work = Path(tempfile.mkdtemp(prefix="specgate-profile-"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Path(args.tokenizer)
    if not (tokenizer / "tokenizer.json").exists():
        from tests.support import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], cpu: str, log: str, env: dict[str, str] | None = None,
              cwd: Path = ROOT) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=open(work / log, "wb"),  # noqa: SIM115  the child owns it
                             stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
                             env={**os.environ, **(env or {})})
        procs.append(p)
        return p

    try:
        backend_port, port = free_port(), free_port()
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)],
              load_cpu, "backend.log")
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        cfg = work / "router.yaml"
        cfg.write_text(json.dumps({
            "model": {"name": "bench", "tokenizer": str(tokenizer)},
            "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
            "pools": [{"name": "plain", "speculative": False, "endpoints": [f"http://127.0.0.1:{backend_port}"]}],
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
            "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
            "server": {"log_requests": False}}))
        router = spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(port)],
                       router_cpu, "specgate.log", env={"PYTHONPATH": str(tree)}, cwd=tree)
        wait_http(f"http://127.0.0.1:{port}/ready")
        lua = work / "req.lua"
        lua.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(STREAM_BODY if args.stream else CHAT_BODY)}\n'
                       'wrk.headers["Content-Type"] = "application/json"\n')
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        load = subprocess.Popen(["taskset", "-c", load_cpu, wrk, "-t1", f"-c{args.concurrency}",
                                 f"-d{args.seconds + 4}s", "-s", str(lua), url],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(2)  # warm
        cpu0, t0 = cpu_seconds(router.pid), time.monotonic()
        folded = out / "specgate.folded"
        subprocess.run(["taskset", "-c", load_cpu, pyspy, "record", "--pid", str(router.pid), "--rate",
                        str(args.rate), "--duration", str(args.seconds), "--format", "raw",
                        *(["--native"] if args.native else ["--nonblocking"]), "--output", str(folded)], check=True, capture_output=True)
        cpu1, t1 = cpu_seconds(router.pid), time.monotonic()
        wrk_out, _ = load.communicate()
        print(wrk_out.strip().splitlines()[-2] if wrk_out.strip() else "")
        rps = float(wrk_out.split("Requests/sec:")[1].split()[0]) if "Requests/sec:" in wrk_out else 0.0
        us = (cpu1 - cpu0) / (rps * (t1 - t0)) * 1e6 if rps else None
        if us:
            print(f"router CPU per request while sampled: {us:.0f} us (py-spy's own reads included)")
        summarise(folded, args.top, us)
        print(f"\ncollapsed stacks: {folded}")
        return 0
    finally:
        stop_processes(procs)


if __name__ == "__main__":
    sys.exit(main())
