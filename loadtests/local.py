"""``specgate loadtest-local``: the operating-point table of the local CPU stack, in one command.

What it does, in order, bounded by ``time_limit_s`` seconds of wall time in all:

1. Copies the operator config with every endpoint moved to a free port of 127.0.0.1 and
   relative paths made absolute (:func:`serving.demo._prepare_config`, the demo's own step),
   and validates it (:func:`router.config.tree.load_config`).
2. Starts, all at once, the speculative and the plain pool's **real SGLang servers** with the
   arguments and environment ``specgate serve`` execs (:func:`serving.launch.engine_argv`,
   :func:`serving.launch.engine_env`; CPU engines include SGLang's ``--sleep-on-idle``, see
   :data:`serving.local.CPU_FLAGS`), and the router (``python -m router.cli router``); each is owned
   by a :class:`serving.local.SGLangProcess` (own process group; SIGTERM, then SIGKILL).
   Meanwhile it loads the served model's tokenizer (exact prompt lengths). Then it waits for
   ``/health``, ``engine_warmup`` warm-up generations per pool
   (:func:`serving.warmup.wait_ready`) and the router's ``/ready``.
3. Runs the comparison grid (:class:`loadtests.runner.LoadTest`): the same workload against
   the spec pool, the plain pool and the router, interleaved; the test's own
   ``max_duration_s`` is what is left of the time limit minus ``reserve_s`` (report,
   calibration, shutdown), so it stops by itself.
4. Stops the router and both pools (always: also on errors, Ctrl-C and SIGTERM).
5. Writes ``report.json``/``report.md``/``requests.jsonl``/PNGs
   (:func:`loadtests.report.write_report`), then calibrates exactly as
   ``specgate calibrate DIR/report.json --config CONFIG --merged-config ...`` does
   (:func:`loadtests.calibrate.calibrate_report`): ``calibration.yaml`` (the patch),
   ``calibration.json`` (evidence), ``merged-config.yaml`` (the operator config with the
   patch applied, paths absolute), and loads the merged file with
   :func:`router.config.tree.load_config`, the code behind ``specgate config check``.
6. Writes ``run.json``: the settings, wall time per phase (seconds), the machine's 1-minute
   load average (before anything starts: the co-tenants; then every ``load_sample_s`` s),
   problems and the patch.

Defaults suit ``examples/demo.yaml`` (the tiny Llama, EAGLE-3 drafter, one OpenMP thread per
engine, 2 CPU cores): buckets 100-300 and 1000-1400 prompt tokens (the spec pool's context
is 2,048 tokens), concurrency 1, 4 and 12, 32 output tokens, one warm-up run per point and
target, 5 measured repetitions of 4, 4 and 12 requests (one wave at concurrency 4 and 12;
5 runs let the spread verdict tell noise from modes, 3 only say "unsettled").
Timings are this CPU's, not a GPU's: they show the method and the routing; the speedups are
whatever the CPU engines measure.

Errors: :class:`LocalRunError` (the config is invalid or has no speculative or no plain pool
with an engine, a server does not start, the time limit leaves no room for the grid).
Servers are stopped before it propagates.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

__all__ = [
    "DEFAULT_GRID",
    "LocalRunError",
    "LocalRunResult",
    "LocalSettings",
    "LocalStack",
    "run_local",
]

#: The default grid: 2 context buckets scaled to the tiny model x 3 concurrency levels.
DEFAULT_GRID = "ctx=100-300,1000-1400;conc=1,4,12"



class LocalRunError(RuntimeError):
    """The local stack cannot be started or the run cannot fit its time limit."""


@dataclass(frozen=True)
class LocalSettings:
    """What :func:`run_local` runs (units: seconds, tokens).

    Attributes:
        config: the operator YAML (``examples/demo.yaml``); pools with ``engine`` sections.
        out: output directory.
        grid: ``"ctx=...;conc=..."`` (or ``rate=``), as ``specgate loadtest --grid``.
        output_tokens: ``max_tokens`` of every request (exact: ``ignore_eos``).
        warmup_runs: discarded runs per point and target (one wave each).
        repetitions: measured runs per point and target.
        requests_per_run: measured requests per run; None: ``max(min_requests_per_run,
            requests_per_load x concurrency)`` (the defaults: 4, 4 and 12 requests at
            concurrency 1, 4 and 12: one wave where the concurrency reaches 4).
        requests_per_load, min_requests_per_run: see :class:`loadtests.workload.Workload`.
        copy_fraction: share of copy-style prompts.
        sampled_fraction: share of requests sent at temperature 1, the rest greedy
            (:meth:`loadtests.workload.Workload.temperature_of`: 0.25 makes every 4th request of a
            run sampled), so that one run measures both classes' accept lengths and
            ``specgate calibrate`` writes the speculative pool's complete ``speed`` block.
        seed: the workload seed.
        time_limit_s: the whole command's bound: start, grid, report, calibration, stop.
        reserve_s: part of the limit kept for the report, calibration and shutdown.
        engine_warmup: warm-up generations per pool before anything is measured.
        request_timeout_s: one request's limit.
        min_speedup, hysteresis: passed to :func:`loadtests.calibrate.calibrate`.
        plots: write the PNGs.
        load_sample_s: how often the machine's load average is sampled.
    """

    config: Path
    out: Path
    grid: str = DEFAULT_GRID
    output_tokens: int = 32
    warmup_runs: int = 1
    repetitions: int = 5
    requests_per_run: int | None = None
    requests_per_load: float = 1.0
    min_requests_per_run: int = 4
    copy_fraction: float = 0.0
    sampled_fraction: float = 0.25
    seed: int = 0
    time_limit_s: float = 600.0
    reserve_s: float = 45.0
    engine_warmup: int = 1
    request_timeout_s: float = 120.0
    min_speedup: float = 1.0
    hysteresis: float = 0.25
    plots: bool = True
    load_sample_s: float = 5.0


@dataclass
class LocalRunResult:
    """What :func:`run_local` did.

    Attributes:
        exit_code: 0: the grid completed without a failed request and the patch was accepted;
            1: the run ended early (time limit), requests failed, or calibration failed.
        wall_s: the command's wall time (seconds), start to everything stopped.
        phases_s: wall time per phase (``start_pools``, ``warmup``, ``start_router``,
            ``loadtest``, ``report``, ``calibrate``, ``stop``).
        paths: files written.
        report: the report mapping (None when the grid never ran).
        patch: the calibration patch (None when calibration failed).
        problems: why ``exit_code`` is 1.
        load: ``{"cpus", "baseline_1m", "samples_1m", "mean_1m", "max_1m"}``.
        router_view: the router's ``/ready`` after the grid, before anything stops, per pool
            (:func:`router_view`): its learned speed model and its checked predictions (the
            median relative error of the completion time); None when it could not be read.
    """

    exit_code: int = 1
    wall_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    report: dict[str, Any] | None = None
    patch: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)
    router_view: dict[str, Any] | None = None


# --------------------------------------------------------------------------- the stack
def _pool_names(doc: Mapping[str, Any]) -> tuple[str, str]:
    spec = [p for p in doc.get("pools") or [] if p.get("speculative") and p.get("engine")]
    plain = [p for p in doc.get("pools") or [] if not p.get("speculative") and p.get("engine")]
    if not spec or not plain:
        raise LocalRunError("the config needs a speculative and a plain pool, each with an `engine` "
                            "section (the local stack launches them)")
    return spec[0]["name"], plain[0]["name"]


def router_view(ready: Mapping[str, Any]) -> dict[str, Any]:
    """Per pool, what a load test keeps of the router's ``GET /ready`` body (``ready``): the
    learned ``speed_model`` and the ``prediction`` check (:mod:`router.decision.prediction_check`:
    ``median_relative_error`` of the completion time over ``checks`` recent requests, its
    ``bias``, per ``class/bucket`` cells); both None for a pool that is not learning
    (``routing.learning.enabled: false``)."""
    return {name: {"speed_model": view.get("speed_model"), "prediction": view.get("prediction")}
            for name, view in (ready.get("pools") or {}).items()}


def _read_router_view(url: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """:func:`router_view` of the router at ``url`` (None: no JSON answer)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/ready", timeout=timeout_s) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 503 while draining: the body is the same view
        try:
            body = json.loads(exc.read())
        except ValueError:
            return None
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return router_view(body) if isinstance(body, Mapping) else None


