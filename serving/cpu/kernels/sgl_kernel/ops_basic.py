"""Dense-layer ops: weight "packing", linear, RMSNorm, gated activations, RoPE, KV store.

SGLang calls these on CPU when ``cpu_has_amx_support()`` is true (see
``sglang/srt/utils/common.py``; the specgate boot hook makes it true whenever this package is
in use, so every CPU machine runs the same code path). Each op reproduces the arithmetic of
the torch-native method SGLang would otherwise run, so float32 results equal those of the
``forward_native`` paths and of Hugging Face ``transformers``.

Shapes use T = tokens, H = hidden size, D = head size.

| op | SGLang caller | semantics |
| --- | --- | --- |
| ``convert_weight_packed(weight)`` | ``srt/utils/common.py: prepack_weight_if_needed`` | identity (no VNNI blocking: ``weight_packed_linear`` reads the plain [out, in] layout) |
| ``weight_packed_linear(mat1, mat2, bias, is_vnni)`` | ``srt/layers/quantization/unquant.py``, ``srt/layers/logits_processor.py`` | ``mat1 @ mat2.T (+ bias)``; mat1 [T, in], mat2 [out, in] |
| ``rmsnorm_cpu(input, weight, eps)`` | ``srt/layers/layernorm.py: RMSNorm.forward_cpu`` | ``(x * rsqrt(mean(x^2) + eps) * weight)`` in float32, cast back |
| ``fused_add_rmsnorm_cpu(input!, residual!, weight, eps)`` | same | ``residual = input + residual; input = rmsnorm(residual)`` in place |
| ``silu_and_mul_cpu(input)`` | ``srt/layers/activation.py: SiluAndMul`` | ``silu(x[..., :d]) * x[..., d:]``, d = last dim / 2 |
| ``gelu_and_mul_cpu``, ``gelu_tanh_and_mul_cpu`` | ``GeluAndMul`` | same with exact / tanh GELU |
| ``rotary_embedding_cpu(positions, query, key, head_size, cos_sin_cache, is_neox)`` | ``srt/layers/rotary_embedding/base.py: RotaryEmbedding.forward_cpu`` | ``forward_native``: rotate the first ``rotary_dim = cos_sin_cache.shape[-1]`` lanes of each head |
| ``apply_rotary_pos_emb_cpu(q, k, cos, sin, unsqueeze_dim)`` | ``srt/layers/rotary_embedding/utils.py`` (bound at import) | ``apply_rotary_pos_emb_native_eager``: ``x * cos + rotate_half(x) * sin`` in float32 |
| ``store_cache_cpu(k, v, k_cache!, v_cache!, indices, row_dim)`` | ``srt/mem_cache/memory_pool.py`` | ``k_cache[indices] = k``, ``v_cache[indices] = v`` as rows of ``row_dim`` |
| ``init_cpu_threads_env(cpu_ids)`` | ``srt/distributed/bootstrap.py`` | sets torch's intra-op threads to the number of listed CPUs; binds nothing |
| ``initialize(size, rank)`` | same | shared-memory all-reduce setup: only world size 1 is supported |
| ``l2norm_cpu(input, eps)`` | ``srt/layers/layernorm.py`` | ``x * rsqrt(sum(x^2) + eps)`` over the last dim, float32 |
| ``murmur_hash32_cpu(seed, positions, col_indices)`` | ``kernels/ops/sampling/murmur_hash.py`` (per-request ``sampling_seed``, used only under ``--enable-deterministic-inference``) | ``[n, m]`` uint32: MurmurHash3_x86_32 (hash seed 0) of the four 32-bit blocks seed_low, seed_high, position, column |
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._registry import register


@register("convert_weight_packed(Tensor weight) -> Tensor")
def convert_weight_packed(weight: torch.Tensor) -> torch.Tensor:
    """Return ``weight`` as is: this stand-in keeps the plain [out_features, in_features] layout."""
    return weight


@register("weight_packed_linear(Tensor mat1, Tensor mat2, Tensor? bias, bool is_vnni) -> Tensor")
def weight_packed_linear(
    mat1: torch.Tensor, mat2: torch.Tensor, bias: torch.Tensor | None, is_vnni: bool
) -> torch.Tensor:
    """``mat1 [T, in] @ mat2[out, in].T + bias[out]`` in mat1's dtype (bias added in float32)."""
    out = F.linear(mat1, mat2.to(mat1.dtype))
    if bias is not None:
        out = (out.float() + bias.float()).to(mat1.dtype)
    return out


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype) -> torch.Tensor:
    xf = x.float()
    variance = xf.pow(2).mean(dim=-1, keepdim=True)
    xf = xf * torch.rsqrt(variance + eps)
    return (xf * weight.float()).to(out_dtype)


