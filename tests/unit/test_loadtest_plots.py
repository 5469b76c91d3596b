"""The load-test pictures, read from the figures themselves: one shared speedup scale centred
on 1.0x with the verdict on each cell, latency small multiples with one legend outside the
panels, accept length only where the speculative pool served the requests, with the
break-even line. Synthetic reports from the speed model (no timing, no noise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadtests import plots
from loadtests.plots import (
    break_even_accept_length,
    heatmap_cells,
    shared_speedup_bounds,
    spec_share,
)
from loadtests.simulate import SimModel, simulate_report
from loadtests.workload import parse_buckets

BUCKETS = "64-256,256-1024,1024-4096"


def sim(repetitions: int = 1) -> dict[str, Any]:
    """spec, plain and a router that sends prompts <= 1000 tokens at load < 8 to spec: so in
    1024-4096 and at load 12 every router request goes plain."""
    return simulate_report(SimModel(), parse_buckets(BUCKETS), [1, 4, 12], repetitions=repetitions,
                           requests_per_run=4, router=(1000, 8))


def mark(report: dict[str, Any], bucket: str, load: float, verdict: str, spread: float) -> None:
    for p in report["points"]:
        if p["bucket"] == bucket and p["load"] == load:
            p["ratios"]["spec_vs_plain"]["decode_speedup"]["spread"].update(verdict=verdict, spread=spread)


@pytest.mark.parametrize(("values", "bounds"), [
    ([0.5, 1.2], (0.5, 2.0)),          # 0.5x as strong a red as 2.0x is green
    ([0.36, 0.95, 1.09, 1.20], (0.36, 1 / 0.36)),
    ([0.99, 1.01], (0.8, 1.25)),       # the narrowest range: near-1.0x cells stay pale
    ([], (0.8, 1.25)),
])
def test_shared_speedup_bounds(values: list[float], bounds: tuple[float, float]) -> None:
    assert shared_speedup_bounds(values) == pytest.approx(bounds)


def test_heatmap_cells_state_value_and_verdict() -> None:
    report = sim()
    mark(report, "64-256", 4, "noisy", 3.46)
    mark(report, "256-1k", 1, "stable", 1.02)
    cells = heatmap_cells(report, "spec_vs_plain")
    noisy, stable, single = cells[0][1], cells[1][0], cells[2][2]
    assert (noisy.verdict, noisy.spread, noisy.hatched) == ("noisy", 3.46, True)
    assert noisy.label == f"{noisy.value:.2f}x\nnoisy 3.46x"
    assert (stable.hatched, stable.label) == (False, f"{stable.value:.2f}x\nstable")
    assert (single.verdict, single.hatched, single.label) == ("single", False, f"{single.value:.2f}x\nsingle")
    mark(report, "1k-4k", 12, "converging", 1.2)   # a faded disturbance: stated, not hatched
    converging = heatmap_cells(report, "spec_vs_plain")[2][2]
    assert (converging.hatched, converging.label) == (False, f"{converging.value:.2f}x\nconverging 1.20x")


@pytest.mark.slow
def test_heatmap_panels_share_one_centred_scale(tmp_path: Path) -> None:
    report = sim()
    mark(report, "64-256", 4, "noisy", 3.46)
    mark(report, "1k-4k", 12, "bimodal", 1.6)
    fig = plots._heatmaps(report, tmp_path / "h.png")
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["spec vs plain decode speedup", "router vs plain decode speedup",
                                                "router vs spec decode speedup"]
    values = [c.value for n in report["tables"] if "_vs_" in n for row in heatmap_cells(report, n) for c in row]
    lo, hi = shared_speedup_bounds([v for v in values if v is not None])
    norms = {id(ax.images[0].norm) for ax in panels}
    assert len(norms) == 1
    norm = panels[0].images[0].norm
    assert (norm.vmin, norm.vcenter, norm.vmax) == pytest.approx((lo, 1.0, hi))
    assert lo == pytest.approx(1 / hi)
    colorbar = [ax for ax in fig.axes if not ax.images]
    assert len(colorbar) == 1
    assert "1.00x break-even" in [t.get_text() for t in colorbar[0].get_yticklabels()]
    hatched = [p for p in panels[0].patches if p.get_hatch()]
    assert len(hatched) == 2 and not any(p.get_hatch() for ax in panels[1:] for p in ax.patches)
    texts = [t.get_text() for t in panels[0].texts]
    assert any(t.endswith("noisy 3.46x") for t in texts) and any(t.endswith("bimodal 1.60x") for t in texts)


@pytest.mark.slow
def test_latency_small_multiples(tmp_path: Path) -> None:
    report = sim()
    fig = plots._latency(report, tmp_path / "l.png")
    assert len(fig.axes) == 3 * 3                        # 3 metrics x 3 buckets
    assert [ax.get_title() for ax in fig.axes[:3]] == ["64-256 prompt tokens", "256-1k prompt tokens",
                                                       "1k-4k prompt tokens"]
    colours = {"spec": "tab:green", "plain": "tab:blue", "router": "tab:orange"}
    for ax in fig.axes:
        assert ax.get_legend() is None
        lines = ax.get_lines()
        assert len(lines) == 2 * 3                       # p50 and p99 per target
        assert [line.get_color() for line in lines] == [c for c in colours.values() for _ in (0, 1)]
        assert [line.get_linestyle() for line in lines] == ["-", "--"] * 3
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["spec", "plain", "router", "p50", "p99"]


def test_spec_share() -> None:
    report = sim()
    tp = {"reasons": {"speculative": 3, "saturated": 1}, "routed": {"a": 3, "b": 1}}
    assert spec_share(report, "spec", tp) == 1.0
    assert spec_share(report, "plain", tp) == 0.0
    assert spec_share(report, "router", tp) == 0.75
    assert spec_share(report, "router", {"reasons": {"prefix_affinity": 2}, "routed": {"spec": 2}}) == 0.0
    assert spec_share(report, "router", {"reasons": {}, "routed": {"spec": 1, "plain": 3}}) == 0.25
    assert spec_share(report, "router", {"reasons": {}, "routed": {}}) == 0.0


@pytest.mark.slow
def test_accept_length_only_where_the_spec_pool_served(tmp_path: Path) -> None:
    report = sim()
    model = SimModel()
    assert break_even_accept_length(report) == pytest.approx(model.c * model.gamma + 1)
    fig = plots._accept(report, tmp_path / "a.png")
    assert len(fig.axes) == 3
    for ax, router_loads in zip(fig.axes, ([1, 4], [1, 4], []), strict=True):
        spec_line = [line for line in ax.get_lines() if line.get_color() == "tab:green"]
        router_line = [line for line in ax.get_lines() if line.get_color() == "tab:orange"]
        assert [list(line.get_xdata()) for line in spec_line] == [[1, 4, 12]]
        assert [list(line.get_xdata()) for line in router_line] == ([router_loads] if router_loads else [])
        breakeven = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert len(breakeven) == 1 and list(breakeven[0].get_ydata()) == [pytest.approx(1.2)] * 2
    assert [t.get_text() for t in fig.axes[0].texts] == ["100% spec", "100% spec"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["spec", "router", "break-even c*gamma+1 = 1.20"]


@pytest.mark.slow
def test_accept_length_without_gamma_has_no_break_even(tmp_path: Path) -> None:
    report = sim()
    report["speculation"] = {"gamma": None, "drafter_cost_ratio": None}
    assert break_even_accept_length(report) is None
    fig = plots._accept(report, tmp_path / "a.png")
    assert not any(line.get_linestyle() == ":" for ax in fig.axes for line in ax.get_lines())
    assert "break-even unknown" in fig.get_suptitle()


@pytest.mark.slow
def test_write_plots_writes_three_pngs(tmp_path: Path) -> None:
    report = sim(repetitions=2)
    paths = plots.write_plots(report, tmp_path)
    assert [p.name for p in paths] == ["speedup_heatmap.png", "latency_percentiles.png", "accept_length.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_md_decision_table() -> None:
    from loadtests.report import decision_table, render_markdown

    report = sim()
    mark(report, "64-256", 4, "noisy", 3.46)
    for p in report["points"]:
        if p["bucket"] == "256-1k" and p["load"] == 4:
            p["targets"]["router"]["reasons"] = {"speculative": 3, "saturated": 1}
    speedups = {(p["bucket"], p["load"]): (p["ratios"]["spec_vs_plain"]["decode_speedup"]["median"],
                                           p["ratios"]["router_vs_plain"]["decode_speedup"]["median"])
                for p in report["points"]}
    lines = decision_table(report)
    assert lines[0] == "## Decisions per operating point"
    assert lines[4] == ("| bucket | concurrency | spec vs plain | reading | router vs plain "
                        "| router's decisions (reason: requests) | to spec pool |")
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in lines[6:-1]}
    assert len(rows) == 9
    s, r = speedups[("64-256", 4)]
    assert rows[("64-256", "4")] == f"| 64-256 | 4 | {s:.2f}x | not evidence (noisy 3.46x) | {r:.2f}x | pool spec: 4 | 100% |"
    s, r = speedups[("256-1k", 4)]
    assert rows[("256-1k", "4")] == f"| 256-1k | 4 | {s:.2f}x | pays | {r:.2f}x | speculative: 3, saturated: 1 | 75% |"
    s, r = speedups[("1k-4k", 12)]
    assert rows[("1k-4k", "12")] == f"| 1k-4k | 12 | {s:.2f}x | pays | {r:.2f}x | pool plain: 4 | 0% |"
    assert "\n".join(lines) in render_markdown(report)
    costly = sim()
    costly["points"][0]["ratios"]["spec_vs_plain"]["decode_speedup"]["median"] = 0.95
    assert "| 0.95x | costs |" in decision_table(costly)[6]
