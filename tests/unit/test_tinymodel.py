"""serving.tinymodel: determinism, idempotency, tokenizer and chat template.

Builds a 3-step model twice into tmp_path (about 10 s each on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving import tinymodel

STEPS_SECONDS = 1.0  # --train-seconds 1 -> 3 steps at the reference rate of 3 steps/s


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny")
    a, b = root / "a", root / "b"
    assert tinymodel.main(["--out", str(a), "--train-seconds", str(STEPS_SECONDS), "--quiet"]) == 0
    tinymodel.build(b, train_seconds=STEPS_SECONDS, progress=False)
    return a, b


@pytest.mark.slow
def test_two_builds_are_identical(built: tuple[Path, Path]) -> None:
    a, b = built
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    assert (a / "tokenizer_config.json").read_bytes() == (b / "tokenizer_config.json").read_bytes()
    assert tinymodel.weights_sha256(a) == tinymodel.weights_sha256(b)
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["steps"] == 3
    assert manifest["weights_sha256"] == tinymodel.weights_sha256(a)


@pytest.mark.slow
def test_second_build_is_skipped(built: tuple[Path, Path]) -> None:
    a, _ = built
    again = tinymodel.build(a, train_seconds=STEPS_SECONDS, progress=False)
    assert again["skipped"] is True
    other_seed = tinymodel._build_key(tinymodel.TinyModelSpec(), 1, 3, "x")
    assert other_seed != tinymodel._build_key(tinymodel.TinyModelSpec(), 0, 3, "x")


@pytest.mark.slow
def test_config_is_a_float32_llama(built: tuple[Path, Path]) -> None:
    config = json.loads((built[0] / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["dtype"] == "float32"
    assert config["max_position_embeddings"] >= 4096
    assert config["vocab_size"] == 2048
    assert config["num_hidden_layers"] == 4
    assert config["eos_token_id"] == [1, 4]
    generation = json.loads((built[0] / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [1, 4]


@pytest.mark.slow
def test_tokenizer_round_trip_and_special_tokens(built: tuple[Path, Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built[0])
    assert len(tok) == 2048
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|pad|>",
    )
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2)
    text = "def f(x):\n    return {'é': x ** 2}  # ünïcode ✓\n"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


@pytest.mark.slow
def test_chat_template_renders_roles_and_generation_prompt(built: tuple[Path, Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built[0])
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|begin_of_text|><|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = tok.apply_chat_template(messages[1:2], tokenize=False)
    assert no_prompt == "<|begin_of_text|><|im_start|>user\nHi<|im_end|>\n"
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert tok.decode(ids) == text


@pytest.mark.slow
def test_chat_template_renders_tools_calls_and_results(built: tuple[Path, Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built[0])
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Seoul?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Seoul"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
    ]
    text = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|begin_of_text|><|im_start|>system\nUse tools.\n\n# Tools\n")
    assert (
        "<tools>\n"
        '{"name": "get_weather", "description": "Weather for a city", "parameters": '
        '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}'
        "\n</tools>"
    ) in text
    assert (
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Seoul"}}\n'
        "</tool_call><|im_end|>\n"
    ) in text
    assert '<|im_start|>tool\n<tool_response>\n{"temp_c": 21}\n</tool_response><|im_end|>\n' in text
    assert text.endswith("<|im_start|>assistant\n")
    # Object arguments render as JSON too; no system message still gets the tools block.
    messages[2]["tool_calls"][0]["function"]["arguments"] = {"city": "Seoul"}
    text2 = tok.apply_chat_template(messages[1:], tools=tools, tokenize=False)
    assert text2.startswith("<|begin_of_text|><|im_start|>system\n# Tools\n")
    # SGLang's pydantic Tool dump adds top-level keys; only the function object is rendered.
    wrapped = [{**tools[0], "defer_loading": None}]
    text3 = tok.apply_chat_template(messages[1:], tools=wrapped, tokenize=False)
    assert text3 == text2
    assert '{"name": "get_weather", "arguments": {"city": "Seoul"}}' in text2


@pytest.mark.slow
def test_chat_template_rejects_unknown_role(built: tuple[Path, Path]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built[0])
    with pytest.raises(Exception, match="unsupported chat role"):
        tok.apply_chat_template([{"role": "robot", "content": "x"}], tokenize=False)


def test_corpus_split_is_disjoint_and_stable() -> None:
    train = tinymodel.stdlib_corpus("train")
    held = tinymodel.stdlib_corpus("heldout")
    assert train and held
    assert not {p.name for p in train} & {p.name for p in held}
    assert sorted(train + held) == tinymodel.stdlib_corpus("all")
    assert [p.name for p in train] == sorted(p.name for p in train)
    with pytest.raises(ValueError):
        tinymodel.stdlib_corpus("test")
    with pytest.raises(ValueError):
        tinymodel._steps_for(0, None)
