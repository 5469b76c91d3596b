"""Chat renders by message shape: the template rendered once per shape, then spliced.

A chat template is a program over the conversation, but for plain text messages most templates
(Llama, Mistral, Qwen, Gemma, ChatML...) treat each ``content`` as opaque text: the rendered
prompt is the template's own text for the conversation's *shape* (its roles, in order) with
each content pasted in once, in order. :class:`ShapeRenders` keeps, per shape, the rendered
text split at the contents (``pieces``: ``len(messages) + 1`` strings) and builds a request's
prompt as ``pieces[0] + content[0] + pieces[1] + ... + pieces[n]``: a string join instead of a
Jinja render (about 2 us instead of 15-20 us for a short chat on the router's core;
docs/performance.md, "Rendering once per message shape").

A shape is used only where splicing gives the template's own text:

- eligible messages: every message has only ``role`` and ``content`` (both strings; ``None``
  fields are dropped as the template sees them), no ``tools``, no template kwargs;
- the key holds each message's role and whether its content is empty or starts or ends with
  whitespace (the cases templates branch on with ``if content`` and ``| trim``);
- filling a shape renders the conversation with unique placeholder contents (Private Use Area
  characters) and keeps the shape only if each placeholder appears exactly once, in order, and
  splicing the request's own contents gives exactly its real render;
- every ``verify_every``-th splice is checked against a real render; any difference, or a
  template that raises where the splice did not, turns splicing off for the template for good
  (:attr:`ShapeRenders.disabled`), logged once.

The spliced text feeds the byte-length bounds and the prefix chain; an exact count always comes
from a real render (:meth:`router.request.features.PromptCounter.count`), and callers widen the bounds
by :data:`SLACK_TOKENS` before deciding that no threshold needs one.

Not thread-safe by design: use it from the event loop only (larger prompts, rendered in worker
threads, take the real render).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["SLACK_TOKENS", "ShapeRenders"]

log = logging.getLogger("specgate.template_shapes")

#: Tokens by which callers widen a spliced prompt's bounds on both sides before skipping the
#: exact count: a template that alters a content in a way the checks have not caught yet (a
#: branch on the content's text) still gets an exact count within this distance of a threshold.
SLACK_TOKENS = 64

_ROLE_CONTENT = frozenset(("role", "content"))
_MARK = "\ue000{}\ue001"  # placeholder i: Private Use Area brackets around the index


class ShapeRenders:
    """Per-shape pieces of one chat template (add_generation_prompt on, no tools, no kwargs).

    Args:
        render: the real render of template-ready messages (``[{"role", "content"}]``) -> text;
            raises what the template raises.
        max_shapes: shapes kept (oldest dropped first); each holds ``len(messages) + 1`` strings.
        verify_every: a real render checks every this-many-th splice (>= 1).

    Raises:
        ValueError: ``max_shapes`` or ``verify_every`` below 1.
    """

    def __init__(self, render: Callable[[list[dict[str, Any]]], str], *, max_shapes: int = 4096,
                 verify_every: int = 64) -> None:
        if max_shapes < 1 or verify_every < 1:
            raise ValueError("max_shapes and verify_every must be >= 1")
        self._render = render
        self._max = max_shapes
        self._every = verify_every
        #: shape -> pieces, or None: splicing is wrong for this shape (always rendered).
        self._pieces: dict[tuple[Any, ...], tuple[str, ...] | None] = {}
        self._splices = 0
        self.disabled = False

    def __len__(self) -> int:
        return len(self._pieces)

    def text(self, messages: list[dict[str, Any]]) -> str | None:
        """The rendered prompt of ``messages`` (the request's, as parsed), or None when this
        conversation must be rendered for real (the caller does so, with its errors).

        Raises:
            Exception: what the template raises, when filling a shape or checking a splice.
        """
        if self.disabled:
            return None
        shape = _shape(messages)
        if shape is None:
            return None
        key, contents = shape
        if key not in self._pieces:
            return self._fill(key, messages)
        pieces = self._pieces[key]
        if pieces is None:
            return None
        text = _splice(pieces, contents)
        self._splices += 1
        if self._splices % self._every == 0:
            return self._check(messages, text)
        return text

    def _fill(self, key: tuple[Any, ...], messages: list[dict[str, Any]]) -> str:
        real = self._render(_plain(messages))  # raises for the caller as a real render would
        pieces = self._pieces_of(messages)
        if pieces is not None and _splice(pieces, [m["content"] for m in messages]) != real:
            pieces = None
        if len(self._pieces) >= self._max:
            del self._pieces[next(iter(self._pieces))]
        self._pieces[key] = pieces
        return real

    def _pieces_of(self, messages: list[dict[str, Any]]) -> tuple[str, ...] | None:
        marks = [_MARK.format(i) for i in range(len(messages))]
        try:
            probe = self._render([{"role": m["role"], "content": mark} for m, mark in zip(messages, marks)])
        except Exception:  # noqa: BLE001  a template that branches on content: no shape
            return None
        pieces, at = [], 0
        for mark in marks:
            found = probe.find(mark, at)
            if found < 0 or probe.count(mark) != 1:
                return None
            pieces.append(probe[at:found])
            at = found + len(mark)
        pieces.append(probe[at:])
        return tuple(pieces)

    def _check(self, messages: list[dict[str, Any]], spliced: str) -> str:
        """The real render of ``messages`` (compared with ``spliced``)."""
        try:
            real = self._render(_plain(messages))
        except Exception:
            self._disable("the template raised where a splice did not")
            raise
        if real != spliced:
            self._disable("a splice differed from the real render")
        return real

    def _disable(self, why: str) -> None:
        self.disabled = True
        self._pieces.clear()
        log.warning("chat template: rendering every request from now on (%s)", why)


def _shape(messages: list[dict[str, Any]]) -> tuple[tuple[Any, ...], list[str]] | None:
    """``(shape key, contents)`` of ``messages``, or None when they are not plain role/content
    strings."""
    key: list[Any] = []
    contents: list[str] = []
    for m in messages:
        if len(m) != 2 and any(v is not None for k, v in m.items() if k not in _ROLE_CONTENT):
            return None
        role, content = m.get("role"), m.get("content")
        if type(role) is not str or type(content) is not str:
            return None
        key.append(role)
        key.append(0 if not content else 2 if content[0].isspace() or content[-1].isspace() else 1)
        contents.append(content)
    return tuple(key), contents


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as the template sees them (role and content only: the shape's fields)."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def _splice(pieces: tuple[str, ...], contents: list[str]) -> str:
    """``pieces[0] + contents[0] + pieces[1] + ... + pieces[-1]``."""
    parts: list[str] = [""] * (2 * len(contents) + 1)
    parts[0::2] = pieces
    parts[1::2] = contents
    return "".join(parts)
