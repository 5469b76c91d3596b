"""Pool launch specs: the router's operator YAML -> ``python -m sglang.launch_server`` argv.

One description serves the router (limits, reserved draft tokens) and the engines (launch
arguments), so the two cannot disagree. Rules:

- ``--enable-metrics`` is always on (the router reads ``sglang:num_running_reqs`` & co.).
- ``--context-length`` is ``min(engine.context_length, limits.max_context_tokens)``: never
  above the validated safe context (docs/operator-guide.md, "The context cap": a ~300k-token request killed an
  engine that advertised 1M; capping the engine at the validated length turned that into a clean 400).
- ``--served-model-name`` defaults to ``model.name``, so clients see one model name.
- Speculative arguments are passed under SGLang's own names (``--speculative-algorithm``,
  ``--speculative-draft-model-path``, ``--speculative-num-steps``,
  ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``).
- ``engine.tool_call_parser`` / ``engine.reasoning_parser`` become ``--tool-call-parser`` /
  ``--reasoning-parser`` (set per pool: both pools of one model should use the same parsers,
  or the tool-call output differs by pool); left out when unset.
- ``engine.otlp_traces_endpoint`` becomes ``--enable-trace --otlp-traces-endpoint`` (and
  ``engine.otlp_service_name`` ``--otlp-service-name``): the engine's request spans then join
  the router's trace (it forwards ``traceparent``). ``host:port`` is OTLP/gRPC (SGLang's
  default); an ``http://`` or ``https://`` URL (``.../v1/traces``) is OTLP/HTTP, for which
  :func:`engine_env` sets ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`` (SGLang 0.5.23
  ``observability/trace.py`` reads it). SGLang exports only when the OpenTelemetry SDK and
  both OTLP exporters (gRPC and HTTP) import in its environment.
- A pool whose ``serves`` lacks ``generate`` (an embedding or reranking model) gets
  ``--is-embedding``.
- ``engine.cpu: true`` adds the CPU-engine flags known to run SGLang 0.5.23 on a CPU
  (found by running it on this project's CPU VM): ``--device cpu --attention-backend intel_amx
  --sampling-backend pytorch --disable-overlap-schedule --sleep-on-idle`` and ``SGLANG_USE_CPU_ENGINE=1``.

When SGLang is importable, :func:`check_with_sglang` parses the argv with SGLang's own
argument parser (``ServerArgs.add_cli_args``) before launch, so a typo fails here, not in a
crash-looping pod.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from urllib.parse import urlparse

from router.config import Config, PoolConfig
from serving.local import CPU_FLAGS, cpu_env

__all__ = ["CPU_FLAGS", "LaunchError", "check_with_sglang", "engine_argv", "engine_env", "is_http_endpoint"]



class LaunchError(ValueError):
    """The pool has no ``engine`` section, or SGLang's parser rejects the arguments."""


def _listen(pool: PoolConfig) -> tuple[str, int]:
    if pool.endpoints:
        url = urlparse(pool.endpoints[0])
        return url.hostname or "0.0.0.0", url.port or 30000
    port = pool.discovery.port if pool.discovery else 30000
    return "0.0.0.0", port


