"""The pure-PyTorch ``sgl_kernel`` stand-in, op by op, without a server.

Expected values are SGLang's: hand-built trees whose links/positions/masks follow from the
Triton kernels' definitions, the CUDA unit-test golden case of ``verify_tree_greedy``
(inputs and outputs as published in SGLang's ``test/srt/cpu/test_spec_kernels.py``), and
SDPA / ``transformers`` references for the dense ops (float32, exact or 1e-6).
These tests import ``sgl_kernel`` from ``serving/cpu/kernels`` directly (no SGLang needed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

KERNELS = Path(__file__).resolve().parents[2] / "serving" / "cpu" / "kernels"


@pytest.fixture(scope="module")
def sk() -> ModuleType:
    if str(KERNELS) not in sys.path:
        sys.path.append(str(KERNELS))
    import sgl_kernel

    return sgl_kernel


# ------------------------------------------------------------------------------ registry


def test_ops_sglang_calls_are_registered_and_probes_are_not(sk):
    ops = torch.ops.sgl_kernel
    for name in (
        "convert_weight_packed", "weight_packed_linear", "rmsnorm_cpu", "fused_add_rmsnorm_cpu",
        "silu_and_mul_cpu", "rotary_embedding_cpu", "store_cache_cpu", "extend_attention_cpu",
        "decode_attention_cpu", "init_cpu_threads_env", "initialize",
        "copy_all_layer_kv_cache_cpu", "assign_req_to_token_pool_cpu",
        "assign_extend_cache_locs_cpu", "assign_draft_cache_locs_contiguous_cpu",
        "fill_accept_out_cache_loc_cpu", "fill_bonus_tokens_cpu", "verify_tree_greedy_cpu",
        "build_tree_kernel_efficient_cpu", "build_draft_decode_metadata_cpu",
        "reconstruct_indices_from_tree_mask", "tree_speculative_sampling_target_only",
        "apply_rotary_pos_emb_cpu",
    ):
        assert hasattr(ops, name), name
    # names SGLang probes with hasattr() to choose another path must stay undefined
    for name in ("fused_qk_norm_cpu", "fused_qk_norm_rope_cpu", "gdn_attention"):
        assert not hasattr(ops, name), name


def test_module_level_stubs_raise_not_implemented(sk):
    assert set(sk.MODULE_LEVEL_STUBS) <= set(sk.STUBS)
    with pytest.raises(NotImplementedError, match="fused_moe_router_cpu"):
        torch.ops.sgl_kernel.fused_moe_router_cpu(torch.zeros(1))
    with pytest.raises(NotImplementedError, match="rotate_input_ids_cpu"):
        sk.rotate_input_ids_cpu(torch.zeros(1))


def test_threads_env_and_initialize(sk):
    before = torch.get_num_threads()
    try:
        msg = torch.ops.sgl_kernel.init_cpu_threads_env("0-2")
        assert torch.get_num_threads() == 3
        assert "3 torch threads" in msg
    finally:
        torch.set_num_threads(before)
    torch.ops.sgl_kernel.initialize(1, 0)
    with pytest.raises(NotImplementedError):
        torch.ops.sgl_kernel.initialize(2, 0)


# ------------------------------------------------------------------------------ dense ops


def test_rmsnorm_and_fused_add_equal_transformers(sk):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 64, generator=g)
    r = torch.randn(5, 64, generator=g)
    norm = LlamaRMSNorm(64, eps=1e-5)
    norm.weight.data = torch.randn(64, generator=g)
    with torch.no_grad():
        want = norm(x)
        want_fused = norm(x + r)
    assert torch.equal(torch.ops.sgl_kernel.rmsnorm_cpu(x, norm.weight.data, 1e-5), want)
    xi, ri = x.clone(), r.clone()
    torch.ops.sgl_kernel.fused_add_rmsnorm_cpu(xi, ri, norm.weight.data, 1e-5)
    assert torch.equal(ri, x + r)
    assert torch.equal(xi, want_fused)


def test_silu_and_mul_and_linear(sk):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 8, generator=g)
    assert torch.equal(torch.ops.sgl_kernel.silu_and_mul_cpu(x), F.silu(x[:, :4]) * x[:, 4:])
    w = torch.randn(6, 8, generator=g)
    b = torch.randn(6, generator=g)
    packed = torch.ops.sgl_kernel.convert_weight_packed(w)
    assert torch.equal(torch.ops.sgl_kernel.weight_packed_linear(x, packed, None, True), x @ w.T)
    assert torch.allclose(
        torch.ops.sgl_kernel.weight_packed_linear(x, packed, b, True), x @ w.T + b, atol=1e-6
    )


def test_rotary_embedding_equals_transformers(sk):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    head, heads, kv_heads, t = 16, 4, 2, 7
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head))
    freqs = torch.einsum("i,j->ij", torch.arange(64).float(), inv_freq)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # SGLang's cos_sin_cache layout
    pos = torch.tensor([0, 3, 4, 9, 10, 11, 40])
    g = torch.Generator().manual_seed(2)
    q = torch.randn(t, heads * head, generator=g)
    k = torch.randn(t, kv_heads * head, generator=g)
    q_out, k_out = torch.ops.sgl_kernel.rotary_embedding_cpu(pos, q, k, head, cache, True)
    emb = torch.cat((freqs[pos], freqs[pos]), dim=-1)
    q_ref, k_ref = apply_rotary_pos_emb(
        q.view(t, heads, head).transpose(0, 1),
        k.view(t, kv_heads, head).transpose(0, 1),
        emb.cos(),
        emb.sin(),
        unsqueeze_dim=0,
    )
    torch.testing.assert_close(q_out, q_ref.transpose(0, 1).reshape(t, -1), atol=1e-6, rtol=0)
    torch.testing.assert_close(k_out, k_ref.transpose(0, 1).reshape(t, -1), atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------ attention


def _sdpa(q, k, v, mask=None):
    """q [Lq, Hq, D], k/v [Lk, Hkv, D] -> [Lq, Hq, D] (float32 reference)."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
        enable_gqa=True,
    )
    return out.squeeze(0).transpose(0, 1)


