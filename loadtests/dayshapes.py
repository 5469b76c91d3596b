"""Day shapes for the day simulator: arrival rate over time, prompt/output mix, temperatures.

A :class:`DayShape` is a list of :class:`Segment` s (piecewise-linear arrival rate in
requests/s; a segment with both rates 0 is an idle gap), optional :class:`Burst` s (many
requests arriving at one instant) and a mix of :class:`PromptClass` es (prompt length drawn
log-uniformly in ``[lo, hi]`` tokens, output length uniformly in ``[out_lo, out_hi]``, a share
of sampled requests at temperature 1, the rest greedy; a cached share of the prompt). A
segment or a burst may bring its own mix (e.g. a batch job of sampled requests).

:meth:`DayShape.requests` draws the day (non-homogeneous Poisson arrivals by thinning,
Lewis & Shedler 1979; one ``random.Random(seed)``), so the same seed gives the same day.

Named shapes (:data:`SHAPES`; calibrated with :func:`default_engine_model` for 2 engines, the
rates scale with the engine count through ``rate_scale``):

- ``light``: 1.5 -> 3 -> 1 requests/s per 2 engines over 10 minutes, with an idle gap: the
  speculative engines' batches stay small, so all-speculative beats all-plain.
- ``heavy``: up to 9 requests/s per 2 engines; the batches pass the point where speculation
  loses (the speculative engine also has 25% less KV cache and queues first), so all-plain
  wins.
- ``mixed``: a light morning, a heavy midday, a sampled batch job (temperature 1) that pulls
  the speculative gauge down, an idle gap, then a light evening: the idle gauge keeps its last
  (low) value through the gap.
- ``shift_long``: 3.4 requests/s per 2 engines all day; short prompts only until mid-day
  (300 s), then the long documents (20% of the requests, 80-131K tokens) start arriving: the
  speculative engines are the better static deployment before the shift, the plain ones after.
- ``shift_sampled``: 2.4 requests/s per 2 engines all day, the default prompt mix; greedy until
  mid-day, then every request is sampled (temperature 1): acceptance falls at once, and the
  accept-length gauge only shows it after its next update.
- ``shift_task``: as ``shift_sampled``, greedy all day, but at mid-day the task changes so that
  the drafter's acceptance rate falls to 0.75 of the engine's (0.8 -> 0.6 on short prompts:
  3.4 -> 2.3 tokens per step at gamma 4): the same temperature class and context buckets, so
  only the learned acceptance itself can show the change.

Slow days (:data:`SLOW_SHAPES`, for the planner, :mod:`loadtests.planday`; same calibration and
scaling; they change over tens of minutes, long enough that moving an engine between the pools,
minutes out of service, can pay for itself):

- ``diurnal``: an hour; 0.6 -> 0.8 requests/s per 2 engines for 10 minutes, up to 3.0 over 10,
  20 minutes at the peak, down to 0.8 over 10 and 0.6 over the last 10 (the default mix):
  speculation wins the light hours, plain engines the KV-bound peak.
- ``slow_long``: 45 minutes at 3.4 requests/s per 2 engines; short prompts only for 7.5
  minutes, then for half an hour the long documents arrive (20% of the requests, as
  ``shift_long``), then short prompts again for 7.5 minutes.
- ``slow_sampled``: 70 minutes at 2.4 requests/s per 2 engines; greedy for 30 minutes, then the
  sampled share grows by a quarter every 5 minutes until every request is sampled (the last 25
  minutes).
- ``steady_light`` / ``steady_heavy``: 25 minutes at a constant 1.2 / 3.4 requests/s per 2
  engines, the default mix (20% sampled): a split that is right at the start stays right.

A shifting day names the instant of its shift (``shift_at_s``) so that reports can follow the
recovery after it (:func:`loadtests.dayreport.windowed_means`). :meth:`DayShape.shortened`
gives a shorter day at the same rates (CI-sized runs); :meth:`DayShape.with_lengths`
scales every prompt and output length (to fit an engine family: :mod:`loadtests.dayfamilies`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from loadtests.simulate import SimModel

__all__ = [
    "CHANGING",
    "SHAPES",
    "SLOW_SHAPES",
    "Burst",
    "DayShape",
    "EngineModel",
    "PromptClass",
    "Request",
    "Segment",
    "default_engine_model",
    "get_shape",
]


@dataclass(frozen=True)
class EngineModel:
    """The engines' speed and capacity (seconds, tokens).

    Attributes:
        speed: the per-token speed model (:class:`loadtests.simulate.SimModel`; its
            ``alpha(L)`` is the greedy acceptance rate).
        alpha_sampled_short: acceptance rate of sampled (temperature > 0) requests up to the
            speed model's ``alpha_knee_tokens``; above it alpha falls by the same
            ``alpha_drop_per_doubling`` as greedy (sampled requests accept far fewer draft
            tokens than greedy ones on the same drafter).
        kv_tokens: KV-cache capacity of a plain engine (tokens).
        spec_kv_fraction: share of ``kv_tokens`` left to a speculative engine (the drafter
            took ~25% of the pool: 1,808,112 -> 1,354,786 tokens in a measured deployment).
        max_running: the engine's ``max_running_requests`` (requests).
        prefill_chunk_tokens: prompt tokens prefilled per engine step at most (SGLang's
            ``--chunked-prefill-size``, default 8192).
        gauge_interval_steps: decode steps between updates of the accept-length gauge
            (SGLang's ``decode_log_interval``, 40).
    """

    speed: SimModel
    alpha_sampled_short: float = 0.3
    kv_tokens: int = 1_808_112
    spec_kv_fraction: float = 0.75
    max_running: int = 256
    prefill_chunk_tokens: int = 8192
    gauge_interval_steps: int = 40

    def __post_init__(self) -> None:
        if not 0 <= self.alpha_sampled_short <= 1 or not 0 < self.spec_kv_fraction <= 1:
            raise ValueError("alpha_sampled_short must be in [0, 1], spec_kv_fraction in (0, 1]")
        if min(self.kv_tokens, self.max_running, self.prefill_chunk_tokens, self.gauge_interval_steps) < 1:
            raise ValueError("kv_tokens, max_running, prefill_chunk_tokens, gauge_interval_steps must be >= 1")

    def kv_capacity(self, speculative: bool) -> int:
        """KV capacity (tokens) of a speculative or a plain engine."""
        return int(self.kv_tokens * self.spec_kv_fraction) if speculative else self.kv_tokens

    def alpha(self, context: float, sampled: bool) -> float:
        """Acceptance rate at ``context`` tokens, greedy or sampled."""
        a = self.speed.alpha(context)
        if sampled:
            a -= self.speed.alpha_short - self.alpha_sampled_short
        return min(1.0, max(0.0, a))


def default_engine_model() -> EngineModel:
    """The model the named shapes are calibrated for.

    Speedups (``SimModel.speedup``): 2.37x at batch 1 and 12K context, 1.69x at batch 8
    (-29%), 1.60x at 96K context (-33%), 1.15x at batch 8 and 96K: the measured operating
    points of a 250B model with a parallel drafter (2.33x, -26%, -31%, 1.16x). Per-token time
    20 ms at batch ~0 (a large model), gamma 4, c 0.08; speculation stops paying at batch ~42
    per engine at short context.
    """
    speed = SimModel(t0_s=0.02, batch_knee=40.0, attn_s_per_token=5e-9, prefill_s_per_token=1e-5,
                     alpha_short=0.8, alpha_knee_tokens=12288.0, alpha_drop_per_doubling=0.07,
                     gamma=4, c=0.08)
    return EngineModel(speed=speed)


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a day (seconds, tokens).

    Attributes:
        rid: index in arrival order.
        arrival_s: arrival time from the day's start.
        prompt_tokens: P.
        cached_tokens: prompt tokens found in the engine's prefix cache (warm on every engine).
        output_tokens: tokens the request will actually generate (<= max_new_tokens).
        max_new_tokens: the output budget the router sees (and the KV reservation uses).
        temperature: 0 greedy, > 0 sampled.
        kind: the prompt class's name.
        alpha_scale: multiplies the engine's acceptance rate for this request (its prompt
            class's ``alpha_scale``: how well the drafter predicts this kind of text).
        model: the model name the request sends (several models behind one router,
            :mod:`loadtests.dayfleet`); None: the deployment's one model.
        speculation: the client's speculation hint (``off``, ``auto``, ``on``; a window's
            request that asked to stay off or on the speculative pool, :mod:`loadtests.plan`).
    """

    rid: int
    arrival_s: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    max_new_tokens: int
    temperature: float
    kind: str
    alpha_scale: float = 1.0
    model: str | None = None
    speculation: str = "auto"

    @property
    def sampled(self) -> bool:
        """True for temperature > 0."""
        return self.temperature > 0


@dataclass(frozen=True)
class PromptClass:
    """A kind of request: its share and its length ranges (tokens).

    Attributes:
        name: label (``short``, ``long``, ...).
        weight: relative share in the mix.
        lo, hi: prompt length range, drawn log-uniformly.
        out_lo, out_hi: output length range, drawn uniformly.
        max_new_tokens: the budget sent (>= out_hi).
        sampled_fraction: share of requests at temperature 1.
        cached_fraction: share of each prompt already in the prefix cache.
        alpha_scale: multiplies the engine's acceptance rate for these requests (1: the
            engine's own; below 1 a task the drafter predicts worse, e.g. free-form chat after
            code: the demo's drafter accepts 2.6 tokens per step on greedy code, 1.8 on chat).
    """

    name: str
    weight: float
    lo: int
    hi: int
    out_lo: int = 128
    out_hi: int = 512
    max_new_tokens: int = 1024
    sampled_fraction: float = 0.2
    cached_fraction: float = 0.5
    alpha_scale: float = 1.0


@dataclass(frozen=True)
class Segment:
    """A stretch of the day with a linear arrival rate (requests/s); 0 -> 0 is an idle gap.

    ``mix``: this segment's request classes (None: the day's).
    """

    duration_s: float
    rate_start: float
    rate_end: float
    mix: tuple[PromptClass, ...] | None = None


@dataclass(frozen=True)
class Burst:
    """``requests`` arrivals at the same instant ``at_s`` (mix None: the day's)."""

    at_s: float
    requests: int
    mix: tuple[PromptClass, ...] | None = None


@dataclass(frozen=True)
class DayShape:
    """A day of traffic (see the module docstring).

    Attributes:
        name: the shape's name.
        segments: the arrival rate over time.
        mix: the default request classes.
        bursts: instants with many arrivals.
        long_prompt_tokens: prompts above this count as ``long`` in reports (tokens).
        rate_scale: multiplies every rate and burst size (e.g. engines / 2).
        shift_at_s: the instant the traffic mix changes (s from the day's start), None for a
            day without a shift.
    """

    name: str
    segments: tuple[Segment, ...]
    mix: tuple[PromptClass, ...]
    bursts: tuple[Burst, ...] = ()
    long_prompt_tokens: int = 32768
    rate_scale: float = 1.0
    shift_at_s: float | None = None

    @property
    def duration_s(self) -> float:
        """The day's length (s)."""
        return sum(s.duration_s for s in self.segments)

    def scaled(self, factor: float) -> DayShape:
        """The same day with ``factor`` times the traffic (rates and bursts)."""
        return replace(self, rate_scale=self.rate_scale * factor)

    def shortened(self, factor: float) -> DayShape:
        """The same day compressed in time by ``factor`` in (0, 1]: every segment lasts
        ``factor`` times as long, bursts and the shift come ``factor`` times as early, the rates
        and burst sizes are unchanged (about ``factor`` times the requests).

        Raises:
            ValueError: factor not in (0, 1].
        """
        if not 0 < factor <= 1:
            raise ValueError(f"shortened needs a factor in (0, 1], got {factor}")
        return replace(self, segments=tuple(replace(s, duration_s=s.duration_s * factor) for s in self.segments),
                       bursts=tuple(replace(b, at_s=b.at_s * factor) for b in self.bursts),
                       shift_at_s=None if self.shift_at_s is None else self.shift_at_s * factor)

    def with_lengths(self, prompt_scale: float = 1.0, output_scale: float = 1.0) -> DayShape:
        """The same day with every prompt length range (and the ``long`` cut of the reports)
        multiplied by ``prompt_scale``, every output range and budget by ``output_scale``
        (rounded, at least 1 token); arrivals unchanged.

        Raises:
            ValueError: a scale <= 0.
        """
        if prompt_scale <= 0 or output_scale <= 0:
            raise ValueError(f"with_lengths needs scales > 0, got {prompt_scale}, {output_scale}")
        if prompt_scale == output_scale == 1:
            return self

        def tok(n: int, f: float) -> int:
            return max(1, round(n * f))

        def mix(m: tuple[PromptClass, ...] | None) -> tuple[PromptClass, ...] | None:
            if m is None:
                return None
            return tuple(replace(c, lo=tok(c.lo, prompt_scale), hi=tok(c.hi, prompt_scale),
                                 out_lo=tok(c.out_lo, output_scale), out_hi=tok(c.out_hi, output_scale),
                                 max_new_tokens=tok(c.max_new_tokens, output_scale)) for c in m)

        return replace(self, mix=mix(self.mix) or (),
                       segments=tuple(replace(s, mix=mix(s.mix)) for s in self.segments),
                       bursts=tuple(replace(b, mix=mix(b.mix)) for b in self.bursts),
                       long_prompt_tokens=tok(self.long_prompt_tokens, prompt_scale))

    def requests(self, seed: int = 0) -> list[Request]:
        """Draw the day's requests, sorted by arrival (deterministic for a seed)."""
        rng = random.Random(seed)
        drawn: list[tuple[float, tuple[PromptClass, ...]]] = []
        t0 = 0.0
        for seg in self.segments:
            peak = max(seg.rate_start, seg.rate_end) * self.rate_scale
            mix = seg.mix or self.mix
            t = t0
            while peak > 0:
                t += rng.expovariate(peak)
                if t >= t0 + seg.duration_s:
                    break
                frac = (t - t0) / seg.duration_s
                rate = (seg.rate_start + (seg.rate_end - seg.rate_start) * frac) * self.rate_scale
                if rng.random() * peak <= rate:
                    drawn.append((t, mix))
            t0 += seg.duration_s
        for b in self.bursts:
            drawn += [(b.at_s, b.mix or self.mix)] * round(b.requests * self.rate_scale)
        drawn.sort(key=lambda x: x[0])
        out = []
        for i, (t, mix) in enumerate(drawn):
            cls = rng.choices(mix, weights=[c.weight for c in mix])[0]
            p = round(math.exp(rng.uniform(math.log(cls.lo), math.log(cls.hi))))
            o = rng.randint(cls.out_lo, cls.out_hi)
            temp = 1.0 if rng.random() < cls.sampled_fraction else 0.0
            out.append(Request(i, t, p, int(p * cls.cached_fraction), o, max(cls.max_new_tokens, o),
                               temp, cls.name, cls.alpha_scale))
        return out


_SHORT = PromptClass("short", 0.8, 8192, 16384, cached_fraction=0.5)
_LONG = PromptClass("long", 0.2, 81920, 131072, cached_fraction=0.9)
_MIX = (_SHORT, _LONG)
#: A batch job: sampled medium prompts (below the long threshold), all at temperature 1.
_BATCH_JOB = (PromptClass("batch", 1.0, 24576, 32000, out_lo=256, out_hi=512, sampled_fraction=1.0,
                          cached_fraction=0.9),)

SHAPES: dict[str, DayShape] = {
    "light": DayShape("light", (Segment(180, 0.6, 1.5), Segment(120, 1.5, 1.5), Segment(60, 0, 0),
                                Segment(240, 1.5, 0.6)), _MIX, bursts=(Burst(400, 6),)),
    "heavy": DayShape("heavy", (Segment(120, 2.0, 4.0), Segment(240, 4.0, 4.0), Segment(120, 4.0, 2.4)),
                      _MIX, bursts=(Burst(200, 20),)),
    "mixed": DayShape("mixed", (Segment(120, 0.6, 1.5), Segment(90, 1.5, 4.0), Segment(150, 4.0, 4.0),
                                Segment(60, 4.0, 1.5), Segment(60, 1.0, 1.0, _BATCH_JOB),
                                Segment(60, 0, 0), Segment(180, 0.6, 1.5)), _MIX,
                      bursts=(Burst(300, 20),)),
    "shift_long": DayShape("shift_long", (Segment(300, 3.4, 3.4, (replace(_SHORT, weight=1.0),)),
                                          Segment(300, 3.4, 3.4)), _MIX, shift_at_s=300.0),
    "shift_sampled": DayShape("shift_sampled",
                              (Segment(300, 2.4, 2.4, tuple(replace(c, sampled_fraction=0.0) for c in _MIX)),
                               Segment(300, 2.4, 2.4, tuple(replace(c, sampled_fraction=1.0) for c in _MIX))),
                              _MIX, shift_at_s=300.0),
    "shift_task": DayShape("shift_task",
                           (Segment(300, 2.4, 2.4, tuple(replace(c, sampled_fraction=0.0) for c in _MIX)),
                            Segment(300, 2.4, 2.4, tuple(replace(c, sampled_fraction=0.0, alpha_scale=0.75)
                                                         for c in _MIX))),
                           _MIX, shift_at_s=300.0),
}


_SHORT_ONLY = (replace(_SHORT, weight=1.0),)


def _sampled(share: float) -> tuple[PromptClass, ...]:
    return tuple(replace(c, sampled_fraction=share) for c in _MIX)


#: The slowly changing days and the steady ones (module docstring), the planner's benchmark days.
SLOW_SHAPES: dict[str, DayShape] = {
    "diurnal": DayShape("diurnal", (Segment(600, 0.6, 0.8), Segment(600, 0.8, 3.0), Segment(1200, 3.0, 3.0),
                                    Segment(600, 3.0, 0.8), Segment(600, 0.8, 0.6)), _MIX),
    "slow_long": DayShape("slow_long", (Segment(450, 3.4, 3.4, _SHORT_ONLY), Segment(1800, 3.4, 3.4),
                                        Segment(450, 3.4, 3.4, _SHORT_ONLY)), _MIX, shift_at_s=450.0),
    "slow_sampled": DayShape("slow_sampled", (Segment(1800, 2.4, 2.4, _sampled(0.0)),
                                              *(Segment(300, 2.4, 2.4, _sampled(q / 4)) for q in (1, 2, 3)),
                                              Segment(1500, 2.4, 2.4, _sampled(1.0))), _MIX, shift_at_s=1800.0),
    "steady_light": DayShape("steady_light", (Segment(1500, 1.2, 1.2),), _MIX),
    "steady_heavy": DayShape("steady_heavy", (Segment(1500, 3.4, 3.4),), _MIX),
}

#: The slow days that change (the others are steady).
CHANGING = ("diurnal", "slow_long", "slow_sampled")


def get_shape(name: str, engines: int = 2) -> DayShape:
    """The named shape (:data:`SHAPES` or :data:`SLOW_SHAPES`) for ``engines`` engines (rates
    scaled by ``engines / 2``).

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    shape = SHAPES.get(name) or SLOW_SHAPES.get(name)
    if shape is None:
        raise KeyError(f"unknown day shape {name!r}; known: {', '.join([*SHAPES, *SLOW_SHAPES])}")
    return shape.scaled(engines / 2)

