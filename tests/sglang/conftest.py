"""Fixtures for the tests that run the real SGLang 0.5.23 server on this CPU.

- ``tiny_model_dir``: the target model, ``$SPECGATE_MODEL_DIR`` or ``models/tiny-llama``, built
  with ``python -m serving.tinymodel`` when missing.
- ``eagle3_draft_dir``: an EAGLE-3 draft for it: the trained ``models/tiny-llama-eagle3`` when
  present, else a seeded random head (``_eagle3.py``).
- ``hf_model``: the same target in ``transformers`` (float32, eager attention), the reference.
- ``prompts``: token-id prompts (code, a repetitive block, a chat turn).
- ``cpu_server``: a factory that starts one SGLang CPU server (``serving.local``) with extra
  arguments and stops it when the requesting scope ends. Each test module asks for one server
  at module scope, so at most one runs at a time (each start takes 25-60 s on 2 cores).

Server tests skip when SGLang is not installed (``make cpu-engine``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from serving.local import SGLangProcess, cpu_env, cpu_launch_args
from tests.support import free_port

from ._eagle3 import build_random_eagle3_head

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """Path of the tiny Llama target; builds ``models/tiny-llama`` on first use."""
    env = os.environ.get("SPECGATE_MODEL_DIR")
    path = Path(env) if env else ROOT / "models" / "tiny-llama"
    if not (path / "config.json").exists():
        subprocess.run(
            [sys.executable, "-m", "serving.tinymodel", "--out", str(path)], cwd=ROOT, check=True
        )
    return path


@pytest.fixture(scope="session")
def eagle3_draft_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An EAGLE-3 draft for the tiny target: ``$SPECGATE_EAGLE3_DIR``, else the trained
    ``models/tiny-llama-eagle3`` (``drafters/eagle3``) when it exists, else a seeded random
    head in a temporary directory. Any drafter keeps greedy output exact; a trained one also
    gets drafts accepted, so the tree masks and accepted-path bookkeeping are exercised."""
    env = os.environ.get("SPECGATE_EAGLE3_DIR")
    if env:
        return Path(env)
    trained = ROOT / "models" / "tiny-llama-eagle3"
    if (trained / "config.json").exists() and (trained / "model.safetensors").exists():
        return trained
    return build_random_eagle3_head(tiny_model_dir, tmp_path_factory.mktemp("eagle3-head"))


@pytest.fixture(scope="session")
def hf_model(tiny_model_dir: Path) -> Any:
    """The target in ``transformers``, float32, eager attention, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()


@pytest.fixture(scope="session")
def prompts(tiny_model_dir: Path) -> list[list[int]]:
    """Token-id prompts: three code openings, a repetitive block, and a chat turn."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = [
        "def fibonacci(n):\n",
        "import os\nimport sys\n\n\nclass Config:\n    def __init__(self, path):\n",
        "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\nfor i in range(10):\n",
    ]
    texts.append(
        tok.apply_chat_template(
            [{"role": "user", "content": "Write a function that reverses a list."}],
            add_generation_prompt=True,
            tokenize=False,
        )
    )
    return [list(tok(t)["input_ids"]) for t in texts]


@pytest.fixture(scope="session")
def sglang_installed() -> None:
    """Skips the requesting test when SGLang is not installed in this interpreter's venv."""
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang is not installed (run `make cpu-engine`)")


ServerFactory = Callable[[Sequence[str]], SGLangProcess]


@pytest.fixture(scope="module")
def cpu_server(
    sglang_installed: None, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerFactory]:
    """Factory: ``cpu_server(extra_args)`` starts an SGLang CPU server on a free port of
    127.0.0.1 serving the tiny model (float32, seed 0) and returns it once ``/health`` is 200;
    every server started through it is stopped when the module's tests are done."""
    started: list[SGLangProcess] = []
    log_dir = tmp_path_factory.mktemp("sglang-logs")

    def start(extra_args: Sequence[str]) -> SGLangProcess:
        port = free_port()
        server = SGLangProcess(
            cpu_launch_args(tiny_model_dir, port=port, extra_args=extra_args),
            port=port,
            env=cpu_env(),
            log_path=log_dir / f"sglang-{port}.log",
        )
        started.append(server)
        server.start(ready_timeout_s=300.0)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