def _pool(seq_lens, hkv=2, d=16, slots=64, seed=3):
    g = torch.Generator().manual_seed(seed)
    k_buf = torch.randn(slots, hkv, d, generator=g)
    v_buf = torch.randn(slots, hkv, d, generator=g)
    perm = torch.randperm(slots, generator=g)
    req_to_token = torch.zeros(4, 32, dtype=torch.int32)
    rows = torch.tensor([2, 0], dtype=torch.int64)[: len(seq_lens)]
    start = 0
    for row, n in zip(rows.tolist(), seq_lens, strict=True):
        req_to_token[row, :n] = perm[start : start + n].to(torch.int32)
        start += n
    return k_buf, v_buf, req_to_token, rows, g


def test_decode_attention_stores_kv_and_matches_sdpa(sk):
    seq_lens = [9, 5]
    k_buf, v_buf, rtt, rows, g = _pool(seq_lens)
    hq, d = 4, 16
    q = torch.randn(2, hq, d, generator=g)
    key = torch.randn(2, 2, d, generator=g)
    value = torch.randn(2, 2, d, generator=g)
    loc = torch.stack([rtt[rows[i], seq_lens[i] - 1] for i in range(2)]).long()
    out = torch.empty(2, hq, d)
    torch.ops.sgl_kernel.decode_attention_cpu(
        q, k_buf, v_buf, 1.0, 1.0, out, key, value, loc, torch.empty(0), rtt, rows,
        torch.tensor(seq_lens), d**-0.5, 0.0, False, 0, None, None,
    )
    assert torch.equal(k_buf[loc], key) and torch.equal(v_buf[loc], value)
    for i, n in enumerate(seq_lens):
        slots = rtt[rows[i], :n].long()
        want = _sdpa(q[i : i + 1], k_buf[slots], v_buf[slots])
        torch.testing.assert_close(out[i : i + 1], want, atol=1e-6, rtol=1e-5)


