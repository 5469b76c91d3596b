"""Prompt-token counting: a Hugging Face tokenizer, or the fake's documented simple count.

The simple count (module docstring of :mod:`serving.fake_sglang`, "Prompt tokens"): a text
costs one token per whitespace-separated word; a chat costs, per message, 1 + the words of its
content (+ its ``tool_calls``), plus 1 + the words of ``json.dumps(tools)`` with tools, plus 1
for the generation prompt.
"""

from __future__ import annotations

import json
from typing import Any

from serving.fake_sglang.errors import ClientError
from serving.fake_sglang.prefix_cache import chat_units, text_units

__all__ = ["TokenCounter", "content_text", "simple_chat_tokens", "simple_text_tokens"]


def simple_text_tokens(text: str) -> int:
    """The fake's documented text count: whitespace-separated words (``len(text.split())``)."""
    return len(text.split())


def content_text(content: Any) -> str:
    """A message content as text (text parts joined by spaces; None: "")."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        return " ".join(p for p in parts if isinstance(p, str))
    return str(content)


def simple_chat_tokens(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """The fake's documented chat count (module docstring, "Prompt tokens"); no errors."""
    total = 1  # generation prompt
    if tools:
        total += 1 + simple_text_tokens(json.dumps(tools))
    for m in messages:
        total += 1 + simple_text_tokens(content_text(m.get("content")))
        if m.get("tool_calls"):
            total += simple_text_tokens(json.dumps(m["tool_calls"]))
    return total


class TokenCounter:
    """Counts prompt tokens with a Hugging Face tokenizer, or the simple count without one."""

    def __init__(self, tokenizer_path: str | None) -> None:
        self.tokenizer: Any = None
        if tokenizer_path:
            from transformers import AutoTokenizer  # heavy import: only when asked for

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)

    def chat(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> int:
        """Prompt tokens of a chat (``ClientError`` when the template fails)."""
        tok = self.tokenizer
        if tok is None or not getattr(tok, "chat_template", None):
            return simple_chat_tokens(messages, tools)
        msgs = []
        for m in messages:
            d = dict(m)
            d["content"] = content_text(d.get("content"))
            msgs.append(d)
        try:
            rendered = tok.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=True, tools=tools or None
            )
        except Exception as e:  # template errors are client errors in SGLang (400)
            raise ClientError(str(e)) from e
        return len(tok.encode(rendered, add_special_tokens=False))

    def text(self, text: str) -> int:
        """Prompt tokens of a completions text."""
        if self.tokenizer is None:
            return simple_text_tokens(text)
        return len(self.tokenizer.encode(text))

    def chat_units(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> list[Any]:
        """The chat prompt's tokens for the prefix cache (ids, or simple-count units)."""
        tok = self.tokenizer
        if tok is None or not getattr(tok, "chat_template", None):
            return chat_units(messages, tools, content_text)
        msgs = [{**m, "content": content_text(m.get("content"))} for m in messages]
        rendered = tok.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, tools=tools or None
        )
        return list(tok.encode(rendered, add_special_tokens=False))

    def text_units(self, text: str) -> list[Any]:
        """A text's tokens for the prefix cache (ids, or words)."""
        return text_units(text) if self.tokenizer is None else list(self.tokenizer.encode(text))
