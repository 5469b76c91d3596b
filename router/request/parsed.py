"""A validated request as the decision reads it: :class:`ParsedRequest`, what
:mod:`router.request.parsing` builds from a chat or completions document.

A module of its own so that the modules :mod:`router.request.parsing` calls while it validates
(:mod:`router.request.capabilities`: the triggers read a parsed request) name the type without
importing the parser; :mod:`router.request.parsing` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Kind", "ParsedRequest"]

#: The request document's shape: a chat (``messages``) or a completion (``prompt``).
Kind = Literal["chat", "completions"]


@dataclass(slots=True)
class ParsedRequest:
    """The validated parts of a request that the decision needs; read-only by convention (not
    ``frozen``: a frozen dataclass sets each field through ``object.__setattr__``, which cost
    this per-request object about 10k more instructions to build; it holds a dict, so it was
    never hashable either way).

    Attributes:
        kind: ``chat`` or ``completions``.
        doc: the request document (a dict; forwarded with at most ``max_tokens``/``rid`` added).
        max_new_tokens: the client's per-sequence budget (tokens) after precedence, or None.
        n: choices per prompt.
        stream: whether the client asked for SSE.
        param: the field over-length errors name (``messages``, ``prompt``, or ``input_ids``
            for a chat that carries its prompt as token ids).
        media_tokens: upper bound of the prompt's non-text tokens (the model's per-part
            bounds summed over image/audio/video parts; 0 for text).
    """

    kind: Kind
    doc: dict[str, Any]
    max_new_tokens: int | None
    n: int
    stream: bool
    param: str
    media_tokens: int = 0
