"""The day simulator's adapter around the router's real policy (``router.policy.decide``).

:class:`PolicyRouter` is a :class:`loadtests.daysim.Router` that does what ``router.pools.Runtime``
does with a fresh scrape, from the simulator's views only:

- at every scrape round (:meth:`PolicyRouter.on_scrape`, ``Runtime.advance_bypass``) each
  speculative pool's stored hysteresis advances with the router's own pure functions
  (``next_saturated`` on the pool's load = the least-loaded endpoint's ``max(running + queued,
  in-flight)``; ``next_low_acceptance`` on the mean scraped accept length of the pool, which the
  router takes as fresh because the scrape is, however old the gauge's value is);
- per request (``Runtime.snapshots`` + ``Runtime.decide``) the snapshots carry the flags as the
  next hysteresis step would set them from the load now (read only), and the policy decides.

Only :func:`decide_today` (and :func:`snapshots` if the snapshot types grow) depend on the
policy's signature; a new policy is adopted by writing one such function and passing it as
``PolicyRouter(settings, decide=...)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from loadtests.dayapi import Choice, PoolView, RequestView
from loadtests.dayshapes import EngineModel
from router.features import RequestFeatures
from router.policy import (
    Decision,
    EndpointSnapshot,
    PoolSnapshot,
    Rules,
    decide,
    next_low_acceptance,
    next_saturated,
)

__all__ = ["PolicyRouter", "PolicySettings", "decide_today", "settings_for", "snapshots"]


@dataclass(frozen=True)
class PolicySettings:
    """The router config the adapter reproduces (tokens, requests, dimensionless).

    Attributes:
        long_prompt_tokens: ``routing.long_prompt_tokens``.
        saturation_enter, saturation_exit: ``routing.saturation``.
        acceptance_enabled, min_expected_speedup, exit_speedup: ``routing.acceptance``.
        gamma: draft length the router assumes (``engine.speculative_num_steps``).
        drafter_cost_ratio: the pool's ``drafter_cost_ratio`` c.
        max_context_tokens: ``limits.max_context_tokens``.
        pool_limit_tokens: each pool's context limit.
        reserved_tokens: the speculative pool's reserved draft tokens K.
        seed: ``routing.seed``.
        speed: the engines' speed model, for a policy that predicts completion times
            (today's ignores it).
    """

    long_prompt_tokens: int
    saturation_enter: int
    saturation_exit: int
    acceptance_enabled: bool = True
    min_expected_speedup: float = 1.0
    exit_speedup: float = 1.05
    gamma: int = 4
    drafter_cost_ratio: float = 0.05
    max_context_tokens: int = 245_760
    pool_limit_tokens: int = 262_144
    reserved_tokens: int = 5
    seed: int = 0
    speed: EngineModel | None = None

    def as_dict(self) -> dict[str, object]:
        """The config values, JSON-ready (the speed model left out)."""
        return {k: v for k, v in self.__dict__.items() if k != "speed"}


def settings_for(model: EngineModel, *, long_prompt_tokens: int = 32768, min_speedup: float = 1.0,
                 context_tokens: float = 12288.0, hysteresis: float = 0.25) -> PolicySettings:
    """Today's policy tuned as ``specgate calibrate`` would from the model's own crossovers.

    ``saturation.enter = ceil(b*)`` with ``b*`` the batch where the speedup falls to
    ``min_speedup`` at ``context_tokens`` (:meth:`SimModel.crossover_load`; 10 000 when it never
    does), ``exit = floor(enter * (1 - hysteresis))``; ``long_prompt_tokens`` is the operator's
    "route by length" cut between short and long prompts (tokens).
    """
    import math

    m = model.speed
    b = m.crossover_load(context_tokens, min_speedup)
    enter = 10_000 if b is None else max(1, math.ceil(b))
    exit_ = max(0, min(enter - 1, math.floor(enter * (1 - hysteresis))))
    return PolicySettings(long_prompt_tokens=long_prompt_tokens, saturation_enter=enter, saturation_exit=exit_,
                          gamma=m.gamma, drafter_cost_ratio=m.c, reserved_tokens=m.gamma + 1, speed=model)


def snapshots(pools: tuple[PoolView, ...], settings: PolicySettings, flags: dict[str, tuple[bool, bool]]
              ) -> tuple[PoolSnapshot, ...]:
    """The policy's snapshots of the simulator's views (``flags``: pool -> (saturated, low))."""
    return tuple(
        PoolSnapshot(name=p.name, speculative=p.speculative, limit=settings.pool_limit_tokens,
                     reserved=settings.reserved_tokens if p.speculative else 0,
                     endpoints=tuple(EndpointSnapshot(e.url, e.healthy, e.load) for e in p.endpoints),
                     saturated=flags.get(p.name, (False, False))[0],
                     low_acceptance=flags.get(p.name, (False, False))[1])
        for p in pools)


def decide_today(features: RequestFeatures, pools: tuple[PoolSnapshot, ...], settings: PolicySettings,
                 tie_break: int) -> Decision:
    """``router.policy.decide`` with today's signature (``Rules`` from the settings)."""
    rules = Rules(max_context_tokens=settings.max_context_tokens, default_max_tokens=features.max_new_tokens,
                  long_prompt_tokens=settings.long_prompt_tokens, seed=settings.seed)
    return decide(features, pools, rules, tie_break=tie_break)


DecideFn = Callable[[RequestFeatures, tuple[PoolSnapshot, ...], PolicySettings, int], Decision]


class PolicyRouter:
    """The router's real policy as a day-simulator router (module docstring).

    Args:
        settings: the config values it reproduces.
        decide: the policy call (default :func:`decide_today`).
    """

    def __init__(self, settings: PolicySettings, decide: DecideFn = decide_today) -> None:
        self.settings = settings
        self._decide = decide
        self.flags: dict[str, tuple[bool, bool]] = {}
        self._tie = itertools.count()

    def _next(self, p: PoolView) -> tuple[bool, bool]:
        """The pool's flags after one hysteresis step from the stored ones (pure)."""
        s = self.settings
        sat, low = self.flags.get(p.name, (False, False))
        healthy = [e for e in p.endpoints if e.healthy]
        load = min(e.load for e in healthy) if healthy else sum(e.load for e in p.endpoints)
        sat = next_saturated(sat, load, enter=s.saturation_enter, exit=s.saturation_exit)
        if s.acceptance_enabled:
            vals = [e.accept_length for e in healthy if e.accept_length]
            acc = sum(vals) / len(vals) if vals else None
            low = next_low_acceptance(low, acc, gamma=s.gamma, c=s.drafter_cost_ratio,
                                      enter_below=s.min_expected_speedup, exit_above=s.exit_speedup)
        return sat, low

    def on_scrape(self, now: float, pools: tuple[PoolView, ...]) -> None:
        """A scrape round: advance the stored hysteresis of every speculative pool."""
        for p in pools:
            if p.speculative:
                self.flags[p.name] = self._next(p)

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        """Decide one request (the stored flags are read, not changed)."""
        flags = {p.name: self._next(p) for p in pools if p.speculative}
        features = RequestFeatures(prompt_tokens=request.prompt_tokens, max_new_tokens=request.max_new_tokens,
                                   n=request.n)
        d = self._decide(features, snapshots(pools, self.settings, flags), self.settings, next(self._tie))
        return Choice(d.pool, d.endpoint, str(d.reason))
