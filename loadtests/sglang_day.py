"""The SGLang-scheduler engine model inside the day simulator (in process, virtual time).

:class:`SglangDayEngine` gives :class:`loadtests.sglang_sched.SglangScheduler` the interface
:func:`loadtests.daysim.simulate_day` drives (the attributes listed on
:class:`loadtests.daysim.Engine`), and :func:`sglang_engines` is the ``make_engine`` factory
that runs a whole day on it::

    simulate_day(reqs, all_plain(2), family.model, seed=0,
                 make_engine=sglang_engines(get_sglang_family("kv_limited")))

The day's ``EngineModel`` then only names the pools' engines (the router's thresholds still come
from it, :func:`loadtests.dayrouter.settings_for`); speed, capacity, limits and acceptance are the
SGLang family's. A request's ``cached_tokens`` is its shared prefix
(:mod:`loadtests.sglang_sched`, "Tokens"). ``kv_reserved`` reads the KV in use as SGLang's
``token_usage`` counts it, so the router's view of KV usage is the engine's gauge.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from loadtests.dayshapes import EngineModel, Request
from loadtests.sglang_families import SglangFamily
from loadtests.sglang_sched import SglangScheduler

__all__ = ["FinishedRequest", "SglangDayEngine", "sglang_engines"]


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """What the simulator reads of a finished request (seconds of the day; tokens)."""

    req: Request
    first_s: float
    admitted_s: float
    spec_tokens: int
    verify_ct: int


class SglangDayEngine:
    """One SGLang-scheduler engine in the day simulator (module docstring).

    Args:
        url, pool: labels; speculative: runs the drafter; family: the engine family;
        seed: seeds the acceptance draws.
    """

    def __init__(self, url: str, pool: str, speculative: bool, family: SglangFamily, seed: int) -> None:
        self.url, self.pool, self.speculative = url, pool, speculative
        self.sched = SglangScheduler(family, speculative, seed)
        self.capacity = self.sched.capacity
        self.busy = False

    @property
    def waiting(self) -> list[object]:
        """The waiting queue (the simulator reads its length)."""
        return self.sched.waiting  # type: ignore[return-value]

    @property
    def running(self) -> int:
        """Requests holding a row (decoding + the chunked one)."""
        return self.sched.running_count

    @property
    def kv_reserved(self) -> int:
        """KV tokens in use (SGLang's ``token_usage`` numerator)."""
        return self.sched.kv_used

    @property
    def accept_length(self) -> float | None:
        """The accept-length gauge."""
        return self.sched.accept_length

    @property
    def generated_total(self) -> int:
        """Tokens emitted so far."""
        return self.sched.generated_total

    @property
    def steps(self) -> int:
        """Steps run."""
        return self.sched.steps

    @property
    def busy_s(self) -> float:
        """Seconds spent in steps."""
        return self.sched.busy_s

    def fits(self, req: Request) -> bool:
        """Whether the request can always be served (:meth:`SglangScheduler.fits`)."""
        return self.sched.fits(req.prompt_tokens, req.max_new_tokens)

    def submit(self, req: Request) -> None:
        """Queue a request (FCFS)."""
        self.sched.submit(req, req.prompt_tokens, req.cached_tokens, req.output_tokens, req.max_new_tokens,
                          req.temperature, req.alpha_scale)

    def start_step(self, now: float) -> float | None:
        """Plan the next step; its duration (s) or None when idle."""
        dt = self.sched.start_step(now)
        self.busy = dt is not None
        return dt

    def finish_step(self, now: float) -> list[FinishedRequest]:
        """Apply the step ending at ``now``; the requests that finished in it."""
        return [FinishedRequest(r.key, r.first_s, r.admitted_s, r.spec_tokens, r.verify_ct)  # type: ignore[arg-type]
                for r, _, done in self.sched.finish_step(now) if done]


def sglang_engines(family: SglangFamily) -> Callable[[str, str, bool, EngineModel, random.Random], SglangDayEngine]:
    """The ``make_engine`` factory of :func:`loadtests.daysim.simulate_day` for ``family``; each
    engine's draws are seeded from the simulator's per-engine random source."""
    def make(url: str, pool: str, speculative: bool, model: EngineModel, rng: random.Random) -> SglangDayEngine:
        return SglangDayEngine(url, pool, speculative, family, rng.getrandbits(63))
    return make
