"""Run a workload's grid against one target or compare several (spec, plain, router).

Plan (:func:`plan_runs`). The grid is every (bucket, load) *operating point*. For each point,
in grid order (buckets outer, loads inner):

1. ``warmup_runs`` warm-up runs per target (discarded: a GPU measurement saw an 11.64x spread
   between the first run, which captured CUDA graphs, and later ones), each of
   ``warmup_requests_for(load)`` requests (one wave: every batch size the point uses gets
   captured);
2. ``repetitions`` measured runs per target, *interleaved*: repetition ``r`` runs every target
   once, in an order rotated by ``r`` (spec, plain, router; then plain, router, spec; ...), so
   that machine drift hits every target alike and each target's run ``r`` is paired with the
   others' run ``r`` for the ratios.

A run (:meth:`LoadTest.execute_run`) sends ``n`` requests:

- closed loop (``mode="closed"``, load = concurrency ``C``): ``min(C, n)`` workers each send
  their next request as soon as their previous one ends, until ``n`` were sent;
- open loop (``mode="open"``, load = rate ``lambda`` requests/s): request ``i`` is sent at the
  ``i``-th arrival of a seeded Poisson process (exponential gaps of mean ``1/lambda`` s), the
  same arrivals for every target of a repetition; at most ``max_inflight`` requests are in
  flight (an arrival past the cap waits and its delay is recorded as ``late_s``).

During a measured run the target's pool ``/metrics`` are sampled (:mod:`loadtests.sampler`).

Bounds: the whole test plans a fixed number of requests; after ``max_duration_s`` seconds no
new request starts, and requests still running are cut ``grace_s`` (10 s) later (error
``cancelled``); the report then says ``stopped.reason = "time_limit"``. Every request also has
``request_timeout_s``.

The runner never raises for a failed request: failures are results (error counts by status).
It raises :class:`LoadTestError` when a target cannot be discovered (``/v1/models``) and no
model name / context length was given.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from loadtests.client import RequestResult, send_request
from loadtests.sampler import MetricSample, MetricsSampler
from loadtests.workload import (
    Bucket,
    PromptFactory,
    Workload,
    WorkloadError,
    arrival_times,
    scaled_buckets,
)

__all__ = [
    "GRACE_S",
    "KEEPALIVE_S",
    "LoadTest",
    "LoadTestError",
    "RunPlan",
    "RunRecord",
    "Target",
    "discover_model",
    "expected_requests",
    "plan_runs",
    "total_requests",
]

#: Seconds after ``max_duration_s`` at which requests still running are cut.
GRACE_S = 10.0

#: Seconds an idle pooled connection is kept. Below the servers' own keep-alive (SGLang's
#: uvicorn: 5 s), so the client always drops an idle connection first: with aiohttp's default
#: (15 s), a run that followed another target's run of more than 5 s reused connections the
#: server had closed and lost its first requests as ``connection`` errors.
KEEPALIVE_S = 2.0

ROLES = ("spec", "plain", "router", "target")


class LoadTestError(RuntimeError):
    """The load test cannot start (target unreachable for discovery, bad target set)."""


@dataclass(frozen=True)
class Target:
    """An endpoint under test.

    Attributes:
        name: label in the report (``spec``, ``plain``, ``router`` in compare mode).
        url: base URL ``http://host:port``.
        role: ``spec`` (speculative pool), ``plain``, ``router`` or ``target`` (single mode).
        metrics_urls: full ``/metrics`` URLs of the SGLang pools behind it, sampled during
            measured runs (a router's own ``/metrics`` has no engine gauges).
        api_key: sent as ``Authorization: Bearer <api_key>`` on the requests to ``url`` (a
            router with ``auth.api_keys``, or SGLang's ``--api-key``); never on the metrics
            samples, never in the report.
    """

    name: str
    url: str
    role: str = "target"
    metrics_urls: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False, compare=False)

    def auth_headers(self) -> dict[str, str]:
        """``{"Authorization": "Bearer <api_key>"}``, or no header without a key."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise LoadTestError(f"target role must be one of {ROLES}, got {self.role!r}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {"name": self.name, "url": self.url, "role": self.role,
                "metrics_urls": list(self.metrics_urls)}


@dataclass(frozen=True)
class RunPlan:
    """One run: ``n`` requests at a point against a target (``phase``: warmup or measure)."""

    point: int
    bucket: Bucket
    load: float
    target: Target
    phase: str
    rep: int
    n: int


@dataclass
class RunRecord:
    """What a run produced: the plan, request results, metric samples, wall time (seconds)."""

    plan: RunPlan
    results: list[RequestResult] = field(default_factory=list)
    samples: list[MetricSample] = field(default_factory=list)
    duration_s: float = 0.0
    not_sent: int = 0
    late_s: list[float] = field(default_factory=list)
    sampler_failures: int = 0


def plan_runs(workload: Workload, targets: Sequence[Target]) -> list[RunPlan]:
    """Every run of the load test in execution order (module docstring).

    Raises:
        WorkloadError: the workload has no buckets (resolve scaled buckets first).
    """
    if not workload.buckets:
        raise WorkloadError("the workload has no buckets; set buckets or context_length")
    plans: list[RunPlan] = []
    point = 0
    for bucket in workload.buckets:
        for load in workload.loads:
            for w in range(workload.warmup_runs):
                for t in targets:
                    plans.append(RunPlan(point, bucket, load, t, "warmup", w,
                                         workload.warmup_requests_for(load)))
            for rep in range(workload.repetitions):
                k = rep % len(targets)
                for t in list(targets[k:]) + list(targets[:k]):
                    plans.append(RunPlan(point, bucket, load, t, "measure", rep,
                                         workload.requests_for(load)))
            point += 1
    return plans


async def discover_model(session: aiohttp.ClientSession, base_url: str,
                         headers: dict[str, str] | None = None) -> tuple[str, int | None]:
    """The first model id and its ``max_model_len`` (tokens) from ``{base_url}/v1/models``.

    Raises:
        LoadTestError: unreachable, non-200, or no model listed.
    """
    url = base_url.rstrip("/") + "/v1/models"
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                raise LoadTestError(f"{url} answered HTTP {r.status}")
            data = await r.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        raise LoadTestError(f"cannot list models at {url}: {exc!r}") from None
    models = data.get("data") or []
    if not models or not isinstance(models[0], dict) or "id" not in models[0]:
        raise LoadTestError(f"{url} lists no model")
    m = models[0]
    length = m.get("max_model_len") or m.get("context_length")
    return str(m["id"]), int(length) if isinstance(length, int) else None


#: Progress callback: (requests finished, requests planned, description of the current run).
ProgressFn = Callable[[int, int, str], None]


class LoadTest:
    """A load test: a workload, its targets, and the records of the runs made.

    Args:
        workload: what to send (buckets may be empty: then they are scaled to the context
            length, given or discovered).
        targets: one target, or several for a comparison (names must be unique).
        progress: called after every finished request.
        factory: prompt factory (default: from the workload's files and tokenizer).

    Raises:
        LoadTestError: no target, or duplicate target names.
    """

    def __init__(self, workload: Workload, targets: Sequence[Target], *,
                 progress: ProgressFn | None = None, factory: PromptFactory | None = None) -> None:
        if not targets:
            raise LoadTestError("no target")
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise LoadTestError(f"duplicate target names: {names}")
        self.workload = workload
        self.targets = tuple(targets)
        self.progress = progress
        self._factory = factory
        self.records: list[RunRecord] = []
        self.model: str | None = workload.model
        self.started_at = 0.0
        self.elapsed_s = 0.0
        self.stop_reason = "completed"
        self._done = 0
        self._total = 0

    async def resolve(self, session: aiohttp.ClientSession) -> Workload:
        """Fill in the model name and scaled buckets from the first target when not given.

        Raises:
            LoadTestError: discovery needed but failed, or no context length for buckets.
        """
        w = self.workload
        context = w.context_length
        if self.model is None or (not w.buckets and context is None):
            model, length = await discover_model(session, self.targets[0].url,
                                                 self.targets[0].auth_headers())
            self.model = self.model or model
            context = context or length
        if not w.buckets:
            if context is None:
                raise LoadTestError("no buckets given and the context length is unknown")
            w = w.with_buckets(scaled_buckets(context, output_tokens=w.output_tokens[1]))
        self.workload = w
        return w

    async def run(self) -> list[RunRecord]:
        """Resolve, plan and execute every run; returns the records (also kept on ``self``)."""
        loads = self.workload.loads
        limit = max(64, int(max(loads) * 2) + 16) if self.workload.mode == "closed" else \
            self.workload.max_inflight + 16
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=KEEPALIVE_S)
        async with aiohttp.ClientSession(connector=connector) as session:
            w = await self.resolve(session)
            factory = self._factory or PromptFactory.from_workload(w)
            plans = plan_runs(w, self.targets)
            self._total = sum(p.n for p in plans)
            self.started_at = time.monotonic()
            deadline = self.started_at + w.max_duration_s
            for plan in plans:
                if time.monotonic() >= deadline:
                    self.stop_reason = "time_limit"
                    self.records.append(RunRecord(plan, not_sent=plan.n))
                    continue
                self.records.append(await self.execute_run(session, factory, plan, deadline))
            self.elapsed_s = time.monotonic() - self.started_at
        return self.records

    @property
    def planned_requests(self) -> int:
        """Requests planned (known once :meth:`run` has planned)."""
        return self._total

    def _tick(self, plan: RunPlan) -> None:
        self._done += 1
        if self.progress is not None:
            desc = (f"{plan.bucket.name} x {plan.load:g} {plan.target.name} "
                    f"{plan.phase} {plan.rep + 1}")
            self.progress(self._done, self._total, desc)

    async def execute_run(self, session: aiohttp.ClientSession, factory: PromptFactory,
                          plan: RunPlan, deadline: float) -> RunRecord:
        """Send one run's requests (closed or open loop, module docstring); never raises for
        request failures."""
        w = self.workload
        assert self.model is not None
        rec = RunRecord(plan)
        specs = [factory.make(plan.bucket, plan.load, plan.phase, plan.rep, i, salt=plan.target.name)
                 for i in range(plan.n)]
        origin = time.perf_counter()
        hard_stop = deadline + GRACE_S

        async def one(i: int) -> None:
            spec = specs[i]
            res = RequestResult(plan.target.name, plan.bucket.name, plan.load, plan.phase, plan.rep,
                                i, spec.task, spec.max_tokens, spec.prompt_tokens_target,
                                spec.prompt_tokens_counted)
            left = hard_stop - time.monotonic()
            timeout = min(w.request_timeout_s, max(0.5, left))
            await send_request(session, plan.target.url, spec, res, model=self.model or "",
                               stream=w.stream, ignore_eos=w.ignore_eos, temperature=w.temperature_of(i),
                               spec_details=plan.target.role == "spec",
                               timeout_s=timeout, clock_origin=origin,
                               headers=plan.target.auth_headers())
            if res.error == "timeout" and timeout < w.request_timeout_s:
                res.error = "cancelled"
            rec.results.append(res)
            self._tick(plan)

        sampler_urls = plan.target.metrics_urls if plan.phase == "measure" else ()
        async with MetricsSampler(session, sampler_urls, interval_s=w.metrics_interval_s) as sampler:
            if w.mode == "closed":
                await self._closed(plan, one, deadline, rec)
            else:
                await self._open(plan, one, deadline, rec)
        rec.duration_s = time.perf_counter() - origin
        rec.samples = list(sampler.samples)
        rec.sampler_failures = sampler.failures
        rec.results.sort(key=lambda r: r.index)
        return rec

    async def _closed(self, plan: RunPlan, one: Callable[[int], Any], deadline: float,
                      rec: RunRecord) -> None:
        indices = iter(range(plan.n))
        sent = 0

        async def worker() -> None:
            nonlocal sent
            for i in indices:
                if time.monotonic() >= deadline:
                    self.stop_reason = "time_limit"
                    return
                sent += 1
                await one(i)

        workers = min(int(plan.load), plan.n)
        await asyncio.gather(*(worker() for _ in range(workers)))
        rec.not_sent = plan.n - sent

    async def _open(self, plan: RunPlan, one: Callable[[int], Any], deadline: float,
                    rec: RunRecord) -> None:
        w = self.workload
        arrivals = arrival_times(plan.load, plan.n,
                                 f"{w.seed}:{plan.bucket.name}:{plan.load:g}:{plan.phase}:{plan.rep}")
        sem = asyncio.Semaphore(w.max_inflight)
        tasks: list[asyncio.Task[None]] = []
        t0 = time.perf_counter()

        async def guarded(i: int) -> None:
            try:
                await one(i)
            finally:
                sem.release()

        for i, at in enumerate(arrivals):
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if time.monotonic() >= deadline:
                self.stop_reason = "time_limit"
                break
            await sem.acquire()
            late = time.perf_counter() - (t0 + at)
            if late > 0.001:
                rec.late_s.append(late)
            tasks.append(asyncio.create_task(guarded(i)))
        await asyncio.gather(*tasks)
        rec.not_sent = plan.n - len(tasks)


def total_requests(plans: Sequence[RunPlan]) -> int:
    """Requests the plans will send if nothing stops them early."""
    return sum(p.n for p in plans)


def expected_requests(workload: Workload, n_targets: int) -> dict[str, int]:
    """Planned request counts: ``{"warmup", "measured", "total"}`` for ``n_targets`` targets."""
    per_bucket_warm = sum(workload.warmup_runs * workload.warmup_requests_for(x) for x in workload.loads)
    per_bucket_meas = sum(workload.repetitions * workload.requests_for(x) for x in workload.loads)
    nb = len(workload.buckets)
    warm = per_bucket_warm * nb * n_targets
    meas = per_bucket_meas * nb * n_targets
    return {"warmup": warm, "measured": meas, "total": warm + meas}