def _get(url: str, timeout_s: float = 2.0) -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


class LocalStack:
    """The demo's stack: the speculative and plain SGLang CPU pools and the router.

    Args:
        config: the operator YAML.
        workdir: where the rewritten config and the server logs go.

    :meth:`start` launches everything (or raises :class:`LocalRunError` after stopping what
    it started); :meth:`stop` is idempotent. Attributes: ``config_path``/``doc``/``config``
    (the rewritten config: file, mapping, validated :class:`router.config.tree.Config`),
    ``spec_pool``/``plain_pool`` (pool names), ``urls`` (name -> base URL, ``router``
    included), ``processes``, and after :meth:`start` ``phases_s`` (seconds).

    Raises:
        LocalRunError: the config is invalid or lacks a speculative or plain engine pool.
    """

    def __init__(self, config: Path, workdir: Path) -> None:
        from router import ConfigError, load_config
        from serving.demo import _prepare_config

        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            self.config_path, self.doc = _prepare_config(Path(config), workdir)
            self.config = load_config(self.config_path)
        except (OSError, KeyError, TypeError, ConfigError) as exc:
            raise LocalRunError(f"config {config}: {exc}") from None
        self.spec_pool, self.plain_pool = _pool_names(self.doc)
        self.urls: dict[str, str] = {}
        for pool in self.doc["pools"]:
            if pool["name"] in (self.spec_pool, self.plain_pool):
                self.urls[pool["name"]] = pool["endpoints"][0]
        self.urls["router"] = f"http://127.0.0.1:{self.doc['server']['port']}"
        self.processes: dict[str, Any] = {}
        self.phases_s: dict[str, float] = {}
        self._lock = threading.Lock()
        self._aborted = threading.Event()

    def pool_argv(self, name: str) -> list[str]:
        """``sglang.launch_server`` arguments of pool ``name``: what ``specgate serve`` execs."""
        from serving.launch import engine_argv

        return engine_argv(self.config, name)

    def _launch(self, name: str, deadline: float) -> float:
        """Start one process (``router`` or a pool name) and wait for ``/health``; returns
        its seconds to healthy. Raises serving.local.SGLangStartError."""
        from serving.launch import engine_env
        from serving.local import SGLangProcess, SGLangStartError

        port = int(self.urls[name].rsplit(":", 1)[1])
        if name == "router":
            proc = SGLangProcess(["router", "--config", str(self.config_path), "--json-logs"], port=port,
                                 module="router.cli", log_path=self.workdir / "router.log")
        else:
            proc = SGLangProcess(self.pool_argv(name), port=port, env=engine_env(self.config, name),
                                 log_path=self.workdir / f"pool-{name}.log")
        with self._lock:
            if self._aborted.is_set():
                raise SGLangStartError(f"{name}: start aborted", log_tail="", returncode=None)
            self.processes[name] = proc
        proc.start(ready_timeout_s=max(1.0, deadline - time.monotonic()), poll_interval_s=0.5)
        return float(proc.ready_after_s or 0.0)

    def start(self, deadline: float, *, engine_warmup: int = 1,
              note: Callable[[str], None] = lambda _m: None,
              meanwhile: Callable[[], None] | None = None) -> None:
        """Start both pools and the router at once, warm the pools up, wait for the router's
        ``/ready``; all by ``deadline`` (``time.monotonic()``). ``meanwhile`` runs in this
        thread while the servers start. Raises LocalRunError (everything stopped)."""
        from serving.local import SGLangStartError
        from serving.warmup import WarmupError, wait_ready

        try:
            t = time.monotonic()
            left = deadline - t
            if left < 30:
                raise LocalRunError(f"{left:.0f} s left: no time to start the servers")
            pools = [self.spec_pool, self.plain_pool]
            names = [*pools, "router"]
            note("starting " + ", ".join(f"{'the router' if n == 'router' else 'SGLang pool ' + n} at "
                                         f"{self.urls[n]}" for n in names))
            ready: dict[str, float] = {}
            failed: list[str] = []
            with ThreadPoolExecutor(len(names)) as ex:
                futures = {ex.submit(self._launch, name, deadline): name for name in names}
                try:
                    if meanwhile is not None:
                        meanwhile()
                    for fut in as_completed(futures):
                        try:
                            ready[futures[fut]] = fut.result()
                        except SGLangStartError as exc:
                            if not failed:  # the first failure stops the others' start too
                                failed.append(f"{futures[fut]} did not start: {exc}")
                                self._abort_start(futures)
                except BaseException:  # Ctrl-C, SIGTERM, the tokenizer: no thread may wait on
                    self._abort_start(futures)
                    raise
            if failed:
                raise LocalRunError(failed[0])
            self.phases_s["start"] = time.monotonic() - t
            note("healthy after " + ", ".join(f"{n} {ready[n]:.0f} s" for n in names))

            t = time.monotonic()

            async def warm_all() -> list[Any]:
                return await asyncio.gather(*(
                    wait_ready(self.urls[n], count=engine_warmup, timeout_s=max(1.0, deadline - time.monotonic()),
                               alive=self.processes[n].alive) for n in pools))

            try:
                asyncio.run(warm_all())
            except WarmupError as exc:
                raise LocalRunError(f"warm-up failed: {exc}") from None
            router = self.processes["router"]
            while _get(self.urls["router"] + "/ready") != 200:
                if not router.alive() or time.monotonic() > deadline:
                    raise LocalRunError(f"the router never became ready:\n{router.log_tail(30)}")
                time.sleep(0.25)
            self.phases_s["warmup"] = time.monotonic() - t
        except BaseException:
            self.stop()
            raise

    def _abort_start(self, futures: Mapping[Any, str]) -> None:
        """Stop every process until no launch thread is left waiting on one (a thread that
        had not yet spawned its process when asked to stop sees ``_aborted`` or is stopped
        on the next round)."""
        self._aborted.set()
        while True:
            self.stop()
            if all(f.done() for f in futures):
                return
            time.sleep(0.2)

    def stop(self) -> float:
        """Stop the router, then both pools (in parallel); returns the seconds it took."""
        t = time.monotonic()
        with self._lock:
            procs = dict(self.processes)
        if "router" in procs:
            procs.pop("router").stop()
        if procs:
            with ThreadPoolExecutor(len(procs)) as ex:
                list(ex.map(lambda p: p.stop(), procs.values()))
        return time.monotonic() - t


