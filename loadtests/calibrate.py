"""Propose the router's thresholds from a comparison report: where speculation stops paying.

Input: a ``specgate-loadtest`` report (schema 1) measured against a speculative pool (role
``spec``) and a plain pool (role ``plain``), usually with the router too. Output: values for
``routing.long_prompt_tokens`` and ``routing.saturation.enter/exit`` (:mod:`router.config.tree`),
the evidence behind each, and a YAML patch validated with :func:`router.config.tree.parse_config`.

The speedup table
-----------------
Each operating point (bucket, load) gets ``S`` = the median over repetitions of the paired
decode speedup spec/plain (``ratios.spec_vs_plain.decode_speedup.median``; on GPUs,
docs/loadtests.md: 2.33x at concurrency 1 and 8-16K down to 1.16x at concurrency 8 and
80-128K). Where it is missing (the plain pool was not measured there, or every request
failed), the speedup model fills it in from the accept length measured at that point
(``sglang:spec_accept_length``, mean over the run): ``alpha`` solves
``E[tau](alpha, gamma) = accept length`` and ``S = E[tau] / (c * gamma + 1)``
(:mod:`drafters.spec_math`, Leviathan et al. 2023). The model knows nothing of batch
saturation, so model-filled cells are upper bounds at high load; they are marked
``source: "model"``. ``gamma`` and ``c`` come from the command line, else the report's
``speculation`` block, else the router config's speculative pool (``drafter_cost_ratio``,
``engine.speculative_num_draft_tokens - 1`` or ``engine.speculative_num_steps``).

Thresholds (``m`` = ``min_speedup``, default 1.0: "speculation stops paying")
-----------------------------------------------------------------------------
- **long_prompt_tokens**: along the context axis at the lowest load (where speculation pays
  most; saturation handles load). Buckets are ordered by their representative prompt length
  (median server-reported ``prompt_tokens`` of the spec target, else the bucket's geometric
  midpoint ``sqrt(lo * hi)``). At the first bucket ``i`` with ``S_i < m`` after one with
  ``S_{i-1} >= m``, the crossover is interpolated linearly in ``log(length)``:
  ``L* = exp(ln L_{i-1} + (S_{i-1} - m) / (S_{i-1} - S_i) * (ln L_i - ln L_{i-1}))``,
  proposed as ``floor(L*)``; so it always lies between the two buckets' lengths (within one
  bucket of the truth). If every measured bucket pays, the proposal is the top bucket's
  ``hi`` (the longest validated length; docs/operator-guide.md, "The context cap"). If
  none pays, ``lo - 1`` of the first bucket (everything measured goes plain), with a warning.
- **saturation.enter / exit**: along the load axis in the shortest bucket (or the one named
  by ``saturation_bucket``). Load is the per-engine batch the router compares with
  ``enter`` (running + queued of the least-loaded endpoint): closed loop, the concurrency
  divided by the spec target's endpoint count (its ``metrics_urls``); open loop, the spec
  pool's measured mean ``running + queued``. The crossover ``b*`` is interpolated linearly;
  ``enter = max(1, ceil(b*))`` and ``exit = min(enter - 1, floor(enter * (1 - hysteresis)))``
  (hysteresis default 0.25; router.config.tree requires ``exit < enter``). Speculation losing at
  the lowest load gives ``enter = 1, exit = 0`` with a warning; no crossover up to the
  highest load leaves saturation out of the patch (measure higher loads).

Speed model: the evidence also carries per-pool speed-model parameters (t0, batch knee,
attention and prefill s/token, alpha, c, gamma) fitted by :func:`loadtests.speedfit.fit_speed_model`
when the report allows (a plain target; for alpha and c, accept lengths and gamma), and the patch's
comments list them; ``specgate calibrate-split --report`` replays a day with them. That fit weighs
noisy points down, where a threshold below refuses them (:mod:`loadtests.speedfit`).

Noise is not evidence (:mod:`loadtests.evidence`): before either threshold is read, its axis
(the lowest-load row; the saturation bucket's column) is checked. When a measured cell on it
has runs that disagree (spread verdict ``noisy``, ``unsettled`` or ``bimodal``) or the speedup
rises along it by more than the report's spread threshold (not monotone), that threshold is
**not proposed**: the patch leaves it out, and a warning in the patch's comments and in
``calibration.json`` (``warnings``; the axis's ``check`` with each cell's spread and the
suggested ``--repetitions``) says why and what would settle it. Same report, same patch.

A row that dips below ``m`` and rises again within the spread threshold uses the first
crossing and is noted. Every proposal carries its evidence: the cells used, their sources and the
interpolation.

Errors: :class:`CalibrationError` (no spec/plain data, no usable row, a patch the router's
config rejects), :class:`loadtests.report.ReportError` (not a valid report).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from drafters.spec_math import alpha_from_expected_tokens, speedup
from loadtests.evidence import AxisCheck, advice, check_axis
from loadtests.report import load_key, validate_report
from loadtests.stats import DEFAULT_SPREAD_THRESHOLD

__all__ = [
    "Calibration",
    "CalibrationError",
    "Cell",
    "alpha_from_accept_length",
    "calibrate",
    "calibrate_report",
    "merge_patch",
    "speculation_from_config",
    "validate_patch",
]


class CalibrationError(ValueError):
    """The report cannot be calibrated, or the proposed patch fails the router's config checks."""


