"""Byte-length bounds on prompt tokens never under-count, and skip exact counts only when safe."""

from __future__ import annotations

import random

import pytest

from router.decision.policy import (
    EndpointSnapshot,
    PoolSnapshot,
    Rules,
    decide,
    flip_points,
    request_features,
)
from router.request.features import PromptCounter, needs_exact, parse_chat, parse_completions

ALPHABET = list("abcdefghij klmnop\n\t{}()[]:;,.'\"=+-*/#_0123456789") + ["é", "ü", "中", "文", "🙂", "∑", "\u00a0"]


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(n))


@pytest.mark.parametrize("seed", range(2))
def test_bounds_contain_the_exact_count(tokenizer_dir, seed):
    counter = PromptCounter(tokenizer_dir)
    rng = random.Random(seed)
    for _ in range(25):
        text = random_text(rng, rng.randint(0, 3000))
        for parsed in (parse_chat({"messages": [{"role": "user", "content": text}]}, max_n=8),
                       parse_completions({"prompt": text or "x"}, max_n=8)):
            rendered = counter.render(parsed)
            lo, hi = counter.bounds(rendered)
            exact = counter.exact(rendered)
            assert lo <= exact <= hi, (lo, exact, hi)
            assert exact == counter.count(parsed)


def test_token_id_prompts_are_exact(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    assert counter.bounds(counter.render(parse_completions({"prompt": [1, 2, 3]}, max_n=8))) == (3, 3)
    assert counter.bounds(counter.render(parse_completions({"prompt": [[1], [1, 2]]}, max_n=8))) == (2, 2)


def test_needs_exact():
    assert needs_exact(10, 20, [5, 25]) is False
    assert needs_exact(10, 20, [10]) is True      # P <= 10 true at lo, false at hi
    assert needs_exact(10, 20, [19]) is True
    assert needs_exact(10, 20, [20]) is False     # true over the whole interval
    assert needs_exact(7, 7, [7]) is False


POOL_SETS = {
    "spec below the cap": (PoolSnapshot("spec", True, 2048, 4, (EndpointSnapshot("http://s", True, 0),)),
                           PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p", True, 0),))),
    # a speculative pool as large as the cap: with a defaulted budget and n > 1 the n-weighted
    # fit flips inside the region where M = S - P
    "spec at the cap": (PoolSnapshot("spec", True, 4096, 4, (EndpointSnapshot("http://s", True, 0),)),
                        PoolSnapshot("plain", False, 3900, 0, (EndpointSnapshot("http://p", True, 0),))),
}


@pytest.mark.slow
@pytest.mark.parametrize("pools", list(POOL_SETS))
@pytest.mark.parametrize("seed", range(3))
def test_decision_with_upper_bound_equals_exact_when_no_flip_point_straddles(seed, pools):
    # For random intervals: whenever needs_exact is False for the policy's own flip points,
    # deciding with hi gives the same decision (refusals included) as every P in [lo, hi].
    snaps = POOL_SETS[pools]
    rules = Rules(max_context_tokens=4096, default_max_tokens=256,
                  long_prompt_tokens=4000 if pools == "spec at the cap" else 1024)
    rng = random.Random(seed)
    checked = 0
    for _ in range(1500):
        m = rng.choice([None, 1, 16, 256, 1000, 3000])
        n = rng.choice([1, 2, 8])
        doc = {"messages": [{"role": "user", "content": "x"}], "n": n}
        if m is not None:
            doc["max_tokens"] = m
        parsed = parse_chat(doc, max_n=8)
        lo = rng.randint(1, 4500)
        hi = lo + rng.randint(0, 600)
        if needs_exact(lo, hi, flip_points(parsed.max_new_tokens, parsed.n, snaps, rules)):
            continue

        def outcome(p, parsed=parsed, m=m):
            f = request_features(parsed, p, rules)
            d = decide(f, snaps, rules)
            return (d.pool, d.reason, d.outcome, f.max_new_tokens if m is not None else None)

        ref = outcome(hi)
        for p in range(lo, hi + 1):
            assert outcome(p) == ref, (m, n, lo, hi, p)
        checked += 1
    assert checked > 500


class _NoOffsets:
    """The Rust tokenizer, refusing the calls that compute offsets (``encode``, ``encode_batch``)."""

    def __init__(self, backend: object) -> None:
        self._backend = backend
        self.fast_calls = 0

    def encode_batch_fast(self, texts: list[str], *, add_special_tokens: bool) -> list[object]:
        self.fast_calls += 1
        return self._backend.encode_batch_fast(texts, add_special_tokens=add_special_tokens)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        if name in ("encode", "encode_batch"):
            raise AssertionError(f"the exact count called {name}, which tracks offsets")
        return getattr(self._backend, name)


def test_exact_count_tracks_no_offsets_and_equals_the_engine_encode(tokenizer_dir):
    # The exact count is the CPU of a prompt's sizing (docs/loadtests.md, the quick start's
    # time to first token): the offset-free encode_batch_fast, equal to tokenizer.encode's length.
    counter, renderer = PromptCounter(tokenizer_dir), PromptCounter(tokenizer_dir)
    reference = counter._tok
    spy = _NoOffsets(reference._tokenizer)
    counter._tok = type("Wrapped", (), {"_tokenizer": spy})()
    rng = random.Random(7)
    for _ in range(6):
        text = random_text(rng, rng.randint(1, 3000))
        chat = parse_chat({"messages": [{"role": "user", "content": text}]}, max_n=8)
        rendered = renderer.render(chat)
        assert counter.exact(rendered) == len(reference.encode(rendered.texts[0], add_special_tokens=False))
        rendered = renderer.render(parse_completions({"prompt": [text, text + "x"]}, max_n=8))
        assert counter.exact(rendered) == max(len(reference.encode(t)) for t in rendered.texts)
    assert spy.fast_calls == 12
