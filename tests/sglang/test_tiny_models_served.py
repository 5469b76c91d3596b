"""The tiny models the project builds, served by the real SGLang CPU engine: the target's chat
template as SGLang renders it, and the EAGLE-3 export's verify passes against the PyTorch
simulation of the same draft head (the builders' own tests: tests/unit/test_tinymodel.py,
tests/unit/test_eagle3_train.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drafters.eagle3 import train as train_mod
from drafters.eagle3.model import load_draft


@pytest.mark.sglang
def test_sglang_chat_uses_the_template(tiny_model_dir: Path, tmp_path: Path) -> None:
    """SGLang's OpenAI chat endpoint renders messages + tools with our template: its
    ``prompt_tokens`` equals transformers' token count for the same conversation."""
    pytest.importorskip("sglang")
    import httpx
    from transformers import AutoTokenizer

    from serving.local import start_sglang
    from tests.support import free_port

    model_dir = tiny_model_dir
    tok = AutoTokenizer.from_pretrained(model_dir)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Seoul?"},
    ]
    ids = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    plain = tok.apply_chat_template(messages, add_generation_prompt=True)
    plain = plain["input_ids"] if not isinstance(plain, list) else plain
    port = free_port()
    with (
        start_sglang(
            model_path=model_dir, port=port, log_path=tmp_path / "sglang.log", ready_timeout_s=600
        ) as server,
        httpx.Client(timeout=300) as client,
    ):
        usage = []
        for extra in ({"tools": tools}, {}):
            body = {"model": "m", "messages": messages, "max_tokens": 4, "temperature": 0}
            r = client.post(f"{server.base_url}/v1/chat/completions", json={**body, **extra})
            assert r.status_code == 200, r.text
            usage.append(r.json()["usage"]["prompt_tokens"])
    assert usage == [len(ids), len(plain)]


@pytest.mark.sglang
def test_sglang_serves_the_export_with_the_offline_verify_counts(
    eagle3_draft_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The real SGLang CPU server loads the export (EAGLE3, topk 1, 3 steps, 4 draft tokens),
    answers greedy requests with the target's greedy tokens, and needs exactly as many verify
    passes per request as the PyTorch simulation of the same draft head predicts."""
    pytest.importorskip("sglang")
    import httpx

    from drafters.eagle3.data import capture, make_prompts
    from drafters.eagle3.evaluate import greedy_sequence, simulate_sequence
    from serving.local import start_sglang
    from tests.support import free_port

    out, target = eagle3_draft_dir, tiny_model_dir
    new_tokens = 24
    model, tok = train_mod.load_target(target)
    draft = load_draft(out, model.get_input_embeddings().weight)
    prompts = make_prompts(tok, "heldout", 4, 0, prompt_tokens=24)
    expected = []
    for p in prompts:
        seq = greedy_sequence(model, p.ids, new_tokens)
        _, aux, _ = capture(model, [seq], (0, 1, 2), model.config.pad_token_id)
        cycles = simulate_sequence(draft, aux[0], seq, len(p.ids), 3, new_tokens)
        expected.append((seq[len(p.ids) :], len(cycles)))
    port = free_port()
    spec_args = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(out)]
    spec_args += ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]
    spec_args += ["--speculative-num-draft-tokens", "4"]
    with (
        start_sglang(
            model_path=target,
            port=port,
            extra_args=spec_args,
            log_path=tmp_path / "sglang.log",
            ready_timeout_s=600,
        ) as server,
        httpx.Client(timeout=300) as client,
    ):
        got = []
        for p in prompts:
            body = {
                "input_ids": list(p.ids),
                "sampling_params": {"temperature": 0, "max_new_tokens": new_tokens},
            }
            r = client.post(f"{server.base_url}/generate", json=body).json()
            got.append((r["output_ids"], r["meta_info"]["spec_verify_ct"]))
    assert got == expected
