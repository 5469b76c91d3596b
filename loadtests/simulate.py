"""A speed model of speculative vs plain decoding, and fakes that run at its speed.

Used to test the load tester and the calibration against known thresholds (a fake
SGLang whose speed depends on batch size and context as the speedup model says, alpha, c and
gamma given), and to try the tools without GPUs.

The model (:class:`SimModel`; seconds, tokens)
----------------------------------------------
Plain decoding of a batch of ``b`` sequences at context ``L`` takes, per output token,

    T_plain(b, L) = t0 * (1 + b / b_knee) + attn_s_per_token * L + kv_read_s_per_token * b * L

(``t0``: the memory-bound weight read; ``b / b_knee``: the batch's
compute, which dominates past ``b_knee``; the last two terms: attention, per sequence and as
the KV of the whole batch read each step, arXiv:2211.05102; ``kv_read_s_per_token`` defaults
to 0).

A speculative cycle drafts ``gamma`` tokens at relative cost ``c`` (``T_draft = c * gamma *
T_target``, arXiv:2211.17192) and verifies ``gamma + 1`` positions per sequence in one
target pass, whose compute term grows ``gamma + 1``-fold:

    T_verify(b, L) = t0 * (1 + b * (gamma + 1) / b_knee) + attn_s_per_token * L + kv_read_s_per_token * b * L
    T_spec(b, L)   = (T_verify(b, L) + c * gamma * T_plain(b, L)) / E[tau](alpha(L), gamma)

with ``E[tau] = (1 - alpha^(gamma+1)) / (1 - alpha)`` (:func:`drafters.spec_math.expected_tokens`)
and an acceptance rate that falls with context (lookup drafters accept 5.4-7.9 tokens per
step on long copy tasks, 1.2-2.3 on long free-form ones: docs/loadtests.md):

    alpha(L) = alpha_short                                                  for L <= alpha_knee_tokens
             = alpha_short - alpha_drop_per_doubling * log2(L / alpha_knee_tokens)   above (>= 0)

The speedup ``S(b, L) = T_plain / T_spec`` equals Leviathan's ``E[tau] / (c * gamma + 1)``
at ``b -> 0`` and falls with batch (speculation spends compute that a saturated batch does
not have: at saturation it costs throughput) and with context. Its
crossovers ``S = 1`` are :meth:`SimModel.crossover_context` and :meth:`SimModel.crossover_load`.

The fakes
---------
:class:`PacedApp` wraps the fake SGLang ASGI app (:mod:`serving.fake_sglang`, run with
``decode_step_s = 0``) and paces its stream: the first token waits ``prefill_s_per_token * P``
(``P``: the fake's simple prompt count), each later token ``T(b, P)`` with ``b`` the number of
requests in flight on that fake at that moment. The speculative fake also publishes
``sglang:spec_accept_length = E[tau](alpha(P))`` (mean over the requests in flight). Tokens are
spaced evenly (a real speculative engine emits them in bursts of ``tau``).
:func:`serve_pair` starts a spec and a plain fake (:class:`SimServer`) on 127.0.0.1.

:func:`simulate_report` builds a schema-valid comparison report straight from the model
(no timing at all), for calibration tests and demos.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from drafters.spec_math import expected_tokens
from serving.ports import free_port

__all__ = [
    "PacedApp",
    "SimModel",
    "SimServer",
    "serve_pair",
    "simulate_report",
]

_CONTENT_RE = re.compile(rb'"content":"[^"]')


@dataclass(frozen=True)
class SimModel:
    """Speed model of a speculative and a plain engine (module docstring; seconds, tokens).

    Attributes:
        t0_s: plain per-token decode time at batch ~0 and context ~0 (seconds).
        batch_knee: batch size at which compute doubles the per-token time (requests).
        attn_s_per_token: extra per-token decode time per context token (seconds/token).
        kv_read_s_per_token: extra decode step time per context token of the whole batch
            (``b * L`` tokens; seconds/token).
        prefill_s_per_token: time to first token per prompt token (seconds/token).
        alpha_short: acceptance rate up to ``alpha_knee_tokens`` of context.
        alpha_knee_tokens: context (tokens) above which alpha falls.
        alpha_drop_per_doubling: alpha lost per doubling of context past the knee.
        gamma: draft length (tokens per cycle drafted).
        c: relative drafter cost T_draft / (gamma * T_target).
    """

    t0_s: float = 0.004
    batch_knee: float = 16.0
    attn_s_per_token: float = 0.0
    prefill_s_per_token: float = 0.0
    alpha_short: float = 0.8
    alpha_knee_tokens: float = 4096.0
    alpha_drop_per_doubling: float = 0.1
    gamma: int = 4
    c: float = 0.05
    kv_read_s_per_token: float = 0.0

    def __post_init__(self) -> None:
        if not (self.t0_s > 0 and self.batch_knee > 0 and self.alpha_knee_tokens > 0):
            raise ValueError("t0_s, batch_knee and alpha_knee_tokens must be > 0")
        if not 0 <= self.alpha_short <= 1 or self.alpha_drop_per_doubling < 0:
            raise ValueError("alpha_short must be in [0, 1], alpha_drop_per_doubling >= 0")
        if (self.gamma < 1 or self.c < 0 or self.attn_s_per_token < 0 or self.prefill_s_per_token < 0
                or self.kv_read_s_per_token < 0):
            raise ValueError("gamma >= 1, c >= 0, attn_s_per_token, prefill_s_per_token, "
                             "kv_read_s_per_token >= 0")

    def alpha(self, context: float) -> float:
        """Acceptance rate at ``context`` tokens."""
        if context <= self.alpha_knee_tokens:
            return self.alpha_short
        drop = self.alpha_drop_per_doubling * math.log2(context / self.alpha_knee_tokens)
        return min(1.0, max(0.0, self.alpha_short - drop))

    def accept_length(self, context: float) -> float:
        """Mean tokens per verify step E[tau] at ``context`` tokens."""
        return expected_tokens(self.alpha(context), self.gamma)

    def plain_token_s(self, batch: float, context: float) -> float:
        """Plain decode time per output token (seconds) at batch ``batch``, context ``context``."""
        return (self.t0_s * (1 + batch / self.batch_knee)
                + (self.attn_s_per_token + self.kv_read_s_per_token * batch) * context)

    def spec_token_s(self, batch: float, context: float) -> float:
        """Speculative decode time per output token (seconds)."""
        verify = (self.t0_s * (1 + batch * (self.gamma + 1) / self.batch_knee)
                  + (self.attn_s_per_token + self.kv_read_s_per_token * batch) * context)
        cycle = verify + self.c * self.gamma * self.plain_token_s(batch, context)
        return cycle / self.accept_length(context)

    def token_s(self, speculative: bool, batch: float, context: float) -> float:
        """Per-token decode time (seconds) of the speculative or the plain engine."""
        return self.spec_token_s(batch, context) if speculative else self.plain_token_s(batch, context)

    def speedup(self, batch: float, context: float) -> float:
        """S(b, L) = T_plain / T_spec (dimensionless)."""
        return self.plain_token_s(batch, context) / self.spec_token_s(batch, context)

    def crossover_context(self, batch: float = 1.0, min_speedup: float = 1.0) -> float | None:
        """Context (tokens) at which S falls to ``min_speedup`` at ``batch``; None if it never
        does below 2^30 tokens or already has at 1 token. Bisection in log context."""
        lo, hi = 1.0, float(2**30)
        if self.speedup(batch, lo) < min_speedup or self.speedup(batch, hi) >= min_speedup:
            return None
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            if self.speedup(batch, mid) >= min_speedup:
                lo = mid
            else:
                hi = mid
        return lo

    def crossover_load(self, context: float, min_speedup: float = 1.0) -> float | None:
        """Batch at which S falls to ``min_speedup`` at ``context``; None if not in [0, 1e6]."""
        lo, hi = 0.0, 1e6
        if self.speedup(lo, context) < min_speedup or self.speedup(hi, context) >= min_speedup:
            return None
        for _ in range(200):
            mid = (lo + hi) / 2
            if self.speedup(mid, context) >= min_speedup:
                lo = mid
            else:
                hi = mid
        return lo


# --------------------------------------------------------------------------- live pacing
class PacedApp:
    """ASGI wrapper that paces a fake SGLang app's chat streams by a :class:`SimModel`.

    Args:
        app: the fake's ASGI app (``serving.fake_sglang.create_fake_app``), ``decode_step_s=0``.
        model: the speed model.
        speculative: pace as the speculative engine (and publish its accept length) or plain.

    ``inflight`` is the number of chat requests in flight on this app (instance state).
    """

    def __init__(self, app: Any, model: SimModel, *, speculative: bool) -> None:
        self.app = app
        self.model = model
        self.speculative = speculative
        self.inflight = 0
        self._contexts: list[int] = []

    @property
    def state(self) -> Any:
        """The wrapped app's state (Starlette ``app.state``)."""
        return self.app.state

    def _publish_accept_length(self) -> None:
        if not self.speculative or not self._contexts:
            return
        fake = self.app.state.fake
        mean = sum(self.model.accept_length(c) for c in self._contexts) / len(self._contexts)
        gauges = dict(fake.metrics_override.get("gauges") or {})
        gauges["spec_accept_length"] = mean
        gauges["spec_accept_rate"] = sum(self.model.alpha(c) for c in self._contexts) / len(self._contexts)
        fake.metrics_override["gauges"] = gauges

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        from serving.fake_sglang import simple_chat_tokens

        parts = []
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            parts.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        body = b"".join(parts)
        try:
            doc = json.loads(body)
            prompt = simple_chat_tokens(doc.get("messages") or [], doc.get("tools"))
            stream = bool(doc.get("stream"))
            if self.speculative and isinstance(doc, dict):
                # the request's own accept length (spec_tokens_details) is the one it is paced
                # by, E[tau] at its context, as the published gauge's mean is
                body = json.dumps({**doc, "fake_accept_length": self.model.accept_length(prompt)}).encode()
        except (ValueError, TypeError, AttributeError):
            prompt, stream = 0, False
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        first = True
        model = self.model

        async def paced(msg: Any) -> None:
            nonlocal first
            if msg["type"] == "http.response.body":
                data = msg.get("body", b"")
                if stream:
                    n = len(_CONTENT_RE.findall(data))
                    if n and first:
                        first = False
                        await asyncio.sleep(model.prefill_s_per_token * prompt)
                        n -= 1
                    if n:
                        await asyncio.sleep(n * model.token_s(self.speculative, self.inflight, prompt))
                elif first and data:
                    first = False
                    try:
                        tokens = int(json.loads(data)["usage"]["completion_tokens"])
                    except (ValueError, KeyError, TypeError):
                        tokens = 1
                    await asyncio.sleep(model.prefill_s_per_token * prompt + max(0, tokens - 1)
                                        * model.token_s(self.speculative, self.inflight, prompt))
            await send(msg)

        self.inflight += 1
        self._contexts.append(prompt)
        self._publish_accept_length()
        try:
            await self.app(scope, replay, paced)
        finally:
            self.inflight -= 1
            self._contexts.remove(prompt)


