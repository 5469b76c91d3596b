"""A fake engine driven by a step model: one batched loop per server instead of per-request sleeps.

Without a step engine the fake runs each request with its own sleeps (:mod:`serving.fake_sglang.engine`).
With one (``create_fake_app(config, step_engine=...)``, ``FakeServer(config, step_engine=...)``)
generation is a continuous-batching loop, as SGLang's scheduler runs it:

1. each choice of a request is submitted to the step engine as a :class:`StepRequest` (its prompt
   tokens ``P`` as the fake counted them, the prefix-cached tokens, the natural output length, the
   budget, the temperature, an acceptance scale);
2. :class:`Stepper` runs one loop per server: ``dt = engine.start_step(now)`` (the engine admits
   waiting requests, e.g. by KV reservation against ``max_total_num_tokens`` and by
   ``max_running_requests``, and plans the step), sleeps ``dt`` real seconds, then
   ``engine.finish_step(now)`` returns what every running sequence emitted in that step
   (:class:`StepEmit`: 1 token for plain decode, 1 + accepted drafts on a speculative engine,
   the first token when its prefill completes); the loop wakes on a submit when idle;
3. the request's handler turns each emit into that many tokens (one SSE content chunk per step,
   as SGLang coalesces a step's tokens) and ends the choice when the engine says so.

Step deadlines are absolute (the next step starts when the last one was due to end, not when the
loop woke), so event-loop lag does not accumulate into the engine's clock; ``now`` is seconds
since the loop first ran. What the step engine computes is what the fake reports: ``/metrics``
``num_running_reqs``, ``num_queue_reqs``, ``token_usage`` (``kv_used / capacity``),
``spec_accept_length`` (the engine's gauge; 0 until its first update), ``max_total_num_tokens``
(the engine's capacity); a request's ``usage`` (its ``completion_tokens`` are the tokens the
engine emitted) and ``sglext.spec_tokens_details`` (``spec_accept_length`` = its tokens per
verify step, ``spec_verify_ct`` its verify steps).

The per-request hint (the fake's own body field, not SGLang's): ``"fake_step": {"output_tokens":
N, "cached_tokens": C, "alpha_scale": a}`` (all optional): the choice stops with
``finish_reason "stop"`` (``matched_stop`` = ``eos_token_id``) after ``N`` tokens when ``N`` is
below its token limit, as a model that reaches its EOS; without it the choice runs to its limit
(``"length"``). ``C`` is reported as ``usage.prompt_tokens_details.cached_tokens`` (as SGLang
with ``--enable-cache-report``) and only ``P - C`` tokens are prefilled; ``a`` scales the
engine's acceptance for this request (its task). A bad hint is a 400 (``ClientError``).

Errors: :class:`ClientError` for a malformed hint; a request whose reservation could never fit
the engine is aborted by the scheduler with SGLang's over-length message (the caller's check 4).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from serving.fake_sglang.errors import ClientError

__all__ = ["StepEmit", "StepEngine", "StepGauges", "StepHint", "StepRequest", "Stepper", "parse_hint"]


@dataclass(frozen=True, slots=True)
class StepRequest:
    """One sequence (a choice) given to a step engine (tokens).

    ``key`` identifies it in :class:`StepEmit` and :meth:`StepEngine.abort` (the fake passes its
    ``Sample``); ``output_tokens`` is where it stops (<= ``max_new_tokens``, the budget the KV
    reservation uses).
    """

    key: object
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    max_new_tokens: int
    temperature: float
    alpha_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class StepEmit:
    """What one sequence emitted in one step: ``tokens`` (>= 1), whether it ``finished``, and its
    speculative totals so far (``spec_tokens`` over ``verify_ct`` verify steps; 0 on a plain
    engine)."""

    key: object
    tokens: int
    finished: bool
    spec_tokens: int = 0
    verify_ct: int = 0


@dataclass(frozen=True, slots=True)
class StepGauges:
    """The engine's state as its ``/metrics`` shows it (requests, tokens; accept length None
    until the engine's gauge has a value)."""

    running: int
    queued: int
    kv_used_tokens: int
    capacity_tokens: int
    accept_length: float | None


