"""A discrete-event simulator of a day of traffic over N engines (virtual time, seeded).

Compares deployments at equal hardware: ``all-spec`` (N speculative engines, client round
robin), ``all-plain``, ``all-adaptive`` (N speculative engines that decode plainly above a batch
threshold: :func:`all_adaptive`) and ``routed`` (k speculative + N-k plain engines behind a router
callback, e.g. :class:`loadtests.dayrouter.PolicyRouter` around ``router.decision.policy.decide``;
:func:`fronted` also allows k = 0 or N, the router in front of one pool).
No HTTP, no sleeping: a day of tens of thousands of requests runs in seconds of CPU, and the
same inputs and seed give the same result.

The engine (continuous batching, one step at a time)
----------------------------------------------------
An engine holds a FIFO *waiting* queue and a *running* batch (prefilling + decoding
sequences). At the start of each step it admits waiting requests in arrival order while
``running < max_running`` and the KV reservation fits: a request reserves ``P +
max_new_tokens`` tokens of the engine's capacity (:meth:`EngineModel.kv_capacity`, 25%
smaller on a speculative engine) from admission to its end, so nothing is ever retracted (SGLang
estimates future use with a ``new_token_ratio`` and retracts on overflow; the reservation is the
conservative bound). A request that could never fit is refused at once (``status`` "refused").

One step lasts ``T_step = T_decode + prefill_s_per_token * chunk``:

- ``chunk``: prompt tokens prefilled this step, at most ``prefill_chunk_tokens``, given to the
  prefilling sequences in admission order. A sequence needs ``max(1, P - cached)`` prefill
  tokens; the step that completes them emits its first token (TTFT) at the step's end.
- ``T_decode`` over the ``b`` decoding sequences with mean context ``Lbar`` (prompt plus
  tokens generated so far, averaged over the batch; a homogeneous batch therefore reproduces
  :class:`loadtests.simulate.SimModel` exactly), 0 when ``b = 0``:
  plain ``T_plain(b, Lbar) = t0 * (1 + b / b_knee) + attn * Lbar``, one token per sequence;
  speculative, one draft-and-verify cycle ``T_verify(b, Lbar) + c * gamma * T_plain(b, Lbar)``
  with ``T_verify = t0 * (1 + b * (gamma + 1) / b_knee) + attn * Lbar``, each sequence emitting
  ``k + 1`` tokens (capped by what it has left), where ``k`` (accepted drafts, 0..gamma) is
  drawn with ``P(k >= j) = alpha^j``, i.e. ``k = min(gamma, floor(ln u / ln alpha))`` for a
  uniform ``u`` (so ``E[k + 1] = E[tau](alpha, gamma)``, Leviathan et al. 2023,
  arXiv:2211.17192). ``alpha`` is :meth:`EngineModel.alpha` at the sequence's prompt length,
  greedy or sampled, times the request's ``alpha_scale`` (its task; capped at 1).
- An *adaptive* speculative engine (``adaptive_max_batch`` set) runs the speculative cycle only
  while ``b <= adaptive_max_batch`` and a plain step (one token per sequence, no drafter) above
  it: in-engine adaptive speculation as SGLang's ``--speculative-adaptive`` (batch-size-aware
  since sgl-project/sglang#24055; the steps adapt to acceptance since #21599) and vLLM's
  ``num_speculative_tokens_per_batch_size`` (vllm-project/vllm#32374) do, reduced to on/off.
  It keeps the drafter's KV cost (:meth:`EngineModel.kv_capacity` with ``speculative=True``)
  and pays no switching overhead (vllm-project/vllm#49548 measures one: this baseline is
  optimistic). :func:`adaptive_max_batch` gives the threshold from the engine model.

The gauge and the scrape
------------------------
The speculative engine's ``accept_length`` gauge is the mean of ``k + 1`` over every
sequence-cycle of the last ``gauge_interval_steps`` decode steps (SGLang's
``spec_num_total_accepted_tokens / spec_num_total_forward_ct`` over ``decode_log_interval``,
``python/sglang/srt/managers/scheduler_metrics_mixin.py`` in sgl-project/sglang). It changes only
when that many decode steps have run: an idle engine keeps its last value indefinitely, as
SGLang 0.5.23 does. Every ``scrape_interval_s`` (0.25 s) the router's view of each engine
(running, queued, KV usage, the gauge) is refreshed and a router's ``on_scrape`` hook, if it
has one, runs with the fresh views; between scrapes the router sees those values as of the last
scrape, plus its own exact in-flight counts.

The router interface (:class:`Router`, the views, :class:`Choice`) lives in
:mod:`loadtests.dayapi` and is re-exported here.

Errors: ``ValueError`` on inconsistent deployments (unknown pool/endpoint from a router).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from loadtests.dayapi import Choice, EndpointView, PoolView, RequestView, RoundRobin, Router
from loadtests.dayshapes import EngineModel, Request

__all__ = [
    "Choice",
    "DayResult",
    "Deployment",
    "EndpointView",
    "Engine",
    "PoolView",
    "RequestRecord",
    "RequestView",
    "RoundRobin",
    "Router",
    "adaptive_max_batch",
    "all_adaptive",
    "all_plain",
    "all_spec",
    "fronted",
    "routed",
    "simulate_day",
]


# --------------------------------------------------------------------------- the engine
class _Seq:
    __slots__ = (
        "admitted_s",
        "context",
        "first_s",
        "generated",
        "ln_alpha",
        "prefill_left",
        "req",
        "reserve",
        "spec_tokens",
        "verify_ct",
    )

    def __init__(self, req: Request, ln_alpha: float) -> None:
        self.req = req
        self.prefill_left = max(1, req.prompt_tokens - req.cached_tokens)
        self.generated = 0
        self.context = req.prompt_tokens
        self.ln_alpha = ln_alpha
        self.first_s = -1.0
        self.admitted_s = -1.0
        self.reserve = req.prompt_tokens + req.max_new_tokens
        self.spec_tokens = 0  # tokens of its verify steps (accepted + bonus): SGLang's spec_tokens_details
        self.verify_ct = 0


class Engine:
    """One engine (see the module docstring for the step model).

    Args:
        url: its URL; pool: its pool's name; speculative: runs a drafter.
        model: speed and capacity; rng: this engine's random source (acceptance draws).
        adaptive_max_batch: on a speculative engine, the largest decoding batch that still
            speculates (above it a step decodes plainly); None: always speculate.

    Attributes (read by the simulator): ``waiting`` (deque), ``prefilling``, ``decoding``
    (lists), ``kv_reserved`` (tokens), ``accept_length`` (the gauge, None until the first
    update), ``generated_total`` (tokens emitted, SGLang's ``generation_tokens_total``),
    ``busy`` (a step is running), ``steps``, ``busy_s``.
    """

    def __init__(self, url: str, pool: str, speculative: bool, model: EngineModel, rng: random.Random, *,
                 adaptive_max_batch: int | None = None) -> None:
        self.url, self.pool, self.speculative, self.model = url, pool, speculative, model
        self.adaptive_max_batch = adaptive_max_batch if speculative else None
        self._spec_step = speculative
        self.capacity = model.kv_capacity(speculative)
        self.rng = rng
        self.waiting: deque[_Seq] = deque()
        self.prefilling: list[_Seq] = []
        self.decoding: list[_Seq] = []
        self.kv_reserved = 0
        self.ctx_sum = 0
        self.accept_length: float | None = None
        self._acc_tokens = 0
        self._acc_cycles = 0
        self._acc_steps = 0
        self.generated_total = 0
        self.busy = False
        self.steps = 0
        self.busy_s = 0.0
        self._chunk: list[tuple[_Seq, int]] = []

    @property
    def running(self) -> int:
        """Requests in the running batch (prefilling + decoding)."""
        return len(self.prefilling) + len(self.decoding)

    def fits(self, req: Request) -> bool:
        """Whether the request could ever be admitted (its reservation fits the capacity)."""
        return req.prompt_tokens + req.max_new_tokens <= self.capacity

    def submit(self, req: Request) -> None:
        """Queue a request (the caller checked :meth:`fits`)."""
        alpha = min(1.0, self.model.alpha(req.prompt_tokens, req.sampled) * req.alpha_scale) if self.speculative else 0.0
        ln_alpha = math.log(alpha) if alpha > 0 else -math.inf
        self.waiting.append(_Seq(req, ln_alpha))

    def speculates_at(self, b: int) -> bool:
        """Whether a step with ``b`` decoding sequences runs the speculative cycle."""
        return self.speculative and (self.adaptive_max_batch is None or b <= self.adaptive_max_batch)

    def decode_time(self, b: int, mean_context: float) -> float:
        """``T_decode`` of one step with ``b`` decoding sequences at mean context (s)."""
        if b == 0:
            return 0.0
        m = self.model.speed
        attn = (m.attn_s_per_token + m.kv_read_s_per_token * b) * mean_context
        plain = m.t0_s * (1 + b / m.batch_knee) + attn
        if not self.speculates_at(b):
            return plain
        verify = m.t0_s * (1 + b * (m.gamma + 1) / m.batch_knee) + attn
        return verify + m.c * m.gamma * plain

    def start_step(self, now: float) -> float | None:
        """Admit, plan the prefill chunk and return the step's duration (s), or None when idle."""
        while self.waiting and self.running < self.model.max_running:
            s = self.waiting[0]
            if self.kv_reserved + s.reserve > self.capacity:
                break
            self.waiting.popleft()
            self.kv_reserved += s.reserve
            s.admitted_s = now
            self.prefilling.append(s)
        if not self.prefilling and not self.decoding:
            self.busy = False
            return None
        budget = self.model.prefill_chunk_tokens
        chunk = []
        for s in self.prefilling:
            if budget <= 0:
                break
            take = min(budget, s.prefill_left)
            chunk.append((s, take))
            budget -= take
        self._chunk = chunk
        prefilled = self.model.prefill_chunk_tokens - budget
        b = len(self.decoding)
        self._spec_step = self.speculates_at(b)
        dt = self.decode_time(b, self.ctx_sum / b if b else 0.0) + self.model.speed.prefill_s_per_token * prefilled
        self.busy = True
        self.steps += 1
        self.busy_s += dt
        return dt

    def finish_step(self, now: float) -> list[_Seq]:
        """Apply the step that ends at ``now``; returns the sequences that finished."""
        done: list[_Seq] = []
        keep: list[_Seq] = []
        if self.decoding:
            if self._spec_step:
                gamma = self.model.speed.gamma
                rnd = self.rng.random
                tokens = 0
                for s in self.decoding:
                    la = s.ln_alpha
                    if la == -math.inf:
                        k = 0
                    elif la == 0.0:
                        k = gamma
                    else:
                        u = 1.0 - rnd()   # in (0, 1]
                        k = min(gamma, int(math.log(u) / la))
                    tokens += k + 1
                    s.spec_tokens += k + 1
                    s.verify_ct += 1
                    emit = min(k + 1, s.req.output_tokens - s.generated)
                    self.generated_total += emit
                    s.generated += emit
                    s.context += emit
                    self.ctx_sum += emit
                    (done if s.generated >= s.req.output_tokens else keep).append(s)
                self._acc_tokens += tokens
                self._acc_cycles += len(self.decoding)
                self._acc_steps += 1
                if self._acc_steps >= self.model.gauge_interval_steps:
                    self.accept_length = self._acc_tokens / self._acc_cycles
                    self._acc_tokens = self._acc_cycles = self._acc_steps = 0
            else:
                for s in self.decoding:
                    s.generated += 1
                    s.context += 1
                    (done if s.generated >= s.req.output_tokens else keep).append(s)
                self.ctx_sum += len(self.decoding)
                self.generated_total += len(self.decoding)
        for s, take in self._chunk:
            s.prefill_left -= take
            if s.prefill_left <= 0:
                s.first_s = now
                s.generated = 1
                self.generated_total += 1
                s.context += 1
                self.prefilling.remove(s)
                self.ctx_sum += s.context
                (done if s.generated >= s.req.output_tokens else keep).append(s)
        self._chunk = []
        self.decoding = keep
        for s in done:
            self.kv_reserved -= s.reserve
            self.ctx_sum -= s.context
        return done


# --------------------------------------------------------------------------- deployments
@dataclass(frozen=True)
class Deployment:
    """Engines by pool and the router in front of them.

    Attributes:
        name: label (``all-spec``, ``all-plain``, ``routed k=1``...).
        pools: ``(pool name, speculative, engine count)`` in config order.
        make_router: builds a fresh router for a run (routers keep state).
        adaptive_max_batch: every speculative engine is adaptive with this threshold
            (:class:`Engine`); None: they always speculate.
    """

    name: str
    pools: tuple[tuple[str, bool, int], ...]
    make_router: Callable[[], Router]
    adaptive_max_batch: int | None = None

    @property
    def engines(self) -> int:
        """Total engines."""
        return sum(n for _, _, n in self.pools)


def all_spec(n: int) -> Deployment:
    """N speculative engines, client round robin."""
    return Deployment("all-spec", (("spec", True, n),), RoundRobin)


def all_plain(n: int) -> Deployment:
    """N plain engines, client round robin."""
    return Deployment("all-plain", (("plain", False, n),), RoundRobin)


def adaptive_max_batch(model: EngineModel, context_tokens: float = 12288.0) -> int | None:
    """The largest decoding batch at which speculation still pays on ``model`` (requests).

    ``floor(b*)`` with ``b*`` the batch where the greedy speedup falls to 1 at
    ``context_tokens`` (:meth:`loadtests.simulate.SimModel.crossover_load`): what an operator
    would put in a batch-size schedule for that model. 0 when speculation never pays there;
    None when it pays at every batch up to 1e6 (never switch off).
    """
    m = model.speed
    if m.speedup(0.0, context_tokens) < 1.0:
        return 0
    b = m.crossover_load(context_tokens)
    return None if b is None else math.floor(b)


def all_adaptive(n: int, max_batch: int | None) -> Deployment:
    """N speculative engines with in-engine adaptive speculation (plain decode above
    ``max_batch`` decoding sequences; :func:`adaptive_max_batch`), client round robin."""
    return Deployment("all-adaptive", (("spec", True, n),), RoundRobin, adaptive_max_batch=max_batch)


def routed(k: int, n: int, make_router: Callable[[], Router], label: str = "routed") -> Deployment:
    """k speculative + n-k plain engines behind ``make_router()``."""
    if not 0 < k < n:
        raise ValueError(f"a routed split needs 0 < k < n, got k={k}, n={n}")
    return Deployment(f"{label} {k}s+{n - k}p", (("spec", True, k), ("plain", False, n - k)), make_router)


def fronted(k: int, n: int, make_router: Callable[[], Router], label: str = "specgate") -> Deployment:
    """k speculative + n-k plain engines behind ``make_router()``, for any 0 <= k <= n.

    As :func:`routed`, but at k = n (or 0) the router fronts a single speculative (plain) pool:
    the deployment ``specgate calibrate-split`` advises at its ends, with the router in front.
    """
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"a split needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    pools = tuple(p for p in (("spec", True, k), ("plain", False, n - k)) if p[2] > 0)
    return Deployment(f"{label} {k}s+{n - k}p", pools, make_router)


# --------------------------------------------------------------------------- results
@dataclass(slots=True)
class RequestRecord:
    """One request's outcome (seconds from the day's start; tokens).

    ``status``: ``ok`` or ``refused`` (the router refused it, or no engine of the chosen one
    could ever hold its KV reservation). ``ttft_s``, ``e2e_s``, ``tpot_s``, ``queue_s``
    (arrival -> admission) are None unless ok; ``tpot_s`` is None for 1-token outputs;
    ``accept_length`` is the request's own tokens per verify step on a speculative engine (what
    SGLang returns with ``return_spec_tokens_details``: ``spec_accept_length``), else None.
    """

    rid: int
    arrival_s: float
    kind: str
    prompt_tokens: int
    output_tokens: int
    temperature: float
    cached_tokens: int
    max_new_tokens: int
    pool: str | None
    endpoint: str | None
    speculative: bool
    reason: str
    status: str = "ok"
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    queue_s: float | None = None
    accept_length: float | None = None


@dataclass
class DayResult:
    """A simulated day: request records, decisions, and the scraped timeline.

    Attributes:
        deployment: its name; engines: URL -> speculative.
        records: one per request, by rid.
        reasons: decisions by reason.
        timeline: ``{"t": [...], "pools": {name: [load...]}, "accept_length": {url: [...]}}``
            sampled at every ``timeline_every_s``; load = running + queued summed over the pool.
        end_s: virtual time of the last completion; busy_s: per engine busy time.
        prediction_errors: the router's checked predictions by pool, ``(predicted - realised) /
            realised`` per request (a router with a ``prediction_errors`` attribute, else empty).
    """

    deployment: str
    engines: dict[str, bool]
    records: list[RequestRecord]
    reasons: Counter[str]
    timeline: dict[str, object] = field(default_factory=dict)
    end_s: float = 0.0
    busy_s: dict[str, float] = field(default_factory=dict)
    prediction_errors: dict[str, list[float]] = field(default_factory=dict)


def _views(pools: Sequence[tuple[str, bool, list[Engine]]],
           scraped: dict[str, tuple[int, int, float, float | None, float, float, float]], inflight: dict[str, int],
           now: float) -> tuple[PoolView, ...]:
    out = []
    for name, spec, engines in pools:
        eps = []
        for e in engines:
            running, queued, usage, acc, at, acc_since, gen = scraped[e.url]
            f = inflight[e.url]
            eps.append(EndpointView(e.url, name, running, queued, f, max(running + queued, f), usage, acc,
                                    now - at, None if acc is None else now - acc_since, gen))
        out.append(PoolView(name, spec, tuple(eps)))
    return tuple(out)


def simulate_day(requests: Sequence[Request], deployment: Deployment, model: EngineModel, *, seed: int = 0,
                 scrape_interval_s: float = 0.25, timeline_every_s: float = 1.0,
                 pool_models: Mapping[str, EngineModel] | None = None,
                 pool_seeds: Mapping[str, int] | None = None,
                 make_engine: Callable[[str, str, bool, EngineModel, random.Random], Engine] | None = None,
                 follows: Mapping[int, tuple[int, float]] | None = None) -> DayResult:
    """Run one day through one deployment (module docstring); deterministic for ``seed``.

    Args:
        requests: the day, sorted by ``arrival_s`` (:meth:`loadtests.dayshapes.DayShape.requests`).
        deployment: engines and router.
        model: the engines' speed and capacity.
        seed: seeds each engine's acceptance draws.
        scrape_interval_s: the router's scrape period (s).
        timeline_every_s: period of the pool-load timeline (s; a multiple of the scrape period
            is sampled at the first scrape past each multiple).
        pool_models: the engine model of a pool's engines, by pool name (several models in one
            run, :mod:`loadtests.dayfleet`); a pool not named runs ``model``.
        pool_seeds: the index that seeds a pool's engines' draws, by pool name (default: the
            pool's position in ``deployment.pools``), so a pool can draw as it did in another
            deployment.
        make_engine: builds each engine from ``(url, pool, speculative, model, rng)`` instead of
            :class:`Engine` (another engine model with its interface: the attributes the
            simulator reads are listed on :class:`Engine`; e.g.
            :func:`loadtests.sglang_day.sglang_engines`); the deployment's
            ``adaptive_max_batch`` is then not applied.
        follows: a closed loop's links, ``{rid: (predecessor rid, gap_s)}``: request ``rid`` is
            sent ``gap_s`` after its predecessor's response ended (or it was refused), not at its
            ``arrival_s``, as the client that waited for that response would
            (:func:`loadtests.plan.closed_loop_links`); its record's ``arrival_s`` is that time.

    Raises:
        ValueError: the router chose a pool/endpoint that does not exist, or a link names a
            request that is not in the day.
    """
    pools: list[tuple[str, bool, list[Engine]]] = []
    by_url: dict[str, Engine] = {}
    for pi, (name, spec, n) in enumerate(deployment.pools):
        pm = (pool_models or {}).get(name, model)
        pi = (pool_seeds or {}).get(name, pi)
        engines = [Engine(f"http://{name}-{i}", name, spec, pm, random.Random(seed * 1_000_003 + pi * 997 + i),
                          adaptive_max_batch=deployment.adaptive_max_batch) if make_engine is None else
                   make_engine(f"http://{name}-{i}", name, spec, pm, random.Random(seed * 1_000_003 + pi * 997 + i))
                   for i in range(n)]
        pools.append((name, spec, engines))
        by_url.update({e.url: e for e in engines})
    router = deployment.make_router()
    on_scrape = getattr(router, "on_scrape", None)
    on_done = getattr(router, "on_done", None)
    inflight = dict.fromkeys(by_url, 0)
    # url -> (running, queued, KV usage, gauge, scraped at, gauge value first seen at)
    # (..., generation_tokens_total)
    scraped: dict[str, tuple[int, int, float, float | None, float, float, float]] = {
        u: (0, 0, 0.0, None, 0.0, 0.0, 0.0) for u in by_url}
    records = [RequestRecord(r.rid, r.arrival_s, r.kind, r.prompt_tokens, r.output_tokens, r.temperature,
                             r.cached_tokens, r.max_new_tokens, None, None, False, "") for r in requests]
    reasons: Counter[str] = Counter()
    tl_t: list[float] = []
    tl_pools: dict[str, list[int]] = {name: [] for name, _, _ in pools}
    tl_acc: dict[str, list[float | None]] = {e.url: [] for _, spec, es in pools if spec for e in es}
    heap: list[tuple[float, int, int, object]] = []
    order = 0
    nexts: dict[int, list[tuple[Request, float]]] = {}  # a closed loop's next requests, by predecessor
    for r in requests:
        link = (follows or {}).get(r.rid)
        if link is None:
            heap.append((r.arrival_s, order, 0, r))
            order += 1
        elif not 0 <= link[0] < len(requests) or link[0] == r.rid:
            raise ValueError(f"request {r.rid} follows {link[0]}, not another request of the day")
        else:
            nexts.setdefault(link[0], []).append((r, link[1]))
    heapq.heapify(heap)

    def release(rid: int, now: float) -> None:
        nonlocal order
        for r, gap in nexts.pop(rid, ()):
            records[r.rid].arrival_s = now + gap
            heapq.heappush(heap, (now + gap, order, 0, replace(r, arrival_s=now + gap)))
            order += 1

    heapq.heappush(heap, (0.0, order, 2, None))
    order += 1
    pending = len(requests)
    next_tl = 0.0
    end = 0.0
    while heap:
        now, _, kind, obj = heapq.heappop(heap)
        if kind == 0:
            r: Request = obj  # type: ignore[assignment]
            rec = records[r.rid]
            choice = router(now, RequestView(r.prompt_tokens, r.max_new_tokens, r.temperature, model=r.model,
                                             speculation=r.speculation),
                            _views(pools, scraped, inflight, now))
            reasons[choice.reason] += 1
            rec.reason = choice.reason
            if choice.pool is None or choice.endpoint is None:
                rec.status = "refused"
                pending -= 1
                release(r.rid, now)
                continue
            e = by_url.get(choice.endpoint)
            if e is None or e.pool != choice.pool:
                raise ValueError(f"router chose {choice.pool}/{choice.endpoint}, not an engine of "
                                 f"{deployment.name}")
            rec.pool, rec.endpoint, rec.speculative = e.pool, e.url, e.speculative
            if not e.fits(r):
                rec.status = "refused"
                pending -= 1
                release(r.rid, now)
                continue
            e.submit(r)
            inflight[e.url] += 1
            if not e.busy:
                dt = e.start_step(now)
                if dt is not None:
                    heapq.heappush(heap, (now + dt, order, 1, e))
                    order += 1
        elif kind == 1:
            e: Engine = obj  # type: ignore[no-redef]
            for s in e.finish_step(now):
                rec = records[s.req.rid]
                rec.ttft_s = s.first_s - s.req.arrival_s
                rec.e2e_s = now - s.req.arrival_s
                rec.queue_s = s.admitted_s - s.req.arrival_s
                if s.req.output_tokens > 1:
                    rec.tpot_s = (now - s.first_s) / (s.req.output_tokens - 1)
                if s.verify_ct:
                    rec.accept_length = s.spec_tokens / s.verify_ct
                inflight[e.url] -= 1
                if on_done is not None:
                    on_done(now, RequestView(s.req.prompt_tokens, s.req.max_new_tokens, s.req.temperature,
                                             model=s.req.model, speculation=s.req.speculation), e.url,
                            rec, _views(pools, scraped, inflight, now))
                pending -= 1
                end = now
                release(s.req.rid, now)
            dt = e.start_step(now)
            if dt is not None:
                heapq.heappush(heap, (now + dt, order, 1, e))
                order += 1
        else:
            for u, e in by_url.items():
                prev = scraped[u]
                since = prev[5] if e.accept_length == prev[3] else now
                scraped[u] = (e.running, len(e.waiting), e.kv_reserved / e.capacity, e.accept_length, now, since,
                              float(e.generated_total))
            if on_scrape is not None:
                on_scrape(now, _views(pools, scraped, inflight, now))
            if now >= next_tl:
                tl_t.append(now)
                for name, _, es in pools:
                    tl_pools[name].append(sum(x.running + len(x.waiting) for x in es))
                for u, series in tl_acc.items():
                    series.append(by_url[u].accept_length)
                next_tl += timeline_every_s
            if pending > 0:
                heapq.heappush(heap, (now + scrape_interval_s, order, 2, None))
                order += 1
    return DayResult(deployment.name, {u: e.speculative for u, e in by_url.items()}, records, reasons,
                     {"t": tl_t, "pools": tl_pools, "accept_length": tl_acc}, end,
                     {u: e.busy_s for u, e in by_url.items()}, dict(getattr(router, "prediction_errors", {})))
