"""Speculative-decoding ops: draft trees, verification, accepted-token bookkeeping.

Every op is the CPU twin of a kernel SGLang 0.5.23 runs elsewhere; the semantics are taken
from SGLang's Triton kernels (read there) and pinned by the golden cases of SGLang's
``test/srt/cpu/test_spec_kernels.py``. Trees are per request with n = ``draft_token_num``
nodes; node 0 is the root (the last committed token, whose target prediction is the first
new token); the tree is stored as first-child / next-sibling links:
``retrieve_next_token[b, i]`` (first child of node i, -1 none), ``retrieve_next_sibling[b, i]``
(-1 none) and ``retrieve_index[b, i] = b * n + i`` (the node's row in the flat verify batch).

| op | SGLang source of the semantics |
| --- | --- |
| ``build_tree_kernel_efficient_cpu`` | ``kernels/ops/speculative/spec_tree.py: sgl_build_tree_kernel_efficient_triton`` |
| ``verify_tree_greedy_cpu`` | ``spec_tree.py: verify_tree_greedy_kernel_triton`` |
| ``reconstruct_indices_from_tree_mask`` | ``kernels/ops/speculative/reconstruct_tree.py`` (module docstring and Triton kernel) |
| ``build_draft_decode_metadata_cpu`` | ``srt/layers/attention/intel_amx_backend.py: IntelAMXMultiStepDraftBackend`` and the test's reference |
| ``fill_accept_out_cache_loc_cpu`` | ``kernels/ops/speculative/eagle.py: fill_accept_out_cache_loc`` |
| ``fill_bonus_tokens_cpu`` | ``eagle.py: fill_bonus_tokens`` |
| ``tree_speculative_sampling_target_only`` | ``sgl-kernel/csrc/speculative/speculative_sampling.cuh`` (CUDA); computed by ``serving.verifier.tree_speculative_sampling`` |

Greedy verification (temperature 0) walks the tree from the root: at each level it accepts
the first child whose token equals the target's argmax at the last accepted node, and stops
at the first level where none does; the target's argmax at the last accepted node is the
bonus token. Sampled verification (temperature > 0) is Leviathan-style rejection sampling
over the same tree; see ``tree_speculative_sampling_target_only`` below.
"""

from __future__ import annotations

import torch

from ._registry import register

FULL_MASK = 0
QLEN_ONLY = 1
QLEN_ONLY_BITPACKING = 2


def _parent_positions(
    sel: list[int], parents: list[int], topk: int, n: int
) -> list[int | None]:
    """Tree position (1..n-1, 0 = root) of each node's parent; None when it cannot be found."""
    out: list[int | None] = [0] * n
    for i in range(1, n):
        parent_tb_idx = sel[i - 1] // topk
        if parent_tb_idx == 0:
            out[i] = 0
            continue
        parent_token_idx = parents[parent_tb_idx]
        out[i] = sel.index(parent_token_idx) + 1 if parent_token_idx in sel[: n - 1] else None
    return out


