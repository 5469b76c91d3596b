"""``serving.local`` without SGLang: argv/env builders, and the process lifecycle exercised on
``serving.fake_sglang`` (which answers ``/health`` like SGLang) and on a process that dies."""

from __future__ import annotations

import os
import socket
import urllib.request

import pytest

from serving.local import (
    CPU_FLAGS,
    SGLangProcess,
    SGLangStartError,
    cpu_env,
    cpu_launch_args,
    free_port,
    start_sglang,
)


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_cpu_launch_args():
    argv = cpu_launch_args(
        "models/m", port=4321, served_model_name="m", context_length=1024,
        extra_args=["--speculative-algorithm", "NGRAM"],
    )
    text = " ".join(argv)
    assert argv[:2] == ["--model-path", "models/m"]
    assert " ".join(CPU_FLAGS) in text
    for piece in ("--dtype float32", "--port 4321", "--host 127.0.0.1", "--served-model-name m",
                  "--context-length 1024", "--random-seed 0", "--enable-metrics --log-level-http warning"):
        assert piece in text, piece
    assert argv[-2:] == ["--speculative-algorithm", "NGRAM"]


def test_cpu_env():
    env = cpu_env({"PATH": "/bin"}, SPECGATE_CPU_SAMPLED_VERIFY="0")
    assert env == {
        "PATH": "/bin",
        "SGLANG_USE_CPU_ENGINE": "1",
        "SGLANG_CPU_OMP_THREADS_BIND": "0",
        "SPECGATE_CPU_SAMPLED_VERIFY": "0",
    }
    assert cpu_env({}, omp_threads=4)["SGLANG_CPU_OMP_THREADS_BIND"] == "0-3"
    assert "SGLANG_CPU_OMP_THREADS_BIND" not in cpu_env({}, omp_threads=None)
    with pytest.raises(ValueError):
        cpu_env({}, omp_threads=0)


def test_start_sglang_needs_exactly_one_of_argv_and_model_path():
    with pytest.raises(ValueError):
        start_sglang(port=1)
    with pytest.raises(ValueError):
        start_sglang(["--x"], port=1, model_path="m")


def test_lifecycle_on_fake_server(tmp_path):
    port = free_port()
    log = tmp_path / "fake.log"
    server = SGLangProcess(
        ["--port", str(port)], port=port, module="serving.fake_sglang", log_path=log,
        env=dict(os.environ),
    )
    with server.start(ready_timeout_s=60) as running:
        assert running is server and server.alive() and server.ready_after_s is not None
        with urllib.request.urlopen(f"{server.base_url}/health", timeout=5) as resp:
            assert resp.status == 200
        assert server.rss_bytes() > 0
        pgid = server.pid
    assert not server.alive()
    assert server._group_pids() == []
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert server.stop() == server.proc.returncode  # idempotent
    with pytest.raises(RuntimeError):
        server.start()


def test_process_that_dies_raises_with_log_tail(tmp_path):
    server = SGLangProcess(
        ["--no-such-flag"], port=free_port(), module="serving.fake_sglang",
        log_path=tmp_path / "dead.log", env=dict(os.environ),
    )
    with pytest.raises(SGLangStartError) as info:
        server.start(ready_timeout_s=60)
    assert info.value.returncode not in (None, 0)
    assert "the following arguments are required: --port" in info.value.log_tail
    assert not server.alive()


BIND_FAILURE = ("ERROR:    [Errno 98] error while attempting to bind on address "
                "('127.0.0.1', {port}): address already in use")


def test_server_that_cannot_bind_fails_at_once(tmp_path):
    # SGLang's HTTP server logs uvicorn's bind failure and its scheduler lives on: the start
    # must say so instead of polling /health until the deadline
    (tmp_path / "squatted.py").write_text(
        "import sys, time\n"
        f"print({BIND_FAILURE!r}.format(port=sys.argv[2]), flush=True)\n"
        "time.sleep(600)\n")
    port = free_port()
    server = SGLangProcess(
        ["--port", str(port)], port=port, module="squatted", log_path=tmp_path / "squat.log",
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    with pytest.raises(SGLangStartError) as info:
        server.start(ready_timeout_s=300)
    assert str(info.value).startswith(f"squatted could not bind 127.0.0.1:{port}: address already in use (log: ")
    assert info.value.returncode is None
    assert BIND_FAILURE.format(port=port) in info.value.log_tail
    assert not server.alive() and server._group_pids() == []


def test_an_earlier_launchs_bind_failure_in_the_log_is_not_this_ones(tmp_path):
    port = free_port()
    log = tmp_path / "fake.log"
    log.write_text(BIND_FAILURE.format(port=port) + "\n")  # the log is appended to
    server = SGLangProcess(
        ["--port", str(port)], port=port, module="serving.fake_sglang", log_path=log,
        env=dict(os.environ),
    )
    with server.start(ready_timeout_s=60):
        assert server.alive()
