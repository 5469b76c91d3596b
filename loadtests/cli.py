"""``specgate loadtest``, ``specgate calibrate``, ``specgate calibrate-split``, ``specgate loadtest-local`` and
``specgate loadtest-fakes``.

Registered on the ``specgate`` parser by :func:`add_commands` (``router/cli.py`` imports this
module). Each sub-command sets ``func(args) -> int`` (exit code: 0 done, 1 the load test ran
but no request succeeded, 2 bad arguments/config/report; ``loadtest-local``: 1 when the grid
stopped early, a request failed, calibration failed or a server did not start, 130 when
interrupted by Ctrl-C or SIGTERM, its servers stopped).

See ``docs/loadtests.md`` for the walk-through.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from loadtests.plancli import add_commands as plan_commands

__all__ = ["add_commands", "parse_grid"]


def parse_grid(text: str) -> dict[str, Any]:
    """``"ctx=1k-2k,8k-16k;conc=1,4,8"`` (or ``rate=0.5,2``) -> workload keys.

    Keys: ``ctx``/``context``/``buckets`` (token ranges), ``conc``/``concurrency`` (closed
    loop), ``rate`` (open loop, requests/s).

    Raises:
        loadtests.workload.WorkloadError: unknown key or bad value.
    """
    from loadtests.workload import WorkloadError, parse_buckets, parse_loads

    out: dict[str, Any] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep:
            raise WorkloadError(f"grid part {part!r} is not KEY=VALUES")
        if key in ("ctx", "context", "buckets"):
            out["buckets"] = parse_buckets(value)
        elif key in ("conc", "concurrency"):
            out["loads"], out["mode"] = parse_loads(value), "closed"
        elif key == "rate":
            out["loads"], out["mode"] = parse_loads(value), "open"
        else:
            raise WorkloadError(f"unknown grid key {key!r} (ctx, conc, rate)")
    return out


def _workload_from_args(args: argparse.Namespace) -> Any:
    import yaml

    from loadtests.workload import Workload, WorkloadError, parse_buckets, parse_loads, parse_range

    data: dict[str, Any] = {}
    if args.workload:
        try:
            loaded = yaml.safe_load(Path(args.workload).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise WorkloadError(f"cannot read workload {args.workload}: {exc}") from None
        if not isinstance(loaded, dict):
            raise WorkloadError(f"workload {args.workload} must be a mapping")
        data.update(loaded)
    w = Workload.from_dict(data)
    kw: dict[str, Any] = {}
    if args.grid:
        kw.update(parse_grid(args.grid))
    if args.buckets:
        kw["buckets"] = parse_buckets(args.buckets)
    if args.concurrency:
        kw["loads"], kw["mode"] = parse_loads(args.concurrency), "closed"
    if args.rate:
        kw["loads"], kw["mode"] = parse_loads(args.rate), "open"
    simple = {
        "context_length": args.context_length, "model": args.model, "tokenizer": args.tokenizer,
        "copy_fraction": args.copy_fraction, "corpus": args.corpus, "trace": args.trace,
        "temperature": args.temperature, "sampled_fraction": args.sampled_fraction,
        "requests_per_run": args.requests, "requests_per_load": args.requests_per_load,
        "min_requests_per_run": args.min_requests,
        "warmup_runs": args.warmup, "repetitions": args.repetitions,
        "seed": args.seed, "max_duration_s": args.max_duration_s,
        "request_timeout_s": args.request_timeout_s, "metrics_interval_s": args.metrics_interval_s,
    }
    kw.update({k: v for k, v in simple.items() if v is not None})
    if args.output_tokens:
        kw["output_tokens"] = parse_range(args.output_tokens)
    if args.no_stream:
        kw["stream"] = False
    if args.no_ignore_eos:
        kw["ignore_eos"] = False
    merged = w.as_dict()
    merged.update({k: v for k, v in kw.items()})
    if isinstance(merged.get("buckets"), tuple):
        merged["buckets"] = [b.as_dict() for b in merged["buckets"]]
    return Workload.from_dict(merged)


def _targets_from_args(args: argparse.Namespace) -> list[Any]:
    from loadtests.runner import LoadTestError, Target

    def metrics(url: str) -> str:
        return url.rstrip("/") + "/metrics"

    overrides: dict[str, list[str]] = {}
    for item in args.metrics or ():
        name, sep, url = item.partition("=")
        if not sep:
            raise LoadTestError(f"--metrics expects NAME=URL, got {item!r}")
        overrides.setdefault(name, []).append(url)
    if args.target:
        if args.spec or args.plain or args.router:
            raise LoadTestError("give --target alone, or --spec/--plain/--router for a comparison")
        urls = tuple(overrides.get("target", [metrics(args.target)]))
        return [Target("target", args.target, "target", urls, api_key=args.api_key)]
    given = [(n, u) for n, u in (("spec", args.spec), ("plain", args.plain), ("router", args.router)) if u]
    if len(given) < 2:
        raise LoadTestError("a comparison needs at least two of --spec, --plain, --router "
                            "(or give --target)")
    out = []
    for name, url in given:
        if name == "router":
            default = [metrics(u) for u in (args.spec, args.plain) if u]
        else:
            default = [metrics(url)]
        out.append(Target(name, url, name, tuple(overrides.get(name, default)), api_key=args.api_key))
    return out


def _loadtest(args: argparse.Namespace) -> int:
    from loadtests.report import build_report, write_report
    from loadtests.runner import LoadTest, LoadTestError
    from loadtests.workload import WorkloadError

    try:
        workload = _workload_from_args(args)
        targets = _targets_from_args(args)
    except (WorkloadError, LoadTestError) as exc:
        print(f"specgate loadtest: {exc}", file=sys.stderr)
        return 2

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), disable=args.quiet, transient=False)
    task = progress.add_task("starting", total=None)

    def tick(done: int, total: int, desc: str) -> None:
        progress.update(task, completed=done, total=total, description=desc)

    test = LoadTest(workload, targets, progress=tick)
    try:
        with progress:
            asyncio.run(test.run())
    except (WorkloadError, LoadTestError) as exc:
        print(f"specgate loadtest: {exc}", file=sys.stderr)
        return 2
    speculation = {"gamma": args.gamma, "drafter_cost_ratio": args.drafter_cost}
    report = build_report(test, speculation=speculation)
    results = [r for rec in test.records for r in rec.results]
    paths = write_report(report, args.out, results=results, plots=not args.no_plots)
    c = report["counts"]
    print(f"wrote {', '.join(str(p) for p in paths)}")
    print(f"requests: {c['sent']} sent, {c['ok']} ok, {c['warmup']} warm-up; "
          f"stopped: {report['stopped']['reason']}")
    for name, table in report["tables"].items():
        if "_vs_" in name:
            for row in table["rows"]:
                vals = ", ".join(f"{k}: {'-' if v is None else f'{v:.2f}x'}"
                                 for k, v in row["values"].items())
                print(f"{name} {row['bucket']}: {vals}")
    return 0 if c["ok"] > 0 else 1


def _calibrate(args: argparse.Namespace) -> int:
    from loadtests.calibrate import CalibrationError, calibrate_report
    from loadtests.report import ReportError

    try:
        cal, _merged, text, written = calibrate_report(
            Path(args.report), config=Path(args.config) if args.config else None,
            out=Path(args.out) if args.out else None,
            evidence=Path(args.evidence) if args.evidence else None,
            merged_config=Path(args.merged_config) if args.merged_config else None,
            min_speedup=args.min_speedup, hysteresis=args.hysteresis, gamma=args.gamma,
            drafter_cost=args.drafter_cost, saturation_bucket=args.saturation_bucket)
    except (ReportError, CalibrationError) as exc:
        print(f"specgate calibrate: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    for key in ("long_prompt_tokens", "saturation"):
        summary = (cal.evidence.get(key) or {}).get("summary")
        if summary:
            print(f"{key}: {summary}", file=sys.stderr)
    for w in cal.evidence.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {' and '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


def _calibrate_split(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from loadtests.dayreport import Objective, read_request_log, summarize
    from loadtests.dayrouter import settings_for
    from loadtests.dayshapes import default_engine_model
    from loadtests.daysim import simulate_day
    from loadtests.report import ReportError, load_report
    from loadtests.speedfit import FitError, engine_model_from_fit, fit_speed_model
    from loadtests.split import SplitError, advise_split, requests_from_log, specgate_at
    from loadtests.splitlog import (
        is_load_test_log,
        load_test_day,
        measured_summary,
        target_deployments,
    )

    try:
        rows = read_request_log(args.day)
        model = default_engine_model()
        fit = report = None
        if args.report:
            report = load_report(Path(args.report))
            fit = fit_speed_model(report)
            model = engine_model_from_fit(fit, model)
        objective = Objective(ttft_slo_s=args.ttft_slo_s, tpot_slo_s=args.tpot_slo_s)
        day = None
        if is_load_test_log(rows):
            day = load_test_day(rows, args.target, temperature=args.temperature,
                                cached_fraction=args.cached_fraction)
            reqs = day.requests
        elif args.target:
            raise SplitError("--target picks a target of a load test's log; this log names none")
        else:
            reqs = requests_from_log(rows, temperature=args.temperature, cached_fraction=args.cached_fraction)
        settings = settings_for(model)
        over = {k: v for k, v in (("long_prompt_tokens", args.long_prompt_tokens),
                                  ("saturation_enter", args.saturation_enter),
                                  ("saturation_exit", args.saturation_exit)) if v is not None}
        settings = replace(settings, **over)
        if settings.saturation_exit >= settings.saturation_enter:
            raise SplitError("--saturation-exit must be < --saturation-enter")
        advice = advise_split(reqs, args.engines, model, settings=settings, metric=args.metric, seed=args.seed,
                              predict=not args.no_predict, objective=objective,
                              follows=day.follows if day is not None else None)
        checks = []
        if day is not None:
            print(day.describe(), file=sys.stderr)
            deps = target_deployments(report, lambda k, n: specgate_at(k, n, settings)) if report else {}
            if day.target in deps and deps[day.target][1] == args.engines:
                advice.measured[deps[day.target][0]] = measured_summary(day, objective=objective)
            # every target's own requests through its own engines: the simulator against the load test
            for name, (label, n, dep) in deps.items():
                own = day if name == day.target else load_test_day(
                    rows, name, temperature=args.temperature, cached_fraction=args.cached_fraction)
                pred = summarize(simulate_day(own.requests, dep, model, seed=args.seed, follows=own.follows),
                                 day_s=max(r.arrival_s for r in own.requests) or 1.0,
                                 long_prompt_tokens=settings.long_prompt_tokens, objective=objective)
                checks.append({"target": name, "deployment": label, "engines": n,
                               "measured": measured_summary(own, objective=objective),
                               "predicted": {k: pred[k] for k in ("requests", "mean_s", "p90_s", "goodput_rps")}})
            if not deps:
                print("no --report: the targets' engines are unknown, so nothing measured is set beside a "
                      "prediction", file=sys.stderr)
    except (OSError, ValueError, ReportError, FitError, SplitError) as exc:
        print(f"specgate calibrate-split: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(advice.text())
    if checks:
        sys.stdout.write("check: each target's own measured requests replayed through its own engines\n")
        for c in checks:
            m, p = c["measured"], c["predicted"]
            sys.stdout.write(f"  {c['target']:<8} {c['deployment']:<16} {m['requests']:>5} requests  mean "
                             f"{m['mean_s']:.3f} s measured, {p['mean_s']:.3f} s predicted "
                             f"({p['mean_s'] / m['mean_s'] - 1:+.0%}); p90 {m['p90_s']:.3f} / {p['p90_s']:.3f} s; "
                             f"goodput {m['goodput_rps']:.2f} / {p['goodput_rps']:.2f} /s\n")
    sys.stdout.flush()
    if args.out:
        doc = advice.as_dict()
        doc["checks"] = checks
        doc["day"] = None if day is None else {"target": day.target, "requests": len(day.requests),
                                                "runs": day.runs, "span_s": day.span_s, "left_out": day.left_out}
        doc["speed_model"] = fit
        Path(args.out).write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _local(args: argparse.Namespace) -> int:
    import signal
    import threading
    import time

    from loadtests.local import LocalRunError, LocalSettings, run_local
    from loadtests.workload import WorkloadError

    settings = LocalSettings(
        config=Path(args.config), out=Path(args.out), grid=args.grid, output_tokens=args.output_tokens,
        warmup_runs=args.warmup, repetitions=args.repetitions,
        requests_per_run=args.requests, requests_per_load=args.requests_per_load,
        min_requests_per_run=args.min_requests, copy_fraction=args.copy_fraction,
        sampled_fraction=args.sampled_fraction, seed=args.seed, time_limit_s=args.time_limit_s, engine_warmup=args.engine_warmup,
        plots=not args.no_plots)

    def terminate(signum: int, _frame: Any) -> None:  # SIGTERM: unwind so the servers get stopped
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second one must not cut the cleanup
        raise KeyboardInterrupt(f"signal {signum}")

    main_thread = threading.current_thread() is threading.main_thread()  # signals: main thread only
    previous = signal.signal(signal.SIGTERM, terminate) if main_thread else None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), disable=args.quiet, transient=False, console=console)
    task = progress.add_task("starting the local stack", total=None)

    def tick(done: int, total: int, desc: str) -> None:
        progress.update(task, completed=done, total=total, description=desc)

    def note(line: str) -> None:
        if args.quiet:
            print(line, file=sys.stderr)
        else:
            progress.console.print(line, highlight=False, markup=False)

    t0 = time.monotonic()
    try:
        with progress:
            result = run_local(settings, note=note, progress=tick)
    except KeyboardInterrupt as exc:
        print(f"specgate loadtest-local: interrupted ({exc or 'Ctrl-C'}); every server it started is "
              f"stopped", file=sys.stderr)
        return 130
    except (LocalRunError, WorkloadError) as exc:
        print(f"specgate loadtest-local: {exc}", file=sys.stderr)
        print(f"wall time {time.monotonic() - t0:.0f} s; details in {Path(args.out) / 'run.json'}")
        return 2 if isinstance(exc, WorkloadError) else 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    report = result.report or {}
    for name, table in (report.get("tables") or {}).items():
        if "_vs_" in name:
            for row in table["rows"]:
                vals = ", ".join(f"c={k}: {'-' if v is None else f'{v:.2f}x'}" for k, v in row["values"].items())
                print(f"{name} {row['bucket']}: {vals}")
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in result.phases_s.items())
    load = result.load
    print(f"load average (1 min) on {load.get('cpus')} CPUs: {load.get('baseline_1m', 0):.2f} before start, "
          f"mean {load.get('mean_1m') or 0:.2f}, max {load.get('max_1m') or 0:.2f} during the run")
    for p in result.problems:
        print(f"problem: {p}")
    print(f"wrote {', '.join(result.paths)}")
    if result.patch is not None:
        print(f"`specgate config check {Path(args.out) / 'merged-config.yaml'}` accepts the patched config")
    print(f"wall time {result.wall_s:.0f} s ({phases})")
    return result.exit_code


def _fakes(args: argparse.Namespace) -> int:
    import signal
    import threading

    from loadtests.simulate import SimModel, serve_pair

    model = SimModel(t0_s=args.t0_s, batch_knee=args.batch_knee, alpha_short=args.alpha,
                     alpha_knee_tokens=args.alpha_knee_tokens,
                     alpha_drop_per_doubling=args.alpha_drop_per_doubling, gamma=args.gamma, c=args.c,
                     prefill_s_per_token=args.prefill_s_per_token)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with serve_pair(model, model_name=args.model_name, context_length=args.context_length,
                    ports=(args.spec_port, args.plain_port)) as (spec, plain):
        print(json.dumps({"spec": spec.base_url, "plain": plain.base_url,
                          "crossover_context_tokens_at_load_1": model.crossover_context(1.0),
                          "crossover_load_at_short_context": model.crossover_load(1.0)}),
              flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``loadtest``, ``calibrate``, ``calibrate-split``, ``loadtest-local``, ``loadtest-fakes``
    and ``plan`` (:mod:`loadtests.plancli`) on the ``specgate`` parser."""
    p = sub.add_parser("loadtest", help="measure operating points (context x load) of one target "
                       "or compare spec/plain/router")
    tg = p.add_argument_group("targets")
    tg.add_argument("--target", help="one OpenAI-compatible base URL (router, pool or SGLang)")
    tg.add_argument("--spec", help="compare mode: the speculative pool's base URL")
    tg.add_argument("--plain", help="compare mode: the plain pool's base URL")
    tg.add_argument("--router", help="compare mode: the router's base URL")
    tg.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY") or None,
                    help="sent as 'Authorization: Bearer KEY' to every target (a router with "
                         "auth.api_keys, SGLang's --api-key); default: $OPENAI_API_KEY")
    tg.add_argument("--metrics", action="append", metavar="NAME=URL",
                    help="a /metrics URL to sample for target NAME (target, spec, plain, router); "
                         "repeatable; default: each pool's own, the router's pools for the router")
    wg = p.add_argument_group("workload (a --workload YAML file, overridden by these flags)")
    wg.add_argument("--workload", help="workload YAML (keys of loadtests.workload.Workload)")
    wg.add_argument("--grid", help='"ctx=1k-2k,8k-16k;conc=1,4,8" or "...;rate=0.5,2"')
    wg.add_argument("--buckets", help="prompt-token buckets, e.g. 1k-2k,8k-16k (k = 1024)")
    wg.add_argument("--concurrency", help="closed-loop concurrency levels, e.g. 1,4,8")
    wg.add_argument("--rate", help="open-loop Poisson arrival rates (requests/s), e.g. 0.5,2")
    wg.add_argument("--context-length", type=int, help="model context (tokens) for scaled buckets")
    wg.add_argument("--model", help="model name (default: from /v1/models)")
    wg.add_argument("--tokenizer", help="local tokenizer dir for exact prompt lengths")
    wg.add_argument("--output-tokens", help="output tokens per request: N or LO-HI")
    wg.add_argument("--copy-fraction", type=float, help="share of copy-style prompts in [0, 1]")
    wg.add_argument("--temperature", type=float,
                    help="sampling temperature of every request (default 0: greedy)")
    wg.add_argument("--sampled-fraction", type=float,
                    help="share of requests sent at temperature 1 (default 0); e.g. 0.5 measures both "
                         "classes' acceptance in one run: `specgate calibrate` then writes complete speed blocks")
    wg.add_argument("--corpus", help="text file to cut passages from")
    wg.add_argument("--trace", help="JSONL/CSV of real prompt_tokens[,output_tokens]")
    wg.add_argument("--no-stream", action="store_true", help="non-streamed requests")
    wg.add_argument("--no-ignore-eos", action="store_true", help="let the model stop at EOS")
    wg.add_argument("--requests", type=int, help="measured requests per run (default: "
                    "max(--min-requests, --requests-per-load x load))")
    wg.add_argument("--requests-per-load", type=float, help="requests per run per unit of load "
                    "(closed loop: waves; default 4)")
    wg.add_argument("--min-requests", type=int, help="floor of a run's requests (default 8)")
    wg.add_argument("--warmup", type=int, help="warm-up runs per point and target (default 3)")
    wg.add_argument("--repetitions", type=int, help="measured runs per point and target (default 3)")
    wg.add_argument("--seed", type=int, help="seed of the workload sampler")
    wg.add_argument("--max-duration-s", type=float, help="stop starting requests after this (s)")
    wg.add_argument("--request-timeout-s", type=float, help="bound on one request (s)")
    wg.add_argument("--metrics-interval-s", type=float, help="seconds between two /metrics samples")
    og = p.add_argument_group("output")
    og.add_argument("--out", required=True, help="output directory")
    og.add_argument("--gamma", type=int, help="draft length, recorded for calibrate's model")
    og.add_argument("--drafter-cost", type=float, help="drafter cost ratio c, recorded for calibrate")
    og.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    og.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_loadtest)

    c = sub.add_parser("calibrate", help="propose routing thresholds from a comparison report")
    c.add_argument("report", help="report.json from `specgate loadtest --spec ... --plain ...`")
    c.add_argument("--config", help="router YAML to patch and validate (and to read gamma, c from)")
    c.add_argument("--out", help="patch file (default: calibration.yaml next to the report)")
    c.add_argument("--evidence", help="evidence JSON (default: the patch path with .json)")
    c.add_argument("--merged-config", help="also write the whole patched config here")
    c.add_argument("--min-speedup", type=float, default=1.0, help="S below which speculation "
                   "stops paying (default 1.0)")
    c.add_argument("--hysteresis", type=float, default=0.25, help="exit = floor(enter * (1 - h))")
    c.add_argument("--gamma", type=int, help="draft length for the speedup model")
    c.add_argument("--drafter-cost", type=float, help="drafter cost ratio c for the speedup model")
    c.add_argument("--saturation-bucket", help="bucket whose load axis sets saturation "
                   "(default: the shortest)")
    c.set_defaults(func=_calibrate)

    cs = sub.add_parser("calibrate-split", help="advise how to divide N engines between the spec and "
                        "the plain pool by replaying a measured day in the day simulator")
    cs.add_argument("--day", required=True, help="request log (JSONL): the day simulator's, or a load "
                    "test's requests.jsonl")
    cs.add_argument("--engines", type=int, default=2, help="engines to divide (default 2)")
    cs.add_argument("--report", help="load-test report.json to fit the speed model from (default: the "
                    "simulator's built-in model)")
    cs.add_argument("--metric", default="mean_s", choices=["mean_s", "p90_s", "long_mean_s", "goodput_rps"],
                    help="what the advice optimises (default mean_s)")
    cs.add_argument("--target", help="the target of a load test's log replayed as the day (default: router "
                    "when the log has it, else its only target); its measured runs are laid end to end")
    cs.add_argument("--ttft-slo-s", type=float, default=5.0, help="goodput's time-to-first-token bound "
                    "(seconds, default 5)")
    cs.add_argument("--tpot-slo-s", type=float, default=0.035, help="goodput's time-per-output-token bound "
                    "(seconds, default 0.035)")
    cs.add_argument("--temperature", type=float, help="temperature of every request (load-test logs have "
                    "none; default: the log's, else 0)")
    cs.add_argument("--cached-fraction", type=float, default=0.0, help="share of each prompt assumed in "
                    "the prefix cache where the log has no cached_tokens (default 0)")
    cs.add_argument("--long-prompt-tokens", type=int, help="routing.long_prompt_tokens of the policy "
                    "replayed (default 32768)")
    cs.add_argument("--saturation-enter", type=int, help="routing.saturation.enter (default: the model's "
                    "crossover batch)")
    cs.add_argument("--saturation-exit", type=int, help="routing.saturation.exit")
    cs.add_argument("--no-predict", action="store_true", help="replay the routed splits on the thresholds "
                    "alone (no pool speed models, no choice by predicted completion time)")
    cs.add_argument("--seed", type=int, default=0, help="the simulator's seed")
    cs.add_argument("--out", help="also write the predictions as JSON here")
    cs.set_defaults(func=_calibrate_split)

    from loadtests.local import DEFAULT_GRID as DEFAULT_GRID_LOCAL

    loc = sub.add_parser("loadtest-local", help="start the config's local SGLang CPU pools and router, "
                         "run the spec/plain/router grid, report, calibrate, stop (time-bounded)")
    loc.add_argument("--config", default="examples/demo.yaml", help="operator YAML whose pools have engines")
    loc.add_argument("--out", default="runs/loadtest-local", help="output directory")
    loc.add_argument("--grid", default=DEFAULT_GRID_LOCAL, help=f"default {DEFAULT_GRID_LOCAL!r}")
    loc.add_argument("--output-tokens", type=int, default=32, help="max_tokens of every request")
    loc.add_argument("--warmup", type=int, default=1, help="warm-up runs per point and target")
    loc.add_argument("--repetitions", type=int, default=5, help="measured runs per point and target")
    loc.add_argument("--requests", type=int, default=None, help="measured requests per run "
                     "(default: max(--min-requests, --requests-per-load x concurrency))")
    loc.add_argument("--requests-per-load", type=float, default=1.0,
                     help="requests per run per unit of concurrency (waves; default 1)")
    loc.add_argument("--min-requests", type=int, default=4, help="floor of a run's requests (default 4)")
    loc.add_argument("--copy-fraction", type=float, default=0.0, help="fraction (0-1) of prompts that ask to copy text (default 0)")
    loc.add_argument("--sampled-fraction", type=float, default=0.25,
                     help="share of requests sent at temperature 1 (default 0.25: every 4th; both classes' "
                          "accept lengths, so calibrate writes complete speed blocks); 0: all greedy")
    loc.add_argument("--seed", type=int, default=0, help="seed of the workload sampler (default 0)")
    loc.add_argument("--engine-warmup", type=int, default=1, help="warm-up generations per pool")
    loc.add_argument("--time-limit-s", type=float, default=600.0,
                     help="bound on the whole command, start-up and shutdown included (s)")
    loc.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    loc.add_argument("--quiet", action="store_true", help="no progress bar")
    loc.set_defaults(func=_local)

    f = sub.add_parser("loadtest-fakes", help="serve a spec and a plain fake SGLang paced by the "
                       "speed model (for trying loadtest/calibrate without GPUs)")
    f.add_argument("--model-name", default="sim-model", help="served model name (default sim-model)")
    f.add_argument("--spec-port", type=int, default=0, help="0: a free port")
    f.add_argument("--plain-port", type=int, default=0, help="0: a free port")
    f.add_argument("--context-length", type=int, default=131072, help="context length (tokens)")
    f.add_argument("--t0-s", type=float, default=0.004, help="plain per-token time at batch 0 (s)")
    f.add_argument("--batch-knee", type=float, default=16.0, help="batch size (requests) where per-token time starts to grow")
    f.add_argument("--alpha", type=float, default=0.8, help="acceptance rate at short context")
    f.add_argument("--alpha-knee-tokens", type=float, default=4096.0, help="context (tokens) beyond which acceptance falls")
    f.add_argument("--alpha-drop-per-doubling", type=float, default=0.1, help="acceptance lost per doubling of context past the knee")
    f.add_argument("--gamma", type=int, default=4, help="draft length (tokens)")
    f.add_argument("--c", type=float, default=0.05, help="drafter cost ratio")
    f.add_argument("--prefill-s-per-token", type=float, default=0.0, help="prefill time per prompt token (s)")
    f.set_defaults(func=_fakes)
    plan_commands(sub)
