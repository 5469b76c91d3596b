"""The load-test report: aggregation, the versioned JSON schema, the Markdown summary.

Schema ``specgate-loadtest`` version 1 (``report["schema"] == {"name": "specgate-loadtest",
"version": 1}``); a reader must refuse another name or a larger major version
(:func:`validate_report`). Units: every ``*_s`` is seconds, ``*_tps`` tokens per second,
``*tokens*`` tokens, loads are concurrency (closed loop) or requests/s (open loop). Top level:

- ``created_at`` (ISO 8601 UTC), ``tool`` ``{"name", "version"}``;
- ``workload``: the resolved :class:`~loadtests.workload.Workload` (``Workload.from_dict``
  reads it back), ``model``: the model name sent;
- ``targets``: ``[{"name", "url", "role", "metrics_urls"}]``;
- ``speculation``: ``{"gamma", "drafter_cost_ratio"}`` given by the operator (may be null),
  used by ``specgate calibrate`` for the speedup model;
- ``grid``: ``{"buckets": [{"name","lo","hi"}], "loads": [...], "load_kind":
  "concurrency"|"rate_rps"}``;
- ``counts``: ``{"planned", "sent", "warmup", "measured", "ok", "not_sent"}`` requests;
- ``stopped``: ``{"reason": "completed"|"time_limit", "elapsed_s"}``;
- ``points``: one per (bucket, load), each ``{"bucket", "bucket_lo", "bucket_hi", "load",
  "targets": {name: TargetPoint}, "ratios": {"<a>_vs_<b>": Ratio}}``;
- ``tables``: ``{"<a>_vs_<b>" | "<target>": {"metric", "loads", "rows": [{"bucket",
  "values": {load: number|null}}]}}``, the operating-point grid of the headline numbers
  (docs/loadtests.md).

``TargetPoint`` (measured runs only; warm-ups are counted in ``counts`` and dropped):
``requests`` ``{"planned","sent","ok"}``, ``errors_by_status`` (HTTP status or error kind ->
count), ``ttft_s``/``itl_s``/``tpot_s``/``e2e_s``/``decode_tps_per_request``/
``output_tps_per_request``/``prompt_tokens``/``output_tokens`` as
``{"n","mean","min","p50","p90","p99","max"}`` pooled over the measured runs' requests (null
when empty), ``output_tps_total`` ``{"per_run", "median", "min", "max"}``, ``pool_metrics``
(see :func:`loadtests.sampler.summarize_samples`), ``routed`` and ``reasons`` (router
headers -> count), ``runs`` (one summary per measured run, in repetition order) and
``spread``: the :class:`~loadtests.stats.SpreadVerdict` of the runs' median decode tokens/s,
whose ``bimodal`` flag marks a spread that did not shrink with more runs (docs/loadtests.md).

``Ratio`` (target ``a`` over target ``b``, paired by repetition): ``decode_speedup``
(a's median decode tokens/s over b's: the speedup of docs/loadtests.md), ``e2e_speedup``
(b's median end-to-end latency over a's) and ``throughput_ratio`` (total output tokens/s),
each ``{"median", "min", "max", "per_rep", "spread"}``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loadtests.client import RequestResult, error_key
from loadtests.evidence import untrusted
from loadtests.runner import LoadTest, RunRecord
from loadtests.sampler import summarize_samples
from loadtests.stats import percentile, spread_verdict, summarize

__all__ = [
    "RATIO_PAIRS",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "ReportError",
    "build_report",
    "decision_table",
    "load_report",
    "render_markdown",
    "sanitize",
    "spec_share",
    "validate_report",
    "write_report",
]

SCHEMA_NAME = "specgate-loadtest"
SCHEMA_VERSION = 1

#: Ratios reported when both roles are present: (numerator role, denominator role).
RATIO_PAIRS: tuple[tuple[str, str], ...] = (("spec", "plain"), ("router", "plain"), ("router", "spec"))


class ReportError(ValueError):
    """A report file is unreadable, of another schema, or misses required fields."""


def _median(xs: Sequence[float]) -> float | None:
    return percentile(xs, 50) if xs else None


def load_key(load: float) -> str:
    """A load as a JSON key: ``4.0`` -> ``"4"``, ``0.5`` -> ``"0.5"``."""
    return f"{load:g}"


def _run_summary(rec: RunRecord) -> dict[str, Any]:
    rs = rec.results
    ok = [r for r in rs if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    decode = [r.decode_tps for r in ok if r.decode_tps is not None]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    pm = summarize_samples(rec.samples)
    return {
        "rep": rec.plan.rep,
        "requests": rec.plan.n,
        "sent": len(rs),
        "ok": len(ok),
        "errors": dict(sorted(Counter(error_key(r) for r in rs if not r.ok).items())),
        "duration_s": rec.duration_s,
        "output_tokens": out_tokens,
        "output_tps_total": out_tokens / rec.duration_s if rec.duration_s > 0 else None,
        "decode_tps_p50": _median(decode),
        "e2e_s_p50": _median(e2e),
        "ttft_s_p50": _median(ttft),
        "accept_length_mean": (pm["accept_length"] or {}).get("mean"),
        "engine_load_mean": (pm["engine_load"] or {}).get("mean"),
        "queue_depth_max": (pm["queue_depth"] or {}).get("max"),
        "late_arrivals": len(rec.late_s),
        "metrics_failures": rec.sampler_failures,
    }


def _target_point(records: Sequence[RunRecord], threshold: float) -> dict[str, Any]:
    records = sorted(records, key=lambda r: r.plan.rep)
    results: list[RequestResult] = [r for rec in records for r in rec.results]
    ok = [r for r in results if r.ok]
    runs = [_run_summary(rec) for rec in records]
    per_run_decode = [run["decode_tps_p50"] for run in runs if run["decode_tps_p50"]]
    totals = [run["output_tps_total"] for run in runs if run["output_tps_total"] is not None]

    def s(values: Iterable[float | None]) -> dict[str, Any] | None:
        return summarize(v for v in values if v is not None)

    return {
        "requests": {"planned": sum(rec.plan.n for rec in records), "sent": len(results),
                     "ok": len(ok)},
        "errors_by_status": dict(sorted(Counter(error_key(r) for r in results if not r.ok).items())),
        "status_counts": dict(sorted(Counter(str(r.status) for r in results).items())),
        "ttft_s": s(r.ttft_s for r in ok),
        "itl_s": s(x for r in ok for x in r.itl_s),
        "tpot_s": s(r.tpot_s for r in ok),
        "e2e_s": s(r.e2e_s for r in ok),
        "decode_tps_per_request": s(r.decode_tps for r in ok),
        "output_tps_per_request": s(r.output_tps for r in ok),
        "prompt_tokens": s(float(r.prompt_tokens) if r.prompt_tokens is not None else None for r in ok),
        "prompt_tokens_counted": s(float(r.prompt_tokens_counted) for r in ok),
        "output_tokens": s(float(r.output_tokens) for r in ok),
        "output_tps_total": {"per_run": totals, "median": _median(totals),
                             "min": min(totals) if totals else None,
                             "max": max(totals) if totals else None},
        "pool_metrics": summarize_samples([x for rec in records for x in rec.samples]),
        # per-request accept length (SGLang's spec_tokens_details) per temperature class
        "accept_length_by_class": {cls: s(r.accept_length for r in rs) for cls, rs in (
            ("greedy", [r for r in ok if r.temperature == 0]), ("sampled", [r for r in ok if (r.temperature or 0) > 0]))
            if any(r.accept_length for r in rs)},
        "routed": dict(sorted(Counter(r.pool for r in ok if r.pool).items())),
        "reasons": dict(sorted(Counter(r.reason for r in ok if r.reason).items())),
        "by_task": {task: {"n": len(rt), "decode_tps_p50": _median([r.decode_tps for r in rt
                                                                    if r.decode_tps is not None])}
                    for task in sorted({r.task for r in ok})
                    for rt in [[r for r in ok if r.task == task]]},
        "runs": runs,
        "spread": {"metric": "decode_tps_p50",
                   **spread_verdict(per_run_decode, threshold).as_dict()} if per_run_decode else None,
    }


def _ratio_block(per_rep: list[float], threshold: float) -> dict[str, Any] | None:
    if not per_rep:
        return None
    return {"median": _median(per_rep), "min": min(per_rep), "max": max(per_rep), "per_rep": per_rep,
            "spread": spread_verdict(per_rep, threshold).as_dict()}


def _ratios(tp: Mapping[str, dict[str, Any]], roles: Mapping[str, str], threshold: float) -> dict[str, Any]:
    by_role = {role: name for name, role in roles.items()}
    out: dict[str, Any] = {}
    for a_role, b_role in RATIO_PAIRS:
        if a_role not in by_role or b_role not in by_role:
            continue
        a, b = tp[by_role[a_role]], tp[by_role[b_role]]
        runs_a = {r["rep"]: r for r in a["runs"]}
        runs_b = {r["rep"]: r for r in b["runs"]}
        dec, e2e, thr = [], [], []
        for rep in sorted(set(runs_a) & set(runs_b)):
            ra, rb = runs_a[rep], runs_b[rep]
            if ra["decode_tps_p50"] and rb["decode_tps_p50"]:
                dec.append(ra["decode_tps_p50"] / rb["decode_tps_p50"])
            if ra["e2e_s_p50"] and rb["e2e_s_p50"]:
                e2e.append(rb["e2e_s_p50"] / ra["e2e_s_p50"])
            if ra["output_tps_total"] and rb["output_tps_total"]:
                thr.append(ra["output_tps_total"] / rb["output_tps_total"])
        out[f"{a_role}_vs_{b_role}"] = {
            "decode_speedup": _ratio_block(dec, threshold),
            "e2e_speedup": _ratio_block(e2e, threshold),
            "throughput_ratio": _ratio_block(thr, threshold),
        }
    return out


def _tables(points: list[dict[str, Any]], buckets: list[dict[str, Any]], loads: list[float],
            target_names: list[str]) -> dict[str, Any]:
    tables: dict[str, Any] = {}
    keys = [load_key(x) for x in loads]
    ratio_names = sorted({k for p in points for k in p["ratios"]})
    for name in ratio_names:
        rows = []
        for b in buckets:
            values: dict[str, Any] = {}
            for p in points:
                if p["bucket"] == b["name"]:
                    block = (p["ratios"].get(name) or {}).get("decode_speedup")
                    values[load_key(p["load"])] = None if block is None else block["median"]
            rows.append({"bucket": b["name"], "values": {k: values.get(k) for k in keys}})
        tables[name] = {"metric": "decode_speedup", "loads": keys, "rows": rows}
    for t in target_names:
        rows = []
        for b in buckets:
            values = {}
            for p in points:
                if p["bucket"] == b["name"] and t in p["targets"]:
                    d = p["targets"][t]["decode_tps_per_request"]
                    values[load_key(p["load"])] = None if d is None else d["p50"]
            rows.append({"bucket": b["name"], "values": {k: values.get(k) for k in keys}})
        tables[t] = {"metric": "decode_tps_per_request_p50", "loads": keys, "rows": rows}
    return tables


def _tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specgate")
    except PackageNotFoundError:
        return "unknown"


def build_report(test: LoadTest, *, speculation: Mapping[str, Any] | None = None,
                 version: str | None = None) -> dict[str, Any]:
    """Aggregate a finished :class:`LoadTest` into the schema-1 report (module docstring).

    ``version`` is the tool version recorded (default: the installed specgate's).
    """
    w = test.workload
    threshold = w.spread_threshold
    roles = {t.name: t.role for t in test.targets}
    points = []
    point_ids = sorted({rec.plan.point for rec in test.records})
    for pid in point_ids:
        recs = [r for r in test.records if r.plan.point == pid]
        plan = recs[0].plan
        tp = {}
        for t in test.targets:
            measured = [r for r in recs if r.plan.target.name == t.name and r.plan.phase == "measure"]
            tp[t.name] = _target_point(measured, threshold)
        points.append({
            "bucket": plan.bucket.name, "bucket_lo": plan.bucket.lo, "bucket_hi": plan.bucket.hi,
            "load": plan.load, "targets": tp, "ratios": _ratios(tp, roles, threshold),
        })
    all_results = [r for rec in test.records for r in rec.results]
    counts = {
        "planned": sum(rec.plan.n for rec in test.records),
        "sent": len(all_results),
        "warmup": sum(len(rec.results) for rec in test.records if rec.plan.phase == "warmup"),
        "measured": sum(len(rec.results) for rec in test.records if rec.plan.phase == "measure"),
        "ok": sum(1 for r in all_results if r.ok),
        "not_sent": sum(rec.not_sent for rec in test.records),
    }
    buckets = [b.as_dict() for b in w.buckets]
    report = {
        "schema": {"name": SCHEMA_NAME, "version": SCHEMA_VERSION},
        "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "tool": {"name": "specgate", "version": version or _tool_version()},
        "model": test.model,
        "workload": w.as_dict(),
        "targets": [t.as_dict() for t in test.targets],
        "speculation": dict(speculation) if speculation else {"gamma": None, "drafter_cost_ratio": None},
        "grid": {"buckets": buckets, "loads": list(w.loads),
                 "load_kind": "concurrency" if w.mode == "closed" else "rate_rps"},
        "counts": counts,
        "stopped": {"reason": test.stop_reason, "elapsed_s": test.elapsed_s},
        "points": points,
    }
    report["tables"] = _tables(points, buckets, list(w.loads), [t.name for t in test.targets])
    return sanitize(report)


def sanitize(obj: Any) -> Any:
    """A deep copy with ``inf``/``nan`` floats replaced by None and tuples by lists (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


_TOP_KEYS = ("schema", "created_at", "workload", "targets", "grid", "counts", "stopped", "points",
             "tables", "speculation")
_POINT_KEYS = ("bucket", "bucket_lo", "bucket_hi", "load", "targets", "ratios")
_TARGET_POINT_KEYS = ("requests", "errors_by_status", "ttft_s", "itl_s", "e2e_s",
                      "decode_tps_per_request", "output_tps_per_request", "output_tps_total",
                      "pool_metrics", "runs", "spread")


def validate_report(report: Any) -> None:
    """Check a report's schema name, version and required fields.

    Raises:
        ReportError: naming the first problem found.
    """
    if not isinstance(report, Mapping):
        raise ReportError("a report must be a JSON object")
    schema = report.get("schema")
    if not isinstance(schema, Mapping) or schema.get("name") != SCHEMA_NAME:
        raise ReportError(f"not a {SCHEMA_NAME} report (schema: {schema!r})")
    version = schema.get("version")
    if not isinstance(version, int) or version < 1 or version > SCHEMA_VERSION:
        raise ReportError(f"unsupported {SCHEMA_NAME} schema version {version!r} "
                          f"(this reader knows 1..{SCHEMA_VERSION})")
    for key in _TOP_KEYS:
        if key not in report:
            raise ReportError(f"report misses {key!r}")
    grid = report["grid"]
    if not isinstance(grid, Mapping) or not {"buckets", "loads", "load_kind"} <= set(grid):
        raise ReportError("report grid needs buckets, loads and load_kind")
    if not isinstance(report["points"], list):
        raise ReportError("report points must be a list")
    for i, p in enumerate(report["points"]):
        for key in _POINT_KEYS:
            if key not in p:
                raise ReportError(f"points[{i}] misses {key!r}")
        for name, tp in p["targets"].items():
            for key in _TARGET_POINT_KEYS:
                if key not in tp:
                    raise ReportError(f"points[{i}].targets.{name} misses {key!r}")


def load_report(path: str | Path) -> dict[str, Any]:
    """Read and validate a report file. Raises ReportError."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ReportError(f"cannot read report {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ReportError(f"report {path} is not JSON: {exc}") from None
    validate_report(data)
    return data


def spec_share(report: Mapping[str, Any], target: str, tp: Mapping[str, Any]) -> float:
    """Fraction (0..1) of target ``target``'s answered requests at a point that the
    speculative pool served: 1.0 for the ``spec`` target, 0.0 for ``plain``; for a router,
    its requests with reason ``speculative`` over all its routed requests (a router report
    without reasons: those routed to a pool named like the spec target). ``prefix_affinity``
    requests are not counted (that reason does not say which pool)."""
    roles = {t["name"]: t["role"] for t in report["targets"]}
    role = roles.get(target)
    if role == "spec":
        return 1.0
    if role != "router":
        return 0.0
    reasons = tp.get("reasons") or {}
    if reasons:
        total = sum(reasons.values())
        return reasons.get("speculative", 0) / total if total else 0.0
    routed = tp.get("routed") or {}
    spec_names = {t["name"] for t in report["targets"] if t["role"] == "spec"}
    total = sum(routed.values())
    return sum(n for pool, n in routed.items() if pool in spec_names) / total if total else 0.0


# --------------------------------------------------------------------------- Markdown
def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _ms(block: Mapping[str, Any] | None, key: str) -> str:
    return "-" if not block else f"{block[key] * 1000:.1f}"


def _reading(block: Mapping[str, Any] | None) -> str:
    """What a speedup block says: ``pays``, ``costs`` or ``not evidence (noisy 3.46x)``."""
    if not block or block.get("median") is None:
        return "-"
    sp = block.get("spread") or {}
    verdict = sp.get("verdict")
    if untrusted(verdict):
        spread = sp.get("spread")
        return f"not evidence ({verdict}" + (f" {spread:.2f}x" if spread is not None else "") + ")"
    return "pays" if block["median"] >= 1.0 else "costs"


def _routes(tp: Mapping[str, Any]) -> str:
    """``speculative: 14, saturated: 6`` (reasons, most first); ``pool plain: 20`` without reasons."""
    reasons = tp.get("reasons") or {}
    counts, prefix = (reasons, "") if reasons else (tp.get("routed") or {}, "pool ")
    return ", ".join(f"{prefix}{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def decision_table(report: Mapping[str, Any]) -> list[str]:
    """The "Decisions per operating point" section of ``report.md``: per (bucket, load) the
    spec-vs-plain decode speedup and what it says (``pays`` >= 1.0x, ``costs`` < 1.0x, or
    ``not evidence (<verdict> <spread>)`` when its runs disagree, :func:`loadtests.evidence.untrusted`:
    more repetitions or requests), and, with a router target, the router's speedup over plain, its routing
    reasons with counts (``x-specgate-reason``; pools when no reason was returned) and the
    share of its requests the speculative pool served (:func:`spec_share`). Empty without a
    spec-vs-plain ratio or a router."""
    router = next((t["name"] for t in report["targets"] if t["role"] == "router"), None)
    has_ratio = any("spec_vs_plain" in p["ratios"] for p in report["points"])
    if not has_ratio and router is None:
        return []
    kind = "concurrency" if report["grid"]["load_kind"] == "concurrency" else "rate (req/s)"
    head = f"| bucket | {kind} | spec vs plain | reading |"
    rule = "|---|---|---|---|"
    if router is not None:
        head += " router vs plain | router's decisions (reason: requests) | to spec pool |"
        rule += "---|---|---|"
    lines = ["## Decisions per operating point", "",
             ("Speedup = median decode tokens/s ratio over paired runs; \"not evidence\": the runs "
             "disagree (spread verdict), so no threshold should be read from that cell."), "",
             head, rule]
    for p in report["points"]:
        sp = (p["ratios"].get("spec_vs_plain") or {}).get("decode_speedup")
        row = (f"| {p['bucket']} | {load_key(p['load'])} | "
               f"{'-' if not sp or sp.get('median') is None else format(sp['median'], '.2f') + 'x'} | "
               f"{_reading(sp)} |")
        if router is not None:
            rp = (p["ratios"].get("router_vs_plain") or {}).get("decode_speedup")
            tp = p["targets"].get(router) or {}
            row += (f" {'-' if not rp or rp.get('median') is None else format(rp['median'], '.2f') + 'x'} | "
                    f"{_routes(tp)} | {spec_share(report, router, tp):.0%} |")
        lines.append(row)
    lines.append("")
    return lines


def render_markdown(report: Mapping[str, Any]) -> str:
    """The human summary of a report (bucket x load tables, docs/loadtests.md)."""
    w = report["workload"]
    grid = report["grid"]
    kind = "concurrency" if grid["load_kind"] == "concurrency" else "rate (req/s)"
    lines = [
        "# specgate load test",
        "",
        f"- model: `{report.get('model')}`; created {report['created_at']}",
        "- targets: " + ", ".join(f"{t['name']} ({t['role']}) {t['url']}" for t in report["targets"]),
        f"- mode: {w['mode']} loop; loads ({kind}): {', '.join(load_key(x) for x in grid['loads'])}",
        "- buckets (prompt tokens): " + ", ".join(f"{b['name']} [{b['lo']}..{b['hi']}]"
                                                    for b in grid["buckets"]),
        (f"- output tokens {w['output_tokens'][0]}-{w['output_tokens'][1]}, copy fraction "
         f"{w['copy_fraction']}, stream {w['stream']}, seed {w['seed']}"),
        (f"- warm-up runs {w['warmup_runs']} (discarded), measured runs {w['repetitions']} per "
         "point and target, interleaved"),
        (f"- requests: {report['counts']['sent']} sent of {report['counts']['planned']} planned "
         f"({report['counts']['warmup']} warm-up, {report['counts']['measured']} measured, "
         f"{report['counts']['ok']} ok); stopped: {report['stopped']['reason']} after "
         f"{_fmt(report['stopped']['elapsed_s'], 1)} s"),
        "",
    ]
    for name, table in report["tables"].items():
        is_ratio = "_vs_" in name
        title = (f"## {name.replace('_vs_', ' vs ')}: decode speedup (median over runs)" if is_ratio
                 else f"## {name}: median decode tokens/s per request")
        lines += [title, "", "| bucket \\ " + kind + " | " + " | ".join(table["loads"]) + " |",
                  "|---" * (len(table["loads"]) + 1) + "|"]
        for row in table["rows"]:
            cells = []
            for k in table["loads"]:
                v = row["values"].get(k)
                cells.append("-" if v is None else (f"{v:.2f}x" if is_ratio else f"{v:.1f}"))
            lines.append(f"| {row['bucket']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += decision_table(report)
    lines += ["## Per operating point", "",
              ("| bucket | load | target | ok/sent | errors | TTFT p50/p90/p99 ms | ITL p50/p90/p99 ms "
               "| E2E p50/p90/p99 ms | decode tok/s p50 | total tok/s | accept len | queue max | "
               "spread |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    flags = []
    for p in report["points"]:
        for name, tp in p["targets"].items():
            errs = ", ".join(f"{k}: {v}" for k, v in tp["errors_by_status"].items()) or "-"
            lat = {k: "/".join(_ms(tp[k], q) for q in ("p50", "p90", "p99"))
                   for k in ("ttft_s", "itl_s", "e2e_s")}
            pm = tp["pool_metrics"]
            acc = (pm.get("accept_length") or {}).get("mean")
            qmax = (pm.get("queue_depth") or {}).get("max")
            sp = tp["spread"]
            sp_txt = "-" if not sp else f"{_fmt(sp['spread'])}x {sp['verdict']}"
            if sp and sp["bimodal"]:
                flags.append(f"- {p['bucket']} x {load_key(p['load'])}, {name}: runs split into modes "
                             f"{_fmt(sp['modes'][0], 1)} and {_fmt(sp['modes'][1], 1)} tok/s "
                             f"(spread {_fmt(sp['spread'])}x did not shrink)")
            dec = tp["decode_tps_per_request"]
            lines.append(
                f"| {p['bucket']} | {load_key(p['load'])} | {name} | {tp['requests']['ok']}/"
                f"{tp['requests']['sent']} | {errs} | {lat['ttft_s']} | {lat['itl_s']} | {lat['e2e_s']} | "
                f"{_fmt(dec['p50'] if dec else None, 1)} | {_fmt(tp['output_tps_total']['median'], 1)} | "
                f"{_fmt(acc)} | {_fmt(qmax, 0)} | {sp_txt} |")
        for rname, ratio in p["ratios"].items():
            sp = (ratio.get("decode_speedup") or {}).get("spread")
            if sp and sp["bimodal"]:
                flags.append(f"- {p['bucket']} x {load_key(p['load'])}, {rname}: speedup runs split into "
                             f"{_fmt(sp['modes'][0])}x and {_fmt(sp['modes'][1])}x")
    lines += ["", "## Bimodal points (a spread that does not shrink is not noise)", ""]
    lines += flags or ["- none"]
    lines.append("")
    return "\n".join(lines)


def write_report(report: Mapping[str, Any], out_dir: str | Path, *,
                 results: Iterable[RequestResult] = (), plots: bool = True) -> list[Path]:
    """Write ``report.json``, ``report.md``, ``requests.jsonl`` (when ``results``) and the PNGs.

    Returns the paths written. Raises OSError when the directory cannot be written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    p = out / "report.json"
    p.write_text(json.dumps(sanitize(report), indent=2, allow_nan=False) + "\n")
    written.append(p)
    p = out / "report.md"
    p.write_text(render_markdown(report))
    written.append(p)
    rs = list(results)
    if rs:
        p = out / "requests.jsonl"
        with p.open("w") as fh:
            for r in rs:
                fh.write(json.dumps(sanitize(r.as_dict()), allow_nan=False) + "\n")
        written.append(p)
    if plots:
        from loadtests.plots import write_plots

        written += write_plots(report, out)
    return written
