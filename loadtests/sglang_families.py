"""Engine families of the second engine model: a roofline step cost and SGLang's launch settings.

:mod:`loadtests.sglang_sched` runs SGLang 0.5.23's scheduler rules; this module says what one
forward pass costs and how an engine is launched. The cost is written from hardware and model
figures, not from :mod:`loadtests.simulate` (whose ``t0 * (1 + b / b_knee) + attn * L`` form the
router's own speed model shares), so that what the router learns is measured against engines
whose economics it was not written around.

One forward over ``n`` tokens (:meth:`Roofline.forward_s`), seconds::

    launch_s + max(weights_read(n) / hbm_bytes_per_s,
                   (2 * active_params * n + attn_flops_per_pair * pairs) / peak_flops)
             + kv_read_tokens * kv_bytes_per_token / hbm_bytes_per_s

``weights_read(n)`` is the dense bytes plus, on a mixture-of-experts model, the experts that
``n`` tokens touch: ``expert_bytes * (1 - (1 - k / E) ** n)`` (each token routes to ``k`` of
``E`` experts, independently); ``pairs`` are the (query token, context token) pairs attention
computes; ``kv_read_tokens`` the context tokens whose KV the pass reads. A step of the engine
model is one such pass for the target model, plus on a speculative engine the drafter's passes
(EAGLE-3: one decoder layer and the vocabulary head, :meth:`Roofline.draft_forward_s`).
``hbm_bytes_per_s`` and ``peak_flops`` are *achieved* figures (a fraction of the data sheet's).

Acceptance (:meth:`SglangFamily.alpha`): the chance that the target accepts one draft position,
``alpha_greedy`` (temperature 0) or ``alpha_sampled`` up to ``alpha_knee_tokens`` of context, then
``alpha_drop_per_doubling`` lower per doubling of the context (floored at 0), times the
request's scale (its task), capped at 1.

Families (:data:`FAMILIES`, each builder's docstring gives its figures; the names are those of
:mod:`loadtests.dayfamilies` whose days they serve, with the same KV capacities so that the same
requests fit):

- ``kv_limited``: a dense 70B model, memory-bound; 61,440 KV tokens plain, 46,080 speculative;
  SGLang's EAGLE default ``max_running_requests`` 48 on the speculative engine.
- ``moe_spec_pays``: a mixture-of-experts model whose verify pass reads experts a batch reads
  anyway (compute-rich: compute-bound only past ~2,000 tokens per pass); speculation loses at
  batch 1 (the verify pass touches 4x the experts) and pays at high batch.

Errors: ``KeyError`` for an unknown family (:func:`get_sglang_family`); ``ValueError`` for
figures out of range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FAMILIES", "Roofline", "SglangFamily", "get_sglang_family"]


@dataclass(frozen=True)
class Roofline:
    """One model on one device, as a roofline (bytes, FLOPs, seconds; achieved rates).

    Attributes:
        hbm_bytes_per_s: memory bandwidth achieved by the forward pass (B/s).
        peak_flops: dense FLOP/s achieved.
        weight_bytes: weight bytes every pass reads (the dense part of a MoE model).
        active_params: parameters one token multiplies (2 FLOPs each).
        kv_bytes_per_token: KV bytes attention reads per context token per pass.
        attn_flops_per_pair: attention FLOPs per (query token, context token) pair
            (``4 * layers * heads * head_dim``).
        launch_s: fixed time per pass (launches, sampling, the scheduler's CPU work).
        expert_bytes, experts, experts_per_token: a MoE model's expert weights (0: dense).
        draft_weight_bytes, draft_active_params, draft_kv_bytes_per_token, draft_launch_s:
            the drafter's figures (EAGLE-3: one layer and the head).
    """

    hbm_bytes_per_s: float
    peak_flops: float
    weight_bytes: float
    active_params: float
    kv_bytes_per_token: float
    attn_flops_per_pair: float
    launch_s: float
    expert_bytes: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    draft_weight_bytes: float = 0.0
    draft_active_params: float = 0.0
    draft_kv_bytes_per_token: float = 0.0
    draft_launch_s: float = 0.0

    def __post_init__(self) -> None:
        if min(self.hbm_bytes_per_s, self.peak_flops) <= 0:
            raise ValueError("hbm_bytes_per_s and peak_flops must be > 0")
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            raise ValueError("experts_per_token must be in 1..experts")

    def weights_read(self, tokens: float) -> float:
        """Weight bytes a pass over ``tokens`` tokens reads."""
        if not self.experts or tokens <= 0:
            return self.weight_bytes
        touched = 1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens
        return self.weight_bytes + self.expert_bytes * touched

    def forward_s(self, tokens: float, pairs: float, kv_read_tokens: float) -> float:
        """One target pass (module docstring), seconds."""
        memory = self.weights_read(tokens) / self.hbm_bytes_per_s
        compute = (2.0 * self.active_params * tokens + self.attn_flops_per_pair * pairs) / self.peak_flops
        return self.launch_s + max(memory, compute) + kv_read_tokens * self.kv_bytes_per_token / self.hbm_bytes_per_s

    def draft_forward_s(self, tokens: float, kv_read_tokens: float) -> float:
        """One drafter pass over ``tokens`` tokens reading ``kv_read_tokens`` of its KV, seconds."""
        memory = self.draft_weight_bytes / self.hbm_bytes_per_s
        compute = 2.0 * self.draft_active_params * tokens / self.peak_flops
        return (self.draft_launch_s + max(memory, compute)
                + kv_read_tokens * self.draft_kv_bytes_per_token / self.hbm_bytes_per_s)


@dataclass(frozen=True)
class SglangFamily:
    """An engine family of the SGLang-scheduler model (figures in each builder's docstring).

    Attributes:
        name, summary: the family's name and one line.
        roofline: the step cost.
        kv_tokens: ``max_total_num_tokens`` of a plain engine; ``spec_kv_fraction`` the share a
            speculative engine keeps (the drafter's weights, KV and graphs take the rest).
        max_running: ``--max-running-requests`` of a plain engine; ``spec_max_running`` of a
            speculative one (SGLang sets 48 for the EAGLE family when it is not given).
        chunked_prefill_size: ``--chunked-prefill-size`` (8192 on H100/H200 by default).
        max_prefill_tokens: ``--max-prefill-tokens`` (16384 by default).
        enable_mixed_chunk: ``--enable-mixed-chunk`` (off by default; the model mixes on a plain
            engine only).
        gamma: ``--speculative-num-steps`` (top-k 1, ``gamma + 1`` draft tokens verified).
        alpha_greedy, alpha_sampled, alpha_knee_tokens, alpha_drop_per_doubling: acceptance.
        schedule_conservativeness: scales the initial new-token ratio (SGLang's default 1.0).
        gauge_interval_steps: decode steps per accept-length gauge update (``decode_log_interval``).
    """

    name: str
    summary: str
    roofline: Roofline
    kv_tokens: int
    spec_kv_fraction: float = 0.75
    max_running: int = 256
    spec_max_running: int = 48
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    enable_mixed_chunk: bool = False
    gamma: int = 3
    alpha_greedy: float = 0.75
    alpha_sampled: float = 0.5
    alpha_knee_tokens: float = 4096.0
    alpha_drop_per_doubling: float = 0.05
    schedule_conservativeness: float = 1.0
    gauge_interval_steps: int = 40

    def __post_init__(self) -> None:
        if not 0 < self.spec_kv_fraction <= 1 or not 0 <= self.alpha_sampled <= 1 or not 0 <= self.alpha_greedy <= 1:
            raise ValueError("spec_kv_fraction must be in (0, 1], the acceptance rates in [0, 1]")
        if min(self.kv_tokens, self.max_running, self.spec_max_running, self.chunked_prefill_size,
               self.max_prefill_tokens, self.gamma, self.gauge_interval_steps) < 1:
            raise ValueError("capacities, limits, gamma and the gauge interval must be >= 1")

    def kv_capacity(self, speculative: bool) -> int:
        """``max_total_num_tokens`` of a speculative or a plain engine (tokens)."""
        return int(self.kv_tokens * self.spec_kv_fraction) if speculative else self.kv_tokens

    def max_running_requests(self, speculative: bool) -> int:
        """``max_running_requests`` of a speculative or a plain engine."""
        return self.spec_max_running if speculative else self.max_running

    def alpha(self, context: float, sampled: bool, scale: float = 1.0) -> float:
        """Acceptance of one draft position at ``context`` tokens (module docstring)."""
        a = self.alpha_sampled if sampled else self.alpha_greedy
        if context > self.alpha_knee_tokens:
            a -= self.alpha_drop_per_doubling * math.log2(context / self.alpha_knee_tokens)
        return min(1.0, max(0.0, a) * scale)


def _first_line(fn: Callable[..., object]) -> str:
    return (fn.__doc__ or "").strip().split("\n")[0]


def kv_limited_family() -> SglangFamily:
    """A dense 70B model on one H200, memory-bound, with the KV of the kv_limited days: 61,440 tokens plain.

    Llama-3.1-70B-class: 80 layers, grouped-query attention with 8 KV heads of 128 dims, FP8
    weights (70 GB, 70e9 parameters) and FP8 KV (80 x 8 x 128 x 2 x 1 B = 160 KiB per token);
    attention 4 x 80 x 64 x 128 = 2.6e6 FLOPs per pair. H200: 4.8 TB/s, 1,979 TFLOP/s dense
    FP8; achieved 75% and 50% (3.6 TB/s, 990 TFLOP/s). A pass reads the weights in 19.4 ms,
    plus 1 ms fixed: ~20 ms at batch 1, compute-bound above ~100 tokens per pass. EAGLE-3
    drafter: one layer and the 128K-vocabulary head in BF16 (~1e9 parameters, 2 GB; 4 KiB of KV
    per token), 0.3 ms fixed per pass; gamma 3, acceptance 0.75 greedy / 0.5 sampled up to 4K
    tokens, 0.05 less per doubling. KV as ``loadtests.dayfamilies``' kv_limited (61,440 tokens,
    46,080 with the drafter: a deployment that leaves little memory to KV); the speculative
    engine keeps SGLang's EAGLE default of 48 running requests, the plain one 256.
    """
    roof = Roofline(hbm_bytes_per_s=3.6e12, peak_flops=990e12, weight_bytes=70e9, active_params=70e9,
                    kv_bytes_per_token=163_840, attn_flops_per_pair=2.62e6, launch_s=0.001,
                    draft_weight_bytes=2e9, draft_active_params=1e9, draft_kv_bytes_per_token=4096,
                    draft_launch_s=0.0003)
    return SglangFamily("kv_limited", _first_line(kv_limited_family), roof, kv_tokens=61_440)


def moe_spec_pays_family() -> SglangFamily:
    """A 120B mixture-of-experts model on two H200s, compute-rich: speculation loses at batch 1 and pays at high batch.

    gpt-oss-120B-class: 36 layers (18 with full attention, 18 with a 128-token window), 128
    experts of which 4 per token, 5.1e9 active parameters; 3 GB of dense weights (attention,
    embeddings, router) and 57 GB of MXFP4 experts; KV 18 x 8 x 64 x 2 x 2 B = 36 KiB per token
    read over the full-attention layers (the windowed ones read at most 128 tokens: left
    out); attention 4 x 18 x 64 x 64 = 2.9e5 FLOPs per pair. Two H200s with tensor parallelism
    (a deployment for hundreds of concurrent requests): achieved 6.0 TB/s and 1,980 TFLOP/s,
    1 ms fixed per pass. One token reads 3 GB + 57 GB x 4/128: 1.8 ms at batch 1; a verify pass
    over 4 tokens touches 12% of the experts, so speculation loses at batch 1 (0.9x); from a
    few dozen tokens per pass every expert is read anyway and the pass stays memory-bound to
    ~2,000 tokens, so it pays at a batch of 200 (~2x: the verify pass costs what the decode
    pass does). EAGLE-3 drafter: one layer and the 201K-vocabulary head in BF16 (0.8e9
    parameters, 1.6 GB, 2 KiB of KV per token), 0.3 ms fixed; gamma 3, acceptance 0.7 greedy /
    0.45 sampled to 8K tokens, 0.04 less per doubling. KV as ``loadtests.dayfamilies``'
    moe_spec_pays (1,808,112 tokens, 75% with the drafter); both engines run up to 256 requests
    (an operator serving 200 concurrent requests sets it).
    """
    roof = Roofline(hbm_bytes_per_s=6.0e12, peak_flops=1980e12, weight_bytes=3e9, active_params=5.1e9,
                    kv_bytes_per_token=36_864, attn_flops_per_pair=2.95e5, launch_s=0.001,
                    expert_bytes=57e9, experts=128, experts_per_token=4,
                    draft_weight_bytes=1.6e9, draft_active_params=0.8e9, draft_kv_bytes_per_token=2048,
                    draft_launch_s=0.0003)
    return SglangFamily("moe_spec_pays", _first_line(moe_spec_pays_family), roof, kv_tokens=1_808_112,
                        spec_max_running=256, alpha_greedy=0.7, alpha_sampled=0.45, alpha_knee_tokens=8192.0,
                        alpha_drop_per_doubling=0.04)


#: family name -> builder (each call builds a fresh, frozen family).
FAMILIES: dict[str, Callable[[], SglangFamily]] = {
    "kv_limited": kv_limited_family,
    "moe_spec_pays": moe_spec_pays_family,
}


def get_sglang_family(name: str) -> SglangFamily:
    """The named family.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    if name not in FAMILIES:
        raise KeyError(f"no SGLang-scheduler engine family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]()