def alpha_from_accept_length(accept_length: float, gamma: int) -> float:
    """The acceptance rate alpha whose E[tau](alpha, gamma) equals ``accept_length``.

    ``accept_length`` (tokens per verify step, as SGLang reports it) is clamped to
    [1, gamma + 1], the range of E[tau] (a scraped gauge may stray outside it), then inverted
    with :func:`drafters.spec_math.alpha_from_expected_tokens`.

    Raises:
        ValueError: gamma < 1 or a non-finite accept length.
    """
    if not math.isfinite(accept_length):
        raise ValueError(f"accept_length must be finite, got {accept_length!r}")
    return alpha_from_expected_tokens(min(max(float(accept_length), 1.0), gamma + 1.0), gamma)


@dataclass(frozen=True)
class Cell:
    """One operating point of the speedup table.

    Attributes:
        bucket: bucket name; lo, hi: its range (tokens).
        length: representative prompt length (tokens).
        load: nominal load (concurrency or requests/s); engine_load: per-engine batch.
        speedup: S (dimensionless) or None when unknown.
        source: ``measured``, ``model`` or ``missing``.
        accept_length: measured mean accept length (tokens/step) or None.
        alpha: acceptance rate derived from it (model cells) or None.
        spread: the verdict of the speedup's spread over repetitions (measured cells).
        spread_ratio: that spread, max / min of the runs' speedups (measured cells).
        runs: the number of paired runs behind the speedup (measured cells).
        run_min / run_max: the lowest and highest of those runs' speedups (measured cells).
    """

    bucket: str
    lo: int
    hi: int
    length: float
    load: float
    engine_load: float | None
    speedup: float | None
    source: str
    accept_length: float | None = None
    alpha: float | None = None
    spread: str | None = None
    spread_ratio: float | None = None
    runs: int | None = None
    run_min: float | None = None
    run_max: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Calibration:
    """Proposed thresholds and their evidence.

    Attributes:
        long_prompt_tokens: proposed ``routing.long_prompt_tokens`` (tokens) or None.
        saturation_enter / saturation_exit: proposed ``routing.saturation`` (requests) or None.
        evidence: ``{"speed_model": {...}, "long_prompt_tokens": {...},
            "saturation": {...}, "cells": [...], "params": {...}, "warnings": [...]}``
            (``speed_model``: :func:`loadtests.speedfit.fit_speed_model`, per-pool parameters
            and its own warnings; ``pools`` empty when it could not fit).
        pool_names: the config's pool name per role (``spec``, ``plain``), for the speed blocks.
    """

    long_prompt_tokens: int | None
    saturation_enter: int | None
    saturation_exit: int | None
    evidence: dict[str, Any] = field(default_factory=dict)
    pool_names: Mapping[str, str] = field(default_factory=lambda: {"spec": "spec", "plain": "plain"})

    def patch(self) -> dict[str, Any]:
        """The YAML patch as a mapping: ``{"routing": {...}, "pools": [{"name", "speed"}]}``
        with only the proposed keys: each fitted pool's complete ``speed`` block
        (:func:`loadtests.speedfit.speed_blocks`), merged by name into the config's pool."""
        from loadtests.speedfit import speed_blocks

        out: dict[str, Any] = {}
        routing: dict[str, Any] = {}
        if self.long_prompt_tokens is not None:
            routing["long_prompt_tokens"] = self.long_prompt_tokens
        if self.saturation_enter is not None and self.saturation_exit is not None:
            routing["saturation"] = {"enter": self.saturation_enter, "exit": self.saturation_exit}
        if routing:
            out["routing"] = routing
        blocks = speed_blocks(self.evidence.get("speed_model") or {})
        pools = [{"name": self.pool_names[role], "speed": {k: _rounded(v) for k, v in block.items()}}
                 for role, block in blocks.items() if role in self.pool_names and _complete(role, block)]
        if pools:
            out["pools"] = pools
        return out

    def patch_yaml(self, source: str = "") -> str:
        """The patch as YAML, headed by comments that state the evidence."""
        lines = [f"# specgate calibrate: routing thresholds proposed from {source or 'a load-test report'}"]
        for key in ("long_prompt_tokens", "saturation"):
            ev = self.evidence.get(key) or {}
            if ev.get("summary"):
                lines.append(f"# {key}: {ev['summary']}")
        for w in self.evidence.get("warnings", []):
            lines.append(f"# warning: {w}")
        from loadtests.speedfit import speed_blocks

        blocks = speed_blocks(self.evidence.get("speed_model") or {})
        if blocks:
            lines.append("# pools[].speed: each pool's speed model (loadtests.speedfit; seconds, tokens), the "
                         "prior its live fit starts from (merged into the pool of that name)")
            if "spec" in blocks and not _complete("spec", blocks["spec"]):
                lines.append("# warning: the speculative pool's block is left out, it lacks an accept length: run "
                             "the load test with --sampled-fraction 0.5 to measure both temperature classes")
        lines.append("# Merge under the router config's top level; `specgate config check` validates it.")
        body = yaml.safe_dump(self.patch(), sort_keys=False) if self.patch() else "{}\n"
        return "\n".join(lines) + "\n" + body


