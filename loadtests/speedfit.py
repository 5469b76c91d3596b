"""Fit the per-pool speed model (:class:`loadtests.simulate.SimModel`) to a load-test report.

Input: a schema-1 comparison report (:mod:`loadtests.report`) with a plain and a speculative
target. Each operating point (bucket, load) gives, per target, the median time per output
token ``tpot`` (s), the median time to first token ``ttft`` (s), the median server-counted
prompt length ``L`` (tokens), the per-engine batch ``b`` (closed loop: concurrency / the
target's endpoint count; open loop: the measured mean running + queued) and, for the
speculative target, the mean ``sglang:spec_accept_length`` ``tau``.

Fits, in order (weighted least squares, ``numpy.polyfit``; the weights below):

1. plain: ``tpot = t0 + (t0 / b_knee) * b + attn * L`` -> ``t0_s``, ``batch_knee``,
   ``attn_s_per_token``, each term where it dominates: ``attn`` from the lowest load measured
   at >= 2 lengths (``tpot`` against ``L``), then ``t0`` and the batch slope from the shortest
   bucket measured at >= 2 loads (``tpot - attn * L`` against ``b``); a parameter that the data
   cannot separate is left out with a warning. Not one joint least squares over every point:
   on engines whose time per token grows with load *times* context (each decode step reads
   every running sequence's KV, and long prompts joining are prefilled between steps: on the
   demo's SGLang CPU pools 0.011 s at 1 sequence and 0.20 s at 12 at 1,000-1,400 tokens,
   against 0.009 s and 0.051 s at 100-300), the long, loaded points set the joint fit's batch
   slope and pull its intercept ``t0`` to zero or below: a ``batch_knee = t0 / slope`` of a
   tenth of a sequence, or no fit. Nor with the router's KV-read term (``kv_read_s_per_token``,
   ``(attn + kv_read * b) * L`` from the context slopes at two loads): on a report of the demo's
   CPU pools it fitted every point (rms residual 2.6 ms against 12.6 ms, no point off by 1.5x
   against two at 1.74x and 3.33x), but ``specgate calibrate-split``'s replay of the plain
   target's requests then read +252% against +18% (an open-loop replay of the load test's
   waves, whose backlog the steeper load curve turns into a runaway), so it is not fitted
   (docs/loadtests.md; the replay now starts each run at the previous run's replayed end,
   :mod:`loadtests.splitlog`, which removes that backlog: the term has not been tried since). ``t0`` is the time of a batch of one at short context
   (:class:`router.decision.predict.SpeedModel`), so it is fitted there; a point the fitted model
   misses by more than :data:`MISFIT_RATIO` either way is named in a warning;
2. prefill, per pool: ``ttft - tpot = prefill * L`` (through the origin) at the lowest load;
3. acceptance, per temperature class: ``alpha`` per point from the class's mean per-request
   accept length (``accept_length_by_class``: SGLang's ``spec_tokens_details``, both classes
   when the load test ran with ``--sampled-fraction``; without them the gauge's ``tau``, at
   the report's ``workload.temperature``), by
   :func:`loadtests.calibrate.alpha_from_accept_length`, then ``alpha = a - d * log2(L)`` over
   the points; ``alpha_knee_tokens`` is the shortest measured length, ``alpha_short = a - d *
   log2(knee)``, ``alpha_drop_per_doubling = max(0, d)``; a class not measured is absent;
4. the drafter's cost ``c``: per speculative point, ``tpot_spec * tau = T_verify + c * gamma *
   T_plain`` with the plain fit (``SimModel``'s cycle), solved for ``c``; the median over
   points, clamped to [0, 1).

``gamma`` comes from the report's ``speculation`` block (or the argument). The result names
each parameter by pool and carries the residuals and the points used.

Noise is a wider error bar, not no measurement. A point whose runs disagree for that target is
a noisier measurement of the same time per token, so the fit is weighted least squares
(NIST/SEMATECH e-Handbook of Statistical Methods, section 4.1.4.3 "Weighted Least Squares
Regression", https://www.itl.nist.gov/div898/handbook/pmd/section1/pmd143.htm; A. C. Aitken,
"On least squares and linear combination of observations", Proc. R. Soc. Edinburgh 55, 1935):
each point counts with the inverse of its variance. The scale of a point's noise is the log of
its ``spread`` (max / min of the runs' median decode tokens/s, :func:`loadtests.stats.spread_verdict`):
the range of the runs' logs, proportional to their standard deviation at a fixed number of runs
(the range estimator ``sigma = R / d2(n)`` of D. C. Montgomery, "Introduction to Statistical
Quality Control", ch. 6; a report's points share ``--repetitions``, so ``d2(n)`` cancels), so its weight is
:func:`noise_weight`: ``min(1, (ln t / ln spread) ** 2)`` with ``t`` the report's spread
threshold (``workload.spread_threshold``, 1.10 by default): 1 for a ``stable``, ``single`` or
``converging`` point and for any spread within ``t`` (the floor: runs that agree within the
threshold are not told apart), about 0.27 at 1.20x, 0.03 at 1.78x. It applies to ``unsettled``
and ``noisy`` points in every least squares above (``numpy.polyfit``'s ``w`` is the square root
of it), the mean without a second load and the prefill line, and as a weighted median to ``c``;
not to the alpha curve (an accept length is a count of tokens per step: a co-tenant that
slows the runs does not change it, so every point kept counts equally there). Each
down-weighted point is named in a warning with its weight. Left out, with
a warning naming it and the suggested ``--repetitions``: a ``bimodal`` point (two recurring
modes: its median describes neither) and an ``unsettled`` or ``noisy`` point without a finite
spread (no error bar to weigh it by). Which side of break-even a cell is on
(:mod:`loadtests.evidence`, ``specgate calibrate``'s thresholds) is a yes/no question and keeps
its stricter rule. When nothing is left for the plain target, nothing is fitted.

Errors: :class:`FitError` (no plain and spec data to fit from).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MISFIT_RATIO", "FitError", "alpha_curve", "engine_model_from_fit", "fit_speed_model", "noise_weight",
           "speed_blocks"]

#: A point whose measured time per token is more than this many times the fitted model's (or
#: less than its inverse) is named in a warning: the model's form does not hold there.
MISFIT_RATIO = 1.5


class FitError(ValueError):
    """The report does not allow a speed-model fit."""


def _target(report: Mapping[str, Any], role: str) -> Mapping[str, Any] | None:
    return next((t for t in report["targets"] if t.get("role") == role), None)


def _points(report: Mapping[str, Any], target: Mapping[str, Any]) -> list[dict[str, float]]:
    closed = report["grid"]["load_kind"] == "concurrency"
    endpoints = max(1, len(target.get("metrics_urls") or ()))
    out = []
    for p in report["points"]:
        t = p["targets"].get(target["name"])
        if not t:
            continue
        tpot = (t.get("tpot_s") or {}).get("p50")
        ttft = (t.get("ttft_s") or {}).get("p50")
        length = (t.get("prompt_tokens") or {}).get("p50") or math.sqrt(p["bucket_lo"] * p["bucket_hi"])
        pm = t.get("pool_metrics") or {}
        b = p["load"] / endpoints if closed else (pm.get("engine_load") or {}).get("mean")
        if tpot is None or b is None:
            continue
        sp = t.get("spread") or {}
        out.append({"bucket": p["bucket"], "load": p["load"], "b": float(b), "L": float(length),
                    "tpot": float(tpot), "ttft": None if ttft is None else float(ttft),
                    "tau": (pm.get("accept_length") or {}).get("mean"),
                    "tau_by_class": {c: v["mean"] for c, v in (t.get("accept_length_by_class") or {}).items()
                                     if isinstance(v, Mapping) and v.get("mean")},
                    "verdict": sp.get("verdict"), "spread": sp.get("spread"), "runs": sp.get("n")})
    return out


def noise_weight(verdict: str | None, spread: float | None, threshold: float) -> float | None:
    """A point's weight in the fit (module docstring): 1 unless its runs disagree; for an
    ``unsettled`` or ``noisy`` point ``min(1, (ln threshold / ln spread) ** 2)``; None (left out)
    for a ``bimodal`` point and for an ``unsettled`` or ``noisy`` one without a finite spread.

    Args:
        verdict: the point's spread verdict (:func:`loadtests.stats.spread_verdict`), or None.
        spread: max / min of its runs (dimensionless, >= 1), or None.
        threshold: the report's spread threshold (> 1).
    """
    if verdict == "bimodal":
        return None
    if verdict not in ("unsettled", "noisy"):
        return 1.0
    if spread is None or not math.isfinite(spread):
        return None
    if spread <= threshold:
        return 1.0
    return min(1.0, (math.log(threshold) / math.log(spread)) ** 2)


def _weighed(points: list[dict[str, Any]], role: str, threshold: float, warnings: list[str]) -> list[dict[str, Any]]:
    """``points`` with their ``weight`` (:func:`noise_weight`), without those left out; one
    warning per point down-weighted or left out."""
    from loadtests.evidence import suggested_repetitions

    kept = []
    for p in points:
        w = noise_weight(p["verdict"], p["spread"], threshold)
        spread = p["spread"]
        text = f"{spread:.2f}x" if spread is not None and math.isfinite(spread) else "unknown"
        runs = f"decode tok/s spread {text} over {p['runs'] or '?'} runs"
        if w is None:
            warnings.append(f"{role}: {p['bucket']} x {p['load']:g} left out of the fit: its runs are "
                            f"{p['verdict']} ({runs}; rerun with --repetitions {suggested_repetitions(p['runs'])})")
            continue
        p["weight"] = w
        if w < 1.0:
            warnings.append(f"{role}: {p['bucket']} x {p['load']:g} weighted {w:.2f} in the fit: its runs are "
                            f"{p['verdict']} ({runs}; weight (ln {threshold:g} / ln spread)^2)")
        kept.append(p)
    return kept


def _spread_threshold(report: Mapping[str, Any]) -> float:
    """The report's spread threshold (``workload.spread_threshold``, default
    :data:`loadtests.stats.DEFAULT_SPREAD_THRESHOLD`)."""
    from loadtests.stats import DEFAULT_SPREAD_THRESHOLD

    t = (report.get("workload") or {}).get("spread_threshold")
    return float(t) if t and float(t) > 1 else DEFAULT_SPREAD_THRESHOLD


def _wmedian(values: list[float], weights: list[float]) -> float:
    """The weighted median: the first value (sorted) whose cumulative weight passes half the
    total, the mean of two neighbours where it lands on half exactly (so equal weights give
    :func:`statistics.median`)."""
    pairs = sorted(zip(values, weights, strict=True))
    half = 0.5 * sum(w for _, w in pairs)
    tol = 1e-12 * max(1.0, half)
    acc = 0.0
    for i, (v, w) in enumerate(pairs):
        acc += w
        if abs(acc - half) <= tol and i + 1 < len(pairs):
            return 0.5 * (v + pairs[i + 1][0])
        if acc > half:
            return v
    return pairs[-1][0]


def _prefill(points: list[dict[str, Any]]) -> float | None:
    low = min((p["b"] for p in points), default=None)
    rows = [(p["L"], p["ttft"] - p["tpot"], p["weight"]) for p in points if p["b"] == low and p["ttft"] is not None]
    den = sum(w * x * x for x, _, w in rows)
    return max(0.0, sum(w * x * y for x, y, w in rows) / den) if den > 0 else None


def _line(xs: list[float], ys: list[float], ws: list[float]) -> tuple[float, float]:
    """``(intercept, slope)`` of the weighted least-squares line through ``(xs, ys)`` (>= 2
    distinct xs; ``ws`` the inverse variances, module docstring)."""
    slope, intercept = np.polyfit(np.array(xs), np.array(ys), 1, w=np.sqrt(np.array(ws)))
    return float(intercept), float(slope)


def _plain_fit(pp: list[dict[str, Any]], warnings: list[str]) -> tuple[dict[str, Any], float]:
    """``({"t0_s", "batch_knee"?, "attn_s_per_token"}, rms residual s)`` of the plain points
    (module docstring, step 1); warnings appended.

    Raises:
        FitError: ``t0 <= 0``.
    """
    by_load: dict[float, list[dict[str, Any]]] = {}
    by_bucket: dict[str, list[dict[str, Any]]] = {}
    for p in pp:
        by_load.setdefault(p["b"], []).append(p)
        by_bucket.setdefault(p["bucket"], []).append(p)
    attn = 0.0
    low = [rows for _, rows in sorted(by_load.items()) if len({r["L"] for r in rows}) > 1]
    if low:
        attn = max(0.0, _line([r["L"] for r in low[0]], [r["tpot"] for r in low[0]], [r["weight"] for r in low[0]])[1])
    else:
        warnings.append("one prompt length only: attn_s_per_token not fitted")
    loaded = sorted((rows for rows in by_bucket.values() if len({r["b"] for r in rows}) > 1),
                    key=lambda rows: statistics.fmean(r["L"] for r in rows))
    slope = None
    if loaded:
        t0, slope = _line([r["b"] for r in loaded[0]], [r["tpot"] - attn * r["L"] for r in loaded[0]],
                          [r["weight"] for r in loaded[0]])
    else:
        warnings.append("one load only: batch_knee not fitted")
        t0 = statistics.fmean([p["tpot"] - attn * p["L"] for p in pp], weights=[p["weight"] for p in pp])
    if t0 <= 0:
        raise FitError(f"the plain fit gives t0 = {t0:.3g} s <= 0: the points do not follow the model")
    plain: dict[str, Any] = {"t0_s": t0}
    if slope is not None and slope > 0:
        plain["batch_knee"] = t0 / slope
    elif slope is not None:
        warnings.append("the plain time per token does not grow with load: batch_knee not fitted")
        slope = 0.0
    plain["attn_s_per_token"] = attn
    model = [t0 + (slope or 0.0) * p["b"] + attn * p["L"] for p in pp]
    for p, m in zip(pp, model, strict=True):
        ratio = p["tpot"] / m
        if not 1 / MISFIT_RATIO <= ratio <= MISFIT_RATIO:
            warnings.append(f"plain: at {p['bucket']} x {p['load']:g} the time per token is {ratio:.2f}x the fitted "
                            "model's t0 * (1 + b / batch_knee) + attn * L (fitted at the shortest bucket and the "
                            "lowest load): there it grows with load and context together")
    return plain, float(np.sqrt(np.mean([(m - p["tpot"]) ** 2 for p, m in zip(pp, model, strict=True)])))


def alpha_curve(rows: list[tuple[float, float]]) -> dict[str, float]:
    """``alpha = a - d * log2(L)`` over ``(L, alpha)`` rows: ``alpha_short`` at the shortest
    length (the knee), ``alpha_drop_per_doubling`` ``max(0, d)``."""
    xs = np.array([math.log2(length) for length, _ in rows])
    al = np.array([a for _, a in rows])
    knee = min(length for length, _ in rows)
    if len(set(xs.tolist())) > 1:
        d, a = np.polyfit(xs, al, 1)
        drop = max(0.0, -float(d))
        short = float(a + d * math.log2(knee)) if drop > 0 else float(al.max())
    else:
        drop, short = 0.0, float(al.mean())
    return {"alpha_short": min(1.0, max(0.0, short)), "alpha_knee_tokens": knee, "alpha_drop_per_doubling": drop}


def fit_speed_model(report: Mapping[str, Any], *, gamma: int | None = None) -> dict[str, Any]:
    """Per-pool speed-model parameters from ``report`` (module docstring).

    Returns:
        ``{"pools": {"plain": {...}, "spec": {...}}, "points": {...}, "residual_s": {...},
        "warnings": [...]}``; the plain pool has ``t0_s``, ``batch_knee``,
        ``attn_s_per_token``, ``prefill_s_per_token``; the spec pool those plus ``gamma``,
        ``c``, ``alpha_greedy`` or ``alpha_sampled`` (``{"alpha_short", "alpha_knee_tokens",
        "alpha_drop_per_doubling"}``). A parameter the data do not determine is absent.

    Raises:
        FitError: no plain target with points (the base of every other fit).
    """
    warnings: list[str] = []
    plain_t, spec_t = _target(report, "plain"), _target(report, "spec")
    if plain_t is None:
        raise FitError("the report has no plain target: run `specgate loadtest --spec URL --plain URL ...`")
    all_pp = _points(report, plain_t)
    if not all_pp:
        raise FitError("the plain target has no point with a time per output token")
    threshold = _spread_threshold(report)
    pp = _weighed(all_pp, "plain", threshold, warnings)
    if not pp:
        raise FitError("every plain point is bimodal or without a spread to weigh it by: rerun with more "
                       "--repetitions; " + "; ".join(warnings))
    plain, resid_s = _plain_fit(pp, warnings)
    pre = _prefill(pp)
    if pre is not None:
        plain["prefill_s_per_token"] = pre
    resid = {"plain": resid_s}
    out: dict[str, Any] = {"pools": {"plain": plain}, "points": {"plain": pp}, "residual_s": resid,
                           "warnings": warnings}
    if spec_t is None:
        warnings.append("no spec target: only the plain pool fitted")
        return out
    sp = _weighed(_points(report, spec_t), "spec", threshold, warnings)
    g = gamma if gamma is not None else (report.get("speculation") or {}).get("gamma")
    spec: dict[str, Any] = {k: v for k, v in plain.items() if k != "prefill_s_per_token"}
    spre = _prefill(sp)
    if spre is not None:
        spec["prefill_s_per_token"] = spre
    out["pools"]["spec"] = spec
    out["points"]["spec"] = sp
    if g is None:
        warnings.append("gamma unknown (no speculation block, no --gamma): alpha and c not fitted")
        return out
    from loadtests.calibrate import alpha_from_accept_length

    g = int(g)
    spec["gamma"] = g
    with_tau = [p for p in sp if p["tau"]]
    if not with_tau:
        warnings.append("no accept length was scraped from the spec pool: alpha and c not fitted")
        return out
    for p in with_tau:
        p["alpha"] = alpha_from_accept_length(p["tau"], g)
    by_class = {c: [(p["L"], alpha_from_accept_length(p["tau_by_class"][c], g)) for p in sp
                    if c in (p.get("tau_by_class") or {})] for c in ("greedy", "sampled")}
    if not any(by_class.values()):  # no per-request statistics: the gauge, at the workload's temperature
        cls = "sampled" if float((report.get("workload") or {}).get("temperature") or 0) > 0 else "greedy"
        by_class = {cls: [(p["L"], p["alpha"]) for p in with_tau]}
    for cls, rows in by_class.items():
        if rows:
            spec[f"alpha_{cls}"] = alpha_curve(rows)
    for cls in ("greedy", "sampled"):
        if not by_class.get(cls):
            warnings.append(f"alpha_{cls} not measured (no {cls} request reported its accept length; "
                            "`specgate loadtest --sampled-fraction 0.5` measures both classes in one run)")
    t0, knee_b, attn = plain["t0_s"], plain.get("batch_knee", math.inf), plain["attn_s_per_token"]
    cs, ws = [], []
    for p in with_tau:
        t_plain = t0 * (1 + p["b"] / knee_b) + attn * p["L"]
        t_verify = t0 * (1 + p["b"] * (g + 1) / knee_b) + attn * p["L"]
        tau = min(max(float(p["tau"]), 1.0), g + 1.0)
        cs.append((p["tpot"] * tau - t_verify) / (g * t_plain))
        ws.append(p["weight"])
    spec["c"] = min(0.999, max(0.0, _wmedian(cs, ws)))
    return out


def engine_model_from_fit(fit: Mapping[str, Any], base: Any = None) -> Any:
    """An :class:`loadtests.dayshapes.EngineModel` with the fitted parameters over ``base``
    (default :func:`loadtests.dayshapes.default_engine_model`); unfitted ones keep ``base``'s."""
    from dataclasses import replace

    from loadtests.dayshapes import default_engine_model

    base = base or default_engine_model()
    speed = base.speed
    pools = fit.get("pools") or {}
    spec = pools.get("spec") or {}
    plain = pools.get("plain") or {}
    kw: dict[str, Any] = {}
    for k in ("t0_s", "batch_knee", "attn_s_per_token", "kv_read_s_per_token", "prefill_s_per_token"):
        if k in plain:
            kw[k] = plain[k]
    for k in ("gamma", "c"):
        if k in spec:
            kw[k] = spec[k]
    greedy = spec.get("alpha_greedy")
    if greedy:
        kw.update(greedy)
    speed = replace(speed, **kw)
    sampled = spec.get("alpha_sampled")
    alpha_sampled = base.alpha_sampled_short if not sampled else sampled["alpha_short"]
    return replace(base, speed=speed, alpha_sampled_short=alpha_sampled)