@register(
    "build_tree_kernel_efficient_cpu(Tensor parent_list, Tensor selected_index, "
    "Tensor verified_seq_len, Tensor(a!) tree_mask, Tensor(b!) positions, "
    "Tensor(c!) retrieve_index, Tensor(d!) retrieve_next_token, Tensor(e!) retrieve_next_sibling, "
    "int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()"
)
def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Build the EAGLE draft tree of each request from the draft loop's top-k bookkeeping.

    Inputs: ``parent_list [bs, P]`` (flat index of each expanded candidate's parent),
    ``selected_index [bs, n-1]`` (flat indices of the chosen draft tokens, sorted),
    ``verified_seq_len [bs]`` (committed tokens). Outputs, in place: ``positions [bs*n]``
    (``seq_len + depth`` of each node), ``retrieve_* [bs, n]`` (links, pre-filled with -1 by
    the caller), ``tree_mask``: QLEN_ONLY ``[bs*n*n]`` (node i sees root, itself and its
    ancestors) or FULL_MASK ``[sum(seq_len)*n + bs*n*n]`` rows of ``seq_len + n`` whose
    prefix columns are left as the caller set them (all true). Raises NotImplementedError
    for QLEN_ONLY_BITPACKING.
    """
    if tree_mask_mode == QLEN_ONLY_BITPACKING:
        raise NotImplementedError("QLEN_ONLY_BITPACKING tree masks are not supported on CPU")
    n = draft_token_num
    bs = verified_seq_len.shape[0]
    seq_lens = [int(x) for x in verified_seq_len.tolist()]
    sel_all = selected_index.tolist()
    par_all = parent_list.tolist() if parent_list.numel() else [[] for _ in range(bs)]
    full_offset = 0
    for b in range(bs):
        seq_len = seq_lens[b]
        sel = [int(x) for x in sel_all[b]]
        parents = [int(x) for x in par_all[b]]
        parent_pos = _parent_positions(sel, parents, topk, n)

        # First-child / next-sibling links, inserting at the head from the last node down.
        for i in range(n - 1, 0, -1):
            retrieve_index[b, i] = b * n + i
            p = parent_pos[i]
            if p is None:
                continue
            head = int(retrieve_next_token[b, p])
            if head != -1:
                retrieve_next_sibling[b, i] = head
            retrieve_next_token[b, p] = i
        retrieve_index[b, 0] = b * n

        # Mask rows and positions.
        if tree_mask_mode == FULL_MASK:
            row_len = seq_len + n
            base = full_offset + seq_len
            full_offset += n * row_len
        else:
            row_len = n
            base = b * n * n
        positions[b * n] = seq_len
        for x in range(n):
            row = base + x * row_len
            tree_mask[row] = True
            tree_mask[row + 1 : row + n] = False
            if x == 0:
                continue
            cur = x - 1
            depth_x = 0
            for _ in range(depth):
                depth_x += 1
                tree_mask[row + 1 + cur] = True
                parent_tb_idx = sel[cur] // topk
                if parent_tb_idx == 0:
                    break
                parent_token_idx = parents[parent_tb_idx]
                if parent_token_idx not in sel[: n - 1]:
                    break
                cur = sel.index(parent_token_idx)
            positions[b * n + x] = seq_len + depth_x


@register(
    "verify_tree_greedy_cpu(Tensor(a!) predicts, Tensor(b!) accept_index, "
    "Tensor(c!) accept_token_num, Tensor candidates, Tensor retrive_index, "
    "Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor target_predict) -> ()"
)
def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy tree verification (argmax acceptance), written in place.

    ``candidates [bs, n]`` are the tree's tokens, ``target_predict [bs, n]`` the target's argmax
    at every node. Outputs: ``accept_index [bs, S]`` (flat rows of the accepted path, root
    first, -1 padded; S = max path length), ``accept_token_num [bs]`` (accepted drafts, root
    excluded), ``predicts [bs*n]`` (at each accepted node: the token that follows it; other
    entries untouched).
    """
    bs = candidates.shape[0]
    num_spec = accept_index.shape[1]
    cand = candidates.tolist()
    r_index = retrive_index.tolist()
    r_next = retrive_next_token.tolist()
    r_sib = retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    for bx in range(bs):
        last = int(r_index[bx][0])
        accept_index[bx, 0] = last
        num_accept = 0
        cur = 0
        for _ in range(1, num_spec):
            cur = int(r_next[bx][cur])
            matched = False
            while cur != -1:
                draft_idx = int(r_index[bx][cur])
                if int(cand[bx][cur]) == int(target[last]):
                    predicts[last] = int(target[last])
                    num_accept += 1
                    accept_index[bx, num_accept] = draft_idx
                    last = draft_idx
                    matched = True
                    break
                cur = int(r_sib[bx][cur])
            if not matched:
                break
        accept_token_num[bx] = num_accept
        predicts[last] = int(target[last])


def reconstruct_indices_from_tree_mask(
    tree_mask: torch.Tensor,
    verified_seq_len: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
) -> None:
    """Derive positions and tree links from an NGRAM tree mask (in place).

    ``tree_mask`` is flat ``[bs*n*n]``, ``tree_mask[b, i, j]``: node j is an ancestor of (or is)
    node i. With ``anc[i, j] = mask[i, j] and j < i``: ``positions[b*n+i] = #anc(i) + seq_len``,
    ``retrieve_index[b, i] = b*n + i``, parent(i) = max{j : anc[i, j]} (-1 none),
    ``retrieve_next_token[b, i] = min{k > i : anc[k, i]}`` (-1 none),
    ``retrieve_next_sibling[b, i] = min{k > i : parent(k) == parent(i)}`` (-1 none, and -1
    for the root). Source: ``kernels/ops/speculative/reconstruct_tree.py``.
    """
    n = draft_token_num
    mask = tree_mask.reshape(batch_size, n, n).bool()
    idx = torch.arange(n)
    lower = idx.view(1, n) < idx.view(n, 1)  # [i, j]: j < i
    for b in range(batch_size):
        anc = mask[b] & lower
        depth = anc.sum(dim=1)
        positions[b * n : (b + 1) * n] = (depth + int(verified_seq_len[b])).to(positions.dtype)
        retrieve_index[b] = (b * n + idx).to(retrieve_index.dtype)
        parent = torch.where(anc, idx.view(1, n), torch.full((n, n), -1)).max(dim=1).values
        child_rows = torch.where(anc, idx.view(n, 1), torch.full((n, n), n)).min(dim=0).values
        next_token = torch.where(child_rows < n, child_rows, torch.full((n,), -1))
        same_parent = (parent.view(n, 1) == parent.view(1, n)) & (idx.view(n, 1) > idx.view(1, n))
        sib_rows = torch.where(same_parent, idx.view(n, 1), torch.full((n, n), n)).min(dim=0).values
        next_sib = torch.where((parent >= 0) & (sib_rows < n), sib_rows, torch.full((n,), -1))
        retrieve_next_token[b] = next_token.to(retrieve_next_token.dtype)
        retrieve_next_sibling[b] = next_sib.to(retrieve_next_sibling.dtype)


register(
    "reconstruct_indices_from_tree_mask(Tensor tree_mask, Tensor verified_seq_len, "
    "Tensor(a!) positions, Tensor(b!) retrieve_index, Tensor(c!) retrieve_next_token, "
    "Tensor(d!) retrieve_next_sibling, int batch_size, int draft_token_num) -> ()"
)(reconstruct_indices_from_tree_mask)


@register(
    "build_draft_decode_metadata_cpu(Tensor req_to_token, Tensor req_pool_indices, "
    "Tensor seq_lens, int topk, int num_steps, int pool_len) -> Tensor"
)
def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """Per-candidate token tables for the EAGLE multi-step draft decode.

    Returns ``[bs*topk, pool_len]`` (req_to_token's dtype): row ``b*topk + k`` is request b's
    committed slots ``req_to_token[r_b, :L_b]`` followed by candidate k's draft slots
    ``req_to_token[r_b, L_b + k*num_steps : L_b + (k+1)*num_steps]`` (the layout written by
    ``assign_draft_cache_locs_contiguous``); the rest of the row is zero.
    """
    bs = seq_lens.shape[0]
    out = torch.zeros((bs * topk, pool_len), dtype=req_to_token.dtype)
    for b in range(bs):
        sl = int(seq_lens[b])
        src = req_to_token[int(req_pool_indices[b])]
        for k in range(topk):
            row = b * topk + k
            out[row, :sl] = src[:sl]
            start = sl + k * num_steps
            out[row, sl : sl + num_steps] = src[start : start + num_steps]
    return out


@register(
    "fill_accept_out_cache_loc_cpu(Tensor accept_index, Tensor out_cache_loc, "
    "Tensor(a!) accept_out_cache_loc, int size=-1) -> ()"
)
def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor,
    out_cache_loc: torch.Tensor,
    accept_out_cache_loc: torch.Tensor,
    size: int = -1,
) -> None:
    """Compact gather: the k-th valid (!= -1) entry of ``accept_index`` (flattened, row-major)
    writes ``out_cache_loc[that entry]`` to ``accept_out_cache_loc[k]``. ``size`` (the Triton
    grid size) is not needed."""
    flat = accept_index.reshape(-1).long()
    valid = flat[flat > -1]
    accept_out_cache_loc[: valid.numel()] = out_cache_loc[valid].to(accept_out_cache_loc.dtype)


