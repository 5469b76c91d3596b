"""``specgate plan``'s prediction: from the router's live window to advice on the split of N engines.

Input: the document of the router's ``GET /admin/plan/window`` (:func:`router.front.planwindow.window_view`:
the recent finished requests and, per pool, its learned speed model, fit status, prediction
error status and live accept lengths).

1. **The day** (:func:`day_from_window`): every request of the window becomes
   ``n`` requests of :class:`loadtests.dayshapes.Request` (one per sequence: ``n`` samples of
   one prompt decode as ``n`` sequences) at its arrival (s from the window's oldest), with
   its prompt, cached and output tokens and its budget (``max_tokens``); temperature 0 for
   ``greedy``, 1 for ``sampled``. A request whose response carried no usage (a stream without
   ``include_usage``) is taken at its budget (an upper bound; counted in ``unreported``).
   A client's speculation hint (``speculation``: ``off`` keeps a request off the speculative
   pool, ``on`` asks for it) is replayed with the request, so the router's own rules place it.
   A window sent by closed loops (clients that send their next request when the last response
   ended: :mod:`loadtests.closedloop`) keeps them: :func:`replay_day` links each such request
   to the one before it, and the replay sends it that gap after its predecessor's replayed end.
2. **The engines** (:func:`engine_models`, :func:`engine_model_from_speed`): each pool's
   :class:`router.SpeedModel` maps onto the simulator's :class:`loadtests.simulate.SimModel`
   term for term, since the simulator's engine step is the router's per-token model
   (:mod:`router.decision.predict`: ``T_plain = t0 (1 + b / b_knee) + a L + k b L``, the speculative cycle
   ``T_verify + c gamma T_plain`` emitting ``tau`` tokens): ``t0_s = decode_s_per_token``,
   ``batch_knee``, ``attn_s_per_token = attention_s_per_token``, ``kv_read_s_per_token``, ``prefill_s_per_token``,
   ``gamma`` and ``c`` of the speculative pool. The acceptance rate ``alpha`` comes from the
   measured accept lengths by inverting ``E[tau](alpha, gamma)`` (Leviathan et al. 2023,
   arXiv:2211.17192; :func:`loadtests.calibrate.alpha_from_accept_length`): per context bucket
   where the fit has per-request measurements (the bucket's geometric middle as its length,
   then ``alpha = a - d log2(L)``, :func:`loadtests.speedfit.alpha_curve`), else the class's
   mean accept length (no fall with context). Sampled requests follow greedy's fall from their
   own short-context alpha (:class:`loadtests.dayshapes.EngineModel`). KV capacity: the plain
   engines' ``sglang:max_total_num_tokens``, the speculative engines' share of it
   (``spec_kv_fraction``); running cap: the model's ``max_running_requests``. Whatever the
   router does not know keeps the base model's value (:func:`loadtests.dayshapes.default_engine_model`).
3. **The splits** (:func:`predict_splits`): the day replayed (:func:`loadtests.daysim.simulate_day`)
   through the router in front of k speculative + N-k plain engines for k = 0..N
   (:func:`loadtests.daysim.fronted`), the router being its own decision code
   (:class:`loadtests.dayrouter.PolicyRouter`: ``router.decision.policy.decide`` with speed models
   learned live from the request stream, starting from the router's models), each role's pool
   admitting the context the router's pool of that role admits (:func:`pool_limits`: a prompt
   above the speculative pool's limit is replayed where the router sends it, not on a drafter).
4. **The advice** (:func:`advise`): the split with the best ``--metric``
   (:func:`loadtests.split.best_prediction`: lowest ``mean_s`` / ``p90_s``, highest
   ``goodput_rps``; ties to fewer speculative engines) among the hedge's safe splits (step 6), and whether the model is trusted: a
   pool whose prediction error's median exceeds ``max_error`` (or whose checker fell back to the
   plain rule), no pool with :data:`MIN_OBSERVATIONS` learned requests, a speculative pool
   whose acceptance was never measured, or a replay of the current split whose mean or p90
   (the seconds metric advised on) is off what the window's requests measured at it by more than
   ``max_replay_error`` relative (0.5; :func:`replay_check`: the learned models' values, not only their
   ratios, drive the replay; at a steady heavy load the router's fit cannot tell ``t0`` from
   the batch slope and predicted 2-4x the measured mean, docs/performance.md) makes the advice
   untrusted, which says why and is not acted on.
5. **What was measured** (:func:`measured`): the window's own mean and p90 of ``duration_s``
   (arrival to the response's end), the current split's ground truth, beside the replay's
   prediction for it; the loop's retreat (:mod:`loadtests.planloop`) reads it.
6. **The hedge** (``hedge``, default :data:`HEDGE`): the window is replayed a second time with
   every request sampled (temperature 1: the turn of the class mix the advice cannot see coming;
   on the simulator's kv_limited engines all-speculative, predicted 4.2 s in a greedy half hour,
   averaged 73 s over the day whose traffic then turned sampled, docs/performance.md), and the advice is the
   best split by the plain replay among the *safe* ones, those whose stressed prediction is
   within ``1 + hedge`` of the best stressed prediction (:func:`loadtests.planloop.safe_splits`).
   A bounded-regret choice: should the traffic turn, the advised split's loss against the best
   split for the turned traffic is at most ``hedge`` relative (by the replay), and within that
   bound the split best for the traffic of now is chosen (Savage's minimax regret, 1951,
   "The theory of statistical decision", JASA 46(253), bounded instead of minimised). A window
   without a greedy request is not replayed again (its stressed replay is itself): the plain
   argmin is always safe, so the advice is the same as without the hedge. The stressed replay
   doubles the replay's CPU.

Errors: :class:`PlanError` (an empty window, a document without pools, bad arguments).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loadtests.calibrate import alpha_from_accept_length
from loadtests.closedloop import Loops, find_loops
from loadtests.dayreport import summarize
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.dayshapes import EngineModel, Request, default_engine_model
from loadtests.daysim import fronted, simulate_day
from loadtests.planloop import HEDGE, safe_splits
from loadtests.speedfit import alpha_curve
from loadtests.split import METRICS, best_prediction
from router import SPECULATION_MODES, SpeedModel

__all__ = ["HEDGE", "MIN_OBSERVATIONS", "PlanError", "PlanModels", "advise", "bucket_tokens", "day_from_window",
           "engine_model_from_speed", "engine_models", "measured", "pool_limits", "predict_splits", "replay_check",
           "replay_day", "trust"]

#: Learned requests a pool's fit needs before the plan trusts it (``router.decision.learn.MIN_OWN_OBSERVATIONS``).
MIN_OBSERVATIONS = 10

#: Temperature of each class in the replayed day.
_TEMPERATURE = {"greedy": 0.0, "sampled": 1.0}


class PlanError(ValueError):
    """The window or the arguments do not allow a plan."""


def day_from_window(doc: Mapping[str, Any]) -> tuple[list[Request], int]:
    """The window's requests as a day (module docstring, step 1), sorted by arrival; and how
    many requests had no reported output (taken at their budget).

    Raises:
        PlanError: no request in the window, or a row without its keys.
    """
    requests, _, unreported = _day(doc)
    return requests, unreported


def replay_day(doc: Mapping[str, Any]) -> tuple[list[Request], dict[int, tuple[int, float]], Loops]:
    """:func:`day_from_window`'s requests with the window's closed loops
    (:func:`loadtests.closedloop.find_loops`) as ``{rid: (predecessor rid, gap_s)}``, what
    :func:`loadtests.daysim.simulate_day` takes as ``follows``, and the loops found.

    Raises:
        PlanError: as :func:`day_from_window`.
    """
    requests, rid_of_row, _ = _day(doc)
    loops = find_loops(doc.get("requests") or [])
    follows = {rid_of_row[j]: (rid_of_row[i], gap) for j, (i, gap) in loops.links.items()}
    return requests, follows, loops


def _day(doc: Mapping[str, Any]) -> tuple[list[Request], dict[int, int], int]:
    """The day, each single-sequence row's rid by row index, the unreported rows."""
    rows = doc.get("requests") or []
    if not rows:
        raise PlanError("the router's window holds no finished request yet")
    out: list[tuple[float, int, int, int, int, int, float, str]] = []
    unreported = 0
    try:
        for i, r in enumerate(rows):
            output = r["output_tokens"]
            if output is None:
                unreported += 1
                output = r["max_tokens"]
            output = max(1, int(output))
            prompt = max(1, int(r["prompt_tokens"]))
            cached = min(prompt, max(0, int(r.get("cached_tokens") or 0)))
            budget = max(int(r["max_tokens"]), output)
            temp = _TEMPERATURE.get(str(r.get("temperature_class")), 0.0)
            hint = r.get("speculation")
            hint = hint if hint in SPECULATION_MODES else "auto"
            out += [(float(r["arrival_s"]), i, prompt, cached, output, budget, temp, hint)] * max(1, int(r.get("n") or 1))
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"a window row lacks a usable field: {exc!r}") from None
    out.sort(key=lambda x: (x[0], x[1]))
    rid_of_row = {row: rid for rid, (_, row, *_rest) in enumerate(out)}  # the last sequence of a row
    return ([Request(rid, t, p, c, o, b, temp, "window", speculation=hint)
             for rid, (t, _, p, c, o, b, temp, hint) in enumerate(out)], rid_of_row, unreported)


