"""One trace across the router and the real SGLang 0.5.23 CPU engine: the engine is launched
from the pool config (``engine.otlp_traces_endpoint``: ``--enable-trace``, OTLP/HTTP), both
export to an OTLP/HTTP receiver that decodes the ``opentelemetry-proto`` messages
(``tests/support/otlp.py``), and the engine's request span is the child of the router's
client span, itself the child of the router's server span, child of the client's context.
``benchmarks/trace_real.py`` runs the same and prints the trace."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from benchmarks.trace_real import CLIENT_TRACE_ID, trace_through_engine
from tests.support.otlp import format_trace

pytestmark = pytest.mark.sglang


def test_one_trace_holds_the_router_and_the_engine_spans(sglang_installed, tiny_model_dir: Path,
                                                         tmp_path: Path) -> None:
    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None:
        pytest.skip("SGLang traces only with both OTLP exporters installed (serving/cpu/requirements.txt)")
    result = trace_through_engine(tiny_model_dir, tmp_path, ready_timeout_s=900)
    assert result.status == 200 and result.reason == "plain_only"
    mine = [s for s in result.spans if s.trace_id == CLIENT_TRACE_ID]
    assert result.checks == dict.fromkeys(result.checks, True), format_trace(mine)
    assert {s.service for s in mine} == {"specgate-router", "sglang-plain"}
    (engine_root,) = [s for s in mine if s.service == "sglang-plain" and "Req " in s.name]
    assert str(engine_root.attributes["rid"]).startswith("specgate-")  # the router's id, never the trace id
    assert engine_root.attributes["gen_ai.usage.completion_tokens"] == 4
