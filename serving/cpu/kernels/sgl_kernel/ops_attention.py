"""Paged attention over SGLang's token-indexed KV pool: ``decode_attention_cpu``, ``extend_attention_cpu``.

Caller: ``sglang/srt/layers/attention/intel_amx_backend.py`` (``IntelAMXAttnBackend``), the CPU
attention backend, which is also the only CPU backend that runs speculative verification
(``--attention-backend torch_native`` fails there on ``extend_prefix_lens`` being None).
Reference semantics: SGLang's own CPU kernel tests ``test/srt/cpu/test_decode.py`` and
``test/srt/cpu/test_extend.py`` (an SDPA over the gathered KV) and
``test/srt/cpu/test_spec_kernels.py::TestExtendAttentionTreeMask`` (tree masks).

Layout. The KV pool is ``k_buffer [N_slots, H_kv, D]`` / ``v_buffer [N_slots, H_kv, D_v]``;
``req_to_token [max_reqs, max_context]`` maps (request row, token position) -> slot; request b
of the batch uses row ``req_pool_indices[b]`` and owns ``seq_lens[b]`` tokens (the new ones
included). Query head h reads KV head ``h // (H_q / H_kv)`` (GQA).

Math, per request and head, in float32 (inputs upcast, output cast to ``o``'s dtype), with
the same operation order as Hugging Face's eager attention so float32 results agree:
``s = (q @ K^T) * sm_scale``; if ``logit_cap > 0``: ``s = logit_cap * tanh(s / logit_cap)``;
masked entries get -inf; ``p = softmax(s)`` (with per-head ``sinks`` logits joining the
denominator when given); ``o = p @ V``. K and V are multiplied by ``k_scale`` / ``v_scale``
(1.0 except for FP8 caches).

Masks. Positions are 0-based token indices within the request. Decode: the one query sits at
position ``seq_len - 1`` and sees every token. Extend: request b's ``extend_seq_lens[b]``
queries start at row ``extend_start_loc[b]`` of ``q_extend`` and sit at positions
``prefix .. seq_len - 1`` (``prefix = seq_len - extend_len``); they see the whole prefix and,
among the new tokens, themselves and earlier ones (``is_causal``), or exactly the new tokens
marked in ``tree_mask`` when one is given. ``tree_mask`` is the QLEN_ONLY layout built by
``build_tree_kernel_efficient_cpu`` / the NGRAM worker: flat bool ``[bs * n * n]``,
``tree_mask[b, i, j]`` = draft j is visible to draft i (n = extend length). A
``sliding_window > 0`` (SGLang passes ``layer.sliding_window_size + 1``) keeps only keys with
``q_pos - k_pos < sliding_window``. Cross-attention (encoder-decoder) is not supported.
"""

from __future__ import annotations

import torch

from ._registry import register


def _gather_kv(
    buffer: torch.Tensor, req_to_token: torch.Tensor, row: int, length: int, scale: float
) -> torch.Tensor:
    slots = req_to_token[row, :length].long()
    out = buffer[slots].float()
    if scale != 1.0:
        out = out * scale
    return out


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    visible: torch.Tensor | None,
    sm_scale: float,
    logit_cap: float,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """q [Lq, Hq, D], k [Lk, Hkv, D], v [Lk, Hkv, Dv], visible [Lq, Lk] bool -> [Lq, Hq, Dv] f32."""
    hq, hkv = q.shape[1], k.shape[1]
    if hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of KV heads {hkv}")
    group = hq // hkv
    qh = q.float().transpose(0, 1)  # [Hq, Lq, D]
    kh = k.transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, Lk, D]
    vh = v.transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, Lk, Dv]
    scores = torch.matmul(qh, kh.transpose(1, 2)) * sm_scale  # [Hq, Lq, Lk]
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if visible is not None:
        scores = scores.masked_fill(~visible.unsqueeze(0), float("-inf"))
    if sinks is not None:
        sink = sinks.float().view(hq, 1, 1).expand(hq, scores.shape[1], 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, vh).transpose(0, 1)  # [Lq, Hq, Dv]


def _check_no_cross(is_cross_attn: bool) -> None:
    if is_cross_attn:
        raise NotImplementedError("cross-attention is not supported by the CPU stand-in")