def bucket_tokens(label: str) -> float:
    """A context bucket's representative length (tokens) from its label
    (:func:`router.decision.learn.bucket_label`): ``le_E`` the geometric middle of ``[E / 4, E]``
    (the buckets' edges are powers of 4 apart), ``gt_E`` twice ``E``.

    Raises:
        PlanError: an unknown label.
    """
    kind, _, edge = label.partition("_")
    try:
        e = float(edge)
    except ValueError:
        raise PlanError(f"unknown context bucket {label!r}") from None
    if kind == "le":
        return math.sqrt(e / 4 * e)
    if kind == "gt":
        return 2 * e
    raise PlanError(f"unknown context bucket {label!r}")


def _alpha(table: Mapping[str, float], cls: str, tau: float | None, gamma: int) -> dict[str, float] | None:
    """The class's alpha curve from the per-bucket table, else its mean tau (flat), else None."""
    rows = [(bucket_tokens(key.partition("/")[2]), alpha_from_accept_length(float(v), gamma))
            for key, v in table.items() if key.partition("/")[0] == cls and v]
    if rows:
        return alpha_curve(rows)
    if tau:
        return {"alpha_short": alpha_from_accept_length(float(tau), gamma), "alpha_drop_per_doubling": 0.0}
    return None


def engine_model_from_speed(speed: SpeedModel, *, gamma: int, c: float,
                            accept_length: Mapping[str, float | None] | None = None,
                            accept_table: Mapping[str, float] | None = None, kv_tokens: int | None = None,
                            spec_kv_fraction: float | None = None, base: EngineModel | None = None) -> EngineModel:
    """The simulator's engine model of one pool's router speed model (module docstring, step 2).

    Args:
        speed: the pool's :class:`router.SpeedModel` (``decode_s_per_token`` ... ``max_running_requests``).
        gamma, c: the speculative pool's draft length and drafter cost (the simulator keeps one
            pair for both pools; a plain engine ignores them).
        accept_length: ``{class: tau}`` measured on the speculative pool (None: unknown).
        accept_table: ``{"<class>/<bucket label>": tau}`` (the fit's status, ``accept_length``).
        kv_tokens: a plain engine's KV capacity (tokens); spec_kv_fraction: a speculative
            engine's share of it (in (0, 1]).
        base: the values the router does not know (default :func:`default_engine_model`).
    """
    base = base or default_engine_model()
    sim = replace(base.speed, t0_s=speed.decode_s_per_token, batch_knee=speed.batch_knee,
                  attn_s_per_token=speed.attention_s_per_token, prefill_s_per_token=speed.prefill_s_per_token,
                  kv_read_s_per_token=speed.kv_read_s_per_token, gamma=max(1, gamma), c=max(0.0, c))
    taus = accept_length or {}
    greedy = _alpha(accept_table or {}, "greedy", taus.get("greedy"), sim.gamma)
    sampled = _alpha(accept_table or {}, "sampled", taus.get("sampled"), sim.gamma)
    if greedy is None and sampled is not None:  # only sampled traffic measured: its curve for both
        greedy = sampled
    if greedy is not None:
        sim = replace(sim, **greedy)
    alpha_sampled = sampled["alpha_short"] if sampled is not None else min(base.alpha_sampled_short, sim.alpha_short)
    kw: dict[str, Any] = {}
    if kv_tokens:
        kw["kv_tokens"] = int(kv_tokens)
    if spec_kv_fraction is not None:
        kw["spec_kv_fraction"] = min(1.0, max(1e-3, spec_kv_fraction))
    if speed.max_running_requests:
        kw["max_running"] = speed.max_running_requests
    return replace(base, speed=sim, alpha_sampled_short=min(alpha_sampled, sim.alpha_short), **kw)


