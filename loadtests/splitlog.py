"""A load test's request log as a day for ``specgate calibrate-split``, and the check of the
simulator against what that load test measured.

A load test's ``requests.jsonl`` (:class:`loadtests.client.RequestResult` rows) is not one day:
it holds every target of a comparison (``spec``, ``plain``, ``router``), a warm-up run and
``repetitions`` measured runs of every operating point (bucket x load), and each run's
``t_start`` counts from that run's own start (:mod:`loadtests.runner`). Replaying all of it as
one day puts every target's every run at second 0 and queues them all at once.

:func:`load_test_day` takes one target's measured runs (``phase == "measure"``, without the
failed requests) in the order they ran (the log is written run by run) and lays them end to end:
each run starts where the previous one ended (its last request's ``t_start + e2e_s``), so every
request arrives when the load test's closed (or open) loop actually sent it, on one clock, and
the idle time between this target's runs (the other targets' runs, the warm-ups) is left out.
A closed loop's arrivals depend on how fast the target answered: each run's closed loops are
found from its own times (:func:`loadtests.closedloop.find_loops`: a request sent when a
response ended) and kept in ``follows``, so a replay sends such a request that gap after its
predecessor's replayed end, as the load test's worker would have; an open loop's run (and a
run too short to tell) is replayed at the times it was sent, counted from its run's start.
A run starts when the previous one has ended (:mod:`loadtests.runner` runs them one after
another), so that start is a link too: every request of a run that no closed loop of its own
links follows the previous run's last measured response, at its own ``t_start`` after it
(``chained`` counts them). Without it a replay that is slower than the engines were carries
one run's tail into the next run's wave, a backlog the load test never had, and every later
run adds to it: on the demo's SGLang CPU pools (a run is one wave of 4 or 12 requests sent at
once) the replayed mean of a 12-request wave of 100-300 tokens was 4.36 s laid end to end
against 1.80 s for the same run replayed alone and 1.08 s measured. Either way the
simulator's prediction is compared with what the load test measured for the same requests
(:func:`measured_summary`).

:func:`target_deployments` maps each target of the report onto the simulator's deployment of the
same engines: ``spec`` -> ``all-spec`` of its endpoints, ``plain`` -> ``all-plain``, ``router``
-> the router in front of its speculative and plain endpoints (matched by their metrics URLs),
as a new deployment runs it (:func:`loadtests.split.specgate_at`, the ``learned`` row).

Errors: :class:`loadtests.split.SplitError` (no such target, no usable row).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtests.closedloop import find_loops
from loadtests.dayreport import Objective
from loadtests.dayshapes import Request
from loadtests.daysim import Deployment, all_plain, all_spec
from loadtests.split import SplitError

__all__ = ["LoadTestDay", "Measured", "is_load_test_log", "load_test_day", "log_targets", "measured_summary",
           "target_deployments"]


@dataclass(frozen=True)
class Measured:
    """What the load test measured for one request (seconds; None where it did not say)."""

    e2e_s: float
    ttft_s: float | None
    tpot_s: float | None


@dataclass(frozen=True)
class LoadTestDay:
    """One target's measured runs of a load test, laid end to end (module docstring).

    Attributes:
        target: the target's name.
        requests: the day, sorted by arrival (s from the first run's start).
        measured: what was measured for ``requests[i]``, index for index.
        runs: measured runs laid end to end.
        span_s: the day's length (s): the last run's end.
        left_out: rows not in the day, by why: ``warmup``, ``failed``, ``other targets``.
        follows: the runs' closed loops and each run's start after the previous run's end,
            ``{rid: (predecessor rid, gap_s)}`` (:func:`loadtests.daysim.simulate_day`'s
            ``follows``); closed_runs: the runs found closed.
        chained: requests that follow the previous run's last response (module docstring).
    """

    target: str
    requests: list[Request]
    measured: list[Measured]
    runs: int
    span_s: float
    left_out: dict[str, int] = field(default_factory=dict)
    follows: dict[int, tuple[int, float]] = field(default_factory=dict)
    closed_runs: int = 0
    chained: int = 0

    def describe(self) -> str:
        """One line saying what is replayed."""
        out = ", ".join(f"{n} {why}" for why, n in self.left_out.items() if n)
        return (f"day: target {self.target!r} of the load test: {len(self.requests)} measured requests of "
                f"{self.runs} runs, laid end to end at the times its loop sent them ({self.span_s:.1f} s); "
                f"{self.closed_runs} runs replayed as closed loops ({len(self.follows) - self.chained} requests "
                f"sent when a response ended), each run after the previous one's end ({self.chained} requests)"
                + (f"; left out: {out}" if out else ""))


def is_load_test_log(rows: Sequence[Mapping[str, Any]]) -> bool:
    """True when ``rows`` are a load test's (they name a ``target`` and a ``phase``)."""
    return any("target" in r and "phase" in r for r in rows)


def log_targets(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The targets of a load test's rows, in the order they first appear."""
    return list(dict.fromkeys(str(r["target"]) for r in rows if "target" in r))


def load_test_day(rows: Sequence[Mapping[str, Any]], target: str | None = None, *,
                  temperature: float | None = None, cached_fraction: float = 0.0) -> LoadTestDay:
    """The day of one target's measured runs (module docstring).

    Args:
        rows: the load test's rows, in the log's order.
        target: the target replayed; None: ``router`` when the log has it (the router in front
            of a split, what calibrate-split advises on), else the only target.
        temperature: overrides each row's ``temperature`` (default: the row's, else 0).
        cached_fraction: share of each prompt taken as cached (load-test rows do not say).

    Raises:
        SplitError: the target is not in the log (or none given among several), or it has no
            measured request with its tokens and times.
    """
    targets = log_targets(rows)
    if target is None:
        if "router" in targets:
            target = "router"
        elif len(targets) == 1:
            target = targets[0]
        else:
            raise SplitError(f"the load test has targets {', '.join(targets)}: choose the one to replay "
                             "with --target")
    if target not in targets:
        raise SplitError(f"target {target!r} is not in the load test (targets: {', '.join(targets) or 'none'})")
    left = {"warmup": 0, "failed": 0, "other targets": 0}
    runs: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("target") != target:
            left["other targets"] += 1
        elif r.get("phase") != "measure":
            left["warmup"] += 1
        else:
            runs.setdefault((r.get("bucket"), r.get("load"), r.get("rep")), []).append(r)
    offset = 0.0
    day: list[tuple[float, int, Request, Measured]] = []
    links: dict[int, tuple[int, float]] = {}  # by position in ``day``
    closed_runs = chained = 0
    last: tuple[int, float] | None = None  # the previous runs' last response: (position, end s)
    for run in runs.values():
        ends = [float(r["t_start"]) + float(r["e2e_s"]) for r in run
                if r.get("t_start") is not None and r.get("e2e_s") is not None]
        first = len(day)
        for r in run:
            p, o, t, e2e = r.get("prompt_tokens"), r.get("output_tokens"), r.get("t_start"), r.get("e2e_s")
            if r.get("error") or not p or not o or t is None or e2e is None:
                left["failed"] += 1
                continue
            temp = temperature if temperature is not None else float(r.get("temperature") or 0.0)
            budget = max(int(r.get("max_tokens") or o), int(o))
            req = Request(0, offset + float(t), int(p), int(int(p) * cached_fraction), int(o), budget, temp,
                          str(r.get("bucket") or ""))
            day.append((req.arrival_s, len(day), req, Measured(float(e2e), r.get("ttft_s"), r.get("tpot_s"))))
        loops = find_loops([{"arrival_s": a, "duration_s": m.e2e_s, "n": 1} for a, _, _, m in day[first:]])
        closed_runs += loops.closed
        links.update({first + j: (first + i, gap) for j, (i, gap) in loops.links.items()})
        if last is not None:  # the run starts when the previous one has ended
            for j in range(first, len(day)):
                if j not in links:
                    links[j] = (last[0], day[j][0] - last[1])
                    chained += 1
        if len(day) > first:
            last = max(((j, day[j][0] + day[j][3].e2e_s) for j in range(first, len(day))), key=lambda x: x[1])
        offset += max(ends, default=0.0)
    if not day:
        raise SplitError(f"target {target!r} has no measured request with prompt_tokens, output_tokens, "
                         "t_start and e2e_s")
    day.sort(key=lambda x: (x[0], x[1]))
    rid = {pos: i for i, (_, pos, _, _) in enumerate(day)}
    reqs = [Request(i, r.arrival_s, r.prompt_tokens, r.cached_tokens, r.output_tokens, r.max_new_tokens,
                    r.temperature, r.kind) for i, (_, _, r, _) in enumerate(day)]
    follows = {rid[j]: (rid[i], gap) for j, (i, gap) in links.items()}
    return LoadTestDay(target, reqs, [m for _, _, _, m in day], len(runs), offset, left, follows, closed_runs,
                       chained)


def measured_summary(day: LoadTestDay, *, objective: Objective | None = None) -> dict[str, Any]:
    """The measured numbers of ``day`` in :func:`loadtests.dayreport.summarize`'s terms:
    ``{"requests", "mean_s", "p90_s", "goodput_rps"}``; goodput counts the requests within
    ``objective`` (TTFT and TPOT, as the simulator's) per second of the day's arrivals (first
    to last, the denominator :func:`loadtests.split.advise_split` uses)."""
    objective = objective or Objective()
    e2e = [m.e2e_s for m in day.measured]
    good = sum(1 for m in day.measured if m.ttft_s is not None and m.ttft_s <= objective.ttft_slo_s
               and (m.tpot_s is None or m.tpot_s <= objective.tpot_slo_s))
    day_s = max(r.arrival_s for r in day.requests) or 1.0
    p90 = sorted(e2e)[max(0, math.ceil(0.9 * len(e2e)) - 1)]  # nearest rank, as summarize's
    return {"requests": len(e2e), "mean_s": statistics.fmean(e2e), "p90_s": p90, "goodput_rps": good / day_s}


def target_deployments(report: Mapping[str, Any],
                       specgate_at: Callable[[int, int], Deployment]) -> dict[str, tuple[str, int, Deployment]]:
    """``{target name: (row label, engines, deployment)}`` for the report's targets whose
    engines are known (module docstring); the row label is the name of the matching row of
    :func:`loadtests.split.deployments_for` at that many engines (``all-spec``, ``all-plain``,
    ``learned ks+(n-k)p``).

    Args:
        report: a load-test report (``targets``: ``name``, ``role``, ``metrics_urls``).
        specgate_at: ``(k, n) ->`` the router in front of k speculative + n-k plain engines.
    """
    targets = report.get("targets") or []
    urls = {t.get("role"): set(t.get("metrics_urls") or ()) for t in targets}
    out: dict[str, tuple[str, int, Deployment]] = {}
    for t in targets:
        n = max(1, len(t.get("metrics_urls") or ()))
        if t.get("role") == "spec":
            out[t["name"]] = ("all-spec", n, all_spec(n))
        elif t.get("role") == "plain":
            out[t["name"]] = ("all-plain", n, all_plain(n))
        elif t.get("role") == "router" and urls.get("spec") is not None:
            mine = set(t.get("metrics_urls") or ())
            k = len(mine & urls["spec"])
            if mine and 0 < k < len(mine) and not mine - urls["spec"] - urls.get("plain", set()):
                out[t["name"]] = (f"learned {k}s+{len(mine) - k}p", len(mine), specgate_at(k, len(mine)))
    return out