class SimServer:
    """One paced fake SGLang server under uvicorn in a background thread on 127.0.0.1.

    uvicorn binds the port itself (``host``/``port``), so accepted sockets are TCP sockets
    that asyncio sets ``TCP_NODELAY`` on; streamed tokens leave at once. (A socket created as
    ``socket.socket(AF_INET, SOCK_STREAM)`` has ``proto == 0`` and asyncio skips the option:
    Nagle's algorithm plus the peer's 40 ms delayed ACK then holds back whole streams on a
    reused keep-alive connection, which would ruin every latency this package measures.)

    Args:
        app: the ASGI app (a :class:`PacedApp`).
        port: port to listen on (0: a free one).

    Attributes: ``base_url``, ``port``, ``app``. Errors: ``RuntimeError`` when uvicorn does
    not start within 10 s.
    """

    def __init__(self, app: PacedApp, port: int = 0) -> None:
        self.app = app
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> SimServer:
        """Start serving; returns self once uvicorn accepts connections."""
        import uvicorn

        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", ws="none", access_log=False, loop="asyncio",
                                timeout_graceful_shutdown=2, timeout_keep_alive=30)
        self._server = uvicorn.Server(config)

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.serve())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=f"sim-sglang-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"simulated SGLang server did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop: end open streams (the fake's ``closing`` event), then uvicorn. Idempotent."""
        if self._thread is None:
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.app.state.fake.closing.set)
        self._server.should_exit = True
        self._thread.join(10)
        self._thread = None


