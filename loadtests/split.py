"""How to divide N engines between a speculative and a plain pool, predicted by the day simulator.

Input: a day of requests (arrival times, prompt and output lengths, temperatures) from

- the day simulator's request log (:func:`loadtests.dayreport.write_request_log`: ``rid``,
  ``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``temperature``, ``cached_tokens``,
  ``max_new_tokens``, ``kind``; replaying it reproduces the simulated day exactly), or
- a load test's ``requests.jsonl``: one target's measured runs laid end to end
  (:func:`loadtests.splitlog.load_test_day`, which also gives what was measured for the same
  requests); :func:`requests_from_log` takes rows without a ``target`` (``t_start``,
  ``prompt_tokens``, ``output_tokens``, ``max_tokens``; measured-phase rows only) as one run.

The day is replayed, request for request, through every deployment of N engines at equal
hardware: ``all-plain`` (k = 0, client round robin), ``routed ks+(N-k)p`` and ``predict
ks+(N-k)p`` for k = 1..N-1 (the router's policy, :class:`loadtests.dayrouter.PolicyRouter`, on
its thresholds alone, and with speed models: the choice by predicted completion time) and
``all-spec`` (k = N, round robin), with the engine model given (:func:`loadtests.dayshapes.default_engine_model`, or one
fitted from a load-test report by :func:`loadtests.speedfit.fit_speed_model`). The advice is
the split with the best chosen metric (lowest ``mean_s`` / ``p90_s``, or highest
``goodput_rps``); ties go to the fewer speculative engines (the drafter costs KV capacity).

The benchmark's yardstick, *the better static deployment* (:func:`better_static`), is the
lowest mean of the deployments without a router: ``all-plain``, ``all-spec`` and
``all-adaptive`` (every engine speculative with in-engine adaptive speculation,
:func:`loadtests.daysim.all_adaptive`; not a split, so never advised).

Errors: :class:`SplitError` (an empty or unusable day, bad arguments).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from loadtests.dayreport import Objective, summarize
from loadtests.dayrouter import PolicyRouter, PolicySettings, settings_for
from loadtests.dayshapes import EngineModel, Request
from loadtests.daysim import Deployment, all_plain, all_spec, fronted, routed, simulate_day

__all__ = ["METRICS", "STATIC_DEPLOYMENTS", "SplitAdvice", "SplitError", "advise_split", "best_prediction",
           "better_static", "deployments_for", "requests_from_log", "specgate_at"]

#: metric -> True when higher is better.
METRICS = {"mean_s": False, "p90_s": False, "long_mean_s": False, "goodput_rps": True}


#: the deployments without a router, candidates for the better static deployment.
STATIC_DEPLOYMENTS = ("all-plain", "all-spec", "all-adaptive")


class SplitError(ValueError):
    """The day or the arguments do not allow split advice."""


def better_static(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The row of :data:`STATIC_DEPLOYMENTS` with the lowest ``mean_s`` (first wins a tie, a
    row without a mean ranks last).

    Raises:
        SplitError: no static deployment among ``rows``.
    """
    static = [r for r in rows if r["deployment"] in STATIC_DEPLOYMENTS]
    if not static:
        raise SplitError(f"no static deployment ({', '.join(STATIC_DEPLOYMENTS)}) among the rows")
    return min(static, key=lambda r: float("inf") if r["mean_s"] is None else r["mean_s"])


