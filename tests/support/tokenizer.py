"""The tests' tokenizer: tiny, deterministic, with a chat template (built in well under 1 s)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "make_test_tokenizer"]

#: Chat template: ``<|role|>content`` per message, tools and tool calls as JSON, and
#: ``<|assistant|>`` as the generation prompt.
CHAT_TEMPLATE = (
    "{%- if tools %}<|system|>tools: {{ tools | tojson }}\n{% endif %}"
    "{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{%- if m.tool_calls %} calls: {{ m.tool_calls | tojson }}{% endif %}\n{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_test_tokenizer(out: str | Path) -> Path:
    """Train a byte-level BPE tokenizer (vocabulary 512, specials ``<s> </s> <pad>``) with
    :data:`CHAT_TEMPLATE` and save it as a Hugging Face tokenizer directory at ``out``.

    Returns:
        ``out`` as a :class:`~pathlib.Path` (``str(path)`` where a string is wanted).
    Raises:
        ImportError: ``tokenizers``/``transformers`` are missing.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(out)
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
