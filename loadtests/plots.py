"""PNG plots of a load-test report (matplotlib's object API with the Agg canvas: no pyplot
global state, no display needed).

- ``speedup_heatmap.png``: one heat map per ratio (spec vs plain, router vs plain, ...) over
  context bucket (rows) x load (columns), the median decode speedup written in each cell,
  colours diverging at 1.0x (green: speculation pays, red: it costs). A single-target report
  gets a heat map of median decode tokens/s instead.
- ``latency_percentiles.png``: TTFT, inter-token latency and end-to-end latency (ms) against
  load, p50 solid and p99 dashed, one line per target and bucket.
- ``accept_length.png``: the pools' mean accept length (tokens per verify step, sampled from
  ``sglang:spec_accept_length``) against load, per target and bucket.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["write_plots"]


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _heatmaps(report: Mapping[str, Any], path: Path) -> None:
    from matplotlib.colors import TwoSlopeNorm

    tables = report["tables"]
    names = [n for n in tables if "_vs_" in n] or list(tables)
    fig = _figure(4.5 * len(names) + 1, 0.6 * len(report["grid"]["buckets"]) + 2.5)
    for i, name in enumerate(names, 1):
        table = tables[name]
        ax = fig.add_subplot(1, len(names), i)
        rows = table["rows"]
        loads = table["loads"]
        data = [[(r["values"].get(k) if r["values"].get(k) is not None else float("nan"))
                 for k in loads] for r in rows]
        is_ratio = "_vs_" in name
        finite = [v for row in data for v in row if not math.isnan(v)]
        if is_ratio and finite:
            lo, hi = min(finite + [0.99]), max(finite + [1.01])
            norm = TwoSlopeNorm(vmin=min(lo, 0.999), vcenter=1.0, vmax=max(hi, 1.001))
            im = ax.imshow(data, cmap="RdYlGn", norm=norm, aspect="auto")
        else:
            im = ax.imshow(data, cmap="viridis", aspect="auto")
        for y, row in enumerate(data):
            for x, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(x, y, f"{v:.2f}x" if is_ratio else f"{v:.0f}", ha="center", va="center",
                            fontsize=9, color="black")
        ax.set_xticks(range(len(loads)), loads)
        ax.set_yticks(range(len(rows)), [r["bucket"] for r in rows])
        ax.set_xlabel(report["grid"]["load_kind"])
        ax.set_ylabel("prompt tokens")
        ax.set_title(name.replace("_vs_", " vs ") + (" decode speedup" if is_ratio else " decode tok/s"))
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path)


def _series(report: Mapping[str, Any]) -> dict[tuple[str, str], list[tuple[float, Mapping[str, Any]]]]:
    out: dict[tuple[str, str], list[tuple[float, Mapping[str, Any]]]] = {}
    for p in report["points"]:
        for name, tp in p["targets"].items():
            out.setdefault((name, p["bucket"]), []).append((p["load"], tp))
    for v in out.values():
        v.sort(key=lambda x: x[0])
    return out


def _latency(report: Mapping[str, Any], path: Path) -> None:
    fig = _figure(15, 4.5)
    series = _series(report)
    for i, (key, title) in enumerate((("ttft_s", "TTFT"), ("itl_s", "inter-token latency"),
                                      ("e2e_s", "end-to-end latency")), 1):
        ax = fig.add_subplot(1, 3, i)
        for (name, bucket), pts in series.items():
            xs = [x for x, tp in pts if tp[key]]
            if not xs:
                continue
            p50 = [tp[key]["p50"] * 1000 for _, tp in pts if tp[key]]
            p99 = [tp[key]["p99"] * 1000 for _, tp in pts if tp[key]]
            (line,) = ax.plot(xs, p50, marker="o", label=f"{name} {bucket} p50")
            ax.plot(xs, p99, linestyle="--", color=line.get_color(), label=f"{name} {bucket} p99")
        ax.set_xlabel(report["grid"]["load_kind"])
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if i == 3:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def _accept(report: Mapping[str, Any], path: Path) -> None:
    fig = _figure(7, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    any_data = False
    for (name, bucket), pts in _series(report).items():
        xy = [(x, (tp["pool_metrics"].get("accept_length") or {}).get("mean")) for x, tp in pts]
        xy = [(x, y) for x, y in xy if y is not None]
        if xy:
            any_data = True
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=f"{name} {bucket}")
    if any_data:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no accept length sampled\n(no speculative pool metrics)",
                ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(report["grid"]["load_kind"])
    ax.set_ylabel("mean accept length (tokens / verify step)")
    ax.set_title("sglang:spec_accept_length during the runs")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def write_plots(report: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write the three PNGs into ``out_dir``; returns their paths.

    Raises:
        ImportError: matplotlib is not installed.
    """
    out = Path(out_dir)
    paths = [out / "speedup_heatmap.png", out / "latency_percentiles.png", out / "accept_length.png"]
    _heatmaps(report, paths[0])
    _latency(report, paths[1])
    _accept(report, paths[2])
    return paths
