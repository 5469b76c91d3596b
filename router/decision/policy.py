"""The routing decision: a pure function of (request features, pool snapshots, rules).

No I/O, no clock, no metrics, no mutation: the same inputs always give the same
:class:`Decision`, so the whole policy is table-tested (``tests/unit/test_policy.py``). Every
rule of the decision lives here: the output budget, the context cap, the speculative pool's
eligibility, the bypasses and the fallbacks; and, next to :func:`decide`, the prompt lengths at
which its answer can change (:func:`flip_points`), so that prompt sizing asks the policy
instead of mirroring its inequalities. Sources: Leviathan et al. 2023 (arXiv:2211.17192) for
the speedup model, sgl-project/sglang#3574 for the drafter's positional limit, and
``docs/operator-guide.md`` for the operating points behind the thresholds.

Symbols: ``P`` prompt tokens (the longest prompt of a batch), ``M`` the per-sequence output
budget, ``n`` choices per prompt, ``S`` the validated safe context
(``limits.max_context_tokens``), ``D`` the default budget (``limits.default_max_tokens``),
``K`` a speculative pool's reserved draft tokens (SGLang's ``max(topk * num_steps,
num_draft_tokens)``), ``limit`` a pool's own context limit. All in tokens.

0. **Budget** (:func:`output_budget`): the client's ``max_completion_tokens``, else its
   ``max_tokens``, else ``min(D, S - P)`` (forwarded to the engine as ``max_tokens``).
1. **Context cap.** ``P >= S``, ``P + M > S``, or ``P + M`` above every pool's limit ->
   :attr:`Outcome.REFUSED`, reason ``context_cap`` (HTTP 400 before any engine sees it: an
   engine pushed past its validated context can crash). Then, when no pool serves every kind
   the request needs (:mod:`router.request.capabilities`; a plain pool serves all), REFUSED with the
   first pool's missing kind as the reason.
2. **Speculative eligibility**, per speculative pool in config order: the checks of
   :data:`router.decision.checks.SPECULATIVE_CHECKS`, in that order (the first rejection names the
   reason, the strongest says what becomes of the pool): a pool the lossless canary ejected ->
   ``canary_mismatch``; a kind it does not serve -> that kind (one of
   :data:`router.reasons.CAPABILITY_KINDS`); a LoRA adapter no endpoint of it has ->
   ``lora_adapter`` (plain pools without it are skipped too); ``P + n * M + K > limit`` (the
   ``n`` weighting keeps large-``n`` requests off the drafter pool: every sample drafts) or
   ``P > routing.long_prompt_tokens`` -> ``long_context`` (the first a hard limit; the
   threshold a bypass: the pool stays a fallback); no healthy endpoint -> ``spec_unhealthy``;
   the client's ``off`` hint -> ``client_opt_out`` (a bypass); saturation bypass on ->
   ``saturated``; acceptance bypass on -> ``low_acceptance``; ``seed`` or ``logit_bias`` ->
   ``sampling_guarantee``; else the pool is chosen with reason ``speculative``. The client's
   ``on`` hint skips the long-prompt threshold, the acceptance bypass and the sampling
   guarantee only. **Affinity** (with a :class:`router.decision.prefix.PrefixRequest` of a
   continued conversation, ``prefix.continued``): a pool bypassed as ``saturated`` and nothing
   else stays a candidate when its chosen endpoint is a ``prefix_match`` (the conversation is
   cached there) whose load is below
   ``prefix.sticky_max_load`` (requests); new conversations (no match) are the ones shed.
   Every other rejection (canary, capability, adapter, opt-out, ``long_context``, ``low_acceptance``, unhealthy)
   stays hard: a conversation grown past ``routing.long_prompt_tokens`` moves to plain.
3. **Plain pools** in config order: the first with a healthy endpoint whose limit holds
   ``P + M`` (each of the ``n`` sequences is checked alone by the engine). The reason is the
   first speculative pool's rejection reason, or ``plain_only`` when there is none.
   Without a prediction, the candidate whose endpoint caches the longest prefix under the
   same ceiling wins (:func:`_affine`), else the first in config order: a conversation that
   started on a plain pool while the speculative one was saturated stays there after the
   bypass turns off (reason ``prefix_affinity``), until its endpoint reaches the ceiling or
   its cache is gone. With speed models every candidate is predicted (cached prefill
   counted), and a saturated pool kept by affinity that wins says ``prefix_affinity``; while
   some candidate pool's predictions are off (``prediction_fallback``,
   :mod:`router.decision.prediction_check`), the candidate endpoint with the least load wins instead
   (the predicted-faster on ties, then config order), reason ``shortest_queue``.
4. **Fallback**: no plain pool can take it (none configured, none healthy, or none large
   enough), but a speculative pool fits and is healthy (only bypassed: long prompt, opt-out,
   saturation, acceptance) -> that pool, reason ``plain_unhealthy``. A deployment of
   speculative pools only therefore serves every request that fits them.
5. Otherwise :attr:`Outcome.UNAVAILABLE`, reason ``no_healthy_upstream`` (HTTP 503).

Inside a pool: the healthy endpoint with the least load (``max(scraped running + queued,
router in-flight)``); ties broken by ``(seed + tie_break) mod ties`` over endpoints sorted by
URL, so a seeded sequence of requests spreads round-robin over equally loaded endpoints.
With a :class:`router.decision.prefix.PrefixRequest` (``routing.prefix_cache``), the choice inside a
pool is :func:`router.decision.prefix.pick_endpoint` on each snapshot's ``cached_tokens`` estimate
(``prefix_match`` / ``rendezvous`` / ``least_load`` / ``load_guard``, in
:attr:`Decision.endpoint_reason`), and a completion-time prediction counts that estimate as
cached prefill.
Across pools, a decision by prediction for a request with an anchor sends it to the pool the
anchor ranks first (rendezvous) among those predicted within ``prefix.pool_affinity_ratio``
(``new_affinity_ratio`` when it continues no conversation) of the fastest with nothing
cached, or, continued, not yet measured for its kind
(:func:`router.decision.affinity.affine_order`, reason ``prefix_affinity`` when that is not the fastest),
and explores a continued conversation whole, by its anchor (:func:`router.decision.affinity.explore_key`):
router replicas that share no state keep a conversation's turns in one pool.

Hysteresis (:func:`next_saturated`, :func:`next_low_acceptance`,
:func:`next_prediction_fallback`, in :mod:`router.decision.hysteresis`) is pure too: the runtime
advances it in one named step per scrape round and feeds the result back as snapshot flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from router.decision.acceptance import temperature_class
from router.decision.affinity import Predict, affine_order, explore_key
from router.decision.checks import SPECULATIVE_CHECKS, Rejection, Strength
from router.decision.hysteresis import (
    expected_speedup,
    next_low_acceptance,
    next_prediction_fallback,
    next_saturated,
)
from router.decision.learn import context_bucket
from router.decision.predicted import (
    batch_context,
    distrusted,
    externality_cost,
    measure_first,
    predict_cost,
    predict_request,
    runner_up,
    shortest_queue,
)
from router.decision.prefix import PickReason, PrefixRequest, pick_endpoint
from router.decision.snapshot import EndpointSnapshot, PoolShape, PoolSnapshot, Rules
from router.reasons import Reason
from router.request.capabilities import preferred_features, required_features, unmet
from router.request.features import ParsedRequest, RequestFeatures, fast_frozen_init, prompt_count

__all__ = [
    "Decision", "EndpointSnapshot", "Outcome", "PoolShape", "PoolSnapshot", "Reason", "Rules",
    "batch_context", "decide", "expected_speedup", "flip_points", "next_low_acceptance", "next_prediction_fallback",
    "next_saturated", "output_budget", "over_length_message", "predict_request", "request_features", "screen",
]


class Outcome(StrEnum):
    """What a decision says about the request; HTTP statuses are the API layer's."""

    ROUTED = "routed"
    REFUSED = "refused"          # the request can never be served as asked (context cap)
    UNAVAILABLE = "unavailable"  # it could be, but no healthy endpoint can take it now


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request goes, and why.

    Attributes:
        pool: the chosen pool's name, or None unless routed.
        endpoint: the chosen endpoint's URL, or None unless routed.
        reason: why (:class:`Reason`).
        outcome: routed, refused (``context_cap``) or unavailable (``no_healthy_upstream``).
        predicted: ``(pool, seconds)`` of every pool that could take the request, when the
            choice was made by predicted completion time (empty otherwise).
        endpoint_reason: why this endpoint inside the pool (:class:`router.decision.prefix.PickReason`
            value) when prefix routing chose it; None otherwise.
        basis: the chosen pool's snapshot when ``predicted`` is set (what the prediction read:
            :func:`predict_request` evaluates it again with what happened); None otherwise. Not
            compared: two decisions are equal when they route alike.
    """

    pool: str | None
    endpoint: str | None
    reason: Reason
    outcome: Outcome = Outcome.ROUTED
    predicted: tuple[tuple[str, float], ...] = ()
    endpoint_reason: str | None = None
    basis: PoolSnapshot | None = field(default=None, compare=False, repr=False)


def output_budget(requested: int | None, prompt_tokens: int, rules: Rules) -> int:
    """The per-sequence output budget M (tokens): ``requested``, else ``min(D, S - P)``
    (never below 0; a prompt at or over the cap is refused whatever its budget)."""
    if requested is not None:
        return requested
    cap = rules.max_context_tokens
    default = cap if rules.default_max_tokens is None else rules.default_max_tokens
    return max(0, min(default, cap - prompt_tokens))


def request_features(parsed: ParsedRequest, prompt_tokens: int, rules: Rules, *,
                     prompt_tokens_lower: int | None = None, speculation: str = "auto",
                     adapters: frozenset[str] = frozenset(), estimate: int | None = None,
                     prompt_bytes: int = 0) -> RequestFeatures:
    """The :class:`RequestFeatures` of ``parsed`` with ``P = prompt_tokens`` and its budget.

    ``prompt_tokens`` is P, exact or an upper bound (then ``prompt_tokens_lower`` is the lower
    bound: the over-length message states "at least <lower>"); ``speculation``, ``adapters``:
    the client's hint and the LoRA adapters (:mod:`router.state.models`); ``estimate``,
    ``prompt_bytes``: :attr:`RequestFeatures.prompt_tokens_estimate` and ``prompt_bytes``.
    """
    requested = parsed.max_new_tokens
    # positional, in field order (tests/unit/test_policy.py pins it): half the cost of keywords
    return RequestFeatures(
        prompt_tokens, output_budget(requested, prompt_tokens, rules), parsed.n, prompt_count(parsed),
        parsed.stream, parsed.param, requested is None, prompt_tokens_lower, temperature_class(parsed.doc),
        required_features(parsed), speculation, adapters, preferred_features(parsed.doc), estimate, prompt_bytes)


def _refused(features: RequestFeatures, pools: Iterable[PoolShape], cap: int) -> bool:
    seq = features.sequence_tokens
    if features.prompt_tokens >= cap or seq > cap:
        return True
    for p in pools:  # a loop, not any(): no generator on every decision's path
        if seq <= p.limit:
            return False
    return True


def over_length_message(features: RequestFeatures, rules: Rules) -> str:
    """The message of a ``context_cap`` refusal: what was counted and what was asked.

    Only true statements: an exact P, or "at least" the lower bound when P was bounded
    (:attr:`RequestFeatures.prompt_phrase`).
    """
    cap, param = rules.max_context_tokens, features.param
    head = f"This model's maximum context length is {cap} tokens"
    shown, budget = features.prompt_phrase(), features.max_new_tokens
    if features.prompt_tokens >= cap:
        no_room = (", which leaves no room for a completion"
                   if features.prompt_exact and features.prompt_tokens == cap else "")
        return (f"{head}. However, your {param} resulted in {shown} tokens{no_room}. "
                f"Please reduce the length of the {param}.")
    detail = f"({shown} in the {param}, {budget} in the completion)"
    if features.sequence_tokens > cap:
        return (f"{head}. However, you requested {features.prompt_phrase(budget)} tokens {detail}. "
                f"Please reduce the length of the {param} or completion.")
    return f"{head} and no pool can hold {features.prompt_phrase(budget)} tokens {detail}."


def flip_points(requested: int | None, n: int, pools: Iterable[PoolShape], rules: Rules) -> list[int]:
    """Every prompt length ``t`` (tokens) at which :func:`decide` may answer differently for
    ``P <= t`` and ``P = t + 1``, for a request asking ``requested`` tokens (None: defaulted)
    with ``n`` choices, whatever the pools' load and health.

    Between two consecutive points every length rule of the decision (budget, cap, pool
    limits, long-prompt threshold) has one truth value, so any ``P`` there (e.g. an upper
    bound of the true count) decides as the true count would. Extra points are harmless (they
    only cost an exact count). With a defaulted budget, ``M = min(D, S - P)`` changes form at
    ``S - D``; above it ``P + M = S`` and the ``n``-weighted speculative fit ``P + n(S - P) + K
    <= limit`` flips where ``(n - 1) P >= n S + K - limit``. Prefix affinity adds no length
    threshold: a ``prefix_match`` compares the estimated cached tokens, which scale with
    ``P`` (:meth:`router.decision.prefix.PrefixChain.tokens`), with ``cache_threshold * P``.
    """
    cap = rules.max_context_tokens
    default = cap if rules.default_max_tokens is None else rules.default_max_tokens
    m = default if requested is None else requested
    out = [cap - 1, cap - m, rules.long_prompt_tokens]
    for pool in pools:
        out.append(pool.limit - m)
        if pool.speculative:
            out.append(pool.limit - n * m - pool.reserved)
            if requested is None and n > 1:
                out.append(-(-(n * cap + pool.reserved - pool.limit) // (n - 1)) - 1)
    return out


def _unservable(features: RequestFeatures, pools: Sequence[PoolSnapshot]) -> Reason | None:
    """None when some pool serves every kind the request needs, else the first pool's missing
    kind (the request can never be served as asked: a refusal, whatever the pools' health)."""
    if not features.needs:
        return None
    missing = [unmet(features.needs, p.capabilities) for p in pools]
    first = missing[0]
    return None if None in missing or first is None else Reason(first)


def _without(pool: PoolSnapshot, exclude: frozenset[str]) -> PoolSnapshot:
    """``pool`` with the endpoints in ``exclude`` (those that failed this request) unhealthy."""
    if not any(e.url in exclude for e in pool.endpoints):
        return pool
    return replace(pool, endpoints=tuple(replace(e, healthy=False) if e.url in exclude else e
                                         for e in pool.endpoints))


def screen(features: RequestFeatures, pool: PoolSnapshot, rules: Rules, *,
           predicting: bool = False) -> list[Rejection]:
    """The rejections of :data:`router.decision.checks.SPECULATIVE_CHECKS` for one speculative pool, in
    check order, less those that do not apply: soft ones under the client's ``on`` hint, and
    the ``predicted`` ones when ``predicting`` (every pool carries a speed model)."""
    insist = features.speculation == "on"
    out = []
    for check in SPECULATIVE_CHECKS:
        r = check(features, pool, rules)
        if r is None or (insist and r.strength is Strength.SOFT) or (predicting and r.predicted):
            continue
        out.append(r)
    return out


def _pick(endpoints: Sequence[EndpointSnapshot], exclude: frozenset[str], tie: int,
          prefix: PrefixRequest | None = None, prompt_tokens: int = 0,
          why: dict[str, str] | None = None) -> str | None:
    if prefix is not None:
        picked = pick_endpoint(endpoints, prompt_tokens=prompt_tokens, anchor=prefix.anchor,
                               anchor_tokens=prefix.anchor_tokens, cache_threshold=prefix.cache_threshold,
                               balance_abs_threshold=prefix.balance_abs_threshold,
                               balance_rel_threshold=prefix.balance_rel_threshold,
                               hash_load_factor=prefix.hash_load_factor, exclude=exclude, tie=tie,
                               continued=prefix.continued)
        if picked is None:
            return None
        if why is not None:
            why[picked[0]] = picked[1]
        return picked[0]
    healthy = [e for e in endpoints if e.healthy and e.url not in exclude]
    if not healthy:
        return None
    low = min(e.load for e in healthy)
    ties = sorted(e.url for e in healthy if e.load == low)
    return ties[tie % len(ties)]


def _load(endpoints: Sequence[EndpointSnapshot], url: str) -> int:
    return next(e.load for e in endpoints if e.url == url)


def _cached(endpoints: Sequence[EndpointSnapshot], url: str) -> int:
    return next(e.cached_tokens for e in endpoints if e.url == url)


def _sticky(endpoints: Sequence[EndpointSnapshot], url: str, why: dict[str, str],
            prefix: PrefixRequest | None) -> bool:
    """The request continues a conversation (``prefix.continued``: a chat with an assistant
    turn; a repeated first prompt is not one), ``url`` holds its prefix (``prefix_match``) and
    its load is below the affinity ceiling ``prefix.sticky_max_load`` (requests)."""
    return (prefix is not None and prefix.continued and why.get(url) == PickReason.PREFIX_MATCH
            and _load(endpoints, url) < prefix.sticky_max_load)


def _affine(candidates: Sequence[tuple[PoolSnapshot, str]], why: dict[str, str],
            prefix: PrefixRequest | None) -> tuple[PoolSnapshot, str] | None:
    """The candidate whose endpoint caches the longest prefix of the conversation among those
    under the affinity ceiling (:func:`_sticky`; the first in config order on ties), or None."""
    best: tuple[PoolSnapshot, str] | None = None
    most = -1
    for pool, url in candidates:
        if _sticky(pool.endpoints, url, why, prefix) and (cached := _cached(pool.endpoints, url)) > most:
            best, most = (pool, url), cached
    return best


def decide(features: RequestFeatures, pools: Sequence[PoolSnapshot], rules: Rules, *,
           exclude: frozenset[str] = frozenset(), tie_break: int = 0,
           prefix: PrefixRequest | None = None) -> Decision:
    """Choose the pool and endpoint for one request (see the module docstring).

    Args:
        features: the request's prompt tokens, budget and ``n`` (:func:`request_features`).
        pools: snapshots of every pool, in config order.
        rules: the thresholds.
        exclude: endpoint URLs not to use (those that already failed this request).
        tie_break: a per-request integer (e.g. a request counter).
        prefix: the request's anchor and the prefix-cache thresholds (None: least load).

    Returns:
        The :class:`Decision`; never raises.
    """
    if _refused(features, pools, rules.max_context_tokens):
        return Decision(None, None, Reason.CONTEXT_CAP, Outcome.REFUSED)
    missing = _unservable(features, pools)
    if missing is not None:
        return Decision(None, None, missing, Outcome.REFUSED)
    tie = rules.seed + tie_break
    why: dict[str, str] = {}  # endpoint -> PickReason value, when prefix routing chose it
    p = features.predicted_prompt_tokens  # prefix thresholds: the expected P of a bounded one
    predicting: bool | None = None  # every pool has a speed model (read by the speculative pools' checks)
    spec_reason: Reason | None = None
    fallback: tuple[str, str] | None = None
    candidates: list[tuple[PoolSnapshot, str]] = []  # pools that may take it, in config order
    kept: set[str] = set()  # saturated speculative pools kept as candidates by affinity
    bypassed: tuple[PoolSnapshot, str] | None = None  # the first pool bypassed for speed alone
    for pool in pools:
        if not pool.speculative:
            continue
        if predicting is None:
            predicting = all(p.speed is not None for p in pools)
        pool = _without(pool, exclude)
        rejections = screen(features, pool, rules, predicting=predicting)
        if rejections and max(r.strength for r in rejections) is Strength.HARD:
            spec_reason = spec_reason or rejections[0].reason
            continue
        endpoint = _pick(pool.endpoints, frozenset(), tie, prefix, p, why)
        if endpoint is None:  # prefix routing found no endpoint to take it
            spec_reason = spec_reason or Reason.SPEC_UNHEALTHY
            continue
        if not rejections:
            if features.speculation == "on":  # the client asked for speculation: no prediction
                return Decision(pool.name, endpoint, Reason.SPECULATIVE, endpoint_reason=why.get(endpoint))
            candidates.append((pool, endpoint))
        elif len(rejections) == 1 and rejections[0].reason is Reason.SATURATED and _sticky(
                pool.endpoints, endpoint, why, prefix):
            candidates.append((pool, endpoint))  # saturated, but the conversation is cached here
            kept.add(pool.name)
        else:
            spec_reason = spec_reason or rejections[0].reason
            fallback = fallback or (pool.name, endpoint)
            if bypassed is None and all(r.predicted for r in rejections):
                bypassed = (pool, endpoint)  # moved only for speed: kept when plain is busier
    seq = features.sequence_tokens
    for pool in pools:
        if pool.speculative or seq > pool.limit or not features.adapters <= pool.adapters:
            continue
        endpoint = _pick(pool.endpoints, exclude, tie, prefix, p, why)
        if endpoint is not None:
            candidates.append((pool, endpoint))
    if len(candidates) > 1 and all(c.speed is not None for c, _ in candidates):
        return _by_prediction(features, candidates, rules, tie_break, why, kept, spec_reason, prefix)
    if candidates:
        affine = _affine(candidates, why, prefix)
        pool, endpoint = affine or candidates[0]
        # on a plain pool while speculation would have been chosen: kept there by the cache
        reason = _reason(pool, candidates, kept, spec_reason, Reason.PREFIX_AFFINITY)
        if affine is None and bypassed is not None and not pool.speculative and (
                _load(pool.endpoints, endpoint) > _load(bypassed[0].endpoints, bypassed[1])):
            # a bypass never moves work to a busier pool without a prediction saying it pays
            pool, endpoint, reason = bypassed[0], bypassed[1], Reason.PLAIN_BUSIER
        return Decision(pool.name, endpoint, reason, Outcome.ROUTED, (), why.get(endpoint))
    if fallback is not None:
        return Decision(fallback[0], fallback[1], Reason.PLAIN_UNHEALTHY, endpoint_reason=why.get(fallback[1]))
    return Decision(None, None, Reason.NO_HEALTHY_UPSTREAM, Outcome.UNAVAILABLE)


def _by_prediction(features: RequestFeatures, candidates: Sequence[tuple[PoolSnapshot, str]], rules: Rules,
                   tie_break: int, why: Mapping[str, str], kept: set[str], spec_reason: Reason | None,
                   prefix: PrefixRequest | None) -> Decision:
    """The decision among ``candidates`` (two or more, every one with a speed model) by
    predicted completion time (module docstring, step 3): the shorter queue while a pool's
    predictions are off, else the predicted-fastest (with ``rules.marginal_cost``: completion
    plus its cost to the others, the measure "near" is judged by too) or, among the near-fastest,
    the conversation's own pool
    (:func:`router.decision.affinity.affine_order`), or the explored runner-up. ``kept``,
    ``spec_reason``: as :func:`_reason` reads them."""
    predicted = tuple((c.name, predict_request(features, c, url)) for c, url in candidates)
    if distrusted(candidates):  # some pool's predictions are off: join the shorter queue
        chosen = candidates.index(shortest_queue(candidates, predicted, features))
        other = measure_first(candidates, chosen, (features.temperature_class,
                                                   context_bucket(features.predicted_prompt_tokens)),
                              prefix is None or not prefix.continued, None if prefix is None else prefix.anchor)
        pool, endpoint = candidates[chosen if other is None else other]
        return Decision(pool.name, endpoint, Reason.SHORTEST_QUEUE if other is None else Reason.EXPLORE,
                        predicted=predicted, endpoint_reason=why.get(endpoint), basis=pool)
    ranked = predicted
    score: Predict = predict_request
    if rules.marginal_cost:  # the same measure for the order and for the affinity's "close"
        ranked = tuple((name, t + externality_cost(features, c, url))
                       for (c, url), (name, t) in zip(candidates, predicted, strict=True))
        score = predict_cost
    order: Sequence[int] = sorted(range(len(candidates)), key=lambda i: ranked[i][1])  # stable: first wins ties
    fastest, order = order[0], affine_order(features, candidates, order, ranked, prefix, score)
    pool, endpoint = candidates[order[0]]  # the conversation's pool among the near-fastest
    reason = (_reason(pool, candidates, kept, spec_reason, Reason.PLAIN_FASTER) if order[0] == fastest
              else Reason.PREFIX_AFFINITY)
    runner = runner_up(candidates, order, predicted, explore_key(tie_break, prefix, rules.explore_every), rules,
                        (features.temperature_class, context_bucket(features.predicted_prompt_tokens)),
                        prefix is None or not prefix.continued, None if prefix is None else prefix.anchor)
    if runner is not None:
        pool, endpoint = candidates[runner]
        reason = Reason.EXPLORE
    return Decision(pool.name, endpoint, reason, predicted=predicted, endpoint_reason=why.get(endpoint),
                    basis=pool)


def _reason(pool: PoolSnapshot, candidates: Sequence[tuple[PoolSnapshot, str]], kept: set[str],
            spec_reason: Reason | None, over_speculative: Reason) -> Reason:
    """The reason of a routed decision: ``prefix_affinity`` on a speculative pool kept by
    affinity, else ``speculative``; on a plain pool, ``over_speculative`` when a speculative
    pool was a candidate too, else the first speculative rejection (``plain_only``: none)."""
    if pool.speculative:
        return Reason.PREFIX_AFFINITY if pool.name in kept else Reason.SPECULATIVE
    for c, _ in candidates:  # a loop, not any(): no generator on every decision's path
        if c.speculative:
            return over_speculative
    return spec_reason or Reason.PLAIN_ONLY
