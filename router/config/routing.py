"""The ``routing`` section of the config tree (:mod:`router.config.tree`): the thresholds the
policy reads (:mod:`router.decision.policy`, :mod:`router.decision.bypass`, :mod:`router.decision.prefix`). They are
hot-reloadable, and :class:`router.config.overrides.Overrides` can change some of them at
runtime (``PUT /admin/config``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, model_validator

from router.config.base import NonNegativeInt, PositiveFloat, PositiveInt, Strict

__all__ = [
    "AcceptanceConfig",
    "LearningConfig",
    "PredictionCheckConfig",
    "PrefixCacheConfig",
    "RoutingConfig",
    "SaturationConfig",
]


class SaturationConfig(Strict):
    """Hysteresis thresholds on a speculative pool's load (running + queued requests).

    Speculation is bypassed once load >= ``enter`` and resumes once load < ``exit``.
    Production reports on GPUs advise bypassing at batch 16-32.
    """

    enter: PositiveInt
    exit: NonNegativeInt

    @model_validator(mode="after")
    def _check(self) -> SaturationConfig:
        if self.exit >= self.enter:
            raise ValueError(f"saturation.exit ({self.exit}) must be < saturation.enter ({self.enter})")
        return self


class AcceptanceConfig(Strict):
    """Acceptance tracking (:mod:`router.decision.acceptance`) and the acceptance bypass.

    The expected speedup is S = E[tau] / (c*gamma + 1) computed from the pool's live accept
    length per temperature class (Leviathan et al. 2023, arXiv:2211.17192); without speed
    models, a class below ``min_expected_speedup`` skips speculation until it reaches
    ``exit_speedup`` (hysteresis). ``enabled: false`` turns the bypass off.

    Attributes:
        max_age_s: seconds an accept-length measurement stays valid; older, it is unknown
            and the pool is used (and so measured) again: the bound on how long a pool stays
            bypassed on a measurement it can no longer refresh.
        weight: the step of the per-class estimate in (0, 1] (1: the last observation only).
    """

    enabled: StrictBool = True
    min_expected_speedup: PositiveFloat = 1.0
    exit_speedup: PositiveFloat = 1.05
    max_age_s: PositiveFloat = 10.0
    weight: Annotated[float, Field(gt=0, le=1)] = 0.5

    @model_validator(mode="after")
    def _check(self) -> AcceptanceConfig:
        if self.exit_speedup < self.min_expected_speedup:
            raise ValueError("acceptance.exit_speedup must be >= min_expected_speedup")
        return self


class PrefixCacheConfig(Strict):
    """Prefix-cache-aware endpoint choice inside a pool (:mod:`router.decision.prefix`, which states the
    algorithm and its sources: SGLang's ``cache_aware`` policy, the Gateway API Inference
    Extension prefix scorer, rendezvous hashing). Hot-reloadable; the index survives a reload
    unless ``block_chars`` changes.

    Attributes:
        enabled: off: least load inside a pool, ties round robin (the router's older choice).
        block_chars: block size of the rendered prompt's hash chain (characters; 64 is about
            16 tokens of English at ~4 characters per token).
        max_blocks: blocks hashed per request (blocks); the prompt beyond
            ``block_chars * max_blocks`` characters is ignored (bounds the per-request cost).
        anchor_blocks: a completions prompt's anchor (its conversation identity) is its first
            this many blocks (blocks); a chat's is its prompt up to the first user message.
        max_blocks_per_endpoint: index capacity per endpoint (blocks, LRU; the memory bound:
            about 100 bytes each).
        cache_threshold: a match counts when it exceeds this fraction of the prompt's tokens
            (0-1; SGLang's ``cache_threshold``, 0.3).
        balance_abs_threshold: load imbalance needs ``max - min`` load above this (requests;
            SGLang's ``balance_abs_threshold``, 64).
        balance_rel_threshold: and ``max > this * min`` (ratio; SGLang's 1.5).
        hash_load_factor: a new conversation's rendezvous choice is skipped when its load
            would exceed this factor of the mean (ratio; SGLang's ``prefix_hash`` uses 1.25).
            Measured in ``benchmarks/multiturn.py`` (docs/performance.md): 1.25 lost up to 12%
            of the hits with 2 router replicas (a conversation moved off its hash on one
            replica misses on the others), 2.0 lost none but left the hash's luck to balance
            (up to 17:7 conversations), 1.5 lost at most 4% with requests within 1.63x.
        sticky_load_factor: conversation affinity across pools (:func:`router.decision.policy.decide`):
            a continued chat (an assistant message in it) whose prefix is cached on an
            endpoint (a ``prefix_match`` there) stays on it while its load is below
            ``ceil(sticky_load_factor * routing.saturation.enter)`` requests, even when the
            speculative pool is bypassed as ``saturated`` (only then: every other bypass
            stays hard), and is not pulled off a plain pool while speculation would have
            been chosen (ratio over ``enter``, >= 0; 0: no affinity across pools, the
            saturation bypass moves every turn).
            Measured in ``benchmarks/multiturn_mixed.py`` (docs/performance.md).
        pool_affinity_ratio: conversation affinity across pools when the pool is chosen by
            predicted completion time (``routing.learning``): among the pools predicted within
            this factor of the fastest, a request goes to the one its anchor ranks first by
            rendezvous hashing (:func:`router.decision.policy.decide`; reason ``prefix_affinity`` when it
            is not the fastest), so router replicas that learn apart still keep a conversation's
            turns in one pool (ratio >= 1; 1: always the fastest). A pool whose predictions for
            the request's kind have not been checked enough counts as close too. Applies to a
            continued chat (an assistant message in it). Measured in
            ``benchmarks/multiturn.py --topology spec2-plain1`` (docs/performance.md).
        new_affinity_ratio: the same for a request that continues no conversation (a first
            turn, a one-off prompt; ratio >= 1, at most ``pool_affinity_ratio``): a first turn
            placed where the next turns will go saves moving it once, a one-off prompt sent to
            a slower pool only costs (measured in ``benchmarks/outofbox_http.py``: +7% mean
            latency at 1.25 on a day of one-off chats, none measurable at 1.1).
    """

    enabled: StrictBool = True
    block_chars: PositiveInt = 64
    max_blocks: PositiveInt = 512
    anchor_blocks: PositiveInt = 4
    max_blocks_per_endpoint: PositiveInt = 32768
    cache_threshold: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.3
    balance_abs_threshold: NonNegativeInt = 64
    balance_rel_threshold: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.5
    hash_load_factor: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.5
    sticky_load_factor: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 2.0
    pool_affinity_ratio: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.25
    new_affinity_ratio: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.1

    @model_validator(mode="after")
    def _check(self) -> PrefixCacheConfig:
        if self.new_affinity_ratio > self.pool_affinity_ratio:
            raise ValueError("new_affinity_ratio must be at most pool_affinity_ratio")
        return self


class PredictionCheckConfig(Strict):
    """Every prediction checked against what happened (:mod:`router.decision.prediction_check`), and the
    fallback while a pool's predictions are off.

    A pool's *median relative error* is the median of ``|predicted - realised| / realised``
    over its last ``window`` checked requests younger than ``max_age_s`` (the prediction
    evaluated with the request's realised output tokens, against the time from its dispatch
    to the engine to its last byte). While some candidate pool's error is at least
    ``fallback_enter`` (once it has ``min_checks`` recent checks), a decision by prediction
    joins the shorter queue instead (the candidate endpoint with the least load, first in
    config order on ties; reason ``shortest_queue``); the pool comes back once its error is
    below ``fallback_exit``, or when fewer than ``min_checks`` recent checks are left.

    Attributes:
        enabled: check and fall back (False: check only, never fall back).
        window: checks kept per pool, and per kind, class and bucket (count).
        min_checks: recent checks a pool needs before its error can turn the fallback on.
        max_age_s: checks older than this are not counted (s).
        fallback_enter: median relative error at or above which the pool falls back (ratio).
        fallback_exit: median relative error below which it comes back (ratio, < enter).
    """

    enabled: StrictBool = True
    window: Annotated[int, Field(ge=1, le=4096)] = 64
    min_checks: PositiveInt = 16
    max_age_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 300.0
    fallback_enter: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 0.5
    fallback_exit: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 0.3

    @model_validator(mode="after")
    def _check(self) -> PredictionCheckConfig:
        if self.fallback_exit >= self.fallback_enter:
            raise ValueError("fallback_exit must be below fallback_enter")
        if self.min_checks > self.window:
            raise ValueError("min_checks must be at most window")
        return self


class LearningConfig(Strict):
    """The live speed models (:mod:`router.decision.learn`): each pool's speed learned from its own
    finished requests, starting from its ``speed`` block (else a default prior).

    While learning is on, every pool carries a speed model, so the pool is chosen by
    predicted completion time (:mod:`router.decision.predict`) and the long-prompt, saturation and
    acceptance thresholds give way to the prediction; only the hard limits (the context cap,
    a pool's ``P + n * M + K``, capabilities, the canary, the client's hint) stay rules.

    Attributes:
        enabled: learn and predict (False: pools without a ``speed`` block use the thresholds).
        forgetting: per-request decay of an observation's weight in (0, 1); about
            ``1 / (1 - forgetting)`` recent requests per pool make the model.
        prior_weight: the prior's strength (observations' worth; small: the traffic wins).
        explore_every: every this many predicted decisions (per router), the runner-up pool
            takes the request when it is predicted at most ``explore_ratio`` times slower, so
            a pool the prediction avoids is still measured (a share of at most
            ``1 / explore_every``, reason ``explore``); besides, an idle runner-up whose
            predictions for the request's cell are unchecked while the best's are checked takes
            it at once, until checked (:func:`router.decision.predicted.runner_up`); 0: never.
        explore_ratio: the runner-up's largest predicted slowdown that exploration accepts.
        marginal_cost: a decision by prediction ranks the pools by the request's predicted
            completion plus what it costs the requests decoding beside it
            (:func:`router.decision.predict.externality_s`) instead of its completion alone: each
            request choosing the pool fastest for itself over-fills the faster pool, as every
            newcomer slows the batch it joins (docs/performance.md, "The learned router against
            the simplest rules").
        acceptance_memory_s: the time constant (s) of the measured accept lengths per
            temperature class and context bucket: an estimate reflects about its last this many
            seconds of requests however rarely its bucket is fed (a change of task or drafter
            shows within a few of them).
        change_detection: a CUSUM test on the fit's residual discounts the fit's history when
            the engine's speed shifts (a new engine, model or load regime), instead of waiting
            for ``forgetting`` to wear it out.
        max_observations_per_s: per pool, at most this many finished requests a second (on
            average; bursts of up to one second's worth, :class:`router.decision.learn.ObservationBudget`)
            are measured for the fit and the acceptance table; the others are not measured (no
            dispatch state, no ``return_spec_tokens_details``). Bounds the learning's CPU at
            rates far above an LLM pool's usual ones, and keeps the fit's memory (about
            ``1 / (1 - forgetting)`` observations) at least that many seconds long there.
        check: every prediction checked, and the fallback to the shorter queue while a
            pool's predictions are off (:class:`PredictionCheckConfig`).
    """

    enabled: StrictBool = True
    forgetting: Annotated[float, Field(gt=0, lt=1)] = 0.995
    prior_weight: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 0.05
    explore_every: NonNegativeInt = 50
    explore_ratio: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.5
    marginal_cost: StrictBool = True
    acceptance_memory_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 30.0
    change_detection: StrictBool = True
    max_observations_per_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 100.0
    check: PredictionCheckConfig = PredictionCheckConfig()


class RoutingConfig(Strict):
    """Routing thresholds.

    Attributes:
        long_prompt_tokens: prompts longer than this (tokens) go to the plain pool
            (reason ``long_context``): speculation loses at long context (docs/loadtests.md).
        saturation: load thresholds for the saturation bypass.
        acceptance: acceptance tracking and bypass.
        min_flip_interval_s: a bypass flag (saturation, acceptance) changes at most once per
            this many seconds per pool, so a load or acceptance signal hovering at a
            threshold cannot toggle a pool faster (vllm-project/vllm#49548 measured a flapping
            threshold cutting throughput from 232 to 24-157 tok/s).
        seed: seed of the endpoint tie-break.
        prefix_cache: prefix-cache-aware endpoint choice inside a pool.
        learning: the live speed models (:class:`LearningConfig`).
    """

    long_prompt_tokens: PositiveInt
    saturation: SaturationConfig
    acceptance: AcceptanceConfig = AcceptanceConfig()
    min_flip_interval_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0
    seed: NonNegativeInt = 0
    prefix_cache: PrefixCacheConfig = PrefixCacheConfig()
    learning: LearningConfig = LearningConfig()
