"""One trace through the router and a real SGLang CPU engine, printed span by span.

    .venv/bin/python benchmarks/trace_real.py [--model models/tiny-llama] [--stream]
        [--ready-timeout 900] [--out trace.json] [--work DIR]

Starts, all on 127.0.0.1:

- an OTLP/HTTP receiver (:class:`tests.support.otlp.OtlpReceiver`: aiohttp decoding the
  ``opentelemetry-proto`` ``ExportTraceServiceRequest`` messages);
- the real SGLang 0.5.23 CPU engine from a pool config (``serving.launch.engine_argv`` and
  ``engine_env``: ``engine.otlp_traces_endpoint`` set to the receiver's URL becomes
  ``--enable-trace --otlp-traces-endpoint`` with the engine's OTLP/HTTP exporter);
- the router with ``tracing.enabled`` exporting to the same receiver.

Then it sends one chat request carrying a client ``traceparent``, stops the router (which
flushes its spans), waits until the engine's request and scheduler spans arrive, and prints every span of
the client's trace as a tree (service, kind, name, span id <- parent span id), the one trace
id, and the checks: the router's server span is the client's child, its client span the
server span's child, and the engine's request span the client span's child.
Exit status 1 when a check fails. The engine takes 1-10 minutes to start on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from router import parse_config
from serving.launch import engine_argv, engine_env
from serving.local import SGLangProcess, free_port
from tests.support.otlp import OtlpReceiver, ReceivedSpan, format_trace
from tests.support.router import RouterServer

#: The client's trace context (W3C Trace Context): trace id and the client's own span id.
CLIENT_TRACE_ID = "5e1f0c2a9b8d4e7fa1c3b5d7e9f10234"
CLIENT_SPAN_ID = "a1b2c3d4e5f60718"
TRACEPARENT = f"00-{CLIENT_TRACE_ID}-{CLIENT_SPAN_ID}-01"


@dataclass
class TraceResult:
    """What one run saw: ``spans`` of the client's trace, the checks by name, the answer's status."""

    spans: list[ReceivedSpan]
    checks: dict[str, bool]
    status: int
    reason: str | None


def router_doc(model: Path, engine_port: int, otlp_url: str) -> dict[str, object]:
    """The router YAML: one plain CPU pool whose engine exports to ``otlp_url``, tracing on."""
    return {
        "model": {"name": "tiny-llama", "tokenizer": str(model)},
        "limits": {"max_context_tokens": 1024, "default_max_tokens": 8},
        "pools": [{"name": "plain", "speculative": False, "endpoints": [f"http://127.0.0.1:{engine_port}"],
                   "engine": {"model_path": str(model), "served_model_name": "tiny-llama", "cpu": True,
                              "dtype": "float32", "mem_fraction_static": 0.5, "max_total_tokens": 4096,
                              "otlp_traces_endpoint": otlp_url, "otlp_service_name": "sglang-plain",
                              "extra_args": ["--random-seed", "0"]}}],
        "routing": {"long_prompt_tokens": 512, "saturation": {"enter": 8, "exit": 6}},
        "scrape": {"interval_s": 0.5, "timeout_s": 5.0, "stale_after_s": 10.0},
        "server": {"log_requests": False},
        "tracing": {"enabled": True, "endpoint": otlp_url, "service_name": "specgate-router", "sampler_ratio": 1.0},
    }


def check_trace(spans: list[ReceivedSpan]) -> dict[str, bool]:
    """The parent links the trace must show (module docstring)."""
    server = [s for s in spans if s.service == "specgate-router" and s.kind == "SERVER"]
    client = [s for s in spans if s.service == "specgate-router" and s.kind == "CLIENT"]
    engine = [s for s in spans if s.service == "sglang-plain"]
    engine_ids = {s.span_id for s in engine}
    roots = [s for s in engine if s.parent_span_id not in engine_ids]  # the engine's request span(s)
    return {
        "one trace id (the client's)": bool(spans) and {s.trace_id for s in spans} == {CLIENT_TRACE_ID},
        "router server span is the client's child": len(server) == 1 and server[0].parent_span_id == CLIENT_SPAN_ID,
        "router client span is the server span's child": len(client) == 1 and bool(server)
        and client[0].parent_span_id == server[0].span_id,
        "engine request span is the client span's child": len(roots) == 1 and bool(client)
        and roots[0].parent_span_id == client[0].span_id,
    }


def complete(spans: list[ReceivedSpan]) -> bool:
    """Whether the client's trace holds the router's server span, the engine's request span
    (``Req <rid>``, from its API server process) and its scheduler's thread span (from the
    scheduler process, exported separately)."""
    mine = [s for s in spans if s.trace_id == CLIENT_TRACE_ID]
    return (any(s.service == "specgate-router" and s.kind == "SERVER" for s in mine)
            and any(s.service == "sglang-plain" and "Req " in s.name for s in mine)
            and any(s.service == "sglang-plain" and s.name.startswith("Scheduler") for s in mine))


def trace_through_engine(model: Path, work: Path, *, stream: bool = False,
                         ready_timeout_s: float = 900.0, spans_timeout_s: float = 60.0) -> TraceResult:
    """Run the whole setup once (module docstring) and return what the receiver saw."""
    with OtlpReceiver() as rx:
        port = free_port()
        doc = router_doc(model, port, rx.url)
        cfg = parse_config(doc)
        engine = SGLangProcess(engine_argv(cfg, "plain", host="127.0.0.1", port=port), port=port,
                               env=engine_env(cfg, "plain"), log_path=work / "sglang.log")
        config_path = work / "router.yaml"
        config_path.write_text(yaml.safe_dump(doc))
        try:
            engine.start(ready_timeout_s=ready_timeout_s)
            router = RouterServer(config_path).start(ready=True, timeout=60)
            try:
                body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "def fibonacci(n):"}],
                        "max_tokens": 4, "temperature": 0, "stream": stream}
                r = httpx.post(router.base_url + "/v1/chat/completions", json=body, timeout=300,
                               headers={"traceparent": TRACEPARENT, "tracestate": "client=1"})
                status, reason = r.status_code, r.headers.get("x-specgate-reason")
            finally:
                router.stop()  # flushes the router's spans

            try:  # the engine's request span (API server process) and its scheduler's spans
                rx.wait_for(complete, spans_timeout_s, "the router's and the engine's request spans")
            except AssertionError as exc:
                print(f"warning: {exc}", file=sys.stderr)
        finally:
            engine.stop()
        spans = rx.spans()
    return TraceResult(spans=spans, checks=check_trace([s for s in spans if s.trace_id == CLIENT_TRACE_ID]),
                       status=status, reason=reason)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-llama")
    ap.add_argument("--stream", action="store_true", help="a streamed request")
    ap.add_argument("--ready-timeout", type=float, default=900.0, help="seconds the engine may take to start")
    ap.add_argument("--out", type=Path, help="write the spans and checks as JSON")
    ap.add_argument("--work", type=Path, help="keep the engine log and router.yaml here (default: a temporary directory)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trace-real-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = trace_through_engine(args.model.resolve(), work, stream=args.stream,
                                      ready_timeout_s=args.ready_timeout)
    mine = [s for s in result.spans if s.trace_id == CLIENT_TRACE_ID]
    others = {s.trace_id for s in result.spans} - {CLIENT_TRACE_ID}
    print(f"answer: HTTP {result.status}, x-specgate-reason {result.reason}")
    print(f"client traceparent: {TRACEPARENT}")
    print(format_trace(mine))
    print(f"the client's trace: {len(mine)} spans from {sorted({s.service for s in mine})}; "
          f"{len(others)} other traces (the engine's own start-up and the router's warm-up requests, "
          f"sent without trace context)")
    for name, ok in result.checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if args.out:
        args.out.write_text(json.dumps({"spans": [asdict(s) for s in result.spans], "checks": result.checks,
                                        "status": result.status}, indent=1))
    return 0 if result.status == 200 and all(result.checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
