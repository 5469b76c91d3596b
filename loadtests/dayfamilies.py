"""Engine families for the day simulator: named engine models, each with the days it serves.

A family (:class:`EngineFamily`) is an :class:`loadtests.dayshapes.EngineModel` (speed, acceptance,
KV capacity) plus how the named days (:data:`loadtests.dayshapes.SHAPES`) are fitted to it:
``prompt_scale`` multiplies every prompt length (an engine whose KV holds 60K tokens cannot take
the default days' 80-131K-token documents), ``output_scale`` every output length and budget
(a reasoning model writes long answers), ``rate_scale`` every arrival rate (a faster engine
needs more traffic for the heavy day to be heavy). The router under test is not told which
family it runs on: ``benchmarks/day.py --families`` runs the same policy over all of them, so
that what the router learns is checked against engines with different economics.

Families (:data:`FAMILIES`; each builder's docstring says what it models and where its
figures come from):

- ``default``: today's model (:func:`loadtests.dayshapes.default_engine_model`).
- ``kv_limited``: the KV cache holds ten ~6K-token prompts; long prompts fill it and requests
  queue at admission.
- ``long_attention``: attention-heavy decoding; at long context the per-context-token cost
  dominates and acceptance falls steeply.
- ``moe_spec_pays``: speculation still pays at high batch (a MoE model, a light drafter).

Errors: ``KeyError`` for an unknown family name (:func:`get_family`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadtests.dayshapes import DayShape, EngineModel, default_engine_model, get_shape
from loadtests.simulate import SimModel

__all__ = ["FAMILIES", "EngineFamily", "get_family"]


@dataclass(frozen=True)
class EngineFamily:
    """An engine model and the fitting of the named days to it.

    Attributes:
        name: the family's name.
        model: the engines' speed and capacity.
        summary: one line (the builder's docstring's first line).
        prompt_scale: multiplies every prompt length of the named days (and their ``long``
            cut, and the policy's ``long_prompt_tokens`` in ``benchmarks/day.py``).
        output_scale: multiplies every output length range and budget of the named days.
        rate_scale: multiplies every arrival rate and burst size of the named days.
    """

    name: str
    model: EngineModel
    summary: str
    prompt_scale: float = 1.0
    output_scale: float = 1.0
    rate_scale: float = 1.0

    def __post_init__(self) -> None:
        if min(self.prompt_scale, self.output_scale, self.rate_scale) <= 0:
            raise ValueError("prompt_scale, output_scale and rate_scale must be > 0")

    def fit(self, shape: DayShape) -> DayShape:
        """``shape`` with this family's prompt and rate scales."""
        out = shape.with_lengths(self.prompt_scale, self.output_scale)
        return out.scaled(self.rate_scale) if self.rate_scale != 1 else out

    def shape(self, name: str, engines: int = 2) -> DayShape:
        """The named day for ``engines`` engines of this family.

        Raises:
            KeyError: unknown shape name.
        """
        return self.fit(get_shape(name, engines))

    def scaled_tokens(self, tokens: float) -> int:
        """A prompt-length setting (tokens) of the default days, at this family's scale."""
        return max(1, round(tokens * self.prompt_scale))


def _first_line(fn: Callable[..., object]) -> str:
    return (fn.__doc__ or "").strip().split("\n")[0]


def default_family() -> EngineFamily:
    """Today's model: a 250B model with a parallel drafter (:func:`loadtests.dayshapes.default_engine_model`).

    Its figures are the measured operating points in that function's docstring and in
    docs/performance.md ("A day at equal hardware"); the named days are calibrated for it
    (prompt and rate scale 1).
    """
    return EngineFamily("default", default_engine_model(), _first_line(default_family))


def kv_limited_family() -> EngineFamily:
    """Small KV: a 6K-token prompt holds a tenth of a plain engine's KV, the drafter's engine 25% less.

    KV capacity 61,440 tokens on a plain engine (ten 6,144-token prompts), 46,080 on a
    speculative one (``spec_kv_fraction`` 0.75: the drafter took ~25% of the pool, 1,808,112 ->
    1,354,786 tokens in the deployment behind docs/performance.md). The days' prompts are
    scaled by 1/16 (short 512-1,024 tokens, long 5,120-8,192: a long prompt plus its 1,024-token
    budget reserves ~1/8 of the plain KV, ~1/6 of the speculative one), so a few long prompts
    fill an engine and the rest queue at admission (the simulator admits by KV reservation,
    as SGLang does by ``max_total_num_tokens``); the running batch stays far below
    ``max_running``. Speed as the default model's (the same model on GPUs with little memory
    left for KV).
    """
    base = default_engine_model()
    model = EngineModel(speed=base.speed, alpha_sampled_short=base.alpha_sampled_short, kv_tokens=61_440,
                        spec_kv_fraction=0.75, max_running=base.max_running)
    return EngineFamily("kv_limited", model, _first_line(kv_limited_family), prompt_scale=1 / 16)


def long_attention_family() -> EngineFamily:
    """Attention-heavy long context: KV reads dominate decoding at long prompts, acceptance falls with context.

    Per-context-token decode cost 4e-7 s (80x the default's): a model with full multi-head
    attention (no grouped-query sharing) keeps ~0.8 MB of KV per token (a 13B-class model: 40
    layers x 40 heads x 128 dims x K and V x 2 bytes), read at ~2 TB/s of HBM bandwidth; at a
    100K-token context that is 40 ms per step against the 20 ms weight read (``t0``), at 12K
    about 5 ms. (The simulator charges the batch's mean context once per step:
    docs in :mod:`loadtests.daysim`.) Acceptance 0.8 up to 4,096 tokens, then 0.12 lower per
    doubling (0.64 at 10K, 0.24 at 100K): the drafter loses the thread at long context,
    as measured for native MTP drafting on Qwen3.6-27B (vllm-project/vllm#47602: the net
    speedup shrinks with context and turns into a loss before the context limit). Speedup at
    batch 1: 1.7x at 12K, 1.0x at ~100K. Batch knee, prefill and KV as the default model's;
    the days unscaled.
    """
    base = default_engine_model()
    speed = SimModel(t0_s=0.02, batch_knee=40.0, attn_s_per_token=4e-7, prefill_s_per_token=1e-5,
                     alpha_short=0.8, alpha_knee_tokens=4096.0, alpha_drop_per_doubling=0.12, gamma=4, c=0.08)
    model = EngineModel(speed=speed, alpha_sampled_short=base.alpha_sampled_short, kv_tokens=base.kv_tokens,
                        spec_kv_fraction=base.spec_kv_fraction, max_running=base.max_running)
    return EngineFamily("long_attention", model, _first_line(long_attention_family))


def moe_spec_pays_family() -> EngineFamily:
    """Speculation pays at high batch: a MoE model with a light EAGLE-3 drafter, batch knee ~370.

    On gpt-oss-120B (a mixture-of-experts model) with EAGLE-3 in vLLM, speculation kept its
    throughput and latency gains up to 200 concurrent requests (output throughput +10-21%,
    end-to-end latency -12-20%, best at 2-3 draft tokens; Red Hat developer blog,
    developers.redhat.com/articles/2026/04/16/performance-improvements-speculative-decoding-vllm-gpt-oss):
    a verify pass over more positions reads experts that the batch reads anyway, so the batch's
    compute grows slowly. Modelled with gamma 3, c 0.05 (a one-layer draft head), acceptance
    0.7 (2.53 tokens per step greedy), and the batch knee solved from the article's ~15% gain
    at 200 concurrent requests: ``S(200) = 1.15`` gives ``batch_knee`` 370 (speedup 2.2x at
    batch 1, still above 1 at ``max_running`` 256: speculation never stops paying).
    ``t0`` 12 ms: the whole ~60 GB of MXFP4 weights read once per step at H200's 4.8 TB/s (at
    the batches of interest a step touches most experts); prefill 5e-6 s/token (few active
    parameters per token), attention 5e-9 s/token as the default's. The days are fitted to
    such a deployment's traffic: prompts x 1/4 (2-4K-token chats, 20-33K-token documents),
    outputs x 4 (512-2,048 tokens, budget 4,096: a reasoning model's answers) and rates x 3,
    so that the heavy day runs 100-200 requests per engine, where speculation still wins
    (simulated: all-spec's mean ~0.83x all-plain's there, the article's -12-20%).
    """
    base = default_engine_model()
    speed = SimModel(t0_s=0.012, batch_knee=370.0, attn_s_per_token=5e-9, prefill_s_per_token=5e-6,
                     alpha_short=0.7, alpha_knee_tokens=12288.0, alpha_drop_per_doubling=0.05, gamma=3, c=0.05)
    model = EngineModel(speed=speed, alpha_sampled_short=base.alpha_sampled_short, kv_tokens=base.kv_tokens,
                        spec_kv_fraction=base.spec_kv_fraction, max_running=base.max_running)
    return EngineFamily("moe_spec_pays", model, _first_line(moe_spec_pays_family), prompt_scale=0.25,
                        output_scale=4.0, rate_scale=3.0)


#: family name -> builder (each call builds a fresh, frozen family).
FAMILIES: dict[str, Callable[[], EngineFamily]] = {
    "default": default_family,
    "kv_limited": kv_limited_family,
    "long_attention": long_attention_family,
    "moe_spec_pays": moe_spec_pays_family,
}


def get_family(name: str) -> EngineFamily:
    """The named family.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    if name not in FAMILIES:
        raise KeyError(f"unknown engine family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]()