@register("rmsnorm_cpu(Tensor input, Tensor weight, float eps) -> Tensor")
def rmsnorm_cpu(input: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of ``input [T, H]`` with ``weight [H]``; returns a new tensor of input's dtype."""
    return _rms(input, weight, eps, input.dtype)


@register(
    "fused_add_rmsnorm_cpu(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps) -> ()"
)
def fused_add_rmsnorm_cpu(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    """In place: ``residual <- input + residual`` (float32 sum), ``input <- rmsnorm(residual)``."""
    total = input.float() + residual.float()
    residual.copy_(total.to(residual.dtype))
    input.copy_(_rms(total, weight, eps, input.dtype))


@register("l2norm_cpu(Tensor input, float eps) -> Tensor")
def l2norm_cpu(input: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(sum(x^2, -1) + eps)`` computed in float32, returned in input's dtype."""
    xf = input.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + eps)).to(input.dtype)


@register("silu_and_mul_cpu(Tensor input) -> Tensor")
def silu_and_mul_cpu(input: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` for ``input [..., 2d]``."""
    d = input.shape[-1] // 2
    return F.silu(input[..., :d]) * input[..., d:]


@register("gelu_and_mul_cpu(Tensor input) -> Tensor")
def gelu_and_mul_cpu(input: torch.Tensor) -> torch.Tensor:
    """``gelu(x[..., :d]) * x[..., d:]`` (exact erf GELU)."""
    d = input.shape[-1] // 2
    return F.gelu(input[..., :d]) * input[..., d:]


@register("gelu_tanh_and_mul_cpu(Tensor input) -> Tensor")
def gelu_tanh_and_mul_cpu(input: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(x[..., :d]) * x[..., d:]``."""
    d = input.shape[-1] // 2
    return F.gelu(input[..., :d], approximate="tanh") * input[..., d:]


def _apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    # Same arithmetic as sglang/srt/layers/rotary_embedding/utils.py: apply_rotary_emb.
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    if neox:
        x1, x2 = torch.chunk(x, 2, dim=-1)
    else:
        x1 = x[..., ::2]
        x2 = x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def _rope_one(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int, neox: bool
) -> torch.Tensor:
    shape = x.shape
    x = x.reshape(cos.shape[0], -1, head_size)
    rotary_dim = cos.shape[-1] * 2
    rot = _apply_rotary(x[..., :rotary_dim], cos, sin, neox)
    return torch.cat((rot, x[..., rotary_dim:]), dim=-1).reshape(shape)


@register(
    "rotary_embedding_cpu(Tensor positions, Tensor query, Tensor key, int head_size, "
    "Tensor cos_sin_cache, bool is_neox) -> (Tensor, Tensor)"
)
def rotary_embedding_cpu(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``query [T, Hq*D]`` and ``key [T, Hkv*D]`` (or [T, heads, D]) at ``positions [T]``.

    ``cos_sin_cache [max_pos, rotary_dim]`` holds cos in its first half and sin in its second.
    Returns new (query, key) tensors of the input shapes.
    """
    cos, sin = cos_sin_cache.index_select(0, positions.flatten()).chunk(2, dim=-1)
    return (
        _rope_one(query, cos, sin, head_size, is_neox),
        _rope_one(key, cos, sin, head_size, is_neox),
    )


@register(
    "apply_rotary_pos_emb_cpu(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim=1) "
    "-> (Tensor, Tensor)"
)
def apply_rotary_pos_emb_cpu(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face-style RoPE: q [T, Hq, D], k [T, Hkv, D], cos/sin [T, D] (full head width).

    Computed in float32 and returned in the inputs' dtypes, as SGLang's
    ``apply_rotary_pos_emb_native_eager``.
    """

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    c = cos.unsqueeze(unsqueeze_dim).float()
    s = sin.unsqueeze(unsqueeze_dim).float()
    qf, kf = q.float(), k.float()
    q_out = (qf * c) + (rotate_half(qf) * s)
    k_out = (kf * c) + (rotate_half(kf) * s)
    return q_out.to(q.dtype), k_out.to(k.dtype)


@register(
    "store_cache_cpu(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor indices, "
    "int row_dim) -> ()"
)
def store_cache_cpu(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    indices: torch.Tensor,
    row_dim: int,
) -> None:
    """Write token rows: ``k_cache.view(-1, row_dim)[indices] = k.view(-1, row_dim)`` (same for v)."""
    idx = indices.long()
    k_cache.view(-1, row_dim)[idx] = k.reshape(-1, row_dim).to(k_cache.dtype)
    v_cache.view(-1, row_dim)[idx] = v.reshape(-1, row_dim).to(v_cache.dtype)


def _parse_cpu_ids(cpu_ids: str) -> list[int]:
    ids: list[int] = []
    for part in cpu_ids.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            ids.extend(range(int(lo), int(hi) + 1))
        else:
            ids.append(int(part))
    return ids


@register("init_cpu_threads_env(str cpu_ids) -> str")
def init_cpu_threads_env(cpu_ids: str) -> str:
    """Set torch's intra-op thread count to the number of CPUs in ``cpu_ids`` ("0,1" or "0-3").

    The real kernel also pins each OpenMP thread to one core; this stand-in pins nothing (the
    machine is shared). Returns a one-line description. Raises ValueError on a malformed list.
    """
    ids = _parse_cpu_ids(cpu_ids)
    if not ids:
        raise ValueError(f"init_cpu_threads_env: no CPU ids in {cpu_ids!r}")
    torch.set_num_threads(len(ids))
    return f"specgate sgl_kernel stand-in: {len(ids)} torch threads for CPUs {ids} (not pinned)"


@register("initialize(int size, int rank) -> ()")
def initialize(size: int, rank: int) -> None:
    """Shared-memory all-reduce setup. Only ``size == 1`` (no tensor parallelism) is supported.

    Raises NotImplementedError for ``size > 1``.
    """
    if size != 1:
        raise NotImplementedError(
            f"shared-memory all-reduce across {size} ranks is not implemented by the CPU stand-in"
        )


_M32 = 0xFFFFFFFF


def _rotl32(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & _M32


def _murmur3_mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    k = (k * 0xCC9E2D51) & _M32
    k = _rotl32(k, 15)
    k = (k * 0x1B873593) & _M32
    h = h ^ k
    h = _rotl32(h, 13)
    return (h * 5 + 0xE6546B64) & _M32


@register("murmur_hash32_cpu(Tensor seed, Tensor positions, Tensor col_indices) -> Tensor")
def murmur_hash32_cpu(
    seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor
) -> torch.Tensor:
    """Seeded per-(row, column) 32-bit hashes for deterministic sampling.

    ``seed [n]`` (uint64 or int64), ``positions [n]``, ``col_indices [m]`` -> ``[n, m]`` uint32:
    the Triton kernel's MurmurHash3 over the 32-bit blocks (seed & 0xFFFFFFFF, seed >> 32,
    position, column), then ``h ^= 16`` and the fmix32 finalizer. Computed in int64 with
    32-bit masks (products wrap, their low 32 bits are exact). Source:
    ``sglang/kernels/ops/sampling/murmur_hash.py: murmur_hash32_kernel``.
    """
    s = seed.view(torch.int64) if seed.dtype == torch.uint64 else seed.to(torch.int64)
    h = torch.zeros_like(s)
    h = _murmur3_mix(h, s & _M32)
    h = _murmur3_mix(h, (s >> 32) & _M32)
    h = _murmur3_mix(h, positions.to(torch.int64) & _M32)
    h = _murmur3_mix(h.view(-1, 1), (col_indices.to(torch.int64) & _M32).view(1, -1))
    h = h ^ 16
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    h = h ^ (h >> 16)
    return h.to(torch.uint32)
