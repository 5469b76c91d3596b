"""The choice among candidate pools by predicted completion time, the parts that need no
:class:`~router.decision.policy.Decision`: each candidate's prediction (:func:`predict_request`), the
cost a request adds to the requests already on an endpoint (:func:`externality_cost`, an
experiment), the fallback to the shorter queue while a pool's predictions are off
(:func:`distrusted`, :func:`shortest_queue`) and exploration (:func:`runner_up`).
:func:`router.decision.policy.decide` calls them (module docstring there, step 3). Pure: no I/O, no clock.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, SupportsIndex

from router.decision.learn import context_bucket
from router.decision.predict import completion_s, externality_s
from router.decision.prefix import rendezvous_score

if TYPE_CHECKING:
    from router.decision.snapshot import EndpointSnapshot, PoolSnapshot, Rules
    from router.request.features import RequestFeatures

__all__ = ["batch_context", "correction", "distrusted", "externality_cost", "predict_cost", "predict_request", "runner_up",
           "shortest_queue"]


def _load(endpoints: Sequence[EndpointSnapshot], url: str) -> int:
    return next(e.load for e in endpoints if e.url == url)


def _inflight(endpoints: Sequence[EndpointSnapshot], url: str) -> int:
    return next(e.inflight for e in endpoints if e.url == url)


def batch_context(e: EndpointSnapshot, prompt_tokens: int, output_tokens: int) -> float | None:
    """The mean context (tokens) of ``e``'s batch once a request of ``prompt_tokens`` joins it,
    halfway through its ``output_tokens``: the engine's used KV plus the request's, over its
    running requests plus one; None when the engine's KV is unknown."""
    if e.kv_free_tokens is None:
        return None
    running = max(0, e.load - e.queued)
    return (e.kv_used_tokens + prompt_tokens + output_tokens / 2) / (running + 1)


def correction(features: RequestFeatures, pool: PoolSnapshot) -> float:
    """The factor the checks put on ``pool``'s predictions for the request's
    ``(temperature class, context bucket)`` cell (``PoolSnapshot.correction``; 1.0: none)."""
    if not pool.correction:
        return 1.0
    cell = (features.temperature_class, context_bucket(features.predicted_prompt_tokens))
    for key, factor in pool.correction:  # a few cells at most: a scan, no dict per snapshot
        if key == cell:
            return factor
    return 1.0


def predict_request(features: RequestFeatures, pool: PoolSnapshot, endpoint: str,
                    output_tokens: int | None = None, cached_tokens: int | None = None, *,
                    raw: bool = False) -> float:
    """Predicted completion seconds of the request on ``endpoint`` of ``pool``
    (:func:`router.decision.predict.completion_s`), with ``output_tokens`` per sequence (default: the
    budget ``M``; the KV reservation is the budget's either way, as the engine reserves it)
    and ``cached_tokens`` of its prompt cached there (default: the endpoint's estimate), times
    the checks' :func:`correction` of its cell unless ``raw`` (what a check evaluates: the
    model's own prediction, :mod:`router.decision.prediction_check`).

    Raises:
        ValueError: ``pool`` has no speed model, or no endpoint ``endpoint``.
    """
    if pool.speed is None:
        raise ValueError(f"pool {pool.name} has no speed model")
    e = next((e for e in pool.endpoints if e.url == endpoint), None)
    if e is None:
        raise ValueError(f"pool {pool.name} has no endpoint {endpoint}")
    m = features.max_new_tokens if output_tokens is None else output_tokens
    p = features.predicted_prompt_tokens  # the expected P where only its bound is known
    need = (features.num_prompts * features.predicted_weight + pool.reserved) * (1 + e.queued)
    t = completion_s(pool.speed, batch=e.load + features.n, prompt_tokens=p,
                     context_tokens=batch_context(e, p, m),
                     kv_read_tokens=None if e.kv_free_tokens is None else e.kv_used_tokens + p + m / 2,
                     cached_tokens=e.cached_tokens if cached_tokens is None else cached_tokens, output_tokens=m,
                     accept_length=pool.accept_length(features.temperature_class, p) if pool.speculative else None,
                     kv_need_tokens=need, kv_free_tokens=e.kv_free_tokens, kv_used_tokens=e.kv_used_tokens,
                     prefill_backlog_tokens=e.prefill_backlog_tokens)
    return t if raw or not pool.correction else t * correction(features, pool)