@dataclass(frozen=True)
class PlanModels:
    """The engine models of a plan.

    Attributes:
        spec, plain: the speculative and plain engines' models.
        sources: per role, the pool it came from and its speed model's source
            (``learned``, ``config``, ``default`` when no pool of that role had a model).
    """

    spec: EngineModel
    plain: EngineModel
    sources: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the parameters the plan simulated with."""
        def one(m: EngineModel) -> dict[str, Any]:
            s = m.speed
            return {"t0_s": s.t0_s, "batch_knee": s.batch_knee, "attn_s_per_token": s.attn_s_per_token,
                    "kv_read_s_per_token": s.kv_read_s_per_token,
                    "prefill_s_per_token": s.prefill_s_per_token, "gamma": s.gamma, "c": s.c,
                    "alpha_short": round(s.alpha_short, 4), "alpha_knee_tokens": s.alpha_knee_tokens,
                    "alpha_drop_per_doubling": round(s.alpha_drop_per_doubling, 4),
                    "alpha_sampled_short": round(m.alpha_sampled_short, 4), "kv_tokens": m.kv_tokens,
                    "spec_kv_fraction": m.spec_kv_fraction, "max_running": m.max_running}
        return {"speculative": one(self.spec), "plain": one(self.plain), "sources": dict(self.sources)}


def _pick(pools: Sequence[Mapping[str, Any]], speculative: bool) -> Mapping[str, Any] | None:
    """The pool of a role whose model has the most learned observations (first on a tie)."""
    mine = [p for p in pools if bool(p.get("speculative")) is speculative]
    return max(mine, key=lambda p: ((p.get("fit") or {}).get("observations") or 0, p.get("speed") is not None),
               default=None)


def _speed(pool: Mapping[str, Any] | None) -> SpeedModel | None:
    doc = (pool or {}).get("speed")
    return None if not doc else SpeedModel(**doc)


def engine_models(doc: Mapping[str, Any], base: EngineModel | None = None) -> PlanModels:
    """The speculative and plain engine models of the window document's pools (step 2): a role
    without a model borrows the other role's timings, and the base model's when neither has one."""
    base = base or default_engine_model()
    pools = doc.get("pools") or []
    spec_pool, plain_pool = _pick(pools, True), _pick(pools, False)
    spec_speed, plain_speed = _speed(spec_pool), _speed(plain_pool)
    b = base.speed
    fallback = SpeedModel(decode_s_per_token=b.t0_s, batch_knee=b.batch_knee, attention_s_per_token=b.attn_s_per_token,
                          prefill_s_per_token=b.prefill_s_per_token, kv_read_s_per_token=b.kv_read_s_per_token,
                          max_running_requests=base.max_running, gamma=b.gamma, c=b.c)
    sources = {"speculative": "default", "plain": "default"}
    for role, pool, speed in (("speculative", spec_pool, spec_speed), ("plain", plain_pool, plain_speed)):
        if speed is not None and pool is not None:
            sources[role] = f"{pool['name']}:{pool.get('speed_source') or 'config'}"
    gamma_src = spec_speed if spec_speed is not None and spec_speed.gamma > 0 else fallback
    spec_speed = spec_speed or plain_speed or fallback
    plain_speed = plain_speed or spec_speed
    spec_kv = (spec_pool or {}).get("kv_tokens")
    plain_kv = (plain_pool or {}).get("kv_tokens")
    kv = plain_kv or (spec_kv / base.spec_kv_fraction if spec_kv else None)
    fraction = spec_kv / plain_kv if spec_kv and plain_kv else None
    table = ((spec_pool or {}).get("fit") or {}).get("accept_length") or {}
    common = {"gamma": gamma_src.gamma, "c": gamma_src.c, "accept_length": (spec_pool or {}).get("accept_length"),
              "accept_table": table, "kv_tokens": kv, "spec_kv_fraction": fraction, "base": base}
    return PlanModels(engine_model_from_speed(spec_speed, **common), engine_model_from_speed(plain_speed, **common),
                      sources)


def trust(doc: Mapping[str, Any], max_error: float) -> list[str]:
    """Why the models are not trusted (empty: trusted); ``max_error`` is the largest median
    relative prediction error accepted (module docstring, step 4)."""
    why = []
    pools = doc.get("pools") or []
    if not any(p.get("speed") for p in pools):
        why.append("no pool has a speed model (turn routing.learning on, or give the pools speed blocks)")
    learned = [p for p in pools if ((p.get("fit") or {}).get("observations") or 0) >= MIN_OBSERVATIONS]
    if any(p.get("fit") for p in pools) and not learned:
        why.append(f"no pool's fit has learned {MIN_OBSERVATIONS} requests yet")
    for p in pools:
        check = p.get("check") or {}
        err = check.get("median_relative_error")
        if check.get("fallback"):
            why.append(f"pool {p['name']}: the router fell back from its speed model (prediction error)")
        elif err is not None and err > max_error:
            why.append(f"pool {p['name']}: median prediction error {err:.2f} > {max_error:.2f}")
        elif not check and ((p.get("fit") or {}).get("error") or 0) > max_error and p in learned:
            why.append(f"pool {p['name']}: prediction error {(p['fit'] or {})['error']:.2f} > {max_error:.2f}")
    spec = [p for p in pools if p.get("speculative")]
    if spec and not any(v for p in spec for v in (p.get("accept_length") or {}).values()) \
            and not any((p.get("fit") or {}).get("accept_length") for p in spec):
        why.append("the speculative pool's acceptance was never measured")
    return why


def pool_limits(doc: Mapping[str, Any]) -> dict[str, int | None]:
    """Each role's context limit (tokens) from the window document's pools: ``{"spec": a,
    "plain": b}``, the largest ``limit_tokens`` of that role's pools (None: none reported)."""
    out: dict[str, int | None] = {"spec": None, "plain": None}
    for p in doc.get("pools") or []:
        role, lim = "spec" if p.get("speculative") else "plain", p.get("limit_tokens")
        if isinstance(lim, int) and lim > 0:
            out[role] = max(out[role] or 0, lim)
    return out


