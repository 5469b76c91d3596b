"""The demo's console: progress lines, table columns (the over-length row), the short summary."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from serving.demo import DemoRequest
from serving.democonsole import TABLE_COLUMNS, progress_line, ready_line, summary_lines, table_row


def test_progress_line() -> None:
    assert progress_line(12.34, "pool spec ready") == "[+  12.3 s] pool spec ready"


def test_table_rows_keep_every_value_in_its_column() -> None:
    ok = DemoRequest("short-1", True, pool="spec", reason="speculative", status=200, ttft_s=0.1234,
                     tokens_per_s=41.26, completion_tokens=24, prompt_tokens=18)
    over = DemoRequest("over-length", False, reason="context_cap", status=400,
                       error_code="context_length_exceeded")
    assert table_row(ok) == ("short-1", "yes", "spec", "speculative", "200", "0.123", "41.3", "18", "24", "-")
    assert table_row(over) == ("over-length", "no", "-", "context_cap", "400", "-", "-", "-", "-",
                               "context_length_exceeded")
    table = Table()
    for col in TABLE_COLUMNS:
        table.add_column(col)
    table.add_row(*table_row(over))
    console = Console(record=True, width=200)
    console.print(table)
    header, row = [line for line in console.export_text().splitlines() if "│" in line or "┃" in line][:2]
    cells = dict(zip([c.strip() for c in header.strip("┃").split("┃")],
                     [c.strip() for c in row.strip("│").split("│")], strict=True))
    assert cells["out tok"] == "-" and cells["error"] == "context_length_exceeded"


def test_summary_lines_are_short_and_name_failed_checks() -> None:
    summary = {"requests": 30, "ok": 29, "elapsed_s": 71.04,
               "by_reason": {"speculative": 14, "saturated": 6, "low_acceptance": 6, "context_cap": 1,
                             "long_context": 3},
               "checks": {"both_pools_served": True, "over_length_rejected": True, "saturation_bypass_seen": False},
               "recovery": [{"step": "x" * 2000}]}
    pools = {"spec": {"served": 20, "accept_length": 2.214, "accept_length_source": "metrics.sglang:spec_accept_length"},
             "plain": {"served": 9, "accept_length": None}}
    assert summary_lines(summary, pools) == [
        ("29 of 30 requests answered 200 in 71.0 s; by reason: speculative 14, low_acceptance 6, saturated 6, "
        "long_context 3, context_cap 1"),
        "pool spec: served 20, accept length 2.21 (metrics.sglang:spec_accept_length)",
        "pool plain: served 9",
        "checks: 2 of 3 held; FAILED: saturation_bypass_seen",
    ]
    summary["checks"]["saturation_bypass_seen"] = True
    assert summary_lines(summary, pools)[-1] == "checks: 3 of 3 held"


def test_ready_line() -> None:
    view = {"spec": {"accept_length_estimate": {"greedy": 2.4, "sampled": None},
                     "low_acceptance_classes": ["sampled"], "signal_age_s": {"scrape": 0.3}}}
    assert ready_line(view) == ("after the sampled requests, /ready says pool spec: accept length greedy 2.40, "
                                "sampled unknown (tokens per verify step); bypassed on acceptance: sampled")
    assert ready_line({}) == "after the sampled requests, /ready says nothing about a speculative pool"