def test_extend_attention_causal_and_tree_mask_match_sdpa(sk):
    seq_lens, ext = [10, 6], 4
    k_buf, v_buf, rtt, rows, g = _pool(seq_lens)
    hq, d = 4, 16
    q = torch.randn(2 * ext, hq, d, generator=g)
    k_ext = torch.cat([k_buf[rtt[rows[i], n - ext : n].long()] for i, n in enumerate(seq_lens)])
    v_ext = torch.cat([v_buf[rtt[rows[i], n - ext : n].long()] for i, n in enumerate(seq_lens)])
    tree = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    for tree_mask in (None, torch.cat([tree.flatten(), tree.flatten()])):
        out = torch.empty_like(q)
        torch.ops.sgl_kernel.extend_attention_cpu(
            q, k_ext, v_ext, out, k_buf, v_buf, 1.0, 1.0, rtt, rows, torch.tensor(seq_lens),
            torch.tensor([ext, ext], dtype=torch.int32), torch.tensor([0, ext], dtype=torch.int32),
            ext, d**-0.5, 0.0, False, 0, None, None, tree_mask, True,
        )
        inner = torch.ones(ext, ext, dtype=torch.bool).tril() if tree_mask is None else tree
        for i, n in enumerate(seq_lens):
            slots = rtt[rows[i], :n].long()
            mask = torch.cat((torch.ones(ext, n - ext, dtype=torch.bool), inner), dim=1)
            want = _sdpa(q[i * ext : (i + 1) * ext], k_buf[slots], v_buf[slots], mask)
            torch.testing.assert_close(out[i * ext : (i + 1) * ext], want, atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------------------ KV bookkeeping


def test_req_to_token_writes_and_gathers(sk):
    rtt = torch.zeros(3, 16, dtype=torch.int32)
    rows = torch.tensor([2, 0])
    start, end = torch.tensor([0, 3]), torch.tensor([4, 5])
    locs = torch.tensor([11, 12, 13, 14, 21, 22])
    sk.assign_req_to_token_pool_cpu(rows, rtt, start, end, locs, 16)
    assert rtt[2, :4].tolist() == [11, 12, 13, 14] and rtt[0, 3:5].tolist() == [21, 22]
    out = torch.empty(6, dtype=torch.int64)
    sk.assign_extend_cache_locs_cpu(rows, rtt, start, end, out, 16)
    assert out.tolist() == locs.tolist()
    rtt[2, 4:10] = torch.arange(100, 106, dtype=torch.int32)
    draft = torch.empty(6, dtype=torch.int64)
    sk.assign_draft_cache_locs_contiguous_cpu(rows[:1], rtt, torch.tensor([4]), draft, 16, 2, 3)
    assert draft.tolist() == [100, 101, 102, 103, 104, 105]
    with pytest.raises(RuntimeError):
        sk.assign_draft_cache_locs_contiguous_cpu(rows[:1], rtt, torch.tensor([4]), draft[:5], 16, 2, 3)
    meta = sk.build_draft_decode_metadata_cpu(rtt, rows[:1], torch.tensor([4]), 2, 3, 16)
    assert meta.shape == (2, 16) and meta.dtype == torch.int32
    assert meta[0, :7].tolist() == [11, 12, 13, 14, 100, 101, 102]
    assert meta[1, :7].tolist() == [11, 12, 13, 14, 103, 104, 105]


def test_fill_accept_and_bonus(sk):
    accept_index = torch.tensor([[0, 1, -1, -1], [16, 18, 21, -1]], dtype=torch.int32)
    out_cache_loc = torch.arange(1000, 1032)
    dst = torch.zeros(8, dtype=torch.int64)
    sk.fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, dst)
    assert dst.tolist() == [1000, 1001, 1016, 1018, 1021, 0, 0, 0]
    tokens = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]], dtype=torch.int32)
    bonus = torch.empty(2, dtype=torch.int32)
    sk.fill_bonus_tokens_cpu(tokens, torch.tensor([2, 4], dtype=torch.int32), bonus, 4)
    assert bonus.tolist() == [6, 12]


def test_copy_all_layer_kv_cache_moves_rows_in_every_buffer(sk):
    bufs = [torch.arange(40, dtype=torch.float32).view(10, 4) + 100 * i for i in range(3)]
    before = [b.clone() for b in bufs]
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in bufs])
    # overlapping move: 1 <- 2 and 2 <- 1 (a swap) and 7 <- 3
    sk.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([1, 2, 7]), torch.tensor([2, 1, 3]))
    for b, old in zip(bufs, before, strict=True):
        assert torch.equal(b[1], old[2]) and torch.equal(b[2], old[1]) and torch.equal(b[7], old[3])
        untouched = [0, 3, 4, 5, 6, 8, 9]
        assert torch.equal(b[untouched], old[untouched])


# ------------------------------------------------------------------------------ trees


