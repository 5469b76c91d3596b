"""PNG plots of a load-test report (matplotlib's object API with the Agg canvas: no pyplot
global state, no display needed).

- ``speedup_heatmap.png``: one heat map per ratio (spec vs plain, router vs plain, ...) over
  context bucket (rows) x load (columns), the median decode speedup written in each cell.
  Every panel shares **one** diverging colour scale centred on 1.0x, the break-even (white;
  green: speculation pays, red: it costs), symmetric in ``log(speedup)`` so 0.5x is as red as
  2.0x is green (:func:`shared_speedup_bounds`); the colour bar marks 1.0x. Each cell also
  states the verdict of its spread over repetitions (:func:`loadtests.stats.spread_verdict`:
  ``stable``, ``noisy 3.46x``, ``bimodal``...) and a cell whose runs disagree (``noisy``,
  ``unsettled``, ``bimodal``: :func:`loadtests.evidence.untrusted`, the cells calibration
  will not read a threshold from) is hatched: its colour is not evidence (:func:`heatmap_cells`). A single-target
  report gets a heat map of median decode tokens/s instead.
- ``latency_percentiles.png``: small multiples, one row per metric (TTFT, inter-token latency,
  end-to-end latency, ms) and one column per bucket, against load; one colour per target,
  p50 solid and p99 dashed; one legend for the figure, below the panels (never over data).
- ``accept_length.png``: one panel per bucket, the mean accept length (tokens per verify step,
  sampled from ``sglang:spec_accept_length``) against load, drawn only where the
  speculative pool served the target's requests (:func:`spec_share`): the spec target always,
  the router only at points where some of its requests went to the speculative pool (an idle
  pool keeps its last gauge value, so a point the router sent elsewhere would plot a stale
  number), each router point labelled with that share. A dotted line marks the break-even
  accept length ``c * gamma + 1`` (where ``S = tau / (c * gamma + 1) = 1``, Leviathan et al.
  2023, arXiv:2211.17192) when the report's ``speculation`` block gives ``gamma`` and ``c``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests.evidence import untrusted
from loadtests.report import spec_share

__all__ = ["HeatCell", "break_even_accept_length", "heatmap_cells", "shared_speedup_bounds",
           "spec_share", "write_plots"]

#: The narrowest colour range, so a grid of near-1.0x cells is not painted deep red/green.
MIN_SPAN = 1.25


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


@dataclass(frozen=True)
class HeatCell:
    """One heat-map cell.

    Attributes:
        value: median decode speedup (dimensionless) or tokens/s; None when not measured.
        verdict: the spread verdict of the runs (``stable``, ``noisy``, ...) or None.
        spread: max / min over the runs (dimensionless) or None.
        label: the text drawn in the cell (value, then verdict).
        hatched: True when the runs disagree (:func:`loadtests.evidence.untrusted`).
    """

    value: float | None
    verdict: str | None
    spread: float | None
    label: str
    hatched: bool


def _ratio_spread(report: Mapping[str, Any], name: str, bucket: str, load: str) -> Mapping[str, Any] | None:
    from loadtests.report import load_key

    for p in report["points"]:
        if p["bucket"] == bucket and load_key(p["load"]) == load:
            return ((p["ratios"].get(name) or {}).get("decode_speedup") or {}).get("spread")
    return None


def _target_spread(report: Mapping[str, Any], name: str, bucket: str, load: str) -> Mapping[str, Any] | None:
    from loadtests.report import load_key

    for p in report["points"]:
        if p["bucket"] == bucket and load_key(p["load"]) == load and name in p["targets"]:
            return p["targets"][name].get("spread")
    return None


def heatmap_cells(report: Mapping[str, Any], name: str) -> list[list[HeatCell]]:
    """The cells of table ``name`` (rows: buckets in table order; columns: its loads).

    A ratio table (``a_vs_b``) reads each cell's verdict from the point's
    ``ratios[name].decode_speedup.spread``, a target table from ``targets[name].spread``.
    Labels: ``1.17x`` then ``stable``, ``noisy 3.46x``, ``bimodal 1.52x`` ... (the spread
    written for every verdict but ``stable`` and ``single``); a tokens/s cell shows ``412``.
    """
    table = report["tables"][name]
    is_ratio = "_vs_" in name
    out = []
    for row in table["rows"]:
        cells = []
        for load in table["loads"]:
            v = row["values"].get(load)
            sp = (_ratio_spread if is_ratio else _target_spread)(report, name, row["bucket"], load)
            verdict = sp.get("verdict") if sp else None
            spread = sp.get("spread") if sp else None
            if v is None:
                cells.append(HeatCell(None, verdict, spread, "-", False))
                continue
            text = f"{v:.2f}x" if is_ratio else f"{v:.0f}"
            if verdict in ("stable", "single"):
                text += f"\n{verdict}"
            elif verdict is not None:
                text += f"\n{verdict}" + (f" {spread:.2f}x" if spread is not None else "")
            cells.append(HeatCell(float(v), verdict, spread, text, untrusted(verdict)))
        out.append(cells)
    return out


def shared_speedup_bounds(values: list[float]) -> tuple[float, float]:
    """``(vmin, vmax)`` of the shared speedup colour scale: ``(1/r, r)`` with ``r`` the largest
    of ``max(v, 1/v)`` over the finite positive ``values`` and :data:`MIN_SPAN`, so 1.0x sits in
    the middle and a ratio and its inverse get equally strong colours."""
    r = MIN_SPAN
    for v in values:
        if v > 0 and math.isfinite(v):
            r = max(r, v, 1 / v)
    return 1 / r, r


def _heatmaps(report: Mapping[str, Any], path: Path) -> Any:
    from matplotlib import patheffects
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    tables = report["tables"]
    from loadtests.report import RATIO_PAIRS

    order = [f"{a}_vs_{b}" for a, b in RATIO_PAIRS]
    names = sorted((n for n in tables if "_vs_" in n),
                   key=lambda n: (order.index(n) if n in order else len(order), n)) or list(tables)
    is_ratio = "_vs_" in names[0]
    grids = {n: heatmap_cells(report, n) for n in names}
    n_rows = len(report["grid"]["buckets"])
    fig = _figure(4.2 * len(names) + 1.5, 0.8 * n_rows + 2.6)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    finite = [c.value for g in grids.values() for row in g for c in row if c.value is not None]
    if is_ratio:
        lo, hi = shared_speedup_bounds(finite)
        norm = TwoSlopeNorm(vmin=lo, vcenter=1.0, vmax=hi)
        cmap = "RdYlGn"
    else:
        from matplotlib.colors import Normalize

        norm = Normalize(vmin=min(finite, default=0.0), vmax=max(finite, default=1.0))
        cmap = "viridis"
    im = None
    outline = [patheffects.withStroke(linewidth=2.5, foreground="white")]
    for ax, name in zip(axes, names, strict=True):
        table = tables[name]
        cells = grids[name]
        data = [[c.value if c.value is not None else float("nan") for c in row] for row in cells]
        im = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto")
        for y, row in enumerate(cells):
            for x, c in enumerate(row):
                if c.hatched:
                    ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///",
                                           edgecolor="0.35", linewidth=0))
                # 8 pt: "converging 1.37x" fits a cell of a 3-column panel without spilling over
                ax.text(x, y, c.label, ha="center", va="center", fontsize=8, color="black",
                        path_effects=outline)
        ax.set_xticks(range(len(table["loads"])), table["loads"])
        ax.set_yticks(range(len(table["rows"])), [r["bucket"] for r in table["rows"]])
        ax.set_xlabel(report["grid"]["load_kind"])
        ax.set_ylabel("prompt tokens")
        ax.set_title(name.replace("_vs_", " vs ") + (" decode speedup" if is_ratio else " decode tok/s"))
    cbar = fig.colorbar(im, ax=list(axes), shrink=0.9)
    if is_ratio:
        lo, hi = norm.vmin, norm.vmax
        ticks = [lo, (lo + 1) / 2, 1.0, (1 + hi) / 2, hi]  # inside the norm's range, unrounded
        cbar.set_ticks(ticks, labels=[("1.00x break-even" if t == 1.0 else f"{t:.2f}x") for t in ticks])
        cbar.add_lines(levels=[1.0], colors=["black"], linewidths=[1.5])
        fig.suptitle("median decode speedup per operating point; one colour scale, 1.0x = break-even; "
                     "hatched: runs disagree (noisy / unsettled / bimodal), colour is not evidence", fontsize=9)
    fig.savefig(path)
    return fig


def _series(report: Mapping[str, Any], bucket: str | None = None
            ) -> dict[str, list[tuple[float, Mapping[str, Any]]]]:
    """Per target name, its ``(load, TargetPoint)`` pairs in ``bucket`` sorted by load."""
    out: dict[str, list[tuple[float, Mapping[str, Any]]]] = {t["name"]: [] for t in report["targets"]}
    for p in report["points"]:
        if bucket is not None and p["bucket"] != bucket:
            continue
        for name, tp in p["targets"].items():
            out.setdefault(name, []).append((p["load"], tp))
    for v in out.values():
        v.sort(key=lambda x: x[0])
    return out


def _colours(report: Mapping[str, Any]) -> dict[str, str]:
    """One colour per target (by report order): tab10's first entries."""
    palette = ("tab:green", "tab:blue", "tab:orange", "tab:purple", "tab:red", "tab:brown")
    return {t["name"]: palette[i % len(palette)] for i, t in enumerate(report["targets"])}


