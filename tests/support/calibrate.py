"""A calibration report with fixed numbers (:func:`fixed_report`): the operating-point table of
docs/loadtests.md as a schema-valid ``specgate loadtest`` report, for the calibration tests."""

from __future__ import annotations

from typing import Any

from loadtests.report import validate_report
from loadtests.simulate import SimModel, simulate_report
from loadtests.workload import parse_buckets

__all__ = ["TABLE", "fixed_report"]

#: An operating-point table as in docs/loadtests.md (bucket x concurrency -> spec/plain decode speedup).
TABLE = {
    "1k-2k": {1: 2.33, 8: 1.60, 16: 0.90},
    "8k-16k": {1: 1.80, 8: 1.30, 16: 0.85},
    "80k-128k": {1: 0.90, 8: 0.80, 16: 0.70},
}


def fixed_report(table: dict[str, dict[int, float | None]] = TABLE) -> dict[str, Any]:
    """A schema-valid report whose spec/plain speedups are exactly ``table``; prompt lengths
    unknown (so each bucket's length is its geometric midpoint); one spec endpoint."""
    buckets = parse_buckets(",".join(table))
    loads = sorted({k for row in table.values() for k in row})
    report = simulate_report(SimModel(), buckets, loads, repetitions=1, requests_per_run=1)
    for p in report["points"]:
        s = table[p["bucket"]][int(p["load"])]
        if s is None:
            p["ratios"]["spec_vs_plain"]["decode_speedup"] = None
        else:
            p["ratios"]["spec_vs_plain"]["decode_speedup"]["median"] = s
        for tp in p["targets"].values():
            tp["prompt_tokens"] = None
    validate_report(report)
    return report
