"""KV-slot bookkeeping ops: request->token table writes, slot gathers, KV row moves.

Each op is the CPU twin of a Triton kernel in SGLang 0.5.23 whose Python wrapper calls it
when ``is_cpu()``; the semantics below are those kernels' (read there) and the assertions of
SGLang's ``test/srt/cpu/test_spec_kernels.py``. Index tensors may be int32 or int64; the
written tensors keep their own dtypes.

| op | wrapper (SGLang file) | semantics, for request i of the batch |
| --- | --- | --- |
| ``assign_req_to_token_pool_cpu(req_pool_indices, req_to_token!, start_offset, end_offset, out_cache_loc, pool_len[, bs_upper])`` | ``srt/mem_cache/allocation.py: assign_req_to_token_pool_func`` | ``req_to_token[r_i, s_i:e_i] = out_cache_loc[o_i : o_i + e_i - s_i]``, o_i = sum of earlier lengths |
| ``assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc!, pool_len)`` | ``kernels/ops/speculative/cache_locs.py: assign_extend_cache_locs_func`` | ``out_cache_loc[o_i : o_i + e_i - s_i] = req_to_token[r_i, s_i:e_i]`` |
| ``assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc!, pool_len, topk, num_steps)`` | ``cache_locs.py: assign_draft_cache_locs_contiguous_func`` | ``out_cache_loc[i*c : (i+1)*c] = req_to_token[r_i, L_i : L_i + c]``, c = topk * num_steps |
| ``copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc)`` | ``kernels/ops/kvcache/cache_move.py: copy_all_layer_kv_cache_func`` | for every buffer (address ``data_ptrs[j]``, row size ``strides[j]`` bytes): row ``tgt_loc[k]`` <- row ``src_loc[k]``, all sources read before any write |
"""

from __future__ import annotations

import ctypes

import torch

from ._registry import register


def _spans(start: torch.Tensor, end: torch.Tensor) -> list[tuple[int, int]]:
    return [(int(s), int(e)) for s, e in zip(start.tolist(), end.tolist(), strict=True)]


@register(
    "assign_req_to_token_pool_cpu(Tensor req_pool_indices, Tensor(a!) req_to_token, "
    "Tensor start_offset, Tensor end_offset, Tensor out_cache_loc, int pool_len, "
    "int bs_upper=-1) -> ()"
)
def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    bs_upper: int = -1,
) -> None:
    """Write newly allocated KV slots into each request's row of ``req_to_token`` (in place).

    ``bs_upper`` (next power of two of the batch size) only sizes the Triton grid; unused.
    """
    offset = 0
    for i, (s, e) in enumerate(_spans(start_offset, end_offset)):
        n = e - s
        if n > 0:
            row = int(req_pool_indices[i])
            req_to_token[row, s:e] = out_cache_loc[offset : offset + n].to(req_to_token.dtype)
        offset += n


@register(
    "assign_extend_cache_locs_cpu(Tensor req_pool_indices, Tensor req_to_token, "
    "Tensor start_offset, Tensor end_offset, Tensor(a!) out_cache_loc, int pool_len) -> ()"
)
def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Gather the slots of positions ``[start, end)`` of each request into ``out_cache_loc``."""
    offset = 0
    for i, (s, e) in enumerate(_spans(start_offset, end_offset)):
        n = e - s
        if n > 0:
            row = int(req_pool_indices[i])
            out_cache_loc[offset : offset + n] = req_to_token[row, s:e].to(out_cache_loc.dtype)
        offset += n


@register(
    "assign_draft_cache_locs_contiguous_cpu(Tensor req_pool_indices, Tensor req_to_token, "
    "Tensor seq_lens, Tensor(a!) out_cache_loc, int pool_len, int topk, int num_steps) -> ()"
)
def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """Copy each request's ``topk * num_steps`` slots after its committed tokens (EAGLE drafts).

    Raises RuntimeError when ``out_cache_loc`` does not hold ``bs * topk * num_steps`` entries.
    """
    copy_len = topk * num_steps
    bs = seq_lens.shape[0]
    if out_cache_loc.numel() != bs * copy_len:
        raise RuntimeError(
            f"out_cache_loc has {out_cache_loc.numel()} entries, expected {bs} * {copy_len}"
        )
    for i in range(bs):
        start = int(seq_lens[i])
        row = int(req_pool_indices[i])
        out_cache_loc[i * copy_len : (i + 1) * copy_len] = req_to_token[
            row, start : start + copy_len
        ].to(out_cache_loc.dtype)


@register(
    "copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, "
    "Tensor src_loc) -> ()"
)
def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """Move KV rows ``src_loc -> tgt_loc`` in every per-layer K and V buffer.

    ``data_ptrs [n_buffers]`` (uint64) are the buffers' base addresses and ``strides
    [n_buffers]`` their row sizes in bytes (``memory_pool.py: _init_data_ptrs_and_strides``).
    The buffers are viewed through ``ctypes`` up to the highest row touched; all source rows
    are gathered before any target row is written, so overlapping moves are safe (as the
    Triton kernel's "safe for in-place copy").
    """
    if tgt_loc.numel() == 0:
        return
    tgt = tgt_loc.long()
    src = src_loc.long()
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        stride = int(stride)
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(int(ptr))
        view = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        view[tgt] = view[src]
