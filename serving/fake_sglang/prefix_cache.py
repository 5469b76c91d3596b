"""The fake SGLang's prefix cache: a token trie with leaf-first LRU eviction and a capacity.

A stand-in for SGLang's ``RadixCache`` (``srt/mem_cache/radix_cache.py``, page size 1): a
request's cached tokens are the longest prefix of its prompt already in the tree, at most
``len(prompt) - 1`` (the scheduler always computes the last prompt token, for its logits);
the prompt is inserted after prefill and prompt + output when the request finishes
(``cache_finished_req``); above ``capacity`` tokens the least recently used *leaves* go first,
so a shared head (the system prompt) outlives the tails that extend it. Unlike SGLang, nodes in
use by a running request are not locked (a fake has no KV memory to protect).

Tokens are any hashable values: token ids with a tokenizer, or the fake's simple-count units
(see :func:`chat_units`).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Hashable, Sequence
from typing import Any

__all__ = ["PrefixCache", "chat_units", "text_units"]


def text_units(text: str) -> list[str]:
    """A text's tokens under the fake's simple count: its whitespace-separated words."""
    return text.split()


def chat_units(messages: Sequence[dict[str, Any]], tools: Any, content_text: Any) -> list[str]:
    """A chat's tokens under the fake's simple count (one per unit it counts, in order).

    ``<tools>`` and the words of ``json.dumps(tools)`` when tools are given; per message a role
    marker ``<role>``, the words of its content (``content_text``) and of ``json.dumps`` of
    its ``tool_calls``; then the generation prompt ``<assistant>``: the same unit that opens
    the assistant message of the next turn (as ``<|im_start|>assistant`` does in real
    templates), so a later turn's prompt extends this one's prompt + output.
    """
    units: list[str] = []
    if tools:
        units.append("<tools>")
        units += json.dumps(tools).split()
    for m in messages:
        units.append(f"<{m.get('role')}>")
        units += content_text(m.get("content")).split()
        if m.get("tool_calls"):
            units += json.dumps(m["tool_calls"]).split()
    units.append("<assistant>")
    return units


class PrefixCache:
    """A token trie bounded to ``capacity`` tokens (one node per token).

    Args:
        capacity: most tokens held (> 0).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("prefix cache capacity must be >= 1 token")
        self.capacity = capacity
        self._children: dict[int, dict[Hashable, int]] = {0: {}}
        self._parent: dict[int, tuple[int, Hashable]] = {}
        self._used: dict[int, int] = {}
        self._tick = 0
        self._next = 1

    def __len__(self) -> int:
        """Tokens held."""
        return len(self._parent)

    def match(self, tokens: Sequence[Hashable]) -> int:
        """Cached prefix length of ``tokens`` (at most ``len(tokens) - 1``); touches it."""
        self._tick += 1
        node = n = 0
        children, used, tick = self._children, self._used, self._tick
        for tok in tokens[: max(len(tokens) - 1, 0)]:
            child = children[node].get(tok)
            if child is None:
                break
            node = child
            used[node] = tick
            n += 1
        return n

    def insert(self, tokens: Sequence[Hashable]) -> None:
        """Hold ``tokens`` (touching every node on the path), then evict down to capacity."""
        self._tick += 1
        node = 0
        for tok in tokens:
            kids = self._children[node]
            child = kids.get(tok)
            if child is None:
                child = kids[tok] = self._next
                self._next += 1
                self._children[child] = {}
                self._parent[child] = (node, tok)
            self._used[child] = self._tick
            node = child
        self._evict()

    def clear(self) -> None:
        """Drop everything (``/flush_cache``)."""
        self._children = {0: {}}
        self._parent.clear()
        self._used.clear()

    def _evict(self) -> None:
        over = len(self._parent) - self.capacity
        if over <= 0:
            return
        heap = [(self._used[n], n) for n in self._parent if not self._children[n]]
        heapq.heapify(heap)
        while over > 0 and heap:
            _, node = heapq.heappop(heap)
            parent, tok = self._parent.pop(node)
            del self._children[node], self._used[node]
            siblings = self._children[parent]
            del siblings[tok]
            over -= 1
            if parent and not siblings:
                heapq.heappush(heap, (self._used[parent], parent))
