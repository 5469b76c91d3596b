"""Pool launch specs from the operator YAML (serving.launch, `specgate serve`)."""

from __future__ import annotations

import importlib.util
import shlex
import sys

import pytest
import yaml

from router.cli import main
from router.config.tree import parse_config
from serving.launch import LaunchError, check_with_sglang, engine_argv, engine_env

DOC = {
    "model": {"name": "tiny-llama", "tokenizer": "/m/tok"},
    "limits": {"max_context_tokens": 245760},
    "pools": [
        {"name": "spec", "speculative": True, "endpoints": ["http://10.0.0.5:30001"], "max_context_tokens": 65536,
         "engine": {"model_path": "/m/target", "context_length": 65536, "tp_size": 8, "mem_fraction_static": 0.8,
                    "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/m/draft",
                    "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
                    "draft_max_positions": 65536, "extra_args": ["--chunked-prefill-size", "8192"]}},
        {"name": "plain", "speculative": False, "endpoints": ["http://10.0.0.6:30002"],
         "engine": {"model_path": "/m/target", "context_length": 1048576, "tp_size": 8}},
        {"name": "noengine", "speculative": False, "endpoints": ["http://10.0.0.7:1"]},
    ],
    "routing": {"long_prompt_tokens": 16384, "saturation": {"enter": 16, "exit": 12}},
}


def test_spec_argv():
    cfg = parse_config(DOC)
    assert engine_argv(cfg, "spec") == [
        "--model-path", "/m/target", "--served-model-name", "tiny-llama", "--host", "10.0.0.5", "--port", "30001",
        "--context-length", "65536", "--tp-size", "8", "--enable-metrics",
        "--log-level-http", "warning", "--mem-fraction-static", "0.8",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/m/draft",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--chunked-prefill-size", "8192"]
    assert cfg.pool("spec").reserved_tokens == 4


def test_context_length_never_above_the_validated_cap():
    # the engine advertises 1M; the validated cap is 245,760 (docs/operator-guide.md)
    argv = engine_argv(parse_config(DOC), "plain", host="0.0.0.0", port=30000)
    i = argv.index("--context-length")
    assert argv[i + 1] == "245760"
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "30000"
    assert "--enable-metrics" in argv


def test_pool_without_engine_and_cpu_env():
    cfg = parse_config(DOC)
    with pytest.raises(LaunchError, match="no `engine` section"):
        engine_argv(cfg, "noengine")
    assert "SGLANG_USE_CPU_ENGINE" not in engine_env(cfg, "plain", base={})
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc["pools"][1]["engine"]["cpu"] = True
    cfg = parse_config(doc)
    assert engine_env(cfg, "plain", base={}) == {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0"}
    assert engine_argv(cfg, "plain")[-8:] == ["--device", "cpu", "--attention-backend", "intel_amx",
                                              "--sampling-backend", "pytorch", "--disable-overlap-schedule",
                                              "--sleep-on-idle"]


def test_serve_print_args(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(DOC))
    assert main(["serve", "--config", str(f), "--pool", "spec", "--print-args"]) == 0
    cmd = shlex.split(capsys.readouterr().out)
    assert cmd[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert cmd[3:] == engine_argv(parse_config(DOC), "spec")
    assert main(["serve", "--config", str(f), "--pool", "nope", "--print-args"]) == 2


@pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="needs SGLang (make cpu-engine)")
def test_sglang_parser_checks_the_args():
    cfg = parse_config(DOC)
    assert check_with_sglang(engine_argv(cfg, "spec")) is True
    with pytest.raises(LaunchError, match="SGLang rejects"):
        check_with_sglang(engine_argv(cfg, "plain") + ["--no-such-flag"])
    with pytest.raises(LaunchError, match="SGLang rejects"):
        check_with_sglang(["--model-path", "/m", "--tp-size", "eight"])


def test_parsers_are_set_per_pool_and_embedding_pools_get_is_embedding():
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc["pools"][0]["engine"].update(tool_call_parser="llama3", reasoning_parser="deepseek-r1")
    doc["pools"][1]["engine"]["tool_call_parser"] = "llama3"
    doc["pools"].append({"name": "embed", "speculative": False, "endpoints": ["http://10.0.0.8:30003"],
                         "serves": ["embeddings", "rerank"], "engine": {"model_path": "/m/embed"}})
    cfg = parse_config(doc)
    spec = engine_argv(cfg, "spec")
    assert spec[spec.index("--tool-call-parser"):][:4] == [
        "--tool-call-parser", "llama3", "--reasoning-parser", "deepseek-r1"]
    assert spec[-2:] == ["--chunked-prefill-size", "8192"]  # extra_args still last
    plain = engine_argv(cfg, "plain")
    assert plain[-2:] == ["--tool-call-parser", "llama3"] and "--reasoning-parser" not in plain
    assert "--is-embedding" in engine_argv(cfg, "embed") and "--is-embedding" not in plain
    assert "--tool-call-parser" not in engine_argv(parse_config(DOC), "spec")
    if importlib.util.find_spec("sglang") is not None:
        assert check_with_sglang(spec) and check_with_sglang(engine_argv(cfg, "embed"))
        doc["pools"][1]["engine"]["tool_call_parser"] = "nope"
        with pytest.raises(LaunchError, match="tool-call-parser"):
            check_with_sglang(engine_argv(parse_config(doc), "plain"))


def test_engine_tracing_flags_follow_the_pool_config():
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc["pools"][1]["engine"].update(otlp_traces_endpoint="otel-collector:4317", otlp_service_name="sglang-plain")
    cfg = parse_config(doc)
    plain = engine_argv(cfg, "plain")
    assert plain[plain.index("--enable-trace"):][:5] == [
        "--enable-trace", "--otlp-traces-endpoint", "otel-collector:4317", "--otlp-service-name", "sglang-plain"]
    assert "--enable-trace" not in engine_argv(cfg, "spec")  # off unless configured
    if importlib.util.find_spec("sglang") is not None:
        assert check_with_sglang(plain)
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in engine_env(cfg, "plain", base={})  # gRPC: SGLang's default


def test_an_http_otlp_endpoint_selects_sglangs_http_exporter():
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc["pools"][1]["engine"].update(otlp_traces_endpoint="http://otel-collector:4318/v1/traces")
    cfg = parse_config(doc)
    plain = engine_argv(cfg, "plain")
    assert plain[plain.index("--enable-trace"):][:3] == [
        "--enable-trace", "--otlp-traces-endpoint", "http://otel-collector:4318/v1/traces"]
    assert engine_env(cfg, "plain", base={})["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in engine_env(cfg, "spec", base={})
