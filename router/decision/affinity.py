"""Conversation affinity across pools chosen by predicted completion time: router replicas that
share no state keep a conversation's turns in one pool.

Each router replica fits its own speed models (:mod:`router.decision.learn`) from the requests it
routed, sees its own load view, and counts as cached only what its own prefix index holds
(:mod:`router.decision.prefix`: the turns it routed itself). With a conversation's turns spread over
replicas, each replica's fastest pool can differ, and a turn that changes pool prefills the
whole conversation again. Two pure rules, called by :func:`router.decision.policy.decide`:

- :func:`affine_order`: among the pools predicted *close* to the fastest, the one the
  request's anchor ranks first by rendezvous hashing (the anchor is the same for every turn of
  a conversation and in every replica, :class:`router.decision.prefix.Anchor`); close is within
  ``routing.prefix_cache.pool_affinity_ratio`` of the fastest prediction *with nothing
  cached*, or not yet measured for the request's kind, for a continued conversation; within
  the narrower ``new_affinity_ratio`` for any other request.
- :func:`explore_key`: exploration (``routing.learning.explore_every``) picks a continued
  conversation by its anchor, so it explores the conversation whole instead of one turn.

Source: rendezvous (highest-random-weight) hashing, Thaler & Ravishankar 1998, here over pool
names as :func:`router.decision.prefix.pick_endpoint` uses it over a pool's endpoints.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from router.decision.learn import context_bucket
from router.decision.prefix import PrefixRequest, rendezvous_score

if TYPE_CHECKING:
    from router.decision.snapshot import PoolSnapshot
    from router.request.features import RequestFeatures

__all__ = ["affine_order", "explore_key"]

#: ``predict(features, pool, endpoint, output_tokens, cached_tokens)`` -> seconds
#: (:func:`router.decision.policy.predict_request`)
Predict = Callable[["RequestFeatures", "PoolSnapshot", str, "int | None", "int | None"], float]


def affine_order(features: RequestFeatures, candidates: Sequence[tuple[PoolSnapshot, str]], order: Sequence[int],
                 predicted: Sequence[tuple[str, float]], prefix: PrefixRequest | None, predict: Predict) -> Sequence[int]:
    """``order`` with the candidate a decision by prediction routes to first (the others after
    it, fastest first: the runner-up that exploration reads); ``order`` itself when that is the
    fastest.

    Args:
        features: the request.
        candidates: ``(pool, endpoint URL)`` of every pool that may take it.
        order: indices into ``candidates`` and ``predicted``, fastest first.
        predicted: ``(pool name, seconds)`` per candidate, its cached prefill counted: the
            predicted completion, or with ``routing.learning.marginal_cost`` the completion plus
            what the request adds to the others (:func:`router.decision.predicted.predict_cost`).
        prefix: the request's anchor and ``pool_affinity_ratio`` (None: no prefix routing).
        predict: the measure of ``predicted`` (:func:`router.decision.predicted.predict_request` or
            :func:`~router.decision.predicted.predict_cost`; called with ``cached_tokens=0`` for a
            candidate whose endpoint caches part of the prompt).

    The routed candidate is the one whose pool name has the highest
    :func:`router.decision.prefix.rendezvous_score` for the anchor among the *close* ones; the fastest
    without an anchor, with a ratio of 1 or less, or when no other candidate is close. For a
    continued conversation (``prefix.continued``) a candidate is close when predicted within
    ``prefix.pool_affinity_ratio`` times the least *cold* prediction (a candidate predicted
    with nothing cached), or when its pool's predictions for the request's ``(temperature
    class, context bucket)`` have not been checked enough (``PoolSnapshot.measured``: its
    prediction is still the prior's, not a measurement); for any other request (a first turn,
    a one-off prompt) when predicted within ``prefix.new_affinity_ratio`` (at most
    ``pool_affinity_ratio``) times it.

    Why cold: a replica's local prefix match makes the pool it sent the earlier turns to look
    faster there only, by the conversation's whole prefill; against the best prediction with
    that match counted, the pool the other replicas sent the turns to would look slower than it
    is. Each candidate is compared with its own cache counted, so the predicted fastest is
    always close (it is at most the least cold prediction). Why unmeasured counts as close:
    each replica measures only the pools it routes to, so at the start one replica's untried
    pool looks several times slower (the default prior) than the same pool on a replica that
    has fitted it. Why narrower for a request that continues nothing: it may be a one-off
    prompt, for which a pool chosen by its anchor is only a slower one, and a hash ignores the
    load the prediction balances (``benchmarks/outofbox_http.py``: the mean latency of a day
    of one-off chats rose 7% at 1.25, none measurable at 1.1); a first turn sent elsewhere
    costs one move of its own prefill at the second turn.
    """
    chosen = _affine(features, candidates, order, predicted, prefix, predict)
    return order if chosen == order[0] else [chosen, *(i for i in order if i != chosen)]


def _affine(features: RequestFeatures, candidates: Sequence[tuple[PoolSnapshot, str]], order: Sequence[int],
            predicted: Sequence[tuple[str, float]], prefix: PrefixRequest | None, predict: Predict) -> int:
    best = order[0]
    ratio = prefix.pool_affinity_ratio if prefix is not None else 1.0
    if ratio <= 1.0 or prefix is None or prefix.anchor is None or len(order) < 2 or (
            not prefix.continued and prefix.new_affinity_ratio <= 1.0):
        return best
    cold = math.inf  # the least prediction with nothing cached (s)
    for i in order:
        pool, url = candidates[i]
        if not _cached(pool, url):
            cold = min(cold, predicted[i][1])  # the later ones predict at least this, cold or not
            break
        cold = min(cold, predict(features, pool, url, None, 0))
    bound = (ratio if prefix.continued else min(ratio, prefix.new_affinity_ratio)) * cold
    cell = (features.temperature_class, context_bucket(features.predicted_prompt_tokens))
    anchor: int | None = None
    chosen, top = best, -1
    for i in order:
        pool = candidates[i][0]
        if predicted[i][1] > bound and (
                not prefix.continued or pool.measured is None or cell in pool.measured):
            continue
        if anchor is None:
            if i == best:  # the fastest alone is close so far: no hash unless another one is
                continue
            anchor = operator.index(prefix.anchor)
            chosen, top = best, rendezvous_score(candidates[best][0].name, anchor)
        score = rendezvous_score(pool.name, anchor)
        if score > top:
            chosen, top = i, score
    return chosen


def explore_key(tie_break: int, prefix: PrefixRequest | None, explore_every: int) -> int:
    """What picks the decisions that explore (those whose key modulo ``explore_every`` is
    ``explore_every - 1``): for a continued conversation (``prefix.continued``) its anchor's
    hash, so the conversation is explored whole, every later turn on every replica, instead of
    one turn in ``explore_every`` moving off the pool that caches it (and back: its prefill
    twice); else ``tie_break`` (a one-off prompt, or a completions prompt, whose anchor, its
    first blocks, many requests may share)."""
    if prefix is None or not prefix.continued or prefix.anchor is None or explore_every <= 0:
        return tie_break
    return operator.index(prefix.anchor)


def _cached(pool: PoolSnapshot, url: str) -> int:
    for e in pool.endpoints:
        if e.url == url:
            return e.cached_tokens
    return 0