def externality_cost(features: RequestFeatures, pool: PoolSnapshot, endpoint: str) -> float:
    """:func:`router.decision.predict.externality_s` of the request on ``endpoint`` of ``pool``, times
    the checks' :func:`correction` of its cell (the others' steps run as far off as its own)."""
    assert pool.speed is not None
    e = next(e for e in pool.endpoints if e.url == endpoint)
    p = features.predicted_prompt_tokens
    ctx = batch_context(e, p, features.max_new_tokens)
    cost = externality_s(pool.speed, batch=e.load + features.n, sequences=features.n,
                         output_tokens=features.max_new_tokens,
                         accept_length=pool.accept_length(features.temperature_class, p) if pool.speculative else None,
                         context_tokens=p + features.max_new_tokens / 2 if ctx is None else ctx)
    return cost * correction(features, pool) if pool.correction else cost


def predict_cost(features: RequestFeatures, pool: PoolSnapshot, endpoint: str,
                 output_tokens: int | None = None, cached_tokens: int | None = None) -> float:
    """:func:`predict_request` plus :func:`externality_cost`: the seconds the request takes and
    the seconds it adds to the requests decoding beside it on ``endpoint`` (what
    ``routing.learning.marginal_cost`` ranks the pools by). Raises what :func:`predict_request`
    raises."""
    return predict_request(features, pool, endpoint, output_tokens, cached_tokens) + \
        externality_cost(features, pool, endpoint)


def distrusted(candidates: Sequence[tuple[PoolSnapshot, str]]) -> bool:
    """Whether some candidate pool's predictions are off (``prediction_fallback``)."""
    for c, _ in candidates:  # a loop, not any(): no generator on every decision's path
        if c.prediction_fallback:
            return True
    return False


def shortest_queue(candidates: Sequence[tuple[PoolSnapshot, str]],
                    predicted: Sequence[tuple[str, float]], features: RequestFeatures) -> tuple[PoolSnapshot, str]:
    """The candidate whose chosen endpoint has the fewest of the router's requests in flight
    (:attr:`EndpointSnapshot.inflight`; all replicas' when they share state): join the shorter
    queue, the rule that needs no model (W. Winston 1977, "Optimality of the shortest line
    discipline", J. Appl. Prob. 14(1)). The router's own count, not the scraped load: it is
    exact at every decision, where a scrape is up to a round old, and a burst decided within one
    round all joins the pool whose last scrape read low (M. Mitzenmacher 2000, "How useful is
    old information?", IEEE Trans. Parallel Distrib. Syst. 11(1): with stale load, joining the
    shortest queue herds): the load-test quick start's waves of 16 went 16 to the slower pool,
    whose engine the load tester had just left idle, docs/loadtests.md.

    Among equally short queues (every queue is empty at a concurrency of one) the faster by
    what the checks measured: each prediction with its cell's whole median bias taken off
    (:attr:`PoolSnapshot.measured_factor` in place of the banded :attr:`PoolSnapshot.correction`:
    two biases inside the band, one each way, reversed the rank of two pools 1.6x apart on the
    quick start), else the predicted-faster one, then config order (never the first pool for
    every request of an idle deployment). :func:`measure_first` sees that both cells get measured."""
    best = 0
    low = (_inflight(candidates[0][0].endpoints, candidates[0][1]),
           _measured(features, candidates[0][0], predicted[0][1]))
    for i in range(1, len(candidates)):
        pool, url = candidates[i]
        key = (_inflight(pool.endpoints, url), _measured(features, pool, predicted[i][1]))
        if key < low:
            best, low = i, key
    return candidates[best]


def _measured(features: RequestFeatures, pool: PoolSnapshot, seconds: float) -> float:
    """``seconds`` (a prediction with the banded :func:`correction`) with the cell's whole
    measured bias taken off instead (:attr:`PoolSnapshot.measured_factor`; as it is without one)."""
    if not pool.measured_factor:
        return seconds
    cell = (features.temperature_class, context_bucket(features.predicted_prompt_tokens))
    for key, factor in pool.measured_factor:
        if key == cell:
            return seconds / correction(features, pool) * factor
    return seconds


