"""Summaries, request logs and plots of simulated days (:mod:`loadtests.daysim`).

Latency objective and goodput
-----------------------------
A request *meets the objective* when it completed, its time to first token is at most
``ttft_slo_s`` and its time per output token after the first (TPOT) is at most ``tpot_slo_s``
(defaults 5 s and 35 ms: interactive chat on a large model). *Goodput* is the number of such
requests per second of the day (the shape's duration), the DistServe definition
(arXiv:2401.09670, section 2); ``goodput_share`` is the share of all requests that met it.

Recovery after a shift
----------------------
:func:`windowed_means` cuts a day into windows by *arrival* time (default 30 s from a day's
``shift_at_s``) and gives the mean end-to-end latency of the requests that arrived in each;
:func:`recovery_s` compares two such series (a routed run against the better static
deployment) and says how long after the shift the first window is back within a tolerance
(default 5%).

Request log (JSONL, one :class:`loadtests.daysim.RequestRecord` per line): what
``specgate calibrate --split`` replays (:mod:`loadtests.split`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtests.daysim import DayResult, RequestRecord

__all__ = ["Objective", "plot_loads", "read_request_log", "recovery_s", "settled_s", "summarize", "windowed_means",
           "write_request_log"]


@dataclass(frozen=True)
class Objective:
    """The per-request latency objective (seconds)."""

    ttft_slo_s: float = 5.0
    tpot_slo_s: float = 0.035

    def met(self, r: RequestRecord) -> bool:
        """True when ``r`` completed within both bounds (1-token outputs: TTFT only)."""
        if r.status != "ok" or r.ttft_s is None or r.ttft_s > self.ttft_slo_s:
            return False
        return r.tpot_s is None or r.tpot_s <= self.tpot_slo_s


def _pct(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` in [0, 1] of ``xs`` (None when empty)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(result: DayResult, *, day_s: float, long_prompt_tokens: int,
              objective: Objective | None = None) -> dict[str, Any]:
    """One day's numbers (seconds, requests/s).

    Returns ``{"deployment", "requests", "ok", "refused", "mean_s", "p90_s", "p99_s",
    "long_mean_s", "short_mean_s", "ttft_mean_s", "tpot_p50_s", "goodput_rps", "goodput_share",
    "reasons", "spec_share", "busy_share"}``; latencies are end to end (arrival -> last token)
    over completed requests; ``long`` = prompt above ``long_prompt_tokens``; ``spec_share``:
    share of completed requests served by a speculative engine; ``busy_share``: per engine,
    busy time / (time of the last completion).
    """
    objective = objective or Objective()
    ok = [r for r in result.records if r.status == "ok"]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    long_ = [r.e2e_s for r in ok if r.e2e_s is not None and r.prompt_tokens > long_prompt_tokens]
    short = [r.e2e_s for r in ok if r.e2e_s is not None and r.prompt_tokens <= long_prompt_tokens]
    good = sum(1 for r in ok if objective.met(r))
    n = len(result.records)
    end = result.end_s or 1.0
    return {
        "deployment": result.deployment,
        "requests": n,
        "ok": len(ok),
        "refused": n - len(ok),
        "mean_s": _mean(e2e),
        "p90_s": _pct(e2e, 0.9),
        "p99_s": _pct(e2e, 0.99),
        "long_mean_s": _mean(long_),
        "short_mean_s": _mean(short),
        "ttft_mean_s": _mean([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_p50_s": _pct([r.tpot_s for r in ok if r.tpot_s is not None], 0.5),
        "goodput_rps": good / day_s if day_s > 0 else None,
        "goodput_share": good / n if n else None,
        "objective": asdict(objective),
        "reasons": dict(sorted(result.reasons.items())),
        "spec_share": (sum(1 for r in ok if r.speculative) / len(ok)) if ok else None,
        "busy_share": {u: round(b / end, 4) for u, b in result.busy_s.items()},
    }


def windowed_means(records: Iterable[RequestRecord], *, start_s: float, end_s: float,
                   window_s: float = 30.0) -> list[dict[str, Any]]:
    """Mean latency of the requests arriving in each window ``[start_s + i * window_s, ...)``
    up to ``end_s`` (seconds; the last window may be shorter).

    Returns ``[{"start_s", "end_s", "requests", "ok", "mean_s"}]`` (``requests``: arrivals in
    the window, ``ok``: of them completed, ``mean_s``: their mean end-to-end latency, None when
    none completed).

    Raises:
        ValueError: window_s <= 0 or end_s < start_s.
    """
    if window_s <= 0 or end_s < start_s:
        raise ValueError(f"need window_s > 0 and end_s >= start_s, got {window_s}, {start_s}..{end_s}")
    n = max(1, math.ceil((end_s - start_s) / window_s - 1e-9))
    lat: list[list[float]] = [[] for _ in range(n)]
    arrived = [0] * n
    for r in records:
        if not start_s <= r.arrival_s < end_s:
            continue
        i = min(n - 1, int((r.arrival_s - start_s) // window_s))
        arrived[i] += 1
        if r.status == "ok" and r.e2e_s is not None:
            lat[i].append(r.e2e_s)
    return [{"start_s": start_s + i * window_s, "end_s": min(end_s, start_s + (i + 1) * window_s),
             "requests": arrived[i], "ok": len(lat[i]), "mean_s": _mean(lat[i])} for i in range(n)]


def recovery_s(windows: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]], *,
               start_s: float, tolerance: float = 0.05) -> float | None:
    """Seconds from ``start_s`` to the start of the first window whose mean is at most
    ``(1 + tolerance)`` times the reference's mean in the same window (:func:`windowed_means`
    series over the same windows); None when no window is (windows without a mean on either
    side are skipped).

    Raises:
        ValueError: the two series have different windows.
    """
    if [w["start_s"] for w in windows] != [w["start_s"] for w in reference]:
        raise ValueError("recovery_s needs two series over the same windows")
    for w, ref in zip(windows, reference, strict=True):
        if w["mean_s"] is not None and ref["mean_s"] is not None and w["mean_s"] <= (1 + tolerance) * ref["mean_s"]:
            return float(w["start_s"]) - start_s
    return None


def settled_s(windows: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]], *,
              start_s: float, tolerance: float = 0.05) -> float | None:
    """Seconds from ``start_s`` to the start of the first window from which every later window
    (with a mean on both sides) is at most ``(1 + tolerance)`` times the reference's: back for
    good, where :func:`recovery_s` takes the first good window; None when the last is not.

    Raises:
        ValueError: the two series have different windows.
    """
    if [w["start_s"] for w in windows] != [w["start_s"] for w in reference]:
        raise ValueError("settled_s needs two series over the same windows")
    since: float | None = None
    for w, ref in zip(windows, reference, strict=True):
        if w["mean_s"] is None or ref["mean_s"] is None:
            continue
        if w["mean_s"] <= (1 + tolerance) * ref["mean_s"]:
            since = float(w["start_s"]) - start_s if since is None else since
        else:
            since = None
    return since


def write_request_log(records: Iterable[RequestRecord], path: str | Path) -> Path:
    """Write records as JSONL; returns the path. Raises OSError."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w") as fh:
        for r in records:
            fh.write(json.dumps(asdict(r)) + "\n")
    return p


