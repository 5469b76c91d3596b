"""Router CPU per request, interleaved: another checkout vs this one, and tracing off vs on.

    .venv/bin/python benchmarks/front_door_overhead.py [--base DIR] [--runs 4] [--duration 6]
        [--modes nonstream,stream]

Setup as :mod:`benchmarks.router_overhead` (all on 127.0.0.1, one ``specgate router``
process per target pinned to core 0; ``benchmarks/fast_backend.py``, ``wrk -t1 -c16`` and a
stub OTLP/HTTP receiver that answers 200 to every export on the last core). Targets:

- ``base``: the router of the checkout ``--base`` (e.g. ``git archive <commit> | tar -x -C
  DIR``), tracing off; left out without ``--base``;
- ``tracing_off``: this checkout's router, tracing off (the default);
- ``tracing_on``: this checkout's router with ``tracing.enabled`` at ``sampler_ratio: 1.0``
  exporting to the stub (the SDK's batch processor: its export thread's CPU is counted, the
  process's utime+stime).

Each run measures every target once, in alternating order; prints each run and the medians
(router CPU us per request = CPU seconds during the run / requests wrk completed).
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

from benchmarks.router_overhead import (
    CHAT_BODY,
    OTLP_STUB,
    STREAM_BODY,
    cpu_seconds,
    ensure_wrk,
    free_port,
    parse_wrk,
    stop_processes,
    wait_http,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=None, help="another checkout's root to compare (tracing off)")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--duration", type=int, default=6, help="seconds per wrk run")
    ap.add_argument("--modes", default="nonstream,stream")
    ap.add_argument("--tokenizer", default=str(ROOT / "models" / "tiny-llama"))
    args = ap.parse_args()
    wrk = ensure_wrk()
    work = Path(tempfile.mkdtemp(prefix="specgate-frontdoor-"))
    tokenizer = Path(args.tokenizer)
    if not (tokenizer / "tokenizer.json").exists():
        from tests.support.tokenizer import make_test_tokenizer

        tokenizer = make_test_tokenizer(work / "tokenizer")
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(cmd: list[str], cpu: str, log: str, cwd: str | None = None) -> subprocess.Popen[bytes]:
        env = None if cwd is None else {**os.environ, "PYTHONPATH": cwd}
        p = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=open(work / log, "wb"),  # noqa: SIM115
                             stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd, env=env)
        procs.append(p)
        return p

    load_cpu = str((os.cpu_count() or 2) - 1)
    try:
        backend_port, otlp_port = free_port(), free_port()
        spawn([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(backend_port)],
              load_cpu, "backend.log")
        (work / "otlp_stub.py").write_text(OTLP_STUB)
        spawn([sys.executable, str(work / "otlp_stub.py"), str(otlp_port)], load_cpu, "otlp.log")
        wait_http(f"http://127.0.0.1:{backend_port}/health")
        doc = {"model": {"name": "bench", "tokenizer": str(tokenizer)},
               "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
               "pools": [{"name": "plain", "speculative": False, "endpoints": [f"http://127.0.0.1:{backend_port}"]}],
               "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
               "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
               "server": {"log_requests": False}}
        off, on = work / "off.yaml", work / "on.yaml"
        off.write_text(json.dumps(doc))
        on.write_text(json.dumps({**doc, "tracing": {"enabled": True, "sampler_ratio": 1.0,
                                                     "endpoint": f"http://127.0.0.1:{otlp_port}/v1/traces"}}))
        plan = ([("base", off, args.base)] if args.base else []) + [
            ("tracing_off", off, str(ROOT)), ("tracing_on", on, str(ROOT))]
        targets = {}
        for name, cfg, root in plan:
            port = free_port()
            p = spawn([sys.executable, "-m", "router.cli", "router", "--config", str(cfg), "--port", str(port)],
                      "0", f"{name}.log", cwd=root)
            targets[name] = (port, p)
        for port, _ in targets.values():
            wait_http(f"http://127.0.0.1:{port}/ready", 300)
        results: dict[tuple[str, str], list[float]] = {}
        for mode in args.modes.split(","):
            lua = work / f"{mode}.lua"
            lua.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(CHAT_BODY if mode == "nonstream" else STREAM_BODY)}\n'
                           'wrk.headers["Content-Type"] = "application/json"\n')
            for run in range(args.runs):
                order = list(targets.items())
                for name, (port, p) in order if run % 2 == 0 else reversed(order):
                    c0 = cpu_seconds(p.pid)
                    out = subprocess.run(["taskset", "-c", load_cpu, wrk, "-t1", "-c16", f"-d{args.duration}s",
                                          "--latency", "-s", str(lua), f"http://127.0.0.1:{port}/v1/chat/completions"],
                                         capture_output=True, text=True, check=True).stdout
                    r = parse_wrk(out)
                    us = (cpu_seconds(p.pid) - c0) / max(r["requests"], 1) * 1e6
                    results.setdefault((mode, name), []).append(us)
                    print(f"{mode:9} run {run + 1} {name:11} {r['rps']:7.0f} req/s  cpu {us:6.0f} us/req"
                          + (f"  errors {r['errors']}" if r["errors"] else ""), flush=True)
        for (mode, name), values in results.items():
            print(f"median {mode:9} {name:11} {statistics.median(values):6.0f} us/req  runs {[round(v) for v in values]}")
        return 0
    finally:
        stop_processes(procs)


if __name__ == "__main__":
    raise SystemExit(main())