def predict_splits(requests: Sequence[Request], engines: int, models: PlanModels, *, seed: int = 0,
                   long_prompt_tokens: int = 32768, ks: Sequence[int] | None = None,
                   limits: Mapping[str, int | None] | None = None,
                   follows: Mapping[int, tuple[int, float]] | None = None) -> list[dict[str, Any]]:
    """``[{"k", **summary}]`` for k = 0..engines (``ks``: those splits only, in [0, engines]):
    the day through the router in front of k speculative + engines - k plain engines (step 3);
    ``limits``: each role's context limit (:func:`pool_limits`; None: the simulator's default);
    ``follows``: the day's closed loops (:func:`replay_day`; None: every request at its arrival).

    Raises:
        PlanError: engines < 1, no request, or a split out of range.
    """
    if ks is not None and any(not 0 <= k <= engines for k in ks):
        raise PlanError(f"splits {list(ks)} out of 0..{engines}")
    if engines < 1:
        raise PlanError(f"need at least one engine, got {engines}")
    if not requests:
        raise PlanError("the day has no request")
    # the models' own predictions: the checks' corrections were measured at the current split's
    # load, and applied to the other splits' they made the planner chase them (slow_sampled 4.0x)
    settings = replace(settings_for(models.plain, long_prompt_tokens=long_prompt_tokens), predict=True, learn=True,
                       correct=False, spec_limit_tokens=(limits or {}).get("spec"),
                       plain_limit_tokens=(limits or {}).get("plain"))
    day_s = max(r.arrival_s for r in requests) or 1.0
    pool_models = {"spec": models.spec, "plain": models.plain}
    out = []
    for k in (range(engines + 1) if ks is None else sorted(set(ks))):
        res = simulate_day(requests, fronted(k, engines, lambda: PolicyRouter(settings)), models.plain, seed=seed,
                           pool_models=pool_models, follows=follows)
        out.append({"k": k, **summarize(res, day_s=day_s, long_prompt_tokens=long_prompt_tokens)})
    return out