@register(
    "fill_bonus_tokens_cpu(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, "
    "int accept_stride) -> ()"
)
def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,
    accept_lens: torch.Tensor,
    bonus_tokens: torch.Tensor,
    accept_stride: int,
) -> None:
    """``bonus_tokens[i] = accept_tokens.flat[accept_stride * i + accept_lens[i] - 1]`` (the last
    accepted token of request i, bonus included in ``accept_lens``)."""
    flat = accept_tokens.reshape(-1)
    bs = accept_lens.shape[0]
    idx = torch.arange(bs) * accept_stride + accept_lens.long() - 1
    bonus_tokens[:bs] = flat[idx].to(bonus_tokens.dtype)


def tree_speculative_sampling_target_only(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """Sampled tree verification (temperature > 0), written in place like the greedy op.

    Same tree inputs and outputs as ``verify_tree_greedy_cpu``, plus ``uniform_samples
    [bs, n]`` (rejection coins), ``uniform_samples_for_final_sampling [bs]`` (coin of the
    final draw), ``target_probs [bs, n, V]`` and ``draft_probs [bs, n, V]`` (zeros for
    target-only drafters such as EAGLE's tree and NGRAM; mutated), ``threshold_single`` /
    ``threshold_acc`` (1.0 = exact, lossless rejection sampling). The computation is
    ``serving.verifier.tree_speculative_sampling``, the project's single implementation of
    SGLang's ``tree_speculative_sampling_target_only``; this op only forwards to it, converting
    dtypes to that function's contract (int32 outputs, int64 tree tensors, float32
    probabilities) and copying outputs back when the caller's dtypes differ.
    Raises ImportError when ``serving.verifier`` is not importable.
    """
    from serving.verifier import tree_speculative_sampling

    outs = [
        t if t.dtype == torch.int32 else t.to(torch.int32)
        for t in (predicts, accept_index, accept_token_num)
    ]
    probs = draft_probs if draft_probs.dtype == torch.float32 else draft_probs.float()
    tree_speculative_sampling(
        outs[0],
        outs[1],
        outs[2],
        candidates.long(),
        retrive_index.long(),
        retrive_next_token.long(),
        retrive_next_sibling.long(),
        uniform_samples.float(),
        uniform_samples_for_final_sampling.float(),
        target_probs.float(),
        probs,
        threshold_single,
        threshold_acc,
        deterministic,
    )
    for original, computed in zip((predicts, accept_index, accept_token_num), outs, strict=True):
        if computed is not original:
            original.copy_(computed)
    if probs is not draft_probs:
        draft_probs.copy_(probs)


register(
    "tree_speculative_sampling_target_only(Tensor(a!) predicts, Tensor(b!) accept_index, "
    "Tensor(c!) accept_token_num, Tensor candidates, Tensor retrive_index, "
    "Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor uniform_samples, "
    "Tensor uniform_samples_for_final_sampling, Tensor target_probs, Tensor draft_probs, "
    "float threshold_single=1.0, float threshold_acc=1.0, bool deterministic=True) -> ()"
)(tree_speculative_sampling_target_only)