class StepEngine(Protocol):
    """What the fake needs from a step engine (``loadtests.dayhttp.DayStepEngine`` wraps the day
    simulator's engine, ``loadtests.sglang_sched.SglangStepEngine`` SGLang's scheduler)."""

    speculative: bool

    def fits(self, req: StepRequest) -> bool:
        """Whether the request could ever be admitted (its KV reservation fits the capacity)."""

    def submit(self, req: StepRequest) -> None:
        """Queue a sequence (the caller checked :meth:`fits`)."""

    def abort(self, key: object) -> None:
        """Drop a queued or running sequence (its KV released); unknown keys are ignored."""

    def start_step(self, now: float) -> float | None:
        """Admit and plan the next step; its duration (s), or None when there is nothing to run."""

    def finish_step(self, now: float) -> list[StepEmit]:
        """Apply the step that ends at ``now``: every sequence that emitted tokens in it."""

    def gauges(self) -> StepGauges:
        """The engine's gauges now."""


@dataclass(frozen=True, slots=True)
class StepHint:
    """The ``fake_step`` body field (module docstring); None fields were not given."""

    output_tokens: int | None = None
    cached_tokens: int = 0
    alpha_scale: float = 1.0


def parse_hint(value: Any) -> StepHint:
    """The ``fake_step`` field of a request body (None or absent: no hint).

    Raises:
        ClientError: not an object, an unknown member, or a member of the wrong type or range.
    """
    if value is None:
        return StepHint()
    if not isinstance(value, dict):
        raise ClientError("fake_step must be an object")
    unknown = set(value) - {"output_tokens", "cached_tokens", "alpha_scale"}
    if unknown:
        raise ClientError(f"fake_step has unknown members: {sorted(unknown)}")
    out, cached, scale = value.get("output_tokens"), value.get("cached_tokens", 0), value.get("alpha_scale", 1.0)
    if out is not None and (type(out) is not int or out < 1):
        raise ClientError("fake_step.output_tokens must be an integer >= 1")
    if type(cached) is not int or cached < 0:
        raise ClientError("fake_step.cached_tokens must be an integer >= 0")
    if isinstance(scale, bool) or not isinstance(scale, int | float) or scale < 0:
        raise ClientError("fake_step.alpha_scale must be a number >= 0")
    return StepHint(out, cached, float(scale))


@dataclass
class _Flow:
    """One submitted sequence's inbox: the emits the loop delivered, and a wake-up event."""

    emits: list[StepEmit] = field(default_factory=list)
    event: asyncio.Event = field(default_factory=asyncio.Event)


class Stepper:
    """Runs a :class:`StepEngine` on the server's event loop (module docstring).

    Built with the app (no task yet); the loop task starts on the first :meth:`submit` and ends
    with the loop (the server cancels it on stop). Attributes: ``engine``; ``steps`` run so far.
    """

    def __init__(self, engine: StepEngine) -> None:
        self.engine = engine
        self.steps = 0
        self._flows: dict[int, _Flow] = {}
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._t0: float | None = None

    def _now(self) -> float:
        if self._t0 is None:
            self._t0 = time.monotonic()
        return time.monotonic() - self._t0

    def submit(self, req: StepRequest) -> _Flow:
        """Queue ``req`` on the engine; returns its inbox (read with :meth:`next_emit`)."""
        flow = _Flow()
        self._flows[id(req.key)] = flow
        self.engine.submit(req)
        self._work.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="fake-sglang-stepper")
        return flow

    def abort(self, key: object) -> None:
        """Drop a sequence from the engine and forget its inbox."""
        if self._flows.pop(id(key), None) is not None:
            self.engine.abort(key)

    async def next_emit(self, flow: _Flow, wake: asyncio.Event | None = None) -> StepEmit | None:
        """The sequence's next emit, waiting for it; None when ``wake`` was set first (an abort)."""
        while not flow.emits:
            flow.event.clear()
            if wake is None:
                await flow.event.wait()
                continue
            waiters = [asyncio.ensure_future(flow.event.wait()), asyncio.ensure_future(wake.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
            if not flow.emits and wake.is_set():
                return None
        return flow.emits.pop(0)

    async def _run(self) -> None:
        deadline: float | None = None
        while True:
            now = self._now()
            if deadline is None or deadline < now - 1.0:  # idle (or far behind): restart the clock here
                deadline = now
            dt = self.engine.start_step(deadline)
            if dt is None:
                deadline = None
                self._work.clear()
                await self._work.wait()
                continue
            deadline += dt
            delay = deadline - self._now()
            await asyncio.sleep(max(0.0, delay))
            self.steps += 1
            for emit in self.engine.finish_step(deadline):
                flow = self._flows.get(id(emit.key))
                if flow is None:
                    continue
                flow.emits.append(emit)
                flow.event.set()
                if emit.finished:
                    del self._flows[id(emit.key)]