def measured(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the window's requests took at the split that served them (step 5): ``{"requests": m,
    "mean_s": x, "p90_s": y}`` over the rows with a ``duration_s`` (seconds, arrival to the
    response's end; the nearest-rank p90); the means are None without such a row."""
    ds = sorted(float(r["duration_s"]) for r in doc.get("requests") or []
                if isinstance(r.get("duration_s"), int | float) and math.isfinite(r["duration_s"]))
    if not ds:
        return {"requests": 0, "mean_s": None, "p90_s": None}
    return {"requests": len(ds), "mean_s": sum(ds) / len(ds), "p90_s": ds[min(len(ds) - 1, math.ceil(0.9 * len(ds)) - 1)]}


def replay_check(splits: Sequence[Mapping[str, Any]], current: int, seen: Mapping[str, Any], metric: str,
                 max_error: float) -> list[str]:
    """Why the replay of the ``current`` split (``splits``: :func:`predict_splits`' rows) is not
    trusted against what the window measured (``seen``: :func:`measured`): its ``metric``
    (``mean_s`` or ``p90_s``; goodput is not checked) off the measured one by more than
    ``max_error`` relative; empty when it agrees, or when either is unknown."""
    row = next((p for p in splits if p["k"] == current), None)
    pred, real = (row or {}).get(metric), seen.get(metric)
    if metric not in ("mean_s", "p90_s") or not pred or not real or abs(pred / real - 1.0) <= max_error:
        return []
    why = (f"the replay of the current split ({current} speculative) predicts {metric} {pred:.2f} s, the window "
           f"measured {real:.2f} s (off by more than {max_error:.2f})")
    return [why]


def current_split(doc: Mapping[str, Any]) -> dict[str, int]:
    """The engines the router sees now, by role: ``{"speculative": a, "plain": b}``."""
    pools = doc.get("pools") or []
    return {"speculative": sum(int(p.get("endpoints") or 0) for p in pools if p.get("speculative")),
            "plain": sum(int(p.get("endpoints") or 0) for p in pools if not p.get("speculative"))}


def advise(doc: Mapping[str, Any], engines: int, *, metric: str = "mean_s", max_error: float = 0.3,
           seed: int = 0, base: EngineModel | None = None, ks: Sequence[int] | None = None,
           max_replay_error: float = 0.5, hedge: float | None = HEDGE) -> dict[str, Any]:
    """The advice document ``specgate plan --json`` prints (steps 1-4 and 6); ``ks``: predict those
    splits only (the loop's reach around the current split; default every split); ``hedge``:
    step 6's bound (None or ``inf``: no hedge, no stressed replay, the plain argmin).

    Shape: ``{"advised": {"speculative": k, "plain": N - k}, "splits": [{"speculative",
    "plain", "predicted_mean_s", "predicted_p90_s", "predicted_goodput_rps",
    "predicted_mean_s_if_sampled", "predicted_p90_s_if_sampled", "predicted_goodput_rps_if_sampled"}, ...]
    (k = 0..N, or ``ks``; the ``_if_sampled`` values null without a hedge), "hedge": {"factor": h
    or null, "stressed": bool (a stressed replay ran; false when the window has no greedy request, its
    values then the plain ones), "safe": [k] or null, "unhedged": the argmin without the hedge},
    "window": {"requests", "seconds", "sequences", "unreported", "closed_loop":
    :meth:`loadtests.closedloop.Loops.as_dict`}, "metric", "current":
    {"speculative", "plain"} (the router's endpoints now), "trusted": bool, "untrusted_because":
    [str], "model": :meth:`PlanModels.as_dict`, "measured": :func:`measured`}``; a prediction
    without a completed request is null.

    Raises:
        PlanError: empty window, unknown metric, engines < 1, hedge < 0.
    """
    if metric not in METRICS or metric == "long_mean_s":
        raise PlanError(f"unknown metric {metric!r}; one of mean_s, p90_s, goodput_rps")
    if hedge is not None and not hedge >= 0:
        raise PlanError(f"hedge must be >= 0 (None or inf: no hedge), got {hedge}")
    factor = None if hedge is None or math.isinf(hedge) else float(hedge)
    requests, follows, loops = replay_day(doc)
    unreported = day_from_window(doc)[1]
    models = engine_models(doc, base)
    limits = pool_limits(doc)
    preds = predict_splits(requests, engines, models, seed=seed, ks=ks, limits=limits, follows=follows)
    greedy = any(not r.sampled for r in requests)
    stressed: list[dict[str, Any]] | None = None
    if factor is not None:  # step 6: the same window with every request sampled (no greedy one: the same day)
        stressed = preds if not greedy else predict_splits(
            [replace(r, temperature=1.0) for r in requests], engines, models, seed=seed, ks=ks, limits=limits,
            follows=follows)
    unhedged = best_prediction(preds, metric)
    safe = None if stressed is None else safe_splits({p["k"]: p[metric] for p in stressed}, factor, metric)
    best = unhedged if safe is None else best_prediction([p for p in preds if p["k"] in safe] or preds, metric)
    seen = measured(doc)
    why = trust(doc, max_error) + replay_check(preds, current_split(doc)["speculative"], seen, metric,
                                               max_replay_error)
    under = {p["k"]: p for p in stressed or ()}
    win = doc.get("window") or {}
    return {
        "advised": {"speculative": best["k"], "plain": engines - best["k"]},
        "splits": [{"speculative": p["k"], "plain": engines - p["k"], "predicted_mean_s": p["mean_s"],
                    "predicted_p90_s": p["p90_s"], "predicted_goodput_rps": p["goodput_rps"],
                    **{f"predicted_{m}_if_sampled": (under.get(p["k"]) or {}).get(m)
                       for m in ("mean_s", "p90_s", "goodput_rps")}} for p in preds],
        "hedge": {"factor": factor, "stressed": stressed is not None and greedy,
                  "safe": None if safe is None else sorted(safe), "unhedged": unhedged["k"]},
        "window": {"requests": int(win.get("requests", len(doc.get("requests") or []))),
                   "seconds": float(win.get("seconds") or 0.0), "sequences": len(requests), "unreported": unreported,
                   "closed_loop": loops.as_dict()},
        "metric": metric,
        "current": current_split(doc),
        "trusted": not why,
        "untrusted_because": why,
        "model": models.as_dict(),
        "measured": seen,
    }
