"""Shared test helpers: a small deterministic tokenizer with a chat template, free ports."""

from __future__ import annotations

import socket
from pathlib import Path

CHAT_TEMPLATE = (
    "{%- if tools %}<|system|>tools: {{ tools | tojson }}\n{% endif %}"
    "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{%- if m.tool_calls %} calls: {{ m.tool_calls | tojson }}{% endif %}\n{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_test_tokenizer(out: Path) -> Path:
    """Write a tiny byte-level BPE tokenizer (vocab 512) with a chat template to ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    corpus = ["lorem ipsum dolor sit amet " * 20, "the quick brown fox jumps over the lazy dog " * 20,
              "def f(x):\n    return x + 1\n" * 20, "Weather in Paris? It is 21 C. Thanks" * 10]
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))
    return out


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
