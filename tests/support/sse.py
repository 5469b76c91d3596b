"""SSE bodies as SGLang frames them, for tests that talk to a fake or real SGLang server.

- :func:`split_sse`: strict framing check; the body must be a concatenation of
  ``data: <one line>\\n\\n`` events (SGLang's framing). Returns each event's payload text.
  Raises ``AssertionError`` naming the offending byte offset otherwise.
- :func:`sse_events`: :func:`split_sse` plus JSON decoding; returns ``(chunks, done)`` where
  ``done`` is True when the last event is ``[DONE]`` (and ``[DONE]`` appears nowhere else).
- :func:`words`: ``n`` space-separated copies of ``word`` (the fake's simple count makes this
  exactly ``n`` tokens of text).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["split_sse", "sse_events", "words"]


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
