"""Checks shared by the plain, NGRAM and EAGLE-3 server tests.

- :func:`assert_greedy_equal`: SGLang's greedy output equals ``transformers``' for every prompt.
- :func:`sampled_pit`: samples a batch at temperature T and returns the sequential randomized
  PIT values of the tokens (``_stats.py``), to be tested for uniformity.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._reference import generate, hf_conditionals, hf_greedy
from ._stats import randomized_pit


def assert_greedy_equal(
    base_url: str, hf_model: Any, prompts: list[list[int]], max_new_tokens: int
) -> list[dict[str, Any]]:
    """One request at a time (``temperature=0``, ``ignore_eos``): the output ids must equal
    :func:`hf_greedy`'s. Returns each response's ``meta_info``. Fails with the first
    differing position."""
    metas = []
    for i, ids in enumerate(prompts):
        res = generate(
            base_url,
            ids,
            {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
        )
        got = res["output_ids"]
        want = hf_greedy(hf_model, ids, max_new_tokens)
        first = next((j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
        assert got == want, (
            f"prompt {i}: SGLang and transformers differ at position {first} "
            f"(len {len(got)} vs {len(want)})"
        )
        metas.append(res["meta_info"])
    return metas


def sampled_pit(
    base_url: str,
    hf_model: Any,
    prompt: list[int],
    *,
    batch: int,
    max_new_tokens: int,
    temperature: float,
    first_position: int,
    seed: int,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Sample ``batch`` continuations of ``prompt`` in one batched request and return the PIT
    values of positions ``first_position ..`` of every continuation, plus the ``meta_info``s.

    The PIT randomization uses ``numpy.random.default_rng(seed)``; SGLang's own sampling is
    seeded by the server's ``--random-seed``.
    """
    res = generate(
        base_url,
        [prompt] * batch,
        {"temperature": temperature, "max_new_tokens": max_new_tokens, "ignore_eos": True},
    )
    rng = np.random.default_rng(seed)
    values = []
    for item in res:
        out = item["output_ids"]
        assert len(out) == max_new_tokens, f"expected {max_new_tokens} tokens, got {len(out)}"
        probs = hf_conditionals(hf_model, prompt, out, temperature)
        for j in range(first_position, len(out)):
            values.append(randomized_pit(probs[j], out[j], float(rng.random())))
    return np.asarray(values), [item["meta_info"] for item in res]
