"""Helpers shared by tests that talk to a fake or real SGLang server over HTTP.

- ``split_sse(raw)``: strict SSE framing check; the body must be a concatenation of
  ``data: <one line>\\n\\n`` events (SGLang's framing). Returns each event's payload text.
  Raises ``AssertionError`` naming the offending byte offset otherwise.
- ``sse_events(raw)``: ``split_sse`` plus JSON decoding; returns ``(chunks, done)`` where
  ``done`` is True when the last event is ``[DONE]`` (and ``[DONE]`` appears nowhere else).
- ``words(n, word)``: ``n`` space-separated copies of ``word`` (the fake's simple count makes
  this exactly ``n`` tokens of text).
- ``make_test_tokenizer(directory)``: trains a tiny byte-level BPE tokenizer (vocabulary 300,
  deterministic, < 1 s) with a ChatML chat template and saves it as a Hugging Face tokenizer
  directory; returns the path. For tokenizer-mode tests that must not depend on the tiny
  model build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["CHATML_TEMPLATE", "make_test_tokenizer", "split_sse", "sse_events", "words"]

CHATML_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def split_sse(raw: bytes) -> list[str]:
    """Payloads of ``data: ...\\n\\n`` events; ``AssertionError`` on any other byte layout."""
    out: list[str] = []
    pos = 0
    while pos < len(raw):
        assert raw.startswith(b"data: ", pos), (
            f"event at byte {pos} does not start with 'data: ': {raw[pos : pos + 40]!r}"
        )
        end = raw.find(b"\n\n", pos)
        assert end != -1, (
            f"event at byte {pos} is not terminated by a blank line: {raw[pos : pos + 80]!r}"
        )
        payload = raw[pos + 6 : end]
        assert b"\n" not in payload and b"\r" not in payload, f"multi-line event at byte {pos}"
        out.append(payload.decode("utf-8"))
        pos = end + 2
    return out


def sse_events(raw: bytes) -> tuple[list[dict[str, Any]], bool]:
    """Decode a whole SSE body: (JSON chunks before ``[DONE]``, whether ``[DONE]`` ended it)."""
    payloads = split_sse(raw)
    done = bool(payloads) and payloads[-1] == "[DONE]"
    body = payloads[:-1] if done else payloads
    assert "[DONE]" not in body, "[DONE] must be the last event"
    return [json.loads(p) for p in body], done


def words(n: int, word: str = "lorem") -> str:
    """``n`` copies of ``word`` separated by single spaces."""
    return " ".join([word] * n)


def make_test_tokenizer(directory: str | Path) -> str:
    """Train and save a tiny deterministic HF tokenizer with a ChatML template; returns its path.

    Errors: ``ImportError`` when ``tokenizers``/``transformers`` are missing.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = ["hello world, the quick brown fox jumps over the lazy dog. lorem ipsum dolor."] * 50
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(str(directory))
    return str(directory)