LATENCY_METRICS: tuple[tuple[str, str], ...] = (("ttft_s", "TTFT"), ("itl_s", "inter-token latency"),
                                                ("e2e_s", "end-to-end latency"))


def _latency(report: Mapping[str, Any], path: Path) -> Any:
    from matplotlib.lines import Line2D

    buckets = [b["name"] for b in report["grid"]["buckets"]]
    colours = _colours(report)
    fig = _figure(3.4 * len(buckets) + 0.8, 2.6 * len(LATENCY_METRICS) + 1.0)
    axes = fig.subplots(len(LATENCY_METRICS), len(buckets), squeeze=False, sharex=True)
    for col, bucket in enumerate(buckets):
        series = _series(report, bucket)
        for row, (key, title) in enumerate(LATENCY_METRICS):
            ax = axes[row][col]
            for name, pts in series.items():
                pts = [(x, tp) for x, tp in pts if tp[key]]
                if not pts:
                    continue
                xs = [x for x, _ in pts]
                ax.plot(xs, [tp[key]["p50"] * 1000 for _, tp in pts], marker="o", color=colours[name],
                        linestyle="-")
                ax.plot(xs, [tp[key]["p99"] * 1000 for _, tp in pts], marker=".", color=colours[name],
                        linestyle="--")
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(f"{bucket} prompt tokens", fontsize=10)
            if col == 0:
                ax.set_ylabel(f"{title} (ms)")
            if row == len(LATENCY_METRICS) - 1:
                ax.set_xlabel(report["grid"]["load_kind"])
    handles = [Line2D([], [], color=c, marker="o", label=n) for n, c in colours.items()]
    handles += [Line2D([], [], color="0.3", linestyle="-", label="p50"),
                Line2D([], [], color="0.3", linestyle="--", label="p99")]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9)
    fig.savefig(path)
    return fig


