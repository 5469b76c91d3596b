"""What ``specgate demo`` prints: progress lines, the per-request table, a short summary.

Pure formatting, no I/O: the demo prints what these functions return, in this order:

1. progress lines as each step happens (:func:`progress_line`, ``[+  12.3 s] ...``): pools
   starting, healthy, warmed up; the router ready; the workload's bypass and recovery steps;
2. the per-request table (:data:`TABLE_COLUMNS`, :func:`table_row`): an engine answer fills
   ``out tok``; a refused request leaves it ``-`` and names its OpenAI ``error.code`` in
   ``error`` (the over-length request: ``context_length_exceeded``);
3. a few lines of summary (:func:`summary_lines`): requests ok of sent, the count per routing
   reason, each pool's served count and accept length, the checks held and the name of
   each one that did not. The whole summary (the JSON, with the recovery steps) goes to the
   report file only (``--report``, ``summary`` key).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TABLE_COLUMNS", "progress_line", "ready_line", "summary_lines", "table_row"]

#: The per-request table's columns, in order.
TABLE_COLUMNS: tuple[str, ...] = ("request", "stream", "pool", "reason", "status", "TTFT s", "tok/s",
                                  "prompt tok", "out tok", "error")


def progress_line(elapsed_s: float, text: str) -> str:
    """One progress line: ``[+  12.3 s] text`` (seconds since the demo started)."""
    return f"[+{elapsed_s:6.1f} s] {text}"


def _opt(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def table_row(r: Any) -> tuple[str, ...]:
    """The table row of one request (a :class:`serving.demo.DemoRequest`), one cell per
    :data:`TABLE_COLUMNS` entry; ``-`` for what the request does not have."""
    return (r.name, "yes" if r.stream else "no", r.pool or "-", r.reason or "-", str(r.status),
            _opt(r.ttft_s, "{:.3f}"), _opt(r.tokens_per_s, "{:.1f}"), _opt(r.prompt_tokens),
            _opt(r.completion_tokens), r.error_code or "-")


def ready_line(spec_view: Mapping[str, Mapping[str, Any]]) -> str:
    """``/ready``'s view of the speculative pool(s) after the sampled requests, in words:
    ``pool spec: accept length greedy 2.40, sampled 1.27 (tokens per verify step); bypassed
    on acceptance: sampled``; an unmeasured class reads ``unknown``."""
    parts = []
    for name, view in spec_view.items():
        est = view.get("accept_length_estimate") or {}
        acc = ", ".join(f"{cls} {'unknown' if v is None else format(v, '.2f')}" for cls, v in sorted(est.items()))
        low = ", ".join(view.get("low_acceptance_classes") or []) or "none"
        parts.append(f"pool {name}: accept length {acc or 'unknown'} (tokens per verify step); "
                     f"bypassed on acceptance: {low}")
    return "after the sampled requests, /ready says " + ("; ".join(parts) or "nothing about a speculative pool")


def summary_lines(summary: Mapping[str, Any], pools: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The summary as a few human lines (the JSON stays in the report file).

    Args:
        summary: the report's ``summary`` (``requests``, ``ok``, ``by_reason``, ``elapsed_s``,
            ``checks``: name -> bool).
        pools: the report's ``pools`` (name -> ``served``, ``accept_length`` or None,
            ``accept_length_source``).
    """
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(summary["by_reason"].items(), key=lambda kv: (-kv[1], kv[0])))
    lines = [(f"{summary['ok']} of {summary['requests']} requests answered 200 in {summary['elapsed_s']:.1f} s; "
              f"by reason: {reasons or '-'}")]
    for name, p in pools.items():
        acc = p.get("accept_length")
        lines.append(f"pool {name}: served {p['served']}"
                     + (f", accept length {acc:.2f} ({p.get('accept_length_source')})" if acc else ""))
    checks = summary["checks"]
    failed = [k for k, ok in checks.items() if not ok]
    lines.append(f"checks: {len(checks) - len(failed)} of {len(checks)} held"
                 + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return lines