@register(
    "decode_attention_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float k_scale, "
    "float v_scale, Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, Tensor attn_logits, "
    "Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, float sm_scale, "
    "float logit_cap, bool is_cross_attn=False, int sliding_window=0, Tensor? encoder_lens=None, "
    "Tensor? sinks=None) -> ()"
)
def decode_attention_cpu(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: float,
    v_scale: float,
    output: torch.Tensor,
    key: torch.Tensor | None,
    value: torch.Tensor | None,
    loc: torch.Tensor,
    attn_logits: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attn: bool = False,
    sliding_window: int = 0,
    encoder_lens: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
) -> None:
    """One new token per request: store its K/V, then attend over the request's whole sequence.

    query [B, Hq, D]; key/value [B, Hkv, D]/[B, Hkv, Dv] are written to ``k_cache[loc]`` /
    ``v_cache[loc]`` first (skipped when None: the caller already stored them); output
    [B, Hq, Dv] is written in place. ``attn_logits`` is the real kernel's split-K scratch
    buffer and is not used. Sources: ``intel_amx_backend.py: forward_decode``,
    ``test/srt/cpu/test_decode.py``.
    """
    _check_no_cross(is_cross_attn)
    if key is not None and value is not None:
        slots = loc.long()
        k_cache[slots] = key.to(k_cache.dtype)
        v_cache[slots] = value.to(v_cache.dtype)
    for b in range(query.shape[0]):
        seq_len = int(seq_lens[b])
        row = int(req_pool_indices[b])
        k = _gather_kv(k_cache, req_to_token, row, seq_len, k_scale)
        v = _gather_kv(v_cache, req_to_token, row, seq_len, v_scale)
        visible = None
        if sliding_window > 0:
            k_pos = torch.arange(seq_len)
            visible = ((seq_len - 1) - k_pos < sliding_window).view(1, seq_len)
        out = _attend(query[b : b + 1], k, v, visible, sm_scale, logit_cap, sinks)
        output[b : b + 1] = out.to(output.dtype)


@register(
    "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
    "Tensor k_buffer, Tensor v_buffer, float k_scale, float v_scale, Tensor req_to_token, "
    "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, "
    "int? max_len_extend, float sm_scale, float logit_cap, bool is_cross_attn=False, "
    "int sliding_window=0, Tensor? encoder_lens=None, Tensor? sinks=None, "
    "Tensor? tree_mask=None, bool is_causal=True) -> ()"
)
def extend_attention_cpu(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor | None,
    v_extend: torch.Tensor | None,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    k_scale: float,
    v_scale: float,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: int | None,
    sm_scale: float,
    logit_cap: float,
    is_cross_attn: bool = False,
    sliding_window: int = 0,
    encoder_lens: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
    tree_mask: torch.Tensor | None = None,
    is_causal: bool = True,
) -> None:
    """Prefill / chunked prefill / speculative verify: new tokens attend to prefix + new tokens.

    q_extend [T, Hq, D] and o_extend [T, Hq, Dv] hold all requests' new tokens back to back;
    the prefix K/V come from the pool, the new tokens' K/V from ``k_extend`` / ``v_extend``
    ([T, Hkv, D]; when None, from the pool, where the caller stored them). ``max_len_extend``
    is a scheduling hint of the real kernel and is not used. Sources:
    ``intel_amx_backend.py: forward_extend`` and ``_build_extend_metadata``,
    ``test/srt/cpu/test_extend.py``, ``test/srt/cpu/test_spec_kernels.py``.
    """
    _check_no_cross(is_cross_attn)
    bs = seq_lens.shape[0]
    masks = None
    if tree_mask is not None and tree_mask.numel() > 0:
        n = int(extend_seq_lens[0])
        masks = tree_mask.reshape(bs, n, n).bool()
    for b in range(bs):
        seq_len = int(seq_lens[b])
        ext = int(extend_seq_lens[b])
        if ext == 0:
            continue
        start = int(extend_start_loc[b])
        prefix = seq_len - ext
        row = int(req_pool_indices[b])
        if k_extend is not None and v_extend is not None:
            k_new = k_extend[start : start + ext].float() * k_scale
            v_new = v_extend[start : start + ext].float() * v_scale
            k = torch.cat((_gather_kv(k_buffer, req_to_token, row, prefix, k_scale), k_new))
            v = torch.cat((_gather_kv(v_buffer, req_to_token, row, prefix, v_scale), v_new))
        else:
            k = _gather_kv(k_buffer, req_to_token, row, seq_len, k_scale)
            v = _gather_kv(v_buffer, req_to_token, row, seq_len, v_scale)
        visible = torch.ones(ext, seq_len, dtype=torch.bool)
        if masks is not None:
            visible[:, prefix:] = masks[b]
        elif is_causal:
            visible[:, prefix:] = torch.ones(ext, ext, dtype=torch.bool).tril()
        if sliding_window > 0:
            q_pos = torch.arange(prefix, seq_len).view(ext, 1)
            k_pos = torch.arange(seq_len).view(1, seq_len)
            visible &= (q_pos - k_pos) < sliding_window
        out = _attend(q_extend[start : start + ext], k, v, visible, sm_scale, logit_cap, sinks)
        o_extend[start : start + ext] = out.to(o_extend.dtype)
