"""Lossless verification of speculative drafts: chain and tree speculative sampling in PyTorch.

Algorithm (Leviathan et al. 2023, arXiv:2211.17192; Chen et al. 2023, arXiv:2302.01318)
-----------------------------------------------------------------------------------------
A drafter proposes gamma tokens x_1..x_gamma, x_i ~ q_i; the target scores gamma + 1 positions in
one pass, giving p_1..p_{gamma+1}. For i = 1..gamma, accept x_i with probability
min(1, p_i(x_i) / q_i(x_i)); at the first rejection i, emit one token from the residual
norm(max(0, p_i - q_i)) and drop x_{i+1}..x_gamma (their KV slots roll back: gamma - (i-1) of
them). If all gamma are accepted, emit a bonus token from p_{gamma+1}. A cycle emits between 1
and gamma + 1 tokens, and every emitted token is distributed exactly as p (lossless), whatever q
is. Greedy decoding is the temperature-0 case: p becomes one-hot at argmax, so a draft is
accepted iff it equals argmax p and the correction is argmax p.

Trees (SpecInfer, Miao et al. 2023, arXiv:2305.09781; EAGLE-2, Li et al. 2024,
arXiv:2406.16858; as run by SGLang): the children of a node are tried in order. SGLang treats
each draft token as a deterministic proposal, so trying siblings x_1, x_2, ... of one node with a
single uniform coin u accepts x_k when p(x_1) + ... + p(x_{k-1}) < u <= p(x_1) + ... + p(x_k)
(recursive rejection sampling with q = one-hot: P(x_k) = p(x_k)); if every sibling is rejected,
the correction is drawn from p with the rejected siblings removed, renormalised. With distinct
sibling tokens, ``draft_probs`` all zero and both thresholds at 1.0 (SGLang's defaults) this is
lossless. :func:`tree_speculative_sampling` reproduces SGLang's ``sgl_kernel`` op
``tree_speculative_sampling_target_only`` (sgl-kernel/csrc/speculative/speculative_sampling.cuh)
argument for argument, in place, and is the implementation behind this project's CPU stand-in
for that op; :func:`verify_tree_greedy` does the same for ``verify_tree_greedy``
(sgl-kernel/csrc/speculative/eagle_utils.cu).

Shared conventions
------------------
* Probabilities are float32 tensors over a vocabulary of size V (last dimension).
* Randomness comes only from an explicit ``torch.Generator`` or from uniform samples in
  [0, 1) passed by the caller; there is no module-level state.
* Sampling from a (possibly unnormalised) non-negative vector w with a uniform u uses the
  inverse CDF exactly as the CUDA kernel does: the first index i with w[i] > 0 and
  cumsum(w)[i] > u * sum(w); if rounding leaves none, the last index with w > 0; if w is all
  zero, V - 1. Sums are float32 (the GPU's reduction order differs, so a token whose
  cumulative mass lands within float32 rounding of u * sum(w) may differ from the GPU's).
* Top-k / top-p / temperature are applied to p and q by one helper, :func:`sampling_probs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "ChainVerifyResult",
    "TreeVerifyResult",
    "sample_from_weights",
    "sampling_probs",
    "speculative_sample_chain",
    "speculative_sample_tree",
    "top_k_renorm_probs",
    "top_p_renorm_probs",
    "tree_links_from_parents",
    "tree_speculative_sampling",
    "verify_chain_from_logits",
    "verify_tree_greedy",
]

_Scalar = float | int
_PerRow = _Scalar | torch.Tensor


# =========================================================================== sampling helpers
def _per_row(
    value: _PerRow, shape: torch.Size, dtype: torch.dtype, device: torch.device, name: str
) -> torch.Tensor:
    """Broadcast a scalar or a tensor broadcastable to ``shape`` to ``shape`` (a read-only view)."""
    t = torch.as_tensor(value, dtype=dtype, device=device)
    try:
        return t.expand(shape)
    except RuntimeError as exc:
        raise ValueError(
            f"{name} of shape {tuple(t.shape)} does not broadcast to {tuple(shape)}"
        ) from exc


def top_k_renorm_probs(probs: torch.Tensor, top_k: _PerRow) -> torch.Tensor:
    """Keep the ``top_k`` largest probabilities of each row, zero the rest, renormalise.

    Args:
        probs: [..., V] float, rows of a probability distribution (non-negative).
        top_k: int or int tensor broadcastable to ``probs.shape[:-1]``; values <= 0 or >= V leave
            the row unchanged (SGLang encodes "no top-k" as a huge value).

    Returns:
        A new [..., V] float32 tensor. Ties at the k-th value are broken towards the lower token
        id (a stable descending sort), like SGLang's PyTorch sampling backend.
    """
    probs = probs.to(torch.float32)
    v = probs.shape[-1]
    k = _per_row(top_k, probs.shape[:-1], torch.int64, probs.device, "top_k")
    k = torch.where((k <= 0) | (k >= v), torch.full_like(k, v), k)
    if bool((k == v).all()):
        return probs.clone()
    sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
    rank = torch.arange(v, device=probs.device)
    sorted_p = sorted_p.masked_fill(rank >= k.unsqueeze(-1), 0.0)
    out = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return out / out.sum(-1, keepdim=True)


def top_p_renorm_probs(probs: torch.Tensor, top_p: _PerRow) -> torch.Tensor:
    """Nucleus filter: keep the smallest head of each row (by descending probability) whose mass
    reaches ``top_p``, zero the rest, renormalise.

    A token is dropped when the mass strictly before it in descending order exceeds top_p
    (SGLang's PyTorch backend rule ``(cumsum - p) > top_p``), so the top token always stays.

    Args:
        probs: [..., V] float, rows of a probability distribution.
        top_p: float in (0, 1] or a float tensor broadcastable to ``probs.shape[:-1]``;
            1.0 leaves the row unchanged.

    Returns:
        A new [..., V] float32 tensor.

    Raises:
        ValueError: a top_p outside (0, 1].
    """
    probs = probs.to(torch.float32)
    tp = _per_row(top_p, probs.shape[:-1], torch.float32, probs.device, "top_p")
    if bool(((tp <= 0) | (tp > 1) | torch.isnan(tp)).any()):
        raise ValueError("top_p must be in (0, 1]")
    if bool((tp == 1).all()):
        return probs.clone()
    sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
    before = sorted_p.cumsum(-1) - sorted_p
    sorted_p = sorted_p.masked_fill(before > tp.unsqueeze(-1), 0.0)
    out = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return out / out.sum(-1, keepdim=True)


def sampling_probs(
    logits: torch.Tensor,
    temperature: _PerRow = 1.0,
    top_k: _PerRow = 0,
    top_p: _PerRow = 1.0,
) -> torch.Tensor:
    """The distribution a sampler draws from: softmax(logits / T), then top-k, then top-p.

    The one helper applied to both the target (p) and the draft (q) logits, so that the two are
    filtered consistently (the order is SGLang's: temperature, top_k_renorm, top_p_renorm).
    Rows with temperature 0 become one-hot at argmax(logits) (first index on ties): greedy
    decoding expressed as a distribution, which makes rejection sampling reduce to exact-match
    verification.

    Args:
        logits: [..., V] float.
        temperature: float >= 0, or a tensor broadcastable to ``logits.shape[:-1]``.
        top_k: see :func:`top_k_renorm_probs` (0 = off).
        top_p: see :func:`top_p_renorm_probs` (1.0 = off).

    Returns:
        [..., V] float32 probabilities (rows sum to 1).

    Raises:
        ValueError: a negative or NaN temperature, or a top_p outside (0, 1].
    """
    logits = logits.to(torch.float32)
    t = _per_row(temperature, logits.shape[:-1], torch.float32, logits.device, "temperature")
    if bool(((t < 0) | torch.isnan(t)).any()):
        raise ValueError("temperature must be >= 0")
    greedy = t == 0
    safe_t = torch.where(greedy, torch.ones_like(t), t)
    probs = torch.softmax(logits / safe_t.unsqueeze(-1), dim=-1)
    probs = top_k_renorm_probs(probs, top_k)
    probs = top_p_renorm_probs(probs, top_p)
    if bool(greedy.any()):
        one_hot = torch.zeros_like(probs).scatter(-1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy.unsqueeze(-1), one_hot, probs)
    return probs


def sample_from_weights(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling from non-negative, possibly unnormalised rows (the kernel's rule).

    Args:
        weights: [B, V] float32, non-negative.
        uniform: [B] float32 in [0, 1).

    Returns:
        [B] int64 token ids: the first i with weights[b, i] > 0 and cumsum > u * sum; if none
        (rounding), the last i with weights[b, i] > 0; if the row is all zero, V - 1.
    """
    w = weights.to(torch.float32)
    v = w.shape[-1]
    u = uniform.to(torch.float32) * w.sum(-1)
    positive = w > 0
    hit = (w.cumsum(-1) > u.unsqueeze(-1)) & positive
    first_hit = hit.to(torch.uint8).argmax(-1)
    last_pos = v - 1 - positive.flip(-1).to(torch.uint8).argmax(-1)
    fallback = torch.where(positive.any(-1), last_pos, torch.full_like(last_pos, v - 1))
    return torch.where(hit.any(-1), first_hit, fallback)


# =========================================================================== chain verifier
@dataclass(frozen=True)
class ChainVerifyResult:
    """Outcome of verifying a batch of draft chains (B rows, gamma drafts each).

    Attributes:
        tokens: [B, gamma + 1] int64, the emitted tokens of each row left-aligned (accepted
            drafts, then the correction or bonus token), padded with -1.
        num_accepted: [B] int64, drafts accepted, 0..gamma.
        num_emitted: [B] int64, tokens emitted = num_accepted + 1.
        rollback: [B] int64, draft KV slots to discard = gamma - num_accepted.
        accepted_mask: [B, gamma] bool, the raw accept test at every position (also past the
            first rejection, where it does not affect the output; useful to measure alpha).
    """

    tokens: torch.Tensor
    num_accepted: torch.Tensor
    num_emitted: torch.Tensor
    rollback: torch.Tensor
    accepted_mask: torch.Tensor


def speculative_sample_chain(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    uniform_samples: torch.Tensor | None = None,
    uniform_final: torch.Tensor | None = None,
) -> ChainVerifyResult:
    """Speculative sampling for B draft chains of gamma tokens each (vectorised).

    Accept x_i iff u_i * q_i(x_i) < p_i(x_i) (probability min(1, p/q)); at the first rejection
    emit a token from norm(max(0, p_i - q_i)) (from p_i if that residual is all zero); if all are
    accepted emit the bonus token from p_{gamma+1}.

    Args:
        draft_tokens: [B, gamma] int64, the drafted tokens x_1..x_gamma.
        draft_probs: [B, gamma, V] float, q_i, the distributions the drafts were drawn from
            (after temperature/top-k/top-p, see :func:`sampling_probs`).
        target_probs: [B, gamma + 1, V] float, p_1..p_{gamma+1} from one target pass.
        generator: source of the uniforms when they are not given.
        uniform_samples: [B, gamma] float in [0, 1), the accept coins (optional).
        uniform_final: [B] float in [0, 1), the coin for the correction/bonus token (optional).

    Returns:
        :class:`ChainVerifyResult`.

    Raises:
        ValueError: inconsistent shapes, or token ids outside [0, V).
    """
    if draft_tokens.dim() != 2:
        raise ValueError(f"draft_tokens must be [B, gamma], got {tuple(draft_tokens.shape)}")
    b, gamma = draft_tokens.shape
    if gamma < 1:
        raise ValueError("gamma must be >= 1")
    if draft_probs.dim() != 3 or draft_probs.shape[:2] != (b, gamma):
        raise ValueError(f"draft_probs must be [{b}, {gamma}, V], got {tuple(draft_probs.shape)}")
    v = draft_probs.shape[2]
    if target_probs.shape != (b, gamma + 1, v):
        raise ValueError(
            f"target_probs must be [{b}, {gamma + 1}, {v}], got {tuple(target_probs.shape)}"
        )
    if bool(((draft_tokens < 0) | (draft_tokens >= v)).any()):
        raise ValueError(f"draft token ids must be in [0, {v})")
    device = target_probs.device
    if uniform_samples is None:
        uniform_samples = torch.rand((b, gamma), generator=generator, device=device)
    if uniform_final is None:
        uniform_final = torch.rand((b,), generator=generator, device=device)
    if uniform_samples.shape != (b, gamma) or uniform_final.shape != (b,):
        raise ValueError("uniform_samples must be [B, gamma] and uniform_final [B]")

    p = target_probs.to(torch.float32)
    q = draft_probs.to(torch.float32)
    x = draft_tokens.to(torch.int64)
    p_x = p[:, :gamma].gather(-1, x.unsqueeze(-1)).squeeze(-1)  # [B, gamma]
    q_x = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    accepted = uniform_samples.to(torch.float32) * q_x < p_x  # [B, gamma]
    num_acc = accepted.to(torch.int64).cumprod(-1).sum(-1)  # accepted prefix length

    rows = torch.arange(b, device=device)
    stop = num_acc.clamp(max=gamma - 1)  # position of the first rejection (if any)
    residual = (p[rows, stop] - q[rows, stop]).clamp_min(0.0)
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p[rows, stop])
    final_w = torch.where((num_acc == gamma).unsqueeze(-1), p[:, gamma], residual)
    final_tok = sample_from_weights(final_w, uniform_final)

    pos = torch.arange(gamma + 1, device=device)
    padded = torch.cat([x, torch.full((b, 1), -1, dtype=torch.int64, device=device)], dim=1)
    tokens = torch.where(pos < num_acc.unsqueeze(-1), padded, torch.full_like(padded, -1))
    tokens[rows, num_acc] = final_tok
    return ChainVerifyResult(
        tokens=tokens,
        num_accepted=num_acc,
        num_emitted=num_acc + 1,
        rollback=gamma - num_acc,
        accepted_mask=accepted,
    )


def verify_chain_from_logits(
    draft_tokens: torch.Tensor,
    draft_logits: torch.Tensor,
    target_logits: torch.Tensor,
    *,
    temperature: _PerRow = 1.0,
    top_k: _PerRow = 0,
    top_p: _PerRow = 1.0,
    generator: torch.Generator | None = None,
) -> ChainVerifyResult:
    """Verify draft chains from raw logits, filtering p and q with the same :func:`sampling_probs`.

    Args:
        draft_tokens: [B, gamma] int64.
        draft_logits: [B, gamma, V] float, the drafter's logits at each draft position.
        target_logits: [B, gamma + 1, V] float, the target's logits.
        temperature: float >= 0 or a [B] tensor; 0 = greedy (accept iff draft == argmax p).
        top_k: int or [B] tensor (0 = off).
        top_p: float or [B] tensor (1.0 = off).
        generator: source of all uniforms.

    Returns:
        :class:`ChainVerifyResult`.

    Raises:
        ValueError: on invalid shapes or sampling parameters.
    """

    def per_pos(value: _PerRow, n: int) -> _PerRow:
        if isinstance(value, torch.Tensor) and value.dim() == 1:
            return value.unsqueeze(-1).expand(-1, n)
        return value

    g = draft_tokens.shape[-1]
    q = sampling_probs(draft_logits, per_pos(temperature, g), per_pos(top_k, g), per_pos(top_p, g))
    p = sampling_probs(
        target_logits, per_pos(temperature, g + 1), per_pos(top_k, g + 1), per_pos(top_p, g + 1)
    )
    return speculative_sample_chain(draft_tokens, q, p, generator=generator)


# =========================================================================== tree (SGLang layout)
def tree_links_from_parents(
    parents: Sequence[Sequence[int]], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Build SGLang's tree arrays from parent lists (what ``build_tree_kernel_efficient`` makes).

    Args:
        parents: B lists of N ints; ``parents[b][i]`` is the local index of node i's parent,
            node 0 is the root (the last verified token) with parent -1, and every parent index
            is smaller than its child's.
        device: where to put the tensors.

    Returns:
        (retrive_index, retrive_next_token, retrive_next_sibling), each [B, N] int64:
        retrive_index[b, i] = b * N + i (the flat index into ``predicts``), next_token = the
        first child (-1 if none), next_sibling = the next child of the same parent (-1 if
        none); children are linked in ascending index order, as SGLang links them.

    Raises:
        ValueError: ragged lists, a root with a parent, or a parent index not below its child.
    """
    b = len(parents)
    n = len(parents[0]) if b else 0
    next_token: list[list[int]] = []
    next_sibling: list[list[int]] = []
    for par in parents:
        if len(par) != n:
            raise ValueError("every parent list must have the same length")
        if n and par[0] != -1:
            raise ValueError("node 0 is the root and must have parent -1")
        first = [-1] * n
        sibling = [-1] * n
        for i in range(n - 1, 0, -1):  # link back to front so children end up ascending
            pi = par[i]
            if not 0 <= pi < i:
                raise ValueError(f"parent of node {i} must be in [0, {i}), got {pi}")
            sibling[i] = first[pi]
            first[pi] = i
        next_token.append(first)
        next_sibling.append(sibling)
    index = torch.arange(b * n, dtype=torch.int64, device=device).reshape(b, n)
    return (
        index,
        torch.tensor(next_token, dtype=torch.int64, device=device).reshape(b, n),
        torch.tensor(next_sibling, dtype=torch.int64, device=device).reshape(b, n),
    )


@dataclass(frozen=True)
class TreeVerifyResult:
    """Outcome of verifying a batch of draft trees (B rows, N nodes, at most S - 1 accepted).

    Attributes:
        tokens: [B, S] int64, emitted tokens left-aligned (accepted drafts along the accepted
            path, then the correction or bonus token), padded with -1.
        accepted_nodes: [B, S] int64, local node indices of the accepted path (column 0 is the
            root, 0), padded with -1; these are the KV slots to keep, the others roll back.
        num_accepted: [B] int64, accepted draft tokens, 0..S-1.
        num_emitted: [B] int64, num_accepted + 1.
    """

    tokens: torch.Tensor
    accepted_nodes: torch.Tensor
    num_accepted: torch.Tensor
    num_emitted: torch.Tensor


def speculative_sample_tree(
    parents: Sequence[Sequence[int]],
    candidates: torch.Tensor,
    target_probs: torch.Tensor,
    max_accept: int,
    *,
    generator: torch.Generator | None = None,
) -> TreeVerifyResult:
    """Lossless verification of B draft trees; a readable front end to
    :func:`tree_speculative_sampling` (same implementation, thresholds 1.0, zero draft_probs).

    Args:
        parents: B lists of N parent indices (see :func:`tree_links_from_parents`); sibling
            tokens must be distinct for the result to be lossless.
        candidates: [B, N] int64, the token of each node (node 0's is not used).
        target_probs: [B, N, V] float32, target distribution after each node.
        max_accept: at most this many drafts are accepted per row (S - 1 in SGLang terms).
        generator: source of the uniforms.

    Returns:
        :class:`TreeVerifyResult`.

    Raises:
        ValueError: invalid parents, shapes, or max_accept < 0.
    """
    if max_accept < 0:
        raise ValueError(f"max_accept must be >= 0, got {max_accept}")
    device = target_probs.device
    ri, nt, ns = tree_links_from_parents(parents, device)
    b, n = ri.shape
    s = max_accept + 1
    predicts = torch.full((b * n,), -1, dtype=torch.int32, device=device)
    accept_index = torch.full((b, s), -1, dtype=torch.int32, device=device)
    accept_num = torch.zeros(b, dtype=torch.int32, device=device)
    probs = target_probs.to(torch.float32).contiguous()
    tree_speculative_sampling(
        predicts,
        accept_index,
        accept_num,
        candidates.to(torch.int64),
        ri,
        nt,
        ns,
        torch.rand((b, n), generator=generator, device=device),
        torch.rand((b,), generator=generator, device=device),
        probs,
        torch.zeros_like(probs),
    )
    num_acc = accept_num.to(torch.int64)
    path = accept_index.to(torch.int64)
    on_path = path >= 0
    tokens = torch.where(on_path, predicts.to(torch.int64)[path.clamp_min(0)], -1)
    local = torch.where(on_path, path - ri[:, :1], -1)
    return TreeVerifyResult(
        tokens=tokens, accepted_nodes=local, num_accepted=num_acc, num_emitted=num_acc + 1
    )


def _check_tree_args(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
) -> tuple[int, int, int]:
    """Shape and dtype checks shared by both tree ops; returns (B, N, num_spec_step)."""
    for name, t, dt in (
        ("predicts", predicts, torch.int32),
        ("accept_index", accept_index, torch.int32),
        ("accept_token_num", accept_token_num, torch.int32),
        ("candidates", candidates, torch.int64),
        ("retrive_index", retrive_index, torch.int64),
        ("retrive_next_token", retrive_next_token, torch.int64),
        ("retrive_next_sibling", retrive_next_sibling, torch.int64),
    ):
        if t.dtype != dt:
            raise TypeError(f"Expected '{name}' to be of type {dt}, got {t.dtype}")
    if candidates.dim() != 2:
        raise ValueError(f"candidates must be [B, N], got {tuple(candidates.shape)}")
    b, n = candidates.shape
    for name, t in (
        ("retrive_index", retrive_index),
        ("retrive_next_token", retrive_next_token),
        ("retrive_next_sibling", retrive_next_sibling),
    ):
        if t.shape != (b, n):
            raise ValueError(f"{name} must be [{b}, {n}], got {tuple(t.shape)}")
    if accept_index.dim() != 2 or accept_index.shape[0] != b or accept_index.shape[1] < 1:
        raise ValueError(
            f"accept_index must be [{b}, num_spec_step], got {tuple(accept_index.shape)}"
        )
    if accept_token_num.shape != (b,):
        raise ValueError(f"accept_token_num must be [{b}], got {tuple(accept_token_num.shape)}")
    if predicts.dim() != 1:
        raise ValueError(f"predicts must be 1-D, got {tuple(predicts.shape)}")
    return b, n, accept_index.shape[1]


def tree_speculative_sampling(
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
    """Tree speculative sampling with SGLang's ``tree_speculative_sampling_target_only`` contract.

    Same arguments, dtypes, in-place outputs and semantics as the ``sgl_kernel`` CUDA op (the
    Python wrapper ``sgl_kernel.tree_speculative_sampling_target_only``), so a CPU stand-in for
    ``torch.ops.sgl_kernel.tree_speculative_sampling_target_only`` can call this function.
    B = batch size, N = draft tokens per request (tree nodes, node 0 = the root, i.e. the last
    verified token), S = num_spec_step (max tokens a request can accept + 1), V = vocab size.

    Args:
        predicts: [B * N] int32, OUT (in place). ``predicts[retrive_index[b, i]]`` becomes the
            token that follows node i when node i is on the accepted path: the next accepted
            draft token, or, for the last accepted node, the correction/bonus token. Other
            entries are left untouched (SGLang pre-fills them).
        accept_index: [B, S] int32, OUT (in place). Row b gets the ``retrive_index`` values of
            the accepted path: column 0 = the root, columns 1..accept_token_num[b] = accepted
            draft nodes; later columns are left untouched (SGLang pre-fills -1).
        accept_token_num: [B] int32, OUT (in place): accepted draft tokens, 0..S-1 (the
            correction/bonus token is not counted).
        candidates: [B, N] int64, the token of each node (candidates[b, 0] = the root's token).
        retrive_index: [B, N] int64, flat index of each node into ``predicts`` (SGLang builds
            b * N + i).
        retrive_next_token: [B, N] int64, first child of each node (local index), -1 = leaf.
        retrive_next_sibling: [B, N] int64, next sibling (local index), -1 = last.
        uniform_samples: [B, N] float32 in [0, 1): ``uniform_samples[b, i]`` is the single coin
            used to try all children of node i.
        uniform_samples_for_final_sampling: [B] float32 in [0, 1), the coin for the
            correction/bonus token.
        target_probs: [B, N, V] float32, ``target_probs[b, i]`` = the target's distribution of
            the token after node i (already temperature/top-k/top-p processed).
        draft_probs: [B, N, V] float32, MUTATED in place: for every rejected child token t of
            node i, ``draft_probs[b, i, t]`` is set to ``target_probs[b, i, t]``; the correction
            is drawn from relu(target_probs - draft_probs) at the last accepted node (from
            target_probs alone when S - 1 drafts were accepted: the bonus token). SGLang passes
            zeros, which makes the result lossless; other contents make it lossy, as in the op.
        threshold_single: float in [0, 1]; a child is also accepted when its own target
            probability is >= this (1.0 = only when certain).
        threshold_acc: float in [0, 1]; the child test is ``coin <= prob_acc / threshold_acc``
            where prob_acc sums the target probabilities of the children tried so far (values
            below 1e-9 are raised to 1e-9, like the op). 1.0 = exact rejection sampling.
        deterministic: accepted for signature compatibility; this implementation is always
            deterministic.

    Returns:
        None; results are written into predicts, accept_index, accept_token_num, draft_probs.

    Raises:
        TypeError: a tensor of the wrong dtype (predicts/accept_index/accept_token_num must be
            int32; candidates/retrive_* int64; uniforms and probabilities float32).
        ValueError: inconsistent shapes, or a threshold outside [0, 1].

    Losslessness: with distinct sibling tokens, draft_probs all zero and both thresholds 1.0,
    each emitted token is distributed exactly as target_probs at its parent node.
    """
    del deterministic
    b, n, s = _check_tree_args(
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        retrive_index,
        retrive_next_token,
        retrive_next_sibling,
    )
    for name, t in (
        ("uniform_samples", uniform_samples),
        ("uniform_samples_for_final_sampling", uniform_samples_for_final_sampling),
        ("target_probs", target_probs),
        ("draft_probs", draft_probs),
    ):
        if t.dtype != torch.float32:
            raise TypeError(f"Expected '{name}' to be of type torch.float32, got {t.dtype}")
    if target_probs.dim() != 3 or target_probs.shape[:2] != (b, n):
        raise ValueError(f"target_probs must be [{b}, {n}, V], got {tuple(target_probs.shape)}")
    if draft_probs.shape != target_probs.shape:
        raise ValueError(
            f"draft_probs must be {tuple(target_probs.shape)}, got {tuple(draft_probs.shape)}"
        )
    if uniform_samples.shape != (b, n):
        raise ValueError(f"uniform_samples must be [{b}, {n}], got {tuple(uniform_samples.shape)}")
    if uniform_samples_for_final_sampling.shape != (b,):
        raise ValueError(f"uniform_samples_for_final_sampling must be [{b}]")
    if not (0.0 <= threshold_single <= 1.0 and 0.0 <= threshold_acc <= 1.0):
        raise ValueError("threshold_single and threshold_acc must be in [0, 1]")
    if b == 0:
        return

    device = target_probs.device
    thr_single = torch.tensor(threshold_single, dtype=torch.float32, device=device)
    thr_acc = torch.tensor(max(threshold_acc, 1e-9), dtype=torch.float32, device=device)

    rows = torch.arange(b, device=device)
    parent = torch.zeros(b, dtype=torch.int64, device=device)  # local index, last accepted node
    last_flat = retrive_index[:, 0].clone()  # its flat index into predicts
    coin = uniform_samples[:, 0].clone()
    num_acc = torch.zeros(b, dtype=torch.int64, device=device)
    accept_index[:, 0] = last_flat.to(torch.int32)
    active = torch.ones(b, dtype=torch.bool, device=device)

    for _depth in range(1, s):
        child = torch.where(active, retrive_next_token[rows, parent], torch.full_like(parent, -1))
        searching = child != -1
        active = searching.clone()
        prob_acc = torch.zeros(b, dtype=torch.float32, device=device)
        while bool(searching.any()):
            idx = searching.nonzero().squeeze(1)
            c, par = child[idx], parent[idx]
            tok = candidates[idx, c]
            p_tok = target_probs[idx, par, tok]
            acc_sum = prob_acc[idx] + p_tok
            prob_acc[idx] = acc_sum
            ok = (coin[idx] <= acc_sum / thr_acc) | (p_tok >= thr_single)

            ai, ac = idx[ok], c[ok]
            if ai.numel():
                predicts[last_flat[ai]] = tok[ok].to(torch.int32)
                num_acc[ai] += 1
                flat = retrive_index[ai, ac]
                accept_index[ai, num_acc[ai]] = flat.to(torch.int32)
                last_flat[ai] = flat
                parent[ai] = ac
                coin[ai] = uniform_samples[ai, ac]
                searching[ai] = False

            ri, rc = idx[~ok], c[~ok]
            if ri.numel():
                draft_probs[ri, par[~ok], tok[~ok]] = p_tok[~ok]
                nxt = retrive_next_sibling[ri, rc]
                child[ri] = nxt
                searching[ri] = nxt != -1
                active[ri] = nxt != -1
        if not bool(active.any()):
            break

    accept_token_num.copy_(num_acc.to(torch.int32))
    last_target = target_probs[rows, parent]
    bonus = (num_acc == s - 1).unsqueeze(-1)
    residual = torch.where(bonus, last_target, last_target - draft_probs[rows, parent]).clamp_min(
        0.0
    )
    final = sample_from_weights(residual, uniform_samples_for_final_sampling)
    predicts[last_flat] = final.to(torch.int32)


def verify_tree_greedy(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy tree verification with SGLang's ``verify_tree_greedy`` contract (in place).

    Walks the tree from the root; at each depth the first child (in sibling order) whose token
    equals the target's argmax after the current node is accepted; stops when none matches or
    S - 1 tokens were accepted. ``predicts`` receives, at each accepted node's flat index, the
    next accepted token, and at the last accepted node the target's argmax (the correction or
    bonus token).

    Args:
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling: as in :func:`tree_speculative_sampling`.
        target_predict: [B, N] int64, argmax of the target's distribution after each node;
            indexed, as in the op, by the flat ``retrive_index`` value (b * N + i).

    Raises:
        TypeError: wrong dtypes (target_predict must be int64).
        ValueError: inconsistent shapes.
    """
    b, n, s = _check_tree_args(
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        retrive_index,
        retrive_next_token,
        retrive_next_sibling,
    )
    if target_predict.dtype != torch.int64:
        raise TypeError(
            f"Expected 'target_predict' to be of type torch.int64, got {target_predict.dtype}"
        )
    if target_predict.shape != (b, n):
        raise ValueError(f"target_predict must be [{b}, {n}], got {tuple(target_predict.shape)}")
    if b == 0:
        return
    device = candidates.device
    flat_target = target_predict.reshape(-1)
    rows = torch.arange(b, device=device)
    parent = torch.zeros(b, dtype=torch.int64, device=device)
    last_flat = retrive_index[:, 0].clone()
    num_acc = torch.zeros(b, dtype=torch.int64, device=device)
    accept_index[:, 0] = last_flat.to(torch.int32)
    active = torch.ones(b, dtype=torch.bool, device=device)

    for _depth in range(1, s):
        child = torch.where(active, retrive_next_token[rows, parent], torch.full_like(parent, -1))
        searching = child != -1
        active = searching.clone()
        while bool(searching.any()):
            idx = searching.nonzero().squeeze(1)
            c = child[idx]
            tok = candidates[idx, c]
            ok = tok == flat_target[last_flat[idx]]
            ai, ac = idx[ok], c[ok]
            if ai.numel():
                predicts[last_flat[ai]] = tok[ok].to(torch.int32)
                num_acc[ai] += 1
                flat = retrive_index[ai, ac]
                accept_index[ai, num_acc[ai]] = flat.to(torch.int32)
                last_flat[ai] = flat
                parent[ai] = ac
                searching[ai] = False
            ri, rc = idx[~ok], c[~ok]
            if ri.numel():
                nxt = retrive_next_sibling[ri, rc]
                child[ri] = nxt
                searching[ri] = nxt != -1
                active[ri] = nxt != -1
        if not bool(active.any()):
            break

    accept_token_num.copy_(num_acc.to(torch.int32))
    predicts[last_flat] = flat_target[last_flat].to(torch.int32)
