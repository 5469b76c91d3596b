"""Goodness-of-fit for sampled LLM output against exact next-token distributions.

Method: the randomized probability integral transform (PIT) of each sampled token, taken in
sequence (Rosenblatt 1952). For a token t drawn from a discrete distribution p over the
vocabulary, order the vocabulary by descending p (ties by token id), let F(t-) be the mass of
the tokens before t in that order, and draw V ~ U(0, 1) independently; then
``u = F(t-) + V * p(t)`` is exactly U(0, 1). Applied to every generated position j with p the
target's conditional distribution given the prompt and the tokens sampled before j, the u's of
a correct sampler are i.i.d. U(0, 1), whatever the context. A sampler that returns the argmax
puts every u in [0, p_max): the ordering makes that failure mode (SGLang's stock CPU
speculative verification at temperature > 0) maximally visible.

The one-sample Kolmogorov-Smirnov test against U(0, 1) then gives a p-value (asymptotic
Kolmogorov distribution with Stephens' small-sample correction, accurate to ~1e-3 for n >= 5).
"""

from __future__ import annotations

import math

import numpy as np


def randomized_pit(probs: np.ndarray, token: int, v: float) -> float:
    """The randomized PIT value of ``token`` under ``probs`` [V] (non-negative, sums to ~1).

    ``v`` is the caller's U(0, 1) draw. Raises ValueError when ``token`` is out of range.
    """
    if not 0 <= token < probs.shape[0]:
        raise ValueError(f"token {token} outside vocabulary of {probs.shape[0]}")
    p = probs.astype(np.float64)
    p = p / p.sum()
    # stable descending order by probability, ties by token id
    order = np.lexsort((np.arange(p.shape[0]), -p))
    rank = int(np.nonzero(order == token)[0][0])
    before = float(p[order[:rank]].sum())
    return min(before + v * float(p[token]), 1.0)


def ks_uniform(u: np.ndarray) -> tuple[float, float]:
    """One-sample KS test of ``u`` against U(0, 1): returns (statistic D, p-value).

    Raises ValueError for an empty sample.
    """
    x = np.sort(np.asarray(u, dtype=np.float64))
    n = x.shape[0]
    if n == 0:
        raise ValueError("empty sample")
    i = np.arange(1, n + 1)
    d = float(max((i / n - x).max(), (x - (i - 1) / n).max()))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    p = 2.0 * sum((-1) ** (k - 1) * math.exp(-2.0 * k * k * lam * lam) for k in range(1, 101))
    return d, min(max(p, 0.0), 1.0)