def _build_tree(sk, parent_list, selected, seq_lens, topk, depth, n, mode=1):
    bs = seq_lens.numel()
    size = bs * n * n if mode == 1 else int(seq_lens.sum()) * n + bs * n * n
    mask = torch.full((size,), True)
    positions = torch.zeros(bs * n, dtype=torch.int64)
    retrieve = torch.full((3, bs, n), -1, dtype=torch.int64)
    sk.build_tree_kernel_efficient_cpu(
        parent_list, selected, seq_lens.to(torch.int32), mask, positions,
        retrieve[0], retrieve[1], retrieve[2], topk, depth, n, mode,
    )
    return mask, positions, retrieve


def test_build_tree_topk2_hand_case(sk):
    # nodes 1, 2: children of the root; node 3: child of node 1
    mask, positions, retrieve = _build_tree(
        sk, torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([5]), 2, 2, 4
    )
    assert retrieve[0].tolist() == [[0, 1, 2, 3]]
    assert retrieve[1].tolist() == [[1, 3, -1, -1]]
    assert retrieve[2].tolist() == [[-1, 2, -1, -1]]
    assert positions.tolist() == [5, 6, 6, 7]
    assert mask.view(4, 4).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    # FULL_MASK: the same tree after 5 all-visible prefix columns
    full, positions_f, retrieve_f = _build_tree(
        sk, torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([5]), 2, 2, 4, 0
    )
    rows = full.view(4, 9)
    assert rows[:, :5].all() and torch.equal(rows[:, 5:], mask.view(4, 4))
    assert torch.equal(positions_f, positions) and torch.equal(retrieve_f, retrieve)


def test_build_tree_chain_is_causal(sk):
    steps, n = 3, 4
    parent_list = torch.arange(-1, steps - 1).repeat(2, 1)
    selected = torch.arange(steps).repeat(2, 1)
    mask, positions, retrieve = _build_tree(
        sk, parent_list, selected, torch.tensor([7, 12]), 1, steps, n
    )
    tril = torch.ones(n, n, dtype=torch.bool).tril()
    assert torch.equal(mask.view(2, n, n), torch.stack([tril, tril]))
    assert positions.tolist() == [7, 8, 9, 10, 12, 13, 14, 15]
    assert retrieve[1].tolist() == [[1, 2, 3, -1]] * 2


def _golden_tree():
    candidates = torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]])
    retrieve_index = torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]])
    next_token = torch.tensor([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]])
    next_sibling = torch.tensor([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]])
    target = torch.full((2, 6), 18)
    target[0, 0], target[0, 3], target[0, 4] = 3, 4, 5
    target[1, 0], target[1, 4] = 11, 12
    return candidates, retrieve_index, next_token, next_sibling, target


def test_verify_tree_greedy_golden(sk):
    candidates, r_index, r_next, r_sib, target = _golden_tree()
    predicts = torch.full((12,), -1, dtype=torch.int32)
    accept = torch.full((2, 4), -1, dtype=torch.int32)
    num = torch.empty(2, dtype=torch.int32)
    sk.verify_tree_greedy_cpu(
        predicts=predicts, accept_index=accept, accept_token_num=num, candidates=candidates,
        retrive_index=r_index, retrive_next_token=r_next, retrive_next_sibling=r_sib,
        target_predict=target,
    )
    assert predicts.tolist() == [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18]
    assert accept.tolist() == [[0, 3, 4, 5], [6, 10, 11, -1]]
    assert num.tolist() == [3, 2]


def test_verify_tree_greedy_agrees_with_the_verifier(sk):
    from serving.verifier import verify_tree_greedy

    gen = torch.Generator().manual_seed(5)
    topk, steps, n, bs = 2, 3, 6, 3
    # parent_list / selected_index as EAGLE's organize_draft_results lays them out
    parent_list = torch.tensor([[-1, 0, 1, 2, 3]] * bs)
    selected = torch.stack([torch.sort(torch.randperm(6, generator=gen)[: n - 1]).values for _ in range(bs)])
    _, _, retrieve = _build_tree(sk, parent_list, selected, torch.tensor([4, 9, 2]), topk, steps, n)
    for _ in range(20):
        candidates = torch.randint(0, 3, (bs, n), generator=gen)
        target = torch.randint(0, 3, (bs, n), generator=gen)
        outs = []
        for fn in (sk.verify_tree_greedy_cpu, verify_tree_greedy):
            predicts = torch.full((bs * n,), -1, dtype=torch.int32)
            accept = torch.full((bs, steps + 1), -1, dtype=torch.int32)
            num = torch.zeros(bs, dtype=torch.int32)
            fn(predicts, accept, num, candidates, retrieve[0], retrieve[1], retrieve[2], target)
            outs.append((predicts, accept, num))
        for mine, theirs in zip(*outs, strict=True):
            assert torch.equal(mine, theirs)


