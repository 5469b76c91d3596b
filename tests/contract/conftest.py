"""The ``backend`` fixture: one SGLang-compatible server per parameter, shared by a session.

Parameters:
- ``fake``: ``serving.fake_sglang`` in a background thread (context length 512, 1 ms per decode
  step so a long stream can be aborted mid-way, simple word count for prompt tokens).
- ``sglang`` (marked ``sglang``): the real SGLang 0.5.23 CPU server on the tiny Llama of
  ``serving.tinymodel`` (``models/tiny-llama``, built on first use), started and stopped with
  ``serving.local`` (``start_sglang(model_path=, port=, served_model_name=, context_length=)``
  -> handle with ``base_url``; ``stop_sglang(handle)``). While that module does not exist, the
  fixture launches ``python -m sglang.launch_server`` itself with the CPU flags of
  ``shared/SGLANG_CPU.md``. Skipped when ``sglang`` is not importable.
  With ``SPECGATE_SGLANG_URL=http://127.0.0.1:PORT`` (and ``SPECGATE_SGLANG_TOKENIZER=DIR``,
  default: the server's ``/model_info`` ``tokenizer_path``) the suite runs against an SGLang
  server that is already running instead; its model name and context length are read from
  ``/v1/models``.

``Backend`` carries what a test needs to predict the server's numbers: the context length, the
reserved draft tokens, and a prompt-token counter that counts the way that server does.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from serving.fake_sglang import FakeConfig, FakeServer, simple_chat_tokens, simple_text_tokens

REPO = Path(__file__).resolve().parents[2]
FAKE_MODEL = "contract-model"
FAKE_CONTEXT = 512
#: SGLang's CPU flags (shared/SGLANG_CPU.md), when serving.launch is not importable.
_CPU_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "intel_amx",
    "--sampling-backend",
    "pytorch",
    "--disable-overlap-schedule",
)
#: Context length the real server is launched with in the contract suite (tokens).
SGLANG_CONTEXT = int(os.environ.get("SPECGATE_CONTRACT_CONTEXT", "1024"))


@dataclass
class Backend:
    """A running SGLang-compatible server and how it counts tokens.

    kind: "fake" or "sglang". base_url: ``http://127.0.0.1:PORT``. model: served model name.
    context_length: the server's context length in tokens. reserved_tokens: draft tokens
    SGLang adds to the input length in its length check (0 without EAGLE). tokenizer: a
    Hugging Face tokenizer for exact counts, or None for the fake's simple count.
    """

    kind: str
    base_url: str
    model: str
    context_length: int
    reserved_tokens: int = 0
    tokenizer: Any = None

    def chat_tokens(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
        """Prompt tokens of a chat request as this server counts them."""
        if self.tokenizer is None:
            return simple_chat_tokens(messages, tools)
        rendered = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, tools=tools
        )
        return len(self.tokenizer.encode(rendered, add_special_tokens=False))

    def text_tokens(self, text: str) -> int:
        """Prompt tokens of a completions string prompt as this server counts them."""
        if self.tokenizer is None:
            return simple_text_tokens(text)
        return len(self.tokenizer.encode(text))

    def client(self, timeout_s: float = 60.0) -> httpx.Client:
        """A fresh httpx client on the server (caller closes it)."""
        return httpx.Client(base_url=self.base_url, timeout=timeout_s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def fake_backend() -> Iterator[Backend]:
    """The fake, served for the whole session."""
    cfg = FakeConfig(model_name=FAKE_MODEL, context_length=FAKE_CONTEXT, decode_step_s=0.001)
    with FakeServer(cfg) as srv:
        yield Backend("fake", srv.base_url, FAKE_MODEL, FAKE_CONTEXT)


def _tiny_model_dir() -> Path:
    out = Path(os.environ.get("SPECGATE_TINY_MODEL", REPO / "models" / "tiny-llama"))
    if not (out / "manifest.json").exists():
        tinymodel = importlib.import_module("serving.tinymodel")
        tinymodel.build(out, progress=False)
    return out


def _external_sglang(url: str) -> Backend:
    from transformers import AutoTokenizer

    with httpx.Client(base_url=url, timeout=30) as c:
        card = c.get("/v1/models").json()["data"][0]
        tok_dir = (
            os.environ.get("SPECGATE_SGLANG_TOKENIZER")
            or c.get("/model_info").json()["tokenizer_path"]
        )
        info = c.get("/server_info").json()
    reserved = 0
    if (info.get("speculative_algorithm") or "").upper() in ("EAGLE", "EAGLE3"):
        reserved = max(
            info["speculative_eagle_topk"] * info["speculative_num_steps"],
            info["speculative_num_draft_tokens"],
        )
    return Backend(
        "sglang",
        url,
        card["id"],
        card["max_model_len"],
        reserved,
        AutoTokenizer.from_pretrained(tok_dir),
    )


@pytest.fixture(scope="module")
def sglang_backend() -> Iterator[Backend]:
    """The real SGLang CPU server on the tiny model, for one test module (an idle SGLang CPU
    scheduler still keeps most of a core busy, so it must not outlive the module)."""
    external = os.environ.get("SPECGATE_SGLANG_URL")
    if external:
        yield _external_sglang(external.rstrip("/"))
        return
    pytest.importorskip("sglang", reason="SGLang is not installed (make cpu-engine)")
    from transformers import AutoTokenizer

    model_dir = _tiny_model_dir()
    name = "tiny-llama"
    port = _free_port()
    try:
        local = importlib.import_module("serving.local")
    except ModuleNotFoundError as e:
        if e.name != "serving.local":
            raise
        local = None
    if local is not None:
        server = local.start_sglang(
            model_path=str(model_dir),
            port=port,
            served_model_name=name,
            context_length=SGLANG_CONTEXT,
        )
        base_url = getattr(server, "base_url", f"http://127.0.0.1:{port}")

        def stop() -> None:
            local.stop_sglang(server)
    else:
        proc, log = _launch_sglang(model_dir, port, name, SGLANG_CONTEXT)
        base_url = f"http://127.0.0.1:{port}"

        def stop() -> None:
            _stop_process(proc, log)

    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        yield Backend("sglang", base_url, name, SGLANG_CONTEXT, 0, tok)
    finally:
        stop()


def _launch_sglang(
    model_dir: Path, port: int, name: str, context_length: int, timeout_s: float = 300.0
) -> tuple[subprocess.Popen[bytes], Any]:
    """Start ``python -m sglang.launch_server`` with the CPU flags of shared/SGLANG_CPU.md and
    wait until ``/health`` answers 200. Used while ``serving.local`` does not exist.

    Errors: ``RuntimeError`` with the log tail if the server exits or is not ready in
    ``timeout_s`` seconds (the tiny model is ready in about 25 s on 2 cores).
    """
    try:
        from serving.launch import CPU_FLAGS as cpu_flags
    except ImportError:
        cpu_flags = _CPU_FLAGS
    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model_dir),
        "--served-model-name",
        name,
        "--context-length",
        str(context_length),
        *cpu_flags,
        "--mem-fraction-static",
        "0.1",
        "--max-total-tokens",
        "4096",
        "--enable-metrics",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1"}
    # the log outlives this function (closed by _stop_process)
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115
        prefix="contract-sglang-", suffix=".log", delete=False
    )
    proc = subprocess.Popen(
        argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            # /v1/models answers while SGLang still warms up; /health is 503 until it is Up
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200:
                return proc, log
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    _stop_process(proc, log, keep=True)
    tail = Path(log.name).read_text(errors="replace")[-3000:]
    raise RuntimeError(f"SGLang did not become ready on port {port}; log {log.name}:\n{tail}")


def _stop_process(proc: subprocess.Popen[bytes], log: Any, keep: bool = False) -> None:
    """SIGTERM the server's process group (SGLang's children exit within ~5 s), then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    log.close()
    if not keep:
        with contextlib.suppress(OSError):
            os.unlink(log.name)


@pytest.fixture(params=["fake", pytest.param("sglang", marks=pytest.mark.sglang)])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each contract test runs once per backend."""
    return request.getfixturevalue(f"{request.param}_backend")
