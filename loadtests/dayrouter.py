"""The day simulator's adapter around the router's real policy (``router.decision.policy.decide``).

:class:`PolicyRouter` is a :class:`loadtests.dayapi.Router` that does what
``router.state.runtime.Runtime`` does, from the simulator's views only, with the router's own pieces:

- per endpoint a ``router.decision.acceptance.AcceptanceTracker`` (per temperature class; a reading
  counts only when ``generation_tokens_total`` moved, estimates expire after
  ``acceptance.max_age_s``), told of every request sent (``started``) and ended (``finished``,
  :meth:`PolicyRouter.on_done`);
- per speculative pool a ``router.decision.bypass.BypassState``: at every scrape round
  (:meth:`PolicyRouter.on_scrape`, ``Runtime.advance_bypass``) the trackers take the new
  scrape and the flags advance (``proposed`` then ``commit``); the pool's load is the
  least-loaded endpoint's ``max(running + queued, in-flight)``;
- per request (``Runtime.snapshots`` + ``Runtime.decide``) the snapshots are built by the
  router's own builder (``router.pool_snapshot``, ``router.endpoint_values`` of each view as an
  ``EngineLoad`` scrape, the taus by ``router.accept_lengths``: live, else the fit's, else the
  calibrated prior); they carry the proposed flags (read only) and, in ``predict`` or ``learn``
  mode, every pool's ``router.decision.predict.SpeedModel``, so the policy chooses by predicted
  completion time; without speed models it applies the thresholds (guard mode);
- per pool, in ``learn`` mode, a ``router.PredictionCheck``: each finished request's decision is
  checked against its time, and every scrape round advances the fallback
  (``Runtime.check_prediction``, ``Runtime.advance_checks``: the fallback and the measured
  cells), which the snapshots carry as ``prediction_fallback`` and ``measured``.

Not modelled (the views carry none of it): back-pressure, the canary, capabilities, LoRA
adapters, prefix routing and stale scrapes. A new engine signal reaches the simulator through
``_scrape`` (the view's fields as an ``EngineLoad``); only :func:`decide_main` depends on the
policy's signature; another policy is one such function, passed as
``PolicyRouter(settings, decide=...)``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from drafters.spec_math import expected_tokens
from loadtests.dayapi import Choice, EndpointView, PoolView, RequestView
from loadtests.dayshapes import EngineModel
from loadtests.daysim import RequestRecord
from router import (
    CLASSES,
    DEFAULT_PRIOR,
    AcceptanceConfig,
    AcceptanceTracker,
    BypassState,
    Decision,
    EndpointValues,
    EngineLoad,
    Observation,
    PoolSnapshot,
    PredictionCheck,
    PrefillMeter,
    RequestFeatures,
    RoutingConfig,
    Rules,
    SaturationConfig,
    SpeedFit,
    SpeedModel,
    accept_lengths,
    advance_prediction_check,
    batch_context,
    context_bucket,
    decide,
    endpoint_values,
    pool_snapshot,
    predict_request,
    share_priors,
)

__all__ = ["PolicyRouter", "PolicySettings", "decide_main", "settings_for"]


@dataclass(frozen=True)
class PolicySettings:
    """The router config the adapter reproduces (tokens, requests, seconds).

    Attributes:
        long_prompt_tokens: ``routing.long_prompt_tokens``.
        saturation_enter, saturation_exit: ``routing.saturation``.
        acceptance_enabled, min_expected_speedup, exit_speedup, max_age_s, weight:
            ``routing.acceptance``.
        min_flip_interval_s: ``routing.min_flip_interval_s``.
        gamma: draft length (``engine.speculative_num_steps``); drafter_cost_ratio: c.
        max_context_tokens: ``limits.max_context_tokens``; pool_limit_tokens: each pool's limit;
        spec_limit_tokens, plain_limit_tokens: the speculative and the plain pool's own limit
            where it differs (None: ``pool_limit_tokens``; the router sends a prompt above a
            pool's limit elsewhere).
        reserved_tokens: the speculative pool's reserved draft tokens K.
        seed: ``routing.seed``.
        speed: the engines' model: in ``predict`` mode it gives each pool's ``speed`` block
            (the true parameters: a perfectly calibrated config) and the accept-length priors.
        predict: pools carry speed models (choice by predicted completion time).
        learn: pools carry speed models learned from their own finished requests
            (``routing.learning``: ``router.decision.learn.SpeedFit`` from ``router.decision.learn.DEFAULT_PRIOR``,
            or from the true model when ``predict`` is set too), with exploration; no priors for
            the accept length (the live estimates only), as a deployment without speed blocks.
        explore_every, explore_ratio, forgetting, prior_weight: ``routing.learning``.
        prior_scale: the learned mode's prior is the true model with every time scaled by this
            (with ``predict``; 1: exact), to test how the fit recovers from a wrong prior.
        marginal_cost: ``routing.learning.marginal_cost`` (ranking by the request's completion
            plus its cost to the requests decoding beside it; the router's default, on).
        check: ``routing.learning.check.enabled`` (False: predictions checked, never a fallback).
        correct: the checks' corrections act on the predictions (the router's behaviour);
            False: the models' own predictions (``specgate plan``'s replay of other splits: a
            correction is measured at the current split's load, not at the replayed one's).
    """

    long_prompt_tokens: int
    saturation_enter: int
    saturation_exit: int
    acceptance_enabled: bool = True
    min_expected_speedup: float = 1.0
    exit_speedup: float = 1.05
    max_age_s: float = 10.0
    weight: float = 0.5
    min_flip_interval_s: float = 1.0
    gamma: int = 4
    drafter_cost_ratio: float = 0.05
    max_context_tokens: int = 245_760
    pool_limit_tokens: int = 262_144
    spec_limit_tokens: int | None = None
    plain_limit_tokens: int | None = None
    reserved_tokens: int = 5
    seed: int = 0
    speed: EngineModel | None = None
    predict: bool = False
    learn: bool = False
    explore_every: int = 50
    explore_ratio: float = 1.5
    forgetting: float = 0.995
    prior_weight: float = 0.05
    prior_scale: float = 1.0
    marginal_cost: bool = True
    check: bool = True
    correct: bool = True

    def as_dict(self) -> dict[str, object]:
        """The config values, JSON-ready (the speed model left out)."""
        return {k: v for k, v in self.__dict__.items() if k != "speed"}

    def routing(self) -> RoutingConfig:
        """The ``routing`` section (validated by the router's own model)."""
        routing = RoutingConfig(
            long_prompt_tokens=self.long_prompt_tokens,
            saturation=SaturationConfig(enter=self.saturation_enter, exit=self.saturation_exit),
            acceptance=AcceptanceConfig(enabled=self.acceptance_enabled, min_expected_speedup=self.min_expected_speedup,
                                        exit_speedup=self.exit_speedup, max_age_s=self.max_age_s, weight=self.weight),
            min_flip_interval_s=self.min_flip_interval_s, seed=self.seed)
        learning = routing.learning
        check = learning.check.model_copy(update={"enabled": self.check})
        return routing.model_copy(update={"learning": learning.model_copy(update={"check": check})})


def settings_for(model: EngineModel, *, long_prompt_tokens: int = 32768, min_speedup: float = 1.0,
                 context_tokens: float = 12288.0, hysteresis: float = 0.25, predict: bool = False,
                 learn: bool = False) -> PolicySettings:
    """The policy tuned as ``specgate calibrate`` would from the model's own crossovers.

    ``saturation.enter = ceil(b*)`` with ``b*`` the batch where the speedup falls to
    ``min_speedup`` at ``context_tokens`` (:meth:`SimModel.crossover_load`; 10 000 when it never
    does), ``exit = floor(enter * (1 - hysteresis))``; ``long_prompt_tokens`` is the operator's
    "route by length" cut between short and long prompts (tokens); ``predict``: give the pools
    speed models.
    """
    m = model.speed
    b = m.crossover_load(context_tokens, min_speedup)
    enter = 10_000 if b is None else max(1, math.ceil(b))
    exit_ = max(0, min(enter - 1, math.floor(enter * (1 - hysteresis))))
    return PolicySettings(long_prompt_tokens=long_prompt_tokens, saturation_enter=enter, saturation_exit=exit_,
                          gamma=m.gamma, drafter_cost_ratio=m.c, reserved_tokens=m.gamma + 1, speed=model,
                          predict=predict, learn=learn)


def decide_main(features: RequestFeatures, pools: tuple[PoolSnapshot, ...], settings: PolicySettings,
                tie_break: int) -> Decision:
    """``router.decision.policy.decide`` with main's signature (``Rules`` from the settings)."""
    rules = Rules(max_context_tokens=settings.max_context_tokens, default_max_tokens=features.max_new_tokens,
                  long_prompt_tokens=settings.long_prompt_tokens, seed=settings.seed,
                  explore_every=settings.explore_every if settings.learn else 0, explore_ratio=settings.explore_ratio,
                  marginal_cost=settings.marginal_cost)
    return decide(features, pools, rules, tie_break=tie_break)


DecideFn = Callable[[RequestFeatures, tuple[PoolSnapshot, ...], PolicySettings, int], Decision]


def _class(request: RequestView) -> str:
    return "greedy" if request.temperature == 0 else "sampled"


def _scrape(e: EndpointView, kv_capacity: int | None) -> EngineLoad:
    """The view's last scrape as the router holds it (``sglang:max_total_num_tokens`` is the
    engine model's KV capacity, tokens; None: unknown)."""
    return EngineLoad(num_running_reqs=e.running, num_queue_reqs=e.queued, token_usage=e.token_usage,
                      spec_accept_length=e.accept_length, generation_tokens_total=e.generation_tokens_total,
                      max_total_num_tokens=kv_capacity)


class PolicyRouter:
    """The router's real policy as a day-simulator router (module docstring).

    Args:
        settings: the config values it reproduces.
        decide: the policy call (default :func:`decide_main`).
    """

    def __init__(self, settings: PolicySettings, decide: DecideFn = decide_main) -> None:
        self.settings = settings
        self.routing_config = settings.routing()
        self._decide = decide
        self.trackers: dict[str, AcceptanceTracker] = {}
        self.bypass: dict[str, BypassState] = {}
        self._tie = itertools.count()
        #: each role's context limit (tokens), by speculative
        self.limits = {True: settings.spec_limit_tokens or settings.pool_limit_tokens,
                        False: settings.plain_limit_tokens or settings.pool_limit_tokens}
        self._speed: dict[bool, SpeedModel] = {}
        #: the calibrated tau per temperature class (``predict`` mode: the engine model's, at its
        #: ``alpha_knee_tokens``), what a speculative pool's ``speed`` block would say; empty otherwise
        self.priors: dict[str, float] = {}
        m = settings.speed
        if settings.predict:
            if m is None:
                raise ValueError("predict mode needs settings.speed (the engine model)")
            s = m.speed
            for spec in (True, False):
                self._speed[spec] = SpeedModel(
                    decode_s_per_token=s.t0_s, batch_knee=s.batch_knee, attention_s_per_token=s.attn_s_per_token,
                    prefill_s_per_token=s.prefill_s_per_token, kv_read_s_per_token=s.kv_read_s_per_token,
                    prefill_stall_s_per_token=s.prefill_s_per_token,  # a speed block's default
                    max_running_requests=m.max_running,
                    gamma=settings.gamma if spec else 0, c=settings.drafter_cost_ratio if spec else 0.0)
            short = s.alpha_knee_tokens
            self.priors = {c: expected_tokens(m.alpha(short, c == "sampled"), s.gamma) for c in CLASSES}
        self.fits: dict[bool, SpeedFit] = {}
        if settings.learn:
            for spec in (True, False):
                gamma, c = (settings.gamma, settings.drafter_cost_ratio) if spec else (0, 0.0)
                prior = replace(DEFAULT_PRIOR, gamma=gamma, c=c)
                if spec in self._speed:
                    k, exact = settings.prior_scale, self._speed[spec]
                    prior = replace(exact, decode_s_per_token=exact.decode_s_per_token * k,
                                    attention_s_per_token=exact.attention_s_per_token * k,
                                    kv_read_s_per_token=exact.kv_read_s_per_token * k,
                                    prefill_s_per_token=exact.prefill_s_per_token * k,
                                    prefill_stall_s_per_token=exact.prefill_stall_s_per_token * k)
                self.fits[spec] = SpeedFit(prior, prior_weight=settings.prior_weight, forgetting=settings.forgetting)
            self._speed, self.priors = {}, {}
        #: per pool, in ``learn`` mode, its predictions checked against what happened and the
        #: fallback state (``Runtime``'s ``Pool.check``, ``routing.learning.check``)
        self.checks: dict[str, PredictionCheck] = {}
        #: per pool, every checked prediction of the day as ``(predicted - realised) / realised``
        #: (the checks keep only their recent window; this is for a day's report)
        self.prediction_errors: dict[str, list[float]] = {}
        # (url, t) -> (load, queued, batch context, decision, features, prefill backlog, prompts
        # sent) at dispatch
        self._dispatched: dict[tuple[str, float], tuple[int, int, float | None, Decision, RequestFeatures,
                                                        float, float]] = {}
        #: per endpoint, the prompt tokens sent there (``Runtime.note_prompt``)
        self.prefill: dict[str, PrefillMeter] = {}
        self._last: tuple[PoolSnapshot, ...] = ()

    def _check(self, pool: str) -> PredictionCheck | None:
        """The pool's prediction check (made on first sight, in ``learn`` mode only)."""
        check = self.checks.get(pool)
        if check is None and self.fits:
            cc = self.routing_config.learning.check
            check = self.checks[pool] = PredictionCheck(cc.window, cc.max_age_s)
        return check

    def _tracker(self, url: str) -> AcceptanceTracker:
        t = self.trackers.get(url)
        if t is None:
            t = self.trackers[url] = AcceptanceTracker()
        return t

    def _proposed(self, p: PoolView, now: float, live: dict[str, float | None] | None = None) -> dict[str, bool]:
        healthy = [e for e in p.endpoints if e.healthy]
        load = min(e.load for e in healthy) if healthy else sum(e.load for e in p.endpoints)
        return self.bypass.setdefault(p.name, BypassState()).proposed(
            load=load, accept_length=self._taus(p, now) if live is None else live, now=now, routing=self.routing_config,
            gamma=self.settings.gamma, c=self.settings.drafter_cost_ratio)

    def _taus(self, p: PoolView, now: float) -> dict[str, float | None]:
        max_age = self.settings.max_age_s
        out: dict[str, float | None] = {}
        for c in CLASSES:
            vals = [a for e in p.endpoints if e.healthy
                    for a in [self._tracker(e.url).accept_length(c, now, max_age)] if a]
            out[c] = sum(vals) / len(vals) if vals else None
        return out

    def live_accept_lengths(self, pool: PoolView, now: float) -> dict[str, float | None]:
        """The pool's live accept length per temperature class (the mean over its healthy
        endpoints' trackers; None where none has a fresh estimate)."""
        return self._taus(pool, now)

    def on_scrape(self, now: float, pools: tuple[PoolView, ...]) -> None:
        """A scrape round: the trackers take the scrape, then each speculative pool's flags
        advance (``Runtime.advance_bypass``)."""
        refresh = 40 * (self.settings.gamma + 1)
        for p in pools:
            if not p.speculative:
                continue
            for e in p.endpoints:
                self._tracker(e.url).scraped(e.accept_length, e.generation_tokens_total, now,
                                             weight=self.settings.weight, refresh_tokens=refresh, running_reqs=e.running)
            self.bypass.setdefault(p.name, BypassState()).commit(self._proposed(p, now), now)
        for p in pools:
            self._check(p.name)
        cc = self.routing_config.learning.check
        for check in self.checks.values():  # Runtime.advance_checks
            advance_prediction_check(check, cc, now)

    def on_done(self, now: float, request: RequestView, url: str, record: RequestRecord | None = None,
                pools: tuple[PoolView, ...] = ()) -> None:
        """A request ended: its lease is released; in ``learn`` mode its pool's check takes the
        decision's prediction (``Runtime.check_prediction``) and its fit the request
        (``Runtime.learn``: dispatch -> end time, output and cached tokens, the endpoint's
        mean load; not when the engine queued requests at dispatch)."""
        cls = _class(request)
        self._tracker(url).finished(cls)
        if record is None:
            return
        dispatched = self._dispatched.pop((url, record.arrival_s), None)
        if dispatched is not None and dispatched[6]:
            self._meter(url).settled(dispatched[6])  # Lease.release
        if dispatched is None or not self.fits or record.pool is None:
            return
        load, queued, ctx, decision, features, backlog, sent = dispatched
        check = self.checks.get(record.pool)
        if check is not None and decision.basis is not None and record.status == "ok":
            predicted, realised = (predict_request(features, decision.basis, url, record.output_tokens, raw=True),
                                   now - record.arrival_s)
            check.add("completion", cls, context_bucket(features.predicted_prompt_tokens), predicted, realised, now)
            if realised > 0:
                self.prediction_errors.setdefault(record.pool, []).append((predicted - realised) / realised)
        if queued:
            return
        spec = record.speculative
        end_load = next((e.load for p in pools for e in p.endpoints if e.url == url), load)
        tau = record.accept_length if spec else None  # the request's own (spec_tokens_details)
        self.fits[spec].observe(Observation(
            prompt_tokens=record.prompt_tokens, cached_tokens=record.cached_tokens, output_tokens=record.output_tokens,
            batch=max(1.0, (load + end_load) / 2 + 0.5), duration_s=now - record.arrival_s, accept_length=tau,
            context=ctx, stall_tokens=backlog + max(0.0, self._meter(url).total - sent)), now,
            cls, measured=tau is not None)
        share_priors(list(self.fits.values()))

    def _meter(self, url: str) -> PrefillMeter:
        meter = self.prefill.get(url)
        if meter is None:
            meter = self.prefill[url] = PrefillMeter()
        return meter

    def _values(self, e: EndpointView, cap: int | None, now: float) -> EndpointValues:
        """``Endpoint.snapshot_values`` of a simulated endpoint (its scrape always fresh)."""
        meter = self.prefill.get(e.url)
        if meter is None or meter.total <= 0.0:
            return endpoint_values(e.url, e.healthy, e.load, 0, _scrape(e, cap), e.inflight)
        return endpoint_values(e.url, e.healthy, e.load, 0, _scrape(e, cap), e.inflight, meter.value(now))

    def _note_prompt(self, d: Decision, request: RequestView, now: float) -> tuple[float, float]:
        """``Runtime.note_prompt``: the request's prompt metered at its endpoint, drained at
        its pool's model's prefill stall; ``(backlog before it, total after it)``."""
        assert d.endpoint is not None
        pool = next((p for p in self._last if p.name == d.pool), None)
        if pool is None:
            return 0.0, 0.0
        fit = self.fits.get(pool.speculative)
        s = fit.stall_s_per_token if fit is not None else (
            0.0 if pool.speed is None else pool.speed.prefill_stall_s_per_token)
        if s <= 0.0:
            return 0.0, 0.0
        meter = self._meter(d.endpoint)
        return meter.add(request.prompt_tokens, now, s), meter.total

    def snapshots(self, pools: tuple[PoolView, ...], now: float) -> tuple[PoolSnapshot, ...]:
        """The policy's snapshots of the simulator's views, built as ``Runtime.snapshots`` builds
        them: through ``router.pool_snapshot`` and ``router.endpoint_values`` (each view's
        scrape as an ``EngineLoad``, always fresh), the taus by ``router.accept_lengths``."""
        out = []
        s = self.settings
        for p in pools:
            sat, low, greedy, sampled = False, frozenset[str](), None, None
            fit = self.fits.get(p.speculative)
            if p.speculative:
                live = self._taus(p, now)
                flags = self._proposed(p, now, live)
                greedy, sampled = accept_lengths(live, fit, self.priors)
                sat, low = flags["saturated"], self.bypass[p.name].low_classes(flags)
            cap = s.speed.kv_capacity(p.speculative) if s.speed is not None else None
            check = self.checks.get(p.name)
            out.append(pool_snapshot(
                name=p.name, speculative=p.speculative, limit=self.limits[p.speculative],
                reserved=s.reserved_tokens if p.speculative else 0,
                endpoints=[self._values(e, cap, now) for e in p.endpoints],
                speed=self._speed.get(p.speculative), fit=fit, saturated=sat, low_acceptance=low,
                accept_length_greedy=greedy, accept_length_sampled=sampled,
                prediction_fallback=check is not None and check.fallback,
                measured=None if check is None else check.measured,
                correction=() if check is None or not s.correct else check.correction,
                measured_factor=() if check is None or not s.correct else check.measured_factor))
        return tuple(out)

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        """Decide one request (the stored flags are read, not changed) and take its lease."""
        cls = _class(request)
        features = RequestFeatures(prompt_tokens=request.prompt_tokens, max_new_tokens=request.max_new_tokens,
                                   n=request.n, temperature_class=cls, speculation=request.speculation)
        self._last = self.snapshots(pools, now)
        d = self._decide(features, self._last, self.settings, next(self._tie))
        if d.endpoint is not None:
            self._tracker(d.endpoint).started(cls)
            snap = next(e for p in self._last for e in p.endpoints if e.url == d.endpoint)
            need = request.prompt_tokens + request.n * request.max_new_tokens
            waits = snap.queued > 0 or (snap.kv_free_tokens is not None and need > snap.kv_free_tokens)
            backlog, sent = self._note_prompt(d, request, now)
            self._dispatched[(d.endpoint, now)] = (snap.load, int(waits), batch_context(
                snap, request.prompt_tokens, request.max_new_tokens), d, features, backlog, sent)
            if d.pool is not None:
                self._check(d.pool)
        return Choice(d.pool, d.endpoint, str(d.reason))
