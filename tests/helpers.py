"""Deprecated (one release): the shared helpers moved to :mod:`tests.support`."""

from __future__ import annotations

from tests.support.net import free_port
from tests.support.tokenizer import CHAT_TEMPLATE, make_test_tokenizer

__all__ = ["CHAT_TEMPLATE", "free_port", "make_test_tokenizer"]