def break_even_accept_length(report: Mapping[str, Any]) -> float | None:
    """``c * gamma + 1`` (tokens per verify step) from the report's ``speculation`` block, or
    None when either is unknown."""
    spec = report.get("speculation") or {}
    gamma, c = spec.get("gamma"), spec.get("drafter_cost_ratio")
    if gamma is None or c is None:
        return None
    return float(c) * int(gamma) + 1.0


def _accept(report: Mapping[str, Any], path: Path) -> Any:
    buckets = [b["name"] for b in report["grid"]["buckets"]]
    colours = _colours(report)
    be = break_even_accept_length(report)
    fig = _figure(3.4 * len(buckets) + 0.8, 4.2)
    axes = fig.subplots(1, len(buckets), squeeze=False, sharey=True)[0]
    drawn: dict[str, str] = {}
    roles = {t["name"]: t["role"] for t in report["targets"]}
    tops: list[float] = [be] if be is not None else []
    for ax, bucket in zip(axes, buckets, strict=True):
        for name, pts in _series(report, bucket).items():
            xy = []
            for x, tp in pts:
                share = spec_share(report, name, tp)
                y = (tp["pool_metrics"].get("accept_length") or {}).get("mean")
                if share > 0 and y is not None:
                    xy.append((x, y, share))
            if not xy:
                continue
            router = roles.get(name) == "router"
            drawn[name] = colours[name]
            ax.plot([x for x, _, _ in xy], [y for _, y, _ in xy], color=colours[name],
                    marker="s" if router else "o", linestyle="--" if router else "-")
            tops.extend(y for _, y, _ in xy)
            if router:
                for i, (x, y, share) in enumerate(xy):  # below, above, below...: neighbours never touch
                    ax.annotate(f"{share:.0%} spec", (x, y), textcoords="offset points",
                                xytext=(4, -12 if i % 2 == 0 else 6), fontsize=7, color=colours[name])
        if be is not None:
            ax.axhline(be, color="black", linestyle=":", linewidth=1.2)
        ax.set_title(f"{bucket} prompt tokens", fontsize=10)
        ax.set_xlabel(report["grid"]["load_kind"])
        ax.grid(alpha=0.3)
        if not ax.lines or all(line.get_linestyle() == ":" for line in ax.lines):
            ax.text(0.5, 0.5, "no speculative traffic\nmeasured here", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8, color="0.4")
    axes[0].set_ylabel("mean accept length (tokens / verify step)")
    axes[0].set_ylim(1.0, max(tops, default=2.0) * 1.1)  # tau >= 1: every verify step emits a token
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, marker="s" if roles.get(n) == "router" else "o",
                      linestyle="--" if roles.get(n) == "router" else "-", label=n) for n, c in drawn.items()]
    if be is not None:
        handles.append(Line2D([], [], color="black", linestyle=":",
                              label=f"break-even c*gamma+1 = {be:.2f}"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9)
    fig.suptitle("sglang:spec_accept_length where the speculative pool served the requests"
                 + ("" if be is not None else " (break-even unknown: no gamma / c in the report)"),
                 fontsize=10)
    fig.savefig(path)
    return fig


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
