"""``specgate plan``'s loop: when an advice is worth a change of split, and the planner's metrics.

Every ``interval`` seconds the planner takes a fresh advice (:func:`loadtests.plan.advise`),
:meth:`PlanLoop.observe` replaces each split's prediction by its median over the last
``smooth_rounds`` rounds (one replay of a short window near saturation can predict several times
the mean for a round, and a single such round must not move an engine), and
:meth:`PlanLoop.decide` turns it into at most one engine moved (HPA's scale-down stabilization
and KEDA's cooldown are the same idea: act on a sustained signal, step by step). In order:

1. **a retreat** (``retreat``): when in ``retreat_rounds`` (2) rounds running both this round's
   own prediction for the current split (before the median) and what the window's requests
   measured at it (``advice["measured"]``, :func:`loadtests.plan.measured`) are at least
   ``retreat_ratio`` (1.5) times this round's prediction for the best split (an untrusted
   advice's own prediction need only exceed the best one: the model is what is in doubt, the
   measurement is not), that best split (among the round's own hedge-safe splits, step 3) lying
   on the same side each round, one engine moves toward it at once: past the median, an
   untrusted model, ``min_gain``, the cost and the dwell (``step_s`` still holds). The
   traffic has turned against the current split (sampled requests arriving on an all-speculative
   deployment: its mean several times all-plain's), and holding costs more each round than
   any prediction noise would: the median alone would act a round later, and a model whose
   prediction error rose because the traffic changed would hold the worst split. Its
   protection is the measurement: one replay's spike (a split's prediction several times the
   mean for one round) is not what the requests took, and one round is not two. The seconds
   metrics only (``mean_s``: the mean; ``p90_s``: the p90; never for goodput);
2. an untrusted advice (the router's prediction error is high, nothing learned yet, the replay
   of the current split off what the window measured: :func:`loadtests.plan.advise`) holds
   (``untrusted``);
3. the target is the best split within the floors (``floor_speculative <= k <= N -
   floor_plain``) and the hedge (``advice["hedge"]``, :func:`loadtests.plan.advise` step 6: the
   splits whose prediction were the window's traffic all sampled is within ``1 + hedge`` of the
   best one's, :func:`safe_splits` on the medians); a current split below a floor moves toward
   it at once (``floor``);
4. at the target: hold (``at_advice``); a target without a prediction: hold (``no_prediction``).
   The hedge guards the loop's next bet, not the split it holds: a current split that the hedge
   leaves out (the window busier, its stressed prediction higher) is not left at a predicted loss
   (steps 5-6 weigh the gain toward the safe target, negative there), and should the traffic
   turn, the retreat (step 1) leaves it on what the requests measured. Leaving it at once cost
   more than it saved on the days that never turned (analytic kv_limited ``slow_long`` 0.67x ->
   1.22x the better static deployment, docs/performance.md);
5. the predicted relative gain ``g`` of the target over the current split on the metric
   (``(cur - target) / cur`` for the seconds, ``(target - cur) / cur`` for goodput) must reach
   ``min_gain`` (hysteresis against noise in the prediction; ``below_min_gain``), or, smaller,
   ``sustained_gain`` toward the same side in ``sustained_rounds`` rounds running (a small gain
   every round predicts is not noise: HPA's stabilization window acts on a sustained signal the
   same way);
6. the cost of a change (Dynamo's planner weighs its adjustment interval the same way):
   moving ``m`` engines takes each out of service for ``change_cost_s`` (drained, restarted
   in the other mode, warmed), ``m * change_cost_s`` engine-seconds; keeping the gain for the
   dwell time is worth ``N * g * dwell_s`` engine-seconds (a relative gain ``g`` on N engines
   is as good as ``g * N`` more of them). Below the cost: hold (``below_cost``);
7. a change in the other direction than the last one waits ``dwell_s`` after it (``dwell``),
   unless its predicted gain reaches ``reverse_gain`` (the traffic turned: a gain that large is
   not the prediction's noise the dwell guards against);
   any change waits ``step_s`` after the last one (``step_wait``: the moved engine's pod
   restarts and warms before the next moves);
8. else one engine moves toward the target (``gain``).

Metrics (``prometheus_client``, one registry per :class:`PlanMetrics`, served by the planner
process on ``--metrics-port``): ``specgate_plan_advised_engines{pool}`` (``speculative`` /
``plain``: the last advice), ``specgate_plan_current_engines{pool}``,
``specgate_plan_trusted`` (1/0), ``specgate_plan_window_requests``,
``specgate_plan_rounds_total{outcome}`` (the reasons above), ``specgate_plan_changes_total{reason}``,
``specgate_plan_last_change_timestamp_seconds`` (Unix time) and
``specgate_plan_last_change_reason{reason}`` (1 for the last change's reason, 0 for the others),
``specgate_plan_errors_total{stage}`` (``fetch``, ``predict``, ``apply``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["HEDGE", "LOOP_DEFAULTS", "OUTCOMES", "Hysteresis", "PlanLoop", "PlanMetrics", "Step", "safe_splits"]

#: Every round outcome (:meth:`PlanLoop.decide`'s reasons): the bounded label set.
OUTCOMES = ("untrusted", "floor", "retreat", "at_advice", "no_prediction", "below_min_gain", "below_cost", "dwell",
            "step_wait", "gain")

#: The outcomes that change the split.
CHANGES = ("floor", "retreat", "gain")

_POOLS = ("speculative", "plain")


#: The hedge's default bound (:func:`loadtests.plan.advise`, step 6; measured in docs/performance.md,
#: "A split safe if the traffic turns sampled").
HEDGE = 0.5


def safe_splits(stressed: Mapping[int, float | None], hedge: float | None, metric: str) -> set[int]:
    """The splits whose prediction under stress (``stressed``: ``{k: value}``, the window
    replayed with every request sampled, :func:`loadtests.plan.advise`) is within ``1 + hedge``
    of the best one's: ``v <= (1 + hedge) * best`` for the seconds, ``v >= best / (1 + hedge)``
    for ``goodput_rps``. A split without a stressed prediction (nothing completes) is outside,
    unless no split has one. ``hedge`` None or ``inf``: every split (no hedge).

    Raises:
        ValueError: ``hedge`` < 0.
    """
    if hedge is not None and not hedge >= 0:
        raise ValueError(f"hedge must be >= 0 (None or inf: none), got {hedge}")
    known = {k: v for k, v in stressed.items() if v is not None}
    if hedge is None or math.isinf(hedge) or not known:
        return set(stressed)
    if metric == "goodput_rps":
        top = max(known.values())
        return {k for k, v in known.items() if v * (1 + hedge) >= top}
    low = min(known.values())
    return {k for k, v in known.items() if v <= (1 + hedge) * low}


@dataclass(frozen=True)
class Hysteresis:
    """The loop's settings (seconds, engines, a ratio; module docstring).

    Attributes:
        dwell_s: time after a change before one in the other direction; also the horizon
            over which a gain is weighed against the change's cost.
        step_s: time after any change before the next engine moves.
        change_cost_s: seconds one engine is out of service to change its mode.
        min_gain: the smallest predicted relative gain acted on.
        reverse_gain: the predicted relative gain that reverses the last change within ``dwell_s``.
        smooth_rounds: rounds whose predictions :meth:`PlanLoop.observe` takes the median of
            (1: the round's own).
        sustained_gain, sustained_rounds: a gain below ``min_gain`` but at least
            ``sustained_gain``, toward the same side in ``sustained_rounds`` rounds running
            (:meth:`PlanLoop.commit` of each), is acted on.
        retreat_ratio, retreat_rounds: a split predicted and measured at least ``retreat_ratio``
            times the best split's prediction in ``retreat_rounds`` rounds running is left at
            once (module docstring, step 1; ``math.inf``: never).
        floor_speculative, floor_plain: engines a pool keeps at least.
    """

    dwell_s: float = 1800.0
    step_s: float = 120.0
    change_cost_s: float = 300.0
    min_gain: float = 0.05
    reverse_gain: float = 0.2
    smooth_rounds: int = 3
    sustained_gain: float = 0.02
    sustained_rounds: int = 3
    retreat_ratio: float = 1.5
    retreat_rounds: int = 2
    floor_speculative: int = 0
    floor_plain: int = 0

    def __post_init__(self) -> None:
        if min(self.dwell_s, self.step_s, self.change_cost_s, self.min_gain, self.reverse_gain) < 0:
            raise ValueError("dwell_s, step_s, change_cost_s, min_gain and reverse_gain must be >= 0")
        if self.sustained_gain < 0 or self.sustained_rounds < 1 or self.smooth_rounds < 1:
            raise ValueError("sustained_gain must be >= 0, sustained_rounds and smooth_rounds >= 1")
        if not self.retreat_ratio > 1 or self.retreat_rounds < 1:
            raise ValueError("retreat_ratio must be > 1 (inf: never), retreat_rounds >= 1")
        if min(self.floor_speculative, self.floor_plain) < 0:
            raise ValueError("the floors must be >= 0")


#: The loop's defaults, the one place the CLIs (`specgate plan`, benchmarks/plan_day.py) read them from.
LOOP_DEFAULTS = Hysteresis()


@dataclass(frozen=True)
class Step:
    """One round's outcome.

    Attributes:
        outcome: one of :data:`OUTCOMES`.
        current: speculative engines before the round; target: the best split within the
            floors (None when untrusted); moved_to: speculative engines after the round
            (``current`` when held).
        gain: the predicted relative gain of ``target`` over ``current`` (None: not computed).
        retreat: the side (+1 toward more speculative engines, -1 fewer, 0 none) this round's
            retreat evidence pointed to, met or not for ``retreat_rounds`` (module docstring,
            step 1).
    """

    outcome: str
    current: int
    target: int | None
    moved_to: int
    gain: float | None = None
    retreat: int = 0

    @property
    def changed(self) -> bool:
        """Whether one engine moves."""
        return self.moved_to != self.current

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"outcome": self.outcome, "current": self.current, "target": self.target, "moved_to": self.moved_to,
                "gain": None if self.gain is None else (round(self.gain, 4) if math.isfinite(self.gain) else "inf"),
                "retreat": self.retreat}


def _value(advice: Mapping[str, Any], k: int) -> float | None:
    key = "predicted_" + advice["metric"]
    row = next((s for s in advice["splits"] if s["speculative"] == k), None)
    return None if row is None else row.get(key)


def _safe(advice: Mapping[str, Any]) -> set[int] | None:
    """The advice's hedge-safe splits (None: no hedge, every split)."""
    safe = (advice.get("hedge") or {}).get("safe")
    return None if safe is None else set(safe)


def _gain(metric: str, current: float | None, target: float | None) -> float | None:
    if target is None:
        return None
    if current is None:  # nothing completes at the current split
        return math.inf
    if metric == "goodput_rps":
        return (target - current) / current if current > 0 else (math.inf if target > 0 else 0.0)
    return (current - target) / current if current > 0 else 0.0


class PlanLoop:
    """The hysteresis state of the planner's loop (module docstring).

    Args:
        engines: N.
        hysteresis: the settings.
    """

    def __init__(self, engines: int, hysteresis: Hysteresis) -> None:
        if hysteresis.floor_speculative + hysteresis.floor_plain > engines:
            raise ValueError(f"the floors ({hysteresis.floor_speculative} + {hysteresis.floor_plain}) exceed "
                             f"the {engines} engines")
        self.engines = engines
        self.h = hysteresis
        self.last_change_at: float | None = None
        self.last_direction = 0
        #: (side, rounds running) of the small gains (``sustained_gain`` <= gain < ``min_gain``)
        self.streak = (0, 0)
        #: the last rounds' predictions, ``{k: value}`` each (:meth:`observe`)
        self.history: deque[dict[int, float | None]] = deque(maxlen=hysteresis.smooth_rounds)
        #: the same rounds' predictions under stress, ``{k: value}`` each (:meth:`observe`)
        self.stressed: deque[dict[int, float | None]] = deque(maxlen=hysteresis.smooth_rounds)
        #: (side, rounds running) of the retreat evidence (module docstring, step 1)
        self.retreat_streak = (0, 0)

    def observe(self, advice: Mapping[str, Any]) -> dict[str, Any]:
        """Record a round's advice and return it with each split's prediction replaced by the
        median of that split's predictions over the last ``smooth_rounds`` rounds (the ones that
        predicted it; a split no round completes stays None), the same for its prediction under
        stress (``predicted_<metric>_if_sampled``, when the advice has one), the hedge's safe
        splits (``advice["hedge"]["safe"]``, :func:`safe_splits`) recomputed from those medians,
        and ``advised`` recomputed; the round's own predictions stay under ``"raw"`` (``{k:
        value}``) and its own safe splits under ``"raw_safe"`` (None: every split), for the retreat."""
        metric = advice["metric"]
        key, skey = "predicted_" + metric, "predicted_" + metric + "_if_sampled"
        self.history.append({s["speculative"]: s.get(key) for s in advice["splits"]})
        self.stressed.append({s["speculative"]: s.get(skey) for s in advice["splits"]})

        def median(rounds: deque[dict[int, float | None]], k: int) -> float | None:
            vals = sorted(v for h in rounds for j, v in h.items() if j == k and v is not None)
            if not vals:
                return None
            mid = len(vals) // 2
            return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2

        splits = []
        for s in advice["splits"]:
            k = s["speculative"]
            row = {**s, key: median(self.history, k) if s.get(key) is not None else None}
            if skey in s:
                row[skey] = median(self.stressed, k) if s.get(skey) is not None else None
            splits.append(row)
        hedge = advice.get("hedge") or {}
        out = {**advice, "splits": splits, "raw": dict(self.history[-1]), "raw_safe": hedge.get("safe")}
        if hedge.get("factor") is not None:
            safe = safe_splits({s["speculative"]: s.get(skey) for s in splits}, hedge["factor"], metric)
            out["hedge"] = {**hedge, "safe": sorted(safe)}
        k = self.target(out)
        out["advised"] = {"speculative": k, "plain": self.engines - k}
        return out

    def target(self, advice: Mapping[str, Any]) -> int:
        """The best split within the floors and the hedge's safe splits (``advice["hedge"]["safe"]``;
        all the floors allow when none of them is safe), ties to fewer speculative engines."""
        lo, hi = self.h.floor_speculative, self.engines - self.h.floor_plain
        higher = advice["metric"] == "goodput_rps"
        safe = _safe(advice)
        allowed = [k for k in range(lo, hi + 1) if safe is None or k in safe] or list(range(lo, hi + 1))

        def key(k: int) -> tuple[float, int]:
            v = _value(advice, k)
            if v is None:
                return (math.inf, k)
            return (-v if higher else v, k)

        return min(allowed, key=key)

    def decide(self, advice: Mapping[str, Any], current: int, now: float) -> Step:
        """The round's step for ``advice`` at ``current`` speculative engines (``now``:
        monotonic s); reads the state, does not change it (:meth:`commit` does)."""
        h = self.h
        if current < h.floor_speculative or self.engines - current < h.floor_plain:
            return Step("floor", current, None, current + (1 if current < h.floor_speculative else -1))
        side, best = self._retreat_evidence(advice, current)
        if side and self.retreat_streak[0] == side and self.retreat_streak[1] + 1 >= h.retreat_rounds and (
                self.last_change_at is None or now - self.last_change_at >= h.step_s):
            raw = advice["raw"]
            return Step("retreat", current, best, current + side, _gain(advice["metric"], raw.get(current), raw[best]),
                        side)
        step = self._decide(advice, current, now)
        return replace(step, retreat=side) if side else step

    def _retreat_evidence(self, advice: Mapping[str, Any], current: int) -> tuple[int, int]:
        """This round's retreat evidence (module docstring, step 1): ``(side, the best other
        split by this round's own predictions)``; side 0 unless the current split is measured
        and predicted at least ``retreat_ratio`` times that split's prediction."""
        metric = advice["metric"]
        raw: Mapping[int, float | None] = advice.get("raw") or {}
        seen = (advice.get("measured") or {}).get(metric)
        lo, hi = self.h.floor_speculative, self.engines - self.h.floor_plain
        raw_safe = advice.get("raw_safe")
        preds = {k: v for k, v in raw.items() if lo <= k <= hi and v is not None and k != current
                 and (raw_safe is None or k in raw_safe)}
        if metric == "goodput_rps" or seen is None or not preds:
            return 0, current
        best = min(preds, key=lambda k: (preds[k], k))
        floor = preds[best] * self.h.retreat_ratio
        own = raw.get(current)
        # an untrusted model's own prediction for the current split is what is in doubt: it
        # need only agree on the side, the measurement gives the size
        if preds[best] <= 0 or seen < floor or (own is not None and own < (floor if advice["trusted"] else preds[best])):
            return 0, current
        return (1 if best > current else -1), best

    def _decide(self, advice: Mapping[str, Any], current: int, now: float) -> Step:
        h = self.h
        if not advice["trusted"]:
            return Step("untrusted", current, None, current)
        target = self.target(advice)
        if target == current:
            return Step("at_advice", current, target, current)
        gain = _gain(advice["metric"], _value(advice, current), _value(advice, target))
        if gain is None:
            return Step("no_prediction", current, target, current)
        direction = 1 if target > current else -1
        if gain < h.min_gain and not (gain >= h.sustained_gain and self.streak[0] == direction
                                      and self.streak[1] + 1 >= h.sustained_rounds):
            return Step("below_min_gain", current, target, current, gain)
        if self.engines * gain * h.dwell_s < abs(target - current) * h.change_cost_s:
            return Step("below_cost", current, target, current, gain)
        if self.last_change_at is not None:
            since = now - self.last_change_at
            if direction != self.last_direction and since < h.dwell_s and gain < h.reverse_gain:
                return Step("dwell", current, target, current, gain)
            if since < h.step_s:
                return Step("step_wait", current, target, current, gain)
        return Step("gain", current, target, current + direction, gain)

    def commit(self, step: Step, now: float) -> None:
        """Record a round's ``step`` at ``now`` (monotonic s): a change applied, or a small
        gain toward a side (every round's step is committed, changed or not)."""
        if step.retreat:  # rounds running whose evidence points the same way, across the moves
            same = self.retreat_streak[0] == step.retreat
            self.retreat_streak = (step.retreat, self.retreat_streak[1] + 1 if same else 1)
        else:
            self.retreat_streak = (0, 0)
        if step.changed:
            self.last_change_at = now
            self.last_direction = 1 if step.moved_to > step.current else -1
            self.streak = (0, 0)
            return
        h = self.h
        if step.target is None or step.gain is None or step.target == step.current or not (
                h.sustained_gain <= step.gain < h.min_gain):
            self.streak = (0, 0)
            return
        side = 1 if step.target > step.current else -1
        self.streak = (side, self.streak[1] + 1 if self.streak[0] == side else 1)


class PlanMetrics:
    """The planner's series (module docstring), in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.advised = Gauge("specgate_plan_advised_engines", "Engines the last advice gives each pool.", ["pool"],
                             registry=r)
        self.current = Gauge("specgate_plan_current_engines", "Engines each pool has now.", ["pool"], registry=r)
        self.trusted = Gauge("specgate_plan_trusted", "1 when the last advice's models were trusted.", registry=r)
        self.window = Gauge("specgate_plan_window_requests", "Requests in the router's window at the last round.",
                            registry=r)
        self.rounds = Counter("specgate_plan_rounds", "Planner rounds by outcome.", ["outcome"], registry=r)
        self.changes = Counter("specgate_plan_changes", "Engines moved between the pools, by reason.", ["reason"],
                               registry=r)
        self.last_change = Gauge("specgate_plan_last_change_timestamp_seconds",
                                 "Unix time of the last change of split (0: none yet).", registry=r)
        self.last_reason = Gauge("specgate_plan_last_change_reason",
                                 "1 for the last change's reason, 0 for the others.", ["reason"], registry=r)
        self.errors = Counter("specgate_plan_errors", "Failed planner stages.", ["stage"], registry=r)
        for outcome in OUTCOMES:
            self.rounds.labels(outcome)
        for reason in CHANGES:
            self.changes.labels(reason)
            self.last_reason.labels(reason).set(0)
        for stage in ("fetch", "predict", "apply"):
            self.errors.labels(stage)

    def advice(self, advice: Mapping[str, Any]) -> None:
        """Show an advice."""
        for pool in _POOLS:
            self.advised.labels(pool).set(advice["advised"][pool])
        self.trusted.set(int(bool(advice["trusted"])))
        self.window.set(advice["window"]["requests"])

    def step(self, step: Step, engines: int, unix_now: float) -> None:
        """Show a round's step (after it was applied, when it changed the split)."""
        self.rounds.labels(step.outcome).inc()
        self.current.labels("speculative").set(step.moved_to)
        self.current.labels("plain").set(engines - step.moved_to)
        if step.changed:
            self.changes.labels(step.outcome).inc()
            self.last_change.set(unix_now)
            for reason in CHANGES:
                self.last_reason.labels(reason).set(int(reason == step.outcome))