def requests_from_log(rows: Sequence[Mapping[str, Any]], *, temperature: float | None = None,
                      cached_fraction: float = 0.0, max_new_tokens: int | None = None) -> list[Request]:
    """Requests of a day from request-log rows (module docstring), sorted by arrival.

    Args:
        rows: simulator records or load-test ``RequestResult`` rows.
        temperature: overrides the rows' temperature (load-test rows have none: default 0).
        cached_fraction: share of each prompt taken as cached where a row has no
            ``cached_tokens`` (load-test logs do not say).
        max_new_tokens: the budget to assume when a row has none (default: its output tokens).

    Raises:
        SplitError: no usable row.
    """
    out = []
    t_key = "arrival_s" if any("arrival_s" in r for r in rows) else "t_start"
    for r in rows:
        if r.get("phase") not in (None, "measure") or r.get("error"):
            continue
        p, o = r.get("prompt_tokens"), r.get("output_tokens")
        if r.get(t_key) is None or not p or not o:
            continue
        temp = temperature if temperature is not None else float(r.get("temperature") or 0.0)
        budget = int(r.get("max_new_tokens") or r.get("max_tokens") or max_new_tokens or o)
        cached = r.get("cached_tokens")
        cached = int(p * cached_fraction) if cached is None else int(cached)
        out.append((float(r[t_key]), int(p), int(o), max(budget, int(o)), temp, str(r.get("kind") or ""),
                    cached))
    if not out:
        raise SplitError("the request log has no usable row (need arrival_s or t_start, prompt_tokens, "
                         "output_tokens)")
    out.sort(key=lambda x: x[0])
    # simulator times are from the day's start already; a load test's t_start is a perf_counter
    base = 0.0 if t_key == "arrival_s" else out[0][0]
    return [Request(i, t - base, p, cached, o, b, temp, kind)
            for i, (t, p, o, b, temp, kind, cached) in enumerate(out)]


def deployments_for(n: int, settings: PolicySettings, *, predict: bool = True) -> list[tuple[int, Deployment]]:
    """``(k, deployment)`` for k = 0..n speculative engines (k = 0 / n: round robin).

    Each split 0 < k < n appears as ``routed`` (the policy's thresholds, no speed models, no
    learning), as ``learned`` (what a new deployment runs: no speed blocks, the speed models
    learned from the router's own traffic, ``routing.learning``) and, with ``predict`` and
    ``settings.speed`` set, as ``predict`` (pools carry the true speed model, no learning: a
    perfectly calibrated config).
    """
    if n < 1:
        raise SplitError(f"need at least one engine, got {n}")
    guard = replace(settings, predict=False, learn=False)
    learned = replace(settings, predict=False, learn=True)
    deps = [(0, all_plain(n))]
    for k in range(1, n):
        deps.append((k, routed(k, n, lambda: PolicyRouter(guard))))
        deps.append((k, routed(k, n, lambda: PolicyRouter(learned), label="learned")))
        if predict and settings.speed is not None:
            deps.append((k, routed(k, n, lambda: PolicyRouter(replace(settings, predict=True, learn=False)),
                                   label="predict")))
    deps.append((n, all_spec(n)))
    return deps


def specgate_at(k: int, n: int, settings: PolicySettings) -> Deployment:
    """The router in front of k speculative + n-k plain engines, 0 <= k <= n (``specgate
    ks+(N-k)p``), as a new deployment runs it: no speed blocks, the speed models learned from
    its own traffic (``routing.learning``, on by default). At 0 < k < n it is the ``learned``
    deployment of :func:`deployments_for`.
    """
    mode = replace(settings, predict=False, learn=True)
    return fronted(k, n, lambda: PolicyRouter(mode))


def best_prediction(predictions: Sequence[Mapping[str, Any]], metric: str = "mean_s") -> Mapping[str, Any]:
    """The advised row of ``predictions`` (``{"k", metric, ...}`` per deployment): the best
    ``metric`` (:data:`METRICS` says which way), ties to the fewer speculative engines; a row
    without the metric (None) ranks last.

    Raises:
        SplitError: no row, or an unknown metric.
    """
    if metric not in METRICS:
        raise SplitError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    if not predictions:
        raise SplitError("no prediction to choose from")
    higher = METRICS[metric]

    def key(p: Mapping[str, Any]) -> tuple[float, int]:
        v = p[metric]
        if v is None:
            v = -float("inf") if higher else float("inf")
        return (-v if higher else v, p["k"])

    return min(predictions, key=key)


