"""The contract suite's server handle (:class:`Backend`, what the ``backend`` fixture of
``tests/contract/conftest.py`` yields): a running SGLang-compatible server and how it counts tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from serving.fake_sglang import simple_chat_tokens, simple_text_tokens

__all__ = ["Backend"]


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