def _rounded(value: float) -> float:
    """A fitted speed-block value as the patch writes it: 6 significant digits, and a
    per-token time below a nanosecond (a least-squares zero such as 5e-20) as 0."""
    return 0.0 if abs(value) < 1e-9 else float(f"{value:.6g}")


def speculation_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"gamma", "drafter_cost_ratio"}`` of the first speculative pool of a router config
    mapping (values None when absent)."""
    for pool in config.get("pools") or []:
        if isinstance(pool, Mapping) and pool.get("speculative"):
            engine = pool.get("engine") or {}
            gamma = None
            if engine.get("speculative_num_draft_tokens"):
                gamma = int(engine["speculative_num_draft_tokens"]) - 1 or None
            if gamma is None and engine.get("speculative_num_steps"):
                gamma = int(engine["speculative_num_steps"])
            return {"gamma": gamma, "drafter_cost_ratio": float(pool.get("drafter_cost_ratio", 0.05))}
    return {"gamma": None, "drafter_cost_ratio": None}


def _role(report: Mapping[str, Any], role: str) -> Mapping[str, Any] | None:
    for t in report["targets"]:
        if t.get("role") == role:
            return t
    return None


def _cells(report: Mapping[str, Any], gamma: int | None, c: float | None) -> list[Cell]:
    spec_t = _role(report, "spec")
    plain_t = _role(report, "plain")
    if spec_t is None and plain_t is None:
        raise CalibrationError("the report has neither a spec nor a plain target: run "
                               "`specgate loadtest --spec URL --plain URL ...`")
    endpoints = max(1, len(spec_t.get("metrics_urls") or ())) if spec_t else 1
    closed = report["grid"]["load_kind"] == "concurrency"
    cells = []
    for p in report["points"]:
        tp = p["targets"].get(spec_t["name"]) if spec_t else None
        ratio = ((p.get("ratios") or {}).get("spec_vs_plain") or {}).get("decode_speedup") or {}
        s = ratio.get("median")
        acc = None
        engine_load = None
        length = math.sqrt(p["bucket_lo"] * p["bucket_hi"])
        if tp:
            acc = ((tp.get("pool_metrics") or {}).get("accept_length") or {}).get("mean")
            pt = tp.get("prompt_tokens")
            if pt and pt.get("p50"):
                length = float(pt["p50"])
            per_pool = (tp.get("pool_metrics") or {}).get("per_pool") or {}
            loads = [(v.get("engine_load") or {}).get("mean") for v in per_pool.values()]
            loads = [x for x in loads if x is not None]
            if not closed and loads:
                engine_load = sum(loads) / len(loads)
        if closed:
            engine_load = p["load"] / endpoints
        if s is not None:
            sp = ratio.get("spread") or {}
            cells.append(Cell(p["bucket"], p["bucket_lo"], p["bucket_hi"], length, p["load"],
                              engine_load, float(s), "measured", acc, spread=sp.get("verdict"),
                              spread_ratio=sp.get("spread"), runs=sp.get("n"),
                              run_min=ratio.get("min"), run_max=ratio.get("max")))
        elif acc is not None and gamma is not None and c is not None:
            alpha = alpha_from_accept_length(acc, gamma)
            cells.append(Cell(p["bucket"], p["bucket_lo"], p["bucket_hi"], length, p["load"],
                              engine_load, speedup(alpha, gamma, c), "model", acc, alpha))
        else:
            cells.append(Cell(p["bucket"], p["bucket_lo"], p["bucket_hi"], length, p["load"],
                              engine_load, None, "missing", acc))
    return cells


def _crossing(xs: Sequence[float], ss: Sequence[float], m: float, log: bool) -> dict[str, Any]:
    """First crossing of S below m along xs (ascending): kind crossed/never_pays/always_pays."""
    for i, s in enumerate(ss):
        if s < m:
            if i == 0:
                return {"kind": "never_pays", "index": 0}
            x0, x1, s0, s1 = xs[i - 1], xs[i], ss[i - 1], s
            frac = (s0 - m) / (s0 - s1)
            if log:
                x = math.exp(math.log(x0) + frac * (math.log(x1) - math.log(x0)))
            else:
                x = x0 + frac * (x1 - x0)
            later = list(ss[i + 1:])
            return {"kind": "crossed", "index": i, "x": x, "between": [x0, x1], "speedups": [s0, s1],
                    "non_monotone": any(v >= m for v in later)}
    return {"kind": "always_pays"}


def _check(cells: Sequence[Cell], threshold: float, axis: str, m: float) -> AxisCheck:
    return check_axis([{"label": f"{x.bucket} x {load_key(x.load)}", "speedup": x.speedup,
                        "source": x.source, "verdict": x.spread, "spread": x.spread_ratio,
                        "runs": x.runs, "min": x.run_min, "max": x.run_max} for x in cells],
                      threshold=threshold, axis=axis, min_speedup=m)


def _refusal(key: str, check: AxisCheck, cells: Sequence[Cell]) -> str:
    bimodal = any(x.spread == "bimodal" for x in cells)
    return (f"{key} not proposed, the evidence is noise: " + "; ".join(check.problems)
            + f". To settle it: {advice(check, bimodal=bimodal)}")


def calibrate(
    report: Mapping[str, Any],
    *,
    min_speedup: float = 1.0,
    hysteresis: float = 0.25,
    gamma: int | None = None,
    drafter_cost_ratio: float | None = None,
    saturation_bucket: str | None = None,
) -> Calibration:
    """Propose thresholds from ``report`` (module docstring).

    Args:
        report: a schema-1 load-test report with spec and plain (or accept-length) data.
        min_speedup: S below which speculation "stops paying" (dimensionless, > 0).
        hysteresis: fraction in [0, 1) that ``exit`` sits below ``enter``.
        gamma, drafter_cost_ratio: speedup-model parameters (override the report's).
        saturation_bucket: bucket whose load axis sets saturation (default: the shortest).

    Raises:
        ReportError: invalid report. CalibrationError: nothing to calibrate from, or bad args.
    """
    validate_report(report)
    if not min_speedup > 0:
        raise CalibrationError("min_speedup must be > 0")
    if not 0 <= hysteresis < 1:
        raise CalibrationError("hysteresis must be in [0, 1)")
    spec_block = report.get("speculation") or {}
    g = gamma if gamma is not None else spec_block.get("gamma")
    c = drafter_cost_ratio if drafter_cost_ratio is not None else spec_block.get("drafter_cost_ratio")
    cells = _cells(report, g, c)
    threshold = float((report.get("workload") or {}).get("spread_threshold") or DEFAULT_SPREAD_THRESHOLD)
    warnings: list[str] = []
    known = [x for x in cells if x.speedup is not None]
    if not known:
        raise CalibrationError("no operating point has a measured or modelled speedup (need spec and "
                               "plain runs, or accept length with --gamma and --drafter-cost)")
    if any(x.source == "model" for x in cells):
        warnings.append("some cells use the speedup model (no batch effects): upper bounds at high load")

    # ---------------------------------------------------------------- long_prompt_tokens
    loads = sorted({x.load for x in known})
    long_ev: dict[str, Any] = {"rows": {}}
    long_value: int | None = None
    chosen_load = None
    for load in loads:
        row = sorted((x for x in known if x.load == load), key=lambda x: x.length)
        cr = _crossing([x.length for x in row], [x.speedup for x in row], min_speedup, log=True)
        cr["cells"] = [(x.bucket, round(x.length, 1), round(x.speedup, 4), x.source) for x in row]
        long_ev["rows"][load_key(load)] = cr
        if chosen_load is None and len(row) >= 2:
            chosen_load = load
    if chosen_load is None:
        long_ev["summary"] = "fewer than two buckets with a known speedup at any load: not proposed"
        warnings.append("long_prompt_tokens not proposed: measure at least two buckets")
    else:
        cr = long_ev["rows"][load_key(chosen_load)]
        row = sorted((x for x in known if x.load == chosen_load), key=lambda x: x.length)
        long_ev["load"] = chosen_load
        check = _check(row, threshold, f"along the context at load {load_key(chosen_load)}", min_speedup)
        long_ev["check"] = check.as_dict()
        warnings += [f"long_prompt_tokens: {n}: used" for n in check.notes]
        if not check.ok:
            long_ev["summary"] = (f"not proposed: the speedups along the context at load "
                                  f"{load_key(chosen_load)} are noise ({'; '.join(check.problems)})")
            warnings.append(_refusal("long_prompt_tokens", check, row))
        elif cr["kind"] == "crossed":
            long_value = max(1, math.floor(cr["x"]))
            a, b = row[cr["index"] - 1], row[cr["index"]]
            long_ev["summary"] = (
                f"at load {load_key(chosen_load)} the speedup falls below {min_speedup:g}x between "
                f"{a.bucket} ({a.speedup:.2f}x at {a.length:.0f} tokens) and {b.bucket} "
                f"({b.speedup:.2f}x at {b.length:.0f} tokens); log-interpolated crossover "
                f"{cr['x']:.0f} tokens")
            if cr["non_monotone"]:
                warnings.append(f"the speedup at load {load_key(chosen_load)} rises again past "
                                f"{b.bucket}: the first crossing is used")
        elif cr["kind"] == "always_pays":
            long_value = max(x.hi for x in row)
            long_ev["summary"] = (f"speculation paid at every measured length at load "
                                  f"{load_key(chosen_load)}: set to the longest measured prompt "
                                  f"({long_value} tokens, the validated range)")
        else:
            long_value = max(1, row[0].lo - 1)
            long_ev["summary"] = (f"speculation did not pay even in {row[0].bucket} at load "
                                  f"{load_key(chosen_load)} ({row[0].speedup:.2f}x)")
            warnings.append("speculation does not pay in the shortest bucket: consider no "
                            "speculative pool, or measure shorter prompts")
        long_ev["value"] = long_value

    # ---------------------------------------------------------------- saturation
    sat_ev: dict[str, Any] = {"columns": {}}
    enter = exit_ = None
    by_bucket: dict[str, list[Cell]] = {}
    for x in known:
        if x.engine_load is not None:
            by_bucket.setdefault(x.bucket, []).append(x)
    order = [b for _, b in sorted({(min(c.length for c in v), k) for k, v in by_bucket.items()})]
    for name in order:
        col = sorted(by_bucket[name], key=lambda x: x.engine_load or 0.0)
        cr = _crossing([x.engine_load or 0.0 for x in col], [x.speedup for x in col], min_speedup,
                       log=False)
        cr["cells"] = [(load_key(x.load), round(x.engine_load or 0.0, 3), round(x.speedup, 4), x.source)
                       for x in col]
        sat_ev["columns"][name] = cr
    if saturation_bucket is not None and saturation_bucket not in by_bucket:
        raise CalibrationError(f"saturation bucket {saturation_bucket!r} has no known speedup; "
                               f"buckets: {order}")
    sat_name = saturation_bucket or (order[0] if order else None)
    if sat_name is None:
        sat_ev["summary"] = "no bucket with a known speedup and load: not proposed"
    else:
        cr = sat_ev["columns"][sat_name]
        col = sorted(by_bucket[sat_name], key=lambda x: x.engine_load or 0.0)
        sat_ev["bucket"] = sat_name
        check = _check(col, threshold, f"along the load in {sat_name}", min_speedup)
        sat_ev["check"] = check.as_dict()
        warnings += [f"saturation: {n}: used" for n in check.notes]
        if not check.ok:
            sat_ev["summary"] = (f"not proposed: the speedups along the load in {sat_name} are noise "
                                 f"({'; '.join(check.problems)})")
            warnings.append(_refusal("saturation", check, col))
        elif len(col) < 2 and cr["kind"] != "never_pays":
            sat_ev["summary"] = f"only one load measured in {sat_name}: not proposed"
            warnings.append("saturation not proposed: measure at least two loads")
        elif cr["kind"] == "crossed":
            enter = max(1, math.ceil(cr["x"] - 1e-9))
            a, b = col[cr["index"] - 1], col[cr["index"]]
            sat_ev["summary"] = (
                f"in {sat_name} the speedup falls below {min_speedup:g}x between engine load "
                f"{a.engine_load:g} ({a.speedup:.2f}x) and {b.engine_load:g} ({b.speedup:.2f}x); "
                f"interpolated crossover {cr['x']:.2f} requests")
        elif cr["kind"] == "never_pays":
            enter = 1
            sat_ev["summary"] = (f"in {sat_name} speculation did not pay even at engine load "
                                 f"{col[0].engine_load:g} ({col[0].speedup:.2f}x)")
            warnings.append(f"speculation loses at the lowest measured load in {sat_name}")
        else:
            sat_ev["summary"] = (f"in {sat_name} speculation paid up to engine load "
                                 f"{col[-1].engine_load:g}: no crossover measured, saturation not "
                                 "proposed (measure higher loads)")
        if enter is not None:
            exit_ = max(0, min(enter - 1, math.floor(enter * (1 - hysteresis))))
            sat_ev["enter"], sat_ev["exit"] = enter, exit_
    from loadtests.speedfit import FitError, fit_speed_model

    try:
        speed_model = fit_speed_model(report, gamma=g)
    except FitError as exc:   # the thresholds do not need it: say why in its own evidence
        speed_model = {"pools": {}, "warnings": [f"not fitted: {exc}"]}
    return Calibration(long_value, enter, exit_, {
        "speed_model": speed_model,
        "long_prompt_tokens": long_ev,
        "saturation": sat_ev,
        "cells": [x.as_dict() for x in cells],
        "params": {"min_speedup": min_speedup, "hysteresis": hysteresis, "gamma": g,
                   "drafter_cost_ratio": c, "load_kind": report["grid"]["load_kind"]},
        "warnings": warnings,
    })


# --------------------------------------------------------------------------- patch validation
def merge_patch(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``patch`` into a copy of ``base``: mappings merge; a list of named mappings
    (``pools``) merges item by item by ``name`` (a name the base lacks is left out); other
    values replace."""
    out = copy.deepcopy(dict(base))
    for k, v in patch.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_patch(out[k], v)
        elif _named(v) and _named(out.get(k)):
            by_name = {item["name"]: item for item in v}
            out[k] = [merge_patch(item, by_name[item["name"]]) if item["name"] in by_name else item
                      for item in out[k]]
        else:
            out[k] = copy.deepcopy(v)
    return out


def _complete(role: str, block: Mapping[str, Any]) -> bool:
    """A speculative pool's block needs both accept lengths (``router.config.tree.SpeedConfig``)."""
    return role != "spec" or {"accept_length_greedy", "accept_length_sampled"} <= set(block)


def _named(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(i, Mapping) and "name" in i for i in v)


def pool_names(config: Mapping[str, Any] | None) -> dict[str, str]:
    """The first speculative and the first plain pool's names of a config mapping, by role
    (``spec``, ``plain``; the skeleton's names without a config)."""
    names = {"spec": "spec", "plain": "plain"}
    if config is None:
        return names
    found: dict[str, str] = {}
    for p in config.get("pools") or ():
        if isinstance(p, Mapping) and isinstance(p.get("name"), str):
            found.setdefault("spec" if p.get("speculative") else "plain", p["name"])
    return found


def _skeleton(cal: Calibration) -> dict[str, Any]:
    cap = max(4096, 2 * (cal.long_prompt_tokens or 1))
    return {
        "model": {"name": "calibration-check", "tokenizer": "/nonexistent-tokenizer"},
        "limits": {"max_context_tokens": cap},
        "pools": [{"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:1"]},
                  {"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:2"]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 16, "exit": 12}},
    }