def measure_first(candidates: Sequence[tuple[PoolSnapshot, str]], chosen: int, cell: tuple[str, int],
                  one_off: bool, anchor: SupportsIndex | None) -> int | None:
    """In the fallback, the candidate that takes this request to be measured, or None:
    :func:`runner_up`'s rule for a request that continues no conversation (``one_off``) without
    its periodic one: another pool whose predictions for the request's ``cell`` have not been
    checked enough (``PoolSnapshot.measured``) while the ``chosen`` one's have, its endpoint
    idle, and (with an ``anchor``) the pool the anchor ranks first. Without it the pool the
    shorter queue's tie-break passes over at a concurrency of one is never measured in that
    cell, and the tie-break reads its unchecked prediction for good."""
    seen = candidates[chosen][0].measured
    if not one_off or seen is None or cell not in seen:
        return None
    name = candidates[chosen][0].name
    for i, (pool, url) in enumerate(candidates):
        if (pool.name != name and pool.measured is not None and cell not in pool.measured
                and _load(pool.endpoints, url) == 0 and _anchors(candidates, i, anchor)):
            return i
    return None


def runner_up(candidates: Sequence[tuple[PoolSnapshot, str]], order: Sequence[int],
               predicted: Sequence[tuple[str, float]], tie_break: int, rules: Rules,
               cell: tuple[str, int], one_off: bool = True, anchor: SupportsIndex | None = None) -> int | None:
    """The candidate that explores this request (``rules.explore_every``), or None: the fastest
    candidate of another pool than the predicted best (the runner-up), when

    - on every ``explore_every``-th request, its prediction is at most ``explore_ratio`` times
      the best's, or its predictions for the request's ``(temperature class, context bucket)``
      ``cell`` have not been checked enough (``PoolSnapshot.measured``) and its endpoint is idle:
      a pool believed slow for a kind of request is measured on it again instead of being
      avoided for good, at the cost of that one request only (an idle endpoint has no batch to
      slow; the share stays at most ``1 / explore_every``);
    - on any request that continues no conversation (``one_off``: moving a conversation's
      turn would prefill it again), when the best's cell is measured and the runner-up's is
      not and its endpoint is idle, however slow it is predicted: the checks have seen one side
      of the comparison only, and a model extrapolated to prompts it has not served can be
      several times off (the load-test quick start, docs/loadtests.md: a speculative pool
      predicted 4-6x too slow at a new prompt length, every request of it sent to the slower
      pool). The measurement corrects the cell's predictions
      (:meth:`router.decision.prediction_check.PredictionCheck.corrections`). Bounded without a
      share: one request at a time (idle), until the cell is measured
      (:meth:`~router.decision.prediction_check.PredictionCheck.measured_cells`: one check that
      finds the pool no faster than predicted, else ``MIN_CELL_CHECKS`` recent checks; a few
      per cell and ``max_age_s``); at a cold start (no cell measured) only the
      periodic rule explores. A request with an ``anchor`` (it may open a conversation) is
      explored so only to the pool its anchor ranks first among the candidates
      (:func:`router.decision.prefix.rendezvous_score`, as :mod:`router.decision.affinity`
      ranks them): where its later turns go on every replica, so the measurement never moves a
      conversation (``benchmarks/multiturn.py --topology spec2-plain1``, two replicas, 5 seeds:
      1.21x the ideal prefill work without this, 1.04x with it, 1.02-1.04x before the dense
      rule; docs/performance.md).
    """
    every = rules.explore_every
    if every <= 0:
        return None
    periodic = tie_break % every == every - 1
    best = order[0]
    seen = candidates[best][0].measured
    one_sided = seen is not None and cell in seen  # the best's predictions here are checked
    for i in order[1:]:
        pool = candidates[i][0]
        if pool.name != candidates[best][0].name:
            if periodic and predicted[i][1] <= rules.explore_ratio * predicted[best][1]:
                return i
            if (pool.measured is not None and cell not in pool.measured
                    and _load(pool.endpoints, candidates[i][1]) == 0
                    and (periodic or (one_off and one_sided and _anchors(candidates, i, anchor)))):
                return i
            return None
    return None


def _anchors(candidates: Sequence[tuple[PoolSnapshot, str]], i: int, anchor: SupportsIndex | None) -> bool:
    """Whether candidate ``i``'s pool is the one ``anchor`` ranks first among the candidates'
    pools (rendezvous); True without an anchor."""
    if anchor is None:
        return True
    a = operator.index(anchor)
    mine = rendezvous_score(candidates[i][0].name, a)
    for pool, _ in candidates:
        if rendezvous_score(pool.name, a) > mine:
            return False
    return True