@contextlib.contextmanager
def serve_pair(model: SimModel, *, model_name: str = "sim-model", context_length: int = 1 << 20,
               max_running_requests: int | None = None,
               ports: tuple[int, int] = (0, 0)) -> Iterator[tuple[SimServer, SimServer]]:
    """Start a speculative and a plain fake paced by ``model`` on 127.0.0.1.

    ``ports``: (spec, plain) ports; 0 picks a free one. Yields ``(spec, plain)``
    :class:`SimServer` s (``base_url``); both are stopped on exit.
    """
    from serving.fake_sglang import FakeConfig, create_fake_app

    servers: list[SimServer] = []
    try:
        for speculative, port in ((True, ports[0]), (False, ports[1])):
            cfg = FakeConfig(
                model_name=model_name, context_length=context_length, context_length_flag=False,
                max_running_requests=max_running_requests,
                speculative_algorithm="EAGLE3" if speculative else None,
                speculative_num_steps=model.gamma, speculative_eagle_topk=1,
                speculative_num_draft_tokens=model.gamma + 1,
                spec_accept_length=model.accept_length(1) if speculative else 0.0,
                spec_accept_rate=model.alpha(1) if speculative else 0.0,
            )
            app = PacedApp(create_fake_app(cfg), model, speculative=speculative)
            servers.append(SimServer(app, port).start())
        yield servers[0], servers[1]
    finally:
        for srv in servers:
            srv.stop()