def engine_argv(config: Config, pool_name: str, *, host: str | None = None, port: int | None = None) -> list[str]:
    """The ``sglang.launch_server`` arguments (without the interpreter) for one pool.

    Args:
        config: the validated operator config.
        pool_name: which pool.
        host, port: where the engine listens; default: the pool's first endpoint URL.

    Raises:
        LaunchError: when the pool has no ``engine`` section.
        KeyError: when there is no such pool.
    """
    pool = config.pool(pool_name)
    engine = pool.engine
    if engine is None:
        raise LaunchError(f"pool {pool_name!r} has no `engine` section")
    default_host, default_port = _listen(pool)
    model = config.model_of(pool_name)  # the model whose pools hold it (a `models:` list or the one)
    cap = model.limits.max_context_tokens
    context = min(engine.context_length or cap, cap)
    argv = ["--model-path", engine.model_path,
            "--served-model-name", engine.served_model_name or model.name,
            "--host", host or default_host, "--port", str(port or default_port),
            "--context-length", str(context), "--tp-size", str(engine.tp_size), "--enable-metrics",
            # the router scrapes /metrics every scrape.interval_s (0.25 s by default): without
            # this, SGLang's HTTP access log is mostly those scrapes (extra_args may override)
            "--log-level-http", "warning"]
    if engine.mem_fraction_static is not None:
        argv += ["--mem-fraction-static", repr(engine.mem_fraction_static)]
    if engine.max_total_tokens is not None:
        argv += ["--max-total-tokens", str(engine.max_total_tokens)]
    if engine.dtype is not None:
        argv += ["--dtype", engine.dtype]
    if engine.speculative_algorithm is not None:
        argv += ["--speculative-algorithm", engine.speculative_algorithm]
        for flag, value in (("--speculative-draft-model-path", engine.speculative_draft_model_path),
                            ("--speculative-num-steps", engine.speculative_num_steps),
                            ("--speculative-eagle-topk", engine.speculative_eagle_topk),
                            ("--speculative-num-draft-tokens", engine.speculative_num_draft_tokens)):
            if value is not None:
                argv += [flag, str(value)]
    if engine.tool_call_parser is not None:
        argv += ["--tool-call-parser", engine.tool_call_parser]
    if engine.reasoning_parser is not None:
        argv += ["--reasoning-parser", engine.reasoning_parser]
    if engine.otlp_traces_endpoint is not None:
        argv += ["--enable-trace", "--otlp-traces-endpoint", engine.otlp_traces_endpoint]
        if engine.otlp_service_name is not None:
            argv += ["--otlp-service-name", engine.otlp_service_name]
    if engine.lora_paths:  # SGLang's `<name>=<path>` entries; `<model>:<name>` or lora_path picks one
        argv += ["--enable-lora", "--lora-paths", *engine.lora_paths]
    if "generate" not in pool.serves:
        argv += ["--is-embedding"]
    if engine.cpu:
        argv += list(CPU_FLAGS)
    argv += list(engine.extra_args)
    return argv


def engine_env(config: Config, pool_name: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the engine process.

    In CPU mode: :func:`serving.local.cpu_env` (``SGLANG_USE_CPU_ENGINE=1`` and one OpenMP
    thread, which decoded the tiny models ~13x faster than two on a busy 2-core machine).
    With an ``http(s)://`` ``otlp_traces_endpoint``: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``.
    """
    env = dict(os.environ if base is None else base)
    engine = config.pool(pool_name).engine
    if engine is not None and engine.cpu:
        env = cpu_env(env)
    if engine is not None and engine.otlp_traces_endpoint is not None and is_http_endpoint(engine.otlp_traces_endpoint):
        env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    return env


def is_http_endpoint(endpoint: str) -> bool:
    """True when an OTLP endpoint is an OTLP/HTTP URL (``http://`` or ``https://``), not gRPC ``host:port``."""
    return endpoint.startswith(("http://", "https://"))


def check_with_sglang(argv: list[str]) -> bool:
    """Parse ``argv`` with SGLang's own CLI parser; returns False when SGLang is not installed.

    Raises:
        LaunchError: with SGLang's parser message when it rejects the arguments.
    """
    import warnings

    try:
        with warnings.catch_warnings():  # SGLang's import chain warns (requests, triton on CPU)
            warnings.simplefilter("ignore")
            from sglang.srt.server_args import ServerArgs
    except ImportError:  # not installed (router-only images)
        return False
    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        detail = err.getvalue().strip().splitlines()[-1:] or [str(exc)]
        raise LaunchError(f"SGLang rejects the launch arguments: {detail[0]}") from None
    return True


def launch_command(argv: list[str]) -> list[str]:
    """The full command line: this interpreter, ``-m sglang.launch_server``, then ``argv``."""
    return [sys.executable, "-m", "sglang.launch_server", *argv]
