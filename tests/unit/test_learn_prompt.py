"""The prompt tokens an observation is learned with: the engine's count replaces the router's
byte-length upper bound (router.decision.learn.observed_prompt_tokens)."""

from __future__ import annotations

import pytest

from router.decision.learn import observed_prompt_tokens


@pytest.mark.parametrize(("counted", "exact", "prompts", "usage", "expected"), [
    (2400, False, 1, 600, 600),     # the byte bound: the engine's count wins
    (600, True, 1, 584, 600),       # exact: the router's own count stands
    (2400, False, 2, 1200, 2400),   # a batch of prompts: usage sums them, the bound stands
    (2400, False, 1, None, 2400),   # no usage count
    (2400, False, 1, 0, 2400),      # a zero count is not a count
    (2400, False, 1, 600.0, 2400),  # not an int
    (2400, False, 1, True, 2400),   # a bool is not a count
])
def test_observed_prompt_tokens(counted: int, exact: bool, prompts: int, usage: object, expected: int) -> None:
    assert observed_prompt_tokens(counted, exact, prompts, usage) == expected