@dataclass(frozen=True)
class SplitAdvice:
    """The predicted numbers per split and the advice.

    Attributes:
        engines: N; metric: what was optimised.
        best_k: speculative engines advised; best: its deployment's name.
        predictions: ``[{"k", "deployment", **summary}]`` per deployment, k = 0..N.
        params: the model and policy used.
    """

    engines: int
    metric: str
    best_k: int
    best: str
    predictions: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)
    #: what the replayed requests measured, by the deployment (a row's name) they ran on:
    #: ``{"requests", "mean_s", "p90_s", "goodput_rps"}`` (:func:`loadtests.splitlog.measured_summary`).
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)

    def text(self) -> str:
        """A human-readable table and the advice; a row the replayed requests were measured on
        is followed by a ``measured`` row (same columns, the same requests)."""
        def f(v: Any, w: int = 8) -> str:
            return f"{v:>{w}.3f}" if isinstance(v, float) else f"{'-':>{w}}"

        slo = self.params.get("objective") or {}
        lines = []
        if slo:
            lines.append(f"goodput/s: requests per second of the day (first to last arrival, "
                         f"{self.params.get('day_s', 0.0):.1f} s) finishing with TTFT <= {slo['ttft_slo_s']:g} s "
                         f"and TPOT <= {slo['tpot_slo_s']:g} s")
        lines.append(f"{'split':<22} {'mean s':>8} {'p90 s':>8} {'long s':>8} {'goodput/s':>10}  reasons")
        for p in self.predictions:
            reasons = ", ".join(f"{k} {v}" for k, v in p["reasons"].items())
            lines.append(f"{p['deployment']:<22} {f(p['mean_s'])} {f(p['p90_s'])} {f(p['long_mean_s'])} "
                         f"{f(p['goodput_rps'], 10)}  {reasons}")
            m = self.measured.get(p["deployment"])
            if m:
                err = (p["mean_s"] / m["mean_s"] - 1) if p["mean_s"] and m["mean_s"] else None
                note = f"  predicted mean {err:+.0%} of it" if err is not None else ""
                lines.append(f"{'  measured':<22} {f(m['mean_s'])} {f(m['p90_s'])} {f(None)} "
                             f"{f(m['goodput_rps'], 10)}  the same {m['requests']} requests{note}")
        lines.append(f"advice: {self.best_k} speculative + {self.engines - self.best_k} plain engines "
                     f"({self.best}; best {self.metric})")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"engines": self.engines, "metric": self.metric, "best_k": self.best_k, "best": self.best,
                "predictions": self.predictions, "params": self.params, "measured": self.measured}


def advise_split(requests: Sequence[Request], engines: int, model: EngineModel, *,
                 settings: PolicySettings | None = None, metric: str = "mean_s",
                 objective: Objective | None = None, long_prompt_tokens: int | None = None,
                 seed: int = 0, predict: bool = True,
                 follows: Mapping[int, tuple[int, float]] | None = None) -> SplitAdvice:
    """Replay ``requests`` through every split of ``engines`` and advise one (module docstring).

    Args:
        requests: the day (sorted by arrival).
        engines: N.
        model: the engines' model.
        settings: today's policy settings (default :func:`loadtests.dayrouter.settings_for`).
        metric: one of :data:`METRICS`.
        objective: the goodput objective (default :class:`loadtests.dayreport.Objective`).
        long_prompt_tokens: the ``long`` cut of the reports (default the policy's).
        seed: the simulator's seed.
        predict: also replay each split with speed models (:func:`deployments_for`).
        follows: the day's closed loops (:attr:`loadtests.splitlog.LoadTestDay.follows`; None:
            every request at its arrival).

    Raises:
        SplitError: no request, unknown metric, engines < 1.
    """
    if not requests:
        raise SplitError("the day has no request")
    if metric not in METRICS:
        raise SplitError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    settings = settings or settings_for(model)
    cut = long_prompt_tokens if long_prompt_tokens is not None else settings.long_prompt_tokens
    day_s = max(r.arrival_s for r in requests) or 1.0
    preds = []
    for k, dep in deployments_for(engines, settings, predict=predict):
        res = simulate_day(requests, dep, model, seed=seed, follows=follows)
        preds.append({"k": k, **summarize(res, day_s=day_s, long_prompt_tokens=cut, objective=objective)})
    best = best_prediction(preds, metric)
    return SplitAdvice(engines, metric, best["k"], best["deployment"], preds,
                       {"policy": settings.as_dict(), "seed": seed, "requests": len(requests), "day_s": day_s,
                        "objective": asdict(objective or Objective())})