def read_request_log(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL request log into dicts (blank lines skipped).

    Raises:
        OSError: unreadable file. ValueError: a line that is not JSON or not a JSON object.
    """
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        doc = json.loads(line)
        if not isinstance(doc, Mapping):
            raise ValueError(f"{path}:{i}: not a JSON object")  # noqa: TRY004 (bad file content, not a bad argument)
        out.append(dict(doc))
    return out


def plot_loads(results: Sequence[DayResult], path: str | Path, *, title: str = "") -> Path:
    """One PNG: per deployment, each pool's load (running + queued, summed over its engines)
    over the day, and the speculative engines' accept-length gauges on a second axis.

    Raises:
        OSError: the file cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 2.6 * len(results)), sharex=True, squeeze=False)
    for ax, res in zip(axes[:, 0], results, strict=True):
        t = res.timeline.get("t", [])
        for name, series in (res.timeline.get("pools") or {}).items():
            ax.plot(t, series, label=f"{name} load", lw=1.2)
        ax.set_ylabel("requests")
        ax.set_title(res.deployment, fontsize=9)
        acc = res.timeline.get("accept_length") or {}
        if acc:
            ax2 = ax.twinx()
            for url, series in acc.items():
                ax2.plot(t, [math.nan if v is None else v for v in series], ls=":", lw=1, label=f"{url} accept len")
            ax2.set_ylabel("accept length", fontsize=8)
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("day time (s)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=90)
    plt.close(fig)
    return p
