"""The ``backend`` fixture: one SGLang-compatible server per parameter, shared by a session.

Parameters:
- ``fake``: ``serving.fake_sglang`` in a background thread (context length 512, 1 ms per decode
  step so a long stream can be aborted mid-way, simple word count for prompt tokens).
- ``sglang`` (marked ``sglang``): the real SGLang 0.5.23 CPU server on the tiny Llama of
  ``serving.tinymodel`` (``models/tiny-llama``, built on first use), started and stopped with
  ``serving.local`` (``start_sglang(model_path=, port=, served_model_name=, context_length=)``
  -> handle with ``base_url``; ``stop_sglang(handle)``; CPU flags from
  ``serving.local.CPU_FLAGS``). Skipped when ``sglang`` is not importable.
  With ``SPECGATE_SGLANG_URL=http://127.0.0.1:PORT`` (and ``SPECGATE_SGLANG_TOKENIZER=DIR``,
  default: the server's ``/model_info`` ``tokenizer_path``) the suite runs against an SGLang
  server that is already running instead; its model name and context length are read from
  ``/v1/models``.

:class:`tests.support.backend.Backend` carries what a test needs to predict the server's numbers:
the context length, the reserved draft tokens, and a prompt-token counter that counts the way
that server does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import free_port
from tests.support.backend import Backend

REPO = Path(__file__).resolve().parents[2]
FAKE_MODEL = "contract-model"
FAKE_CONTEXT = 512
#: Context length the real server is launched with in the contract suite (tokens).
SGLANG_CONTEXT = int(os.environ.get("SPECGATE_CONTRACT_CONTEXT", "1024"))


@pytest.fixture(scope="session")
def fake_backend() -> Iterator[Backend]:
    """The fake, served for the whole session."""
    cfg = FakeConfig(model_name=FAKE_MODEL, context_length=FAKE_CONTEXT, decode_step_s=0.001)
    with FakeServer(cfg) as srv:
        yield Backend("fake", srv.base_url, FAKE_MODEL, FAKE_CONTEXT)


def _tiny_model_dir() -> Path:
    out = Path(os.environ.get("SPECGATE_TINY_MODEL", REPO / "models" / "tiny-llama"))
    if not (out / "manifest.json").exists():
        from serving import tinymodel

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
    port = free_port()
    from serving import local

    server = local.start_sglang(model_path=str(model_dir), port=port, served_model_name=name,
                                context_length=SGLANG_CONTEXT)
    base_url = server.base_url

    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        yield Backend("sglang", base_url, name, SGLANG_CONTEXT, 0, tok)
    finally:
        local.stop_sglang(server)


@pytest.fixture(params=["fake", pytest.param("sglang", marks=pytest.mark.sglang)])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each contract test runs once per backend."""
    return request.getfixturevalue(f"{request.param}_backend")