def test_reconstruct_indices_from_tree_mask(sk):
    from sgl_kernel.speculative import reconstruct_indices_from_tree_mask

    # root 0 -> {1, 2}; 1 -> {3}
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    positions = torch.zeros(4, dtype=torch.int64)
    r_index, r_next, r_sib = (torch.zeros(1, 4, dtype=torch.int64) for _ in range(3))
    reconstruct_indices_from_tree_mask(
        mask.flatten(), torch.tensor([10]), positions, r_index, r_next, r_sib, 1, 4
    )
    assert positions.tolist() == [10, 11, 11, 12]
    assert r_index.tolist() == [[0, 1, 2, 3]]
    assert r_next.tolist() == [[1, 3, -1, -1]]
    assert r_sib.tolist() == [[-1, 2, -1, -1]]


def test_sampled_verification_op_forwards_to_the_verifier(sk):
    candidates, r_index, r_next, r_sib, _ = _golden_tree()
    vocab = 20
    probs = torch.zeros(2, 6, vocab)
    # the target is certain of the path 0 -> 3 -> 4 -> 5 in tree 0 and 0 -> 4 in tree 1,
    # then of token 7 / 19
    probs[0, 0, 3] = probs[0, 3, 4] = probs[0, 4, 5] = probs[0, 5, 7] = 1.0
    probs[1, 0, 11] = probs[1, 4, 19] = 1.0
    probs[probs.sum(-1) == 0] = 1.0 / vocab
    predicts = torch.full((12,), -1, dtype=torch.int64)  # int64: the op copies back
    accept = torch.full((2, 4), -1, dtype=torch.int32)
    num = torch.zeros(2, dtype=torch.int32)
    torch.ops.sgl_kernel.tree_speculative_sampling_target_only(
        predicts, accept, num, candidates.int(), r_index, r_next, r_sib,
        torch.full((2, 6), 0.5), torch.full((2,), 0.5), probs, torch.zeros_like(probs),
    )
    assert num.tolist() == [3, 1]
    assert accept.tolist() == [[0, 3, 4, 5], [6, 10, -1, -1]]
    assert predicts[[0, 3, 4, 5, 6, 10]].tolist() == [3, 4, 5, 7, 11, 19]


# ------------------------------------------------------------------------------ boot hook


def test_post_import_hook_runs_after_module_execution(tmp_path, monkeypatch):
    if str(KERNELS) not in sys.path:
        sys.path.append(str(KERNELS))
    import specgate_sglang_cpu

    (tmp_path / "specgate_hook_target.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def hook(module):
        seen.append(module.VALUE)
        module.VALUE = 2

    finder = specgate_sglang_cpu._PostImportFinder({"specgate_hook_target": hook})
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    monkeypatch.delitem(sys.modules, "specgate_hook_target", raising=False)
    import specgate_hook_target

    assert seen == [1] and specgate_hook_target.VALUE == 2
    monkeypatch.delitem(sys.modules, "specgate_hook_target")


def _murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """Textbook MurmurHash3_x86_32 for a length that is a multiple of 4."""
    h = seed
    for i in range(0, len(data), 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * 0xCC9E2D51) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * 0x1B873593) & 0xFFFFFFFF
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def test_murmur_hash32_equals_textbook_murmur3(sk):
    seeds = [0, 42, 2**40 + 5, 2**64 - 1]
    positions = [0, 7, 123456, 2**31 + 3]
    cols = torch.tensor([0, 1, 999, 2047])
    got = torch.ops.sgl_kernel.murmur_hash32_cpu(
        torch.tensor(seeds, dtype=torch.uint64), torch.tensor(positions), cols
    )
    assert got.dtype == torch.uint32 and got.shape == (4, 4)
    for i, (s, p) in enumerate(zip(seeds, positions, strict=True)):
        for j, c in enumerate(cols.tolist()):
            key = b"".join(
                v.to_bytes(4, "little") for v in (s & 0xFFFFFFFF, s >> 32, p & 0xFFFFFFFF, c)
            )
            assert int(got[i, j]) == _murmur3_x86_32(key)