def speed_blocks(fit: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each fitted pool's ``speed`` block in the router config's keys (``router.config.tree.SpeedConfig``:
    ``decode_s_per_token``, ``batch_knee``, ``attention_s_per_token``, ``kv_read_s_per_token``
    (0: not fitted, see :func:`fit_speed_model`), ``prefill_s_per_token``; for the speculative
    pool ``accept_length_greedy`` / ``accept_length_sampled``, the
    accept length E[tau] of the fitted alpha at its knee, where measured). A pool without a
    fitted ``batch_knee`` is left out (the config requires it). Keys: ``plain``, ``spec``.
    """
    from drafters.spec_math import expected_tokens

    out: dict[str, dict[str, Any]] = {}
    for role, params in (fit.get("pools") or {}).items():
        if "batch_knee" not in params:
            continue
        block: dict[str, Any] = {"decode_s_per_token": params["t0_s"], "batch_knee": params["batch_knee"],
                                 "attention_s_per_token": params.get("attn_s_per_token", 0.0),
                                 "kv_read_s_per_token": params.get("kv_read_s_per_token", 0.0),
                                 "prefill_s_per_token": params.get("prefill_s_per_token", 0.0)}
        gamma = params.get("gamma")
        for cls in ("greedy", "sampled"):
            alpha = params.get(f"alpha_{cls}")
            if alpha and gamma:
                block[f"accept_length_{cls}"] = expected_tokens(alpha["alpha_short"], int(gamma))
        out[role] = block
    return out