def validate_patch(cal: Calibration, base_config: Mapping[str, Any] | None = None,
                   base_dir: Path | None = None) -> tuple[dict[str, Any], Any]:
    """Merge the patch into ``base_config`` (or a minimal skeleton) and validate it.

    Returns:
        ``(merged mapping, router.config.tree.Config)``.

    Raises:
        CalibrationError: the router's config loader rejects the merged config.
    """
    from router import ConfigError, parse_config

    base = base_config if base_config is not None else _skeleton(cal)
    merged = merge_patch(base, cal.patch())
    try:
        cfg = parse_config(merged, base_dir=base_dir)
    except ConfigError as exc:
        raise CalibrationError(f"the patched config is invalid:\n{exc}") from None
    return merged, cfg


# --------------------------------------------------------------------------- files
def calibrate_report(report_path: Path, *, config: Path | None = None, out: Path | None = None,
                     evidence: Path | None = None, merged_config: Path | None = None,
                     min_speedup: float = 1.0, hysteresis: float = 0.25, gamma: int | None = None,
                     drafter_cost: float | None = None,
                     saturation_bucket: str | None = None) -> tuple[Calibration, dict[str, Any], str, list[Path]]:
    """``specgate calibrate``: propose thresholds from ``report_path`` and validate the patch.

    ``gamma``/``drafter_cost`` default to the report's, else ``config``'s speculative pool.
    The patch is merged into ``config`` (paths resolved against its directory, so the merged
    file can live anywhere) or into a skeleton, and validated with the router's loader.

    Returns:
        ``(Calibration, merged config mapping, patch YAML text, paths written)``: the patch
        (``out``, default ``calibration.yaml`` next to the report), the evidence JSON
        (``evidence``, default the patch path with ``.json``) and ``merged_config`` if given.

    Raises:
        loadtests.report.ReportError: not a valid report.
        loadtests.calibrate.CalibrationError: nothing to calibrate, unreadable config, or a
            patch the router's config loader rejects.
    """
    from loadtests.report import load_report
    from router import resolve_paths  # the loader's own path rules

    report = load_report(report_path)
    base = None
    base_dir = None
    if config is not None:
        try:
            base = yaml.safe_load(Path(config).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CalibrationError(f"cannot read config {config}: {exc}") from None
        if not isinstance(base, dict):
            raise CalibrationError(f"config {config} must be a mapping")
        base_dir = Path(config).resolve().parent
        base = resolve_paths(base, base_dir)
        from_cfg = speculation_from_config(base)
        spec_block = report.get("speculation") or {}
        if gamma is None and spec_block.get("gamma") is None:
            gamma = from_cfg["gamma"]
        if drafter_cost is None and spec_block.get("drafter_cost_ratio") is None:
            drafter_cost = from_cfg["drafter_cost_ratio"]
    cal = calibrate(report, min_speedup=min_speedup, hysteresis=hysteresis, gamma=gamma,
                    drafter_cost_ratio=drafter_cost, saturation_bucket=saturation_bucket)
    cal = replace(cal, pool_names=pool_names(base))
    merged, _cfg = validate_patch(cal, base, base_dir)
    out = Path(out) if out else Path(report_path).with_name("calibration.yaml")
    text = cal.patch_yaml(str(report_path))
    out.write_text(text)
    evidence = Path(evidence) if evidence else out.with_suffix(".json")
    evidence.write_text(json.dumps({"patch": cal.patch(), "evidence": cal.evidence}, indent=2,
                                   default=str) + "\n")
    written = [out, evidence]
    if merged_config:
        Path(merged_config).write_text(yaml.safe_dump(merged, sort_keys=False))
        written.append(Path(merged_config))
    return cal, merged, text, written