class _LoadSampler:
    """The machine's 1-minute load average every ``interval_s`` seconds, in a daemon thread."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((round(time.monotonic() - self._t0, 1), os.getloadavg()[0]))
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# --------------------------------------------------------------------------- the command
def _workload(settings: LocalSettings, stack: LocalStack, max_duration_s: float) -> Any:
    from loadtests.cli import parse_grid
    from loadtests.workload import Workload

    doc = stack.doc
    data: dict[str, Any] = {
        "model": doc["model"]["name"], "tokenizer": doc["model"]["tokenizer"],
        "output_tokens": settings.output_tokens, "copy_fraction": settings.copy_fraction,
        "sampled_fraction": settings.sampled_fraction,
        "warmup_runs": settings.warmup_runs, "repetitions": settings.repetitions,
        "requests_per_run": settings.requests_per_run, "requests_per_load": settings.requests_per_load,
        "min_requests_per_run": settings.min_requests_per_run, "seed": settings.seed,
        "max_duration_s": max_duration_s, "request_timeout_s": settings.request_timeout_s,
        "metrics_interval_s": 0.5,
    }
    grid = parse_grid(settings.grid)
    if "buckets" in grid:
        grid["buckets"] = [b.as_dict() for b in grid["buckets"]]
    data.update(grid)
    return Workload.from_dict(data)


def run_local(settings: LocalSettings, *, note: Callable[[str], None] = print,
              progress: Callable[[int, int, str], None] | None = None,
              while_up: Callable[[LocalStack], None] | None = None) -> LocalRunResult:
    """Run the whole command (module docstring); never leaves a server running.

    ``note`` receives one line per step; ``progress`` is the load test's per-request callback;
    ``while_up`` runs after the grid (and the router's ``/ready`` read), before anything
    stops, with the running stack (its wall time is the ``while_up`` phase; an exception it
    raises stops the stack and propagates).

    Raises:
        LocalRunError: a bad config (before anything starts), a server that does not start,
            or no time left for the grid (``run.json`` is written for these two).
        loadtests.workload.WorkloadError: a bad grid (before anything starts).
    """
    from loadtests.calibrate import CalibrationError, calibrate_report, speculation_from_config
    from loadtests.report import ReportError, build_report, write_report
    from loadtests.runner import LoadTest, Target
    from loadtests.workload import PromptFactory
    from router import ConfigError, load_config

    t_start = time.monotonic()
    deadline = t_start + settings.time_limit_s
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    result = LocalRunResult()
    result.load = {"cpus": os.cpu_count(), "baseline_1m": os.getloadavg()[0]}
    stack = LocalStack(settings.config, out / "stack")
    # fail on a bad grid before minutes of server start-up
    _workload(settings, stack, max_duration_s=1.0)
    counter: list[Any] = []

    def load_tokenizer() -> None:  # while the servers start
        from loadtests.workload import TokenCounter

        counter.append(TokenCounter(stack.doc["model"]["tokenizer"]))

    sampler = _LoadSampler(settings.load_sample_s)
    try:
        with sampler:
            try:
                stack.start(deadline - settings.reserve_s, engine_warmup=settings.engine_warmup, note=note,
                            meanwhile=load_tokenizer)
                result.phases_s.update(stack.phases_s)
                budget = deadline - settings.reserve_s - time.monotonic()
                if budget < 10:
                    raise LocalRunError(f"only {budget:.0f} s left for the grid after start-up")
                workload = _workload(settings, stack, max_duration_s=budget)
                u = stack.urls
                sp, pl = stack.spec_pool, stack.plain_pool
                targets = [Target("spec", u[sp], "spec", (u[sp] + "/metrics",)),
                           Target("plain", u[pl], "plain", (u[pl] + "/metrics",)),
                           Target("router", u["router"], "router", (u[sp] + "/metrics", u[pl] + "/metrics"))]
                note(f"grid {settings.grid}: {settings.output_tokens} output tokens, "
                     f"{settings.warmup_runs} warm-up + {settings.repetitions} measured runs per point and "
                     f"target; at most {budget:.0f} s")
                t = time.monotonic()
                test = LoadTest(workload, targets, progress=progress,
                                factory=PromptFactory.from_workload(workload, counter[0]))
                asyncio.run(test.run())
                result.phases_s["loadtest"] = time.monotonic() - t
                result.router_view = _read_router_view(u["router"])
                for pool, view in (result.router_view or {}).items():
                    pred = view.get("prediction") or {}
                    if pred.get("checks"):
                        note(f"router's predictions for pool {pool}: median relative error of the completion "
                             f"time {pred['median_relative_error']} over {pred['checks']} requests")
                if while_up is not None:
                    t = time.monotonic()
                    while_up(stack)
                    result.phases_s["while_up"] = time.monotonic() - t
            finally:
                result.phases_s["stop"] = stack.stop()

            t = time.monotonic()
            spec_params = speculation_from_config(stack.doc)
            report = build_report(test, speculation=spec_params)
            results = [r for rec in test.records for r in rec.results]
            result.paths += [str(p) for p in write_report(report, out, results=results, plots=settings.plots)]
            result.report = report
            result.phases_s["report"] = time.monotonic() - t
            counts = report["counts"]
            if report["stopped"]["reason"] != "completed":
                result.problems.append(f"the grid stopped early: {report['stopped']['reason']} "
                                       f"({counts['not_sent']} requests not sent)")
            failed = counts["sent"] - counts["ok"]
            if failed:
                result.problems.append(f"{failed} of {counts['sent']} requests failed")

            t = time.monotonic()
            try:
                cal, _merged, text, written = calibrate_report(
                    out / "report.json", config=Path(settings.config), merged_config=out / "merged-config.yaml",
                    min_speedup=settings.min_speedup, hysteresis=settings.hysteresis)
                result.paths += [str(p) for p in written]
                load_config(out / "merged-config.yaml")  # what `specgate config check` runs
                result.patch = cal.patch()
                note(text.rstrip())
                for w in cal.evidence.get("warnings", []):
                    note(f"calibration warning: {w}")
            except (CalibrationError, ReportError, ConfigError) as exc:
                result.problems.append(f"calibration failed: {exc}")
            result.phases_s["calibrate"] = time.monotonic() - t
    finally:
        stack.stop()
        result.wall_s = time.monotonic() - t_start
        loads = [v for _, v in sampler.samples]
        result.load.update({"samples_1m": sampler.samples,
                            "mean_1m": sum(loads) / len(loads) if loads else None,
                            "max_1m": max(loads) if loads else None})
        result.exit_code = 0 if (result.report is not None and result.patch is not None
                                 and not result.problems) else 1
        run = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
               **{k: v for k, v in asdict(result).items() if k != "report"}}
        run_path = out / "run.json"
        run_path.write_text(json.dumps(run, indent=2, default=str) + "\n")
        if str(run_path) not in result.paths:
            result.paths.append(str(run_path))
    return result