# --------------------------------------------------------------------------- synthetic reports
def simulate_report(
    model: SimModel,
    buckets: Sequence[Any],
    loads: Sequence[float],
    *,
    repetitions: int = 3,
    requests_per_run: int = 4,
    output_tokens: int = 64,
    noise: float = 0.0,
    seed: int = 0,
    router: tuple[int, int] | None = None,
    sampled_fraction: float = 0.0,
    alpha_sampled_short: float = 0.3,
) -> dict[str, Any]:
    """A comparison report (spec, plain and optionally router) computed from ``model``.

    Request ``i`` of a run at bucket ``[lo, hi]`` has prompt length
    ``lo * (hi/lo)^((i + 0.5) / requests_per_run)`` (spread geometrically over the bucket) and
    runs at the model's per-token time for batch = load, times ``1 + noise * N(0, 1)`` (seeded).

    Args:
        model: the speed model.
        buckets: :class:`loadtests.workload.Bucket` s.
        loads: concurrency levels.
        repetitions, requests_per_run, output_tokens: sizes of the synthetic runs.
        noise: relative per-run timing noise (0: exact).
        seed: seed of the noise.
        router: ``(long_prompt_tokens, saturation_enter)``: add a ``router`` target that picks
            spec when ``prompt <= long_prompt_tokens`` and ``load < enter``, else plain.
        sampled_fraction: the workload's share of sampled requests
            (:meth:`loadtests.workload.Workload.temperature_of`); every spec request reports its
            own accept length (``spec_tokens_details``): ``E[tau]`` of ``model.alpha(p)``, less
            ``alpha_short - alpha_sampled_short`` for a sampled one (the timings stay greedy's).
        alpha_sampled_short: the sampled requests' acceptance rate at short context.

    Returns:
        A schema-1 report (see :mod:`loadtests.report`).
    """
    from loadtests.client import RequestResult
    from loadtests.report import build_report
    from loadtests.runner import LoadTest, RunPlan, RunRecord, Target
    from loadtests.sampler import MetricSample
    from loadtests.workload import Workload

    w = Workload(buckets=tuple(buckets), loads=tuple(float(x) for x in loads), model="sim-model",
                 output_tokens=(output_tokens, output_tokens), requests_per_run=requests_per_run,
                 warmup_runs=0, repetitions=repetitions, seed=seed, sampled_fraction=sampled_fraction)
    targets = [Target("spec", "http://sim-spec", "spec", ("http://sim-spec/metrics",)),
               Target("plain", "http://sim-plain", "plain", ("http://sim-plain/metrics",))]
    if router is not None:
        targets.append(Target("router", "http://sim-router", "router",
                              ("http://sim-spec/metrics", "http://sim-plain/metrics")))
    test = LoadTest(w, targets)
    rng = random.Random(seed)
    point = 0
    for bucket in w.buckets:
        for load in w.loads:
            for rep in range(repetitions):
                for t in targets:
                    plan = RunPlan(point, bucket, load, t, "measure", rep, requests_per_run)
                    rec = RunRecord(plan)
                    jitter = 1 + noise * rng.gauss(0, 1) if noise else 1.0
                    duration = 0.0
                    for i in range(requests_per_run):
                        p = bucket.lo * (bucket.hi / bucket.lo) ** ((i + 0.5) / requests_per_run)
                        if t.role == "router":
                            spec = router is not None and p <= router[0] and load < router[1]
                        else:
                            spec = t.role == "spec"
                        tok = model.token_s(spec, load, p) * jitter
                        ttft = model.prefill_s_per_token * p + tok
                        r = RequestResult(t.name, bucket.name, load, "measure", rep, i, "free",
                                          output_tokens, int(p), int(p))
                        r.status, r.prompt_tokens, r.output_tokens = 200, int(p), output_tokens
                        r.ttft_s = ttft
                        r.itl_s = [tok] * (output_tokens - 1)
                        r.tpot_s = tok
                        r.decode_tps = 1 / tok
                        r.e2e_s = ttft + tok * (output_tokens - 1)
                        r.output_tps = output_tokens / r.e2e_s
                        r.pool = ("spec" if spec else "plain") if t.role == "router" else None
                        r.temperature = w.temperature_of(i)
                        if t.role == "spec":
                            drop = model.alpha_short - alpha_sampled_short if r.temperature else 0.0
                            r.accept_length = expected_tokens(min(1.0, max(0.0, model.alpha(p) - drop)), model.gamma)
                        rec.results.append(r)
                        duration = max(duration, r.e2e_s)
                    rec.duration_s = duration * requests_per_run / min(load, requests_per_run)
                    mid = bucket.midpoint
                    for url in t.metrics_urls:
                        is_spec = "spec" in url
                        rec.samples.append(MetricSample(url, 0.0, int(load), 0,
                                                        model.accept_length(mid) if is_spec else None))
                    test.records.append(rec)
            point += 1
    return build_report(test, speculation={"gamma": model.gamma, "drafter_cost_ratio": model.c})
