"""Lossless speculative verification (serving.verifier): chain, greedy, tree (SGLang contract).

Covers the usual five validation scenarios of a speculative sampler at least as strictly:
losslessness by total variation AND a chi-square goodness-of-fit test, forced rejection and
rollback, the 1,000-cycle accepted-length check against the exact expectation, greedy, and the
tree op's losslessness and its agreement with greedy tree verification at temperature 0.
Every random draw is seeded through an explicit torch.Generator.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from drafters import spec_math as sm
from serving.verifier import (
    sample_from_weights,
    sampling_probs,
    speculative_sample_chain,
    speculative_sample_tree,
    top_k_renorm_probs,
    top_p_renorm_probs,
    tree_links_from_parents,
    tree_speculative_sampling,
    verify_chain_from_logits,
    verify_tree_greedy,
)

# Chi-square critical values at significance 0.001 (upper tail), by degrees of freedom.
# From standard tables; cross-checked against scipy below when scipy is installed.
CHI2_CRIT_0001 = {5: 20.515, 7: 24.322}

V = 8
# Fixed target p and a deliberately different draft q (TV(p, q) = 0.48, alpha = 0.52).
P = torch.tensor([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
Q = torch.tensor([0.05, 0.05, 0.10, 0.30, 0.25, 0.05, 0.10, 0.10])


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic sum (O - E)^2 / E over cells with E > 0."""
    n = counts.sum().item()
    expected = probs.double() * n
    mask = expected > 0
    assert int(counts[~mask].sum()) == 0, "a token with zero target probability was emitted"
    return float((((counts.double() - expected) ** 2)[mask] / expected[mask]).sum())


def total_variation(counts: torch.Tensor, probs: torch.Tensor) -> float:
    return 0.5 * float((counts.double() / counts.sum() - probs.double()).abs().sum())


def assert_follows(
    tokens: torch.Tensor, probs: torch.Tensor, *, tv_max: float | None = None
) -> None:
    """Chi-square goodness of fit at 0.001 (df = support - 1), and TV when asked."""
    counts = torch.bincount(tokens, minlength=probs.numel())
    df = int((probs > 0).sum()) - 1
    stat = chi_square(counts, probs)
    assert stat < CHI2_CRIT_0001[df], f"chi2={stat:.2f} >= {CHI2_CRIT_0001[df]} (df={df})"
    if tv_max is not None:
        assert total_variation(counts, probs) < tv_max


def test_chi2_critical_values_match_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df, crit in CHI2_CRIT_0001.items():
        assert stats.chi2.ppf(0.999, df) == pytest.approx(crit, abs=1e-3)


# =========================================================================== scenario 1
def test_chain_is_lossless_50k_draws() -> None:
    """50,000 cycles, gamma = 3, p != q: every emitted position follows p (TV and chi-square)."""
    g = torch.Generator().manual_seed(1)
    b, gamma = 50_000, 3
    # Different p and q at each position (rolled copies of P and Q).
    p = torch.stack([P.roll(i) for i in range(gamma + 1)]).expand(b, -1, -1)
    q = torch.stack([Q.roll(2 * i) for i in range(gamma)]).expand(b, -1, -1)
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(b, gamma)
    r = speculative_sample_chain(x, q, p, generator=g)

    first = r.tokens[:, 0]
    counts = torch.bincount(first, minlength=V)
    assert total_variation(counts, p[0, 0]) < 0.02
    assert_follows(first, p[0, 0], tv_max=0.02)
    # Position k (0-based) exists iff k drafts were accepted; given that, it follows p_k.
    for k in range(1, gamma + 1):
        emitted = r.tokens[r.num_emitted > k, k]
        assert emitted.numel() > 1000
        assert_follows(emitted, p[0, k])
    # The acceptance rate is 1 - TV(p_1, q_1) = 0.52 at the first position (binomial SE 0.0022).
    alpha_1 = float(torch.minimum(p[0, 0], q[0, 0]).sum())
    assert alpha_1 == pytest.approx(0.52)
    assert r.accepted_mask[:, 0].double().mean().item() == pytest.approx(alpha_1, abs=0.01)


def test_lossless_check_has_power() -> None:
    """The same check rejects the draft distribution: a verifier that always accepted would fail."""
    g = torch.Generator().manual_seed(1)
    x = torch.multinomial(Q, 50_000, replacement=True, generator=g)
    counts = torch.bincount(x, minlength=V)
    assert chi_square(counts, P) > 1000 * CHI2_CRIT_0001[7]
    assert total_variation(counts, P) > 0.4


# =========================================================================== scenario 2
def test_forced_rejection_at_third_draft() -> None:
    """Drafts 1-2 always pass (p >= q), draft 3 never does (p = 0): 2 + 1 = 3 tokens, rollback gamma - 2."""
    gamma, b = 6, 64
    g = torch.Generator().manual_seed(7)
    p = P.repeat(b, gamma + 1, 1)
    q = P.repeat(b, gamma, 1)
    draft = torch.tensor([0, 1, 7, 2, 3, 4]).repeat(b, 1)
    p[:, 2, 7] = 0.0  # target never produces token 7 at position 3
    p[:, 2] /= p[:, 2].sum(-1, keepdim=True)
    r = speculative_sample_chain(draft, q, p, generator=g)
    assert r.num_accepted.tolist() == [2] * b
    assert r.num_emitted.tolist() == [3] * b
    assert r.rollback.tolist() == [gamma - 2] * b
    assert (r.tokens[:, :2] == torch.tensor([0, 1])).all()
    assert (r.tokens[:, 3:] == -1).all()  # later drafts discarded
    corrected = r.tokens[:, 2]
    # Residual max(0, p3 - q3) with q3 = P: tokens 0..6 gain mass, 7 has none.
    residual = (p[0, 2] - q[0, 2]).clamp_min(0)
    assert (residual[corrected] > 0).all()


# =========================================================================== scenario 5
def test_thousand_cycles_match_expected_tokens() -> None:
    """1,000 cycles on random logits: mean tokens per cycle equals the exact E[tau].

    Per cycle c, position i has alpha_ci = sum min(p, q); acceptance events are independent
    Bernoulli(alpha_ci) here (p, q do not depend on the prefix), so with P_ck = prod_{i<=k}
    alpha_ci: E[tau_c] = 1 + sum_k P_ck and Var[tau_c] = sum_k (2k - 1) P_ck - (sum_k P_ck)^2.
    Tolerance: 4 standard errors of the mean, SE = sqrt(sum_c Var[tau_c]) / 1000.
    """
    g = torch.Generator().manual_seed(2024)
    cycles, gamma, vocab = 1000, 4, 32
    target_logits = 2.0 * torch.randn(cycles, gamma + 1, vocab, generator=g)
    draft_logits = target_logits[:, :gamma] + 0.7 * torch.randn(cycles, gamma, vocab, generator=g)
    p = sampling_probs(target_logits)
    q = sampling_probs(draft_logits)
    x = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(cycles, gamma)
    r = speculative_sample_chain(x, q, p, generator=g)

    alpha = torch.minimum(p[:, :gamma], q).sum(-1).double()  # [cycles, gamma]
    surv = alpha.cumprod(-1)  # P(at least k accepted)
    e_acc = surv.sum(-1)
    var = ((2 * torch.arange(1, gamma + 1) - 1) * surv).sum(-1) - e_acc**2
    expected = float((1 + e_acc).mean())
    se = float(var.sum().sqrt()) / cycles
    observed = float(r.num_emitted.double().mean())
    assert abs(observed - expected) < 4 * se, (observed, expected, se)
    assert 0.02 < se < 0.06  # the tolerance is meaningful (~0.2 tokens)

    # Measured acceptance rate vs the mean per-position alpha (SE <= sqrt(.25 / 4000)).
    measured_alpha = float(r.accepted_mask.double().mean())
    assert measured_alpha == pytest.approx(float(alpha.mean()), abs=4 * math.sqrt(0.25 / 4000))
    assert 0.70 < measured_alpha < 0.82  # the usual random-logits regime (75.7%)
    # The homogeneous formula at the measured alpha is close (its Jensen gap is small here).
    assert observed == pytest.approx(sm.expected_tokens(measured_alpha, gamma), rel=0.05)


# =========================================================================== greedy
def _greedy_reference(draft: list[int], argmax: list[int]) -> list[int]:
    out = []
    for i, tok in enumerate(draft):
        if tok != argmax[i]:
            return [*out, argmax[i]]
        out.append(tok)
    return [*out, argmax[len(draft)]]


def test_greedy_equals_argmax() -> None:
    g = torch.Generator().manual_seed(3)
    b, gamma, vocab = 256, 5, 16
    target_logits = torch.randn(b, gamma + 1, vocab, generator=g)
    draft_logits = torch.randn(b, gamma, vocab, generator=g)
    argmax = target_logits.argmax(-1)
    # Drafts agree with argmax with probability 0.8 per position, else a random token.
    agree = torch.rand(b, gamma, generator=g) < 0.8
    draft = torch.where(agree, argmax[:, :gamma], torch.randint(0, vocab, (b, gamma), generator=g))
    results = [
        verify_chain_from_logits(
            draft,
            draft_logits,
            target_logits,
            temperature=0.0,
            generator=torch.Generator().manual_seed(s),
        )
        for s in (0, 1)
    ]
    for row in range(b):
        want = _greedy_reference(draft[row].tolist(), argmax[row].tolist())
        got = results[0].tokens[row, : len(want)].tolist()
        assert got == want
        assert results[0].num_emitted[row] == len(want)
    assert torch.equal(results[0].tokens, results[1].tokens)  # no randomness at temperature 0
    assert {int(n) for n in results[0].num_accepted} >= {0, 1, gamma}


def test_per_row_temperature_mixes_greedy_and_sampled() -> None:
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 4, V, generator=g)
    probs = sampling_probs(logits, torch.tensor([0.0, 1.0, 0.5]).unsqueeze(-1))
    assert torch.equal(probs[0], torch.nn.functional.one_hot(logits[0].argmax(-1), V).float())
    assert torch.allclose(probs[1], torch.softmax(logits[1], -1))
    assert torch.allclose(probs[2], torch.softmax(logits[2] / 0.5, -1))


# =========================================================================== top-k / top-p
def test_top_k_and_top_p_exact() -> None:
    probs = torch.tensor([[0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25]])
    k2 = top_k_renorm_probs(probs, 2)
    assert torch.allclose(k2, torch.tensor([[0.0, 4 / 7, 0.0, 3 / 7], [0.5, 0.5, 0.0, 0.0]]))
    assert torch.equal(top_k_renorm_probs(probs, 0), probs)  # off
    assert torch.equal(top_k_renorm_probs(probs, 4), probs)
    # top_p 0.6: row 0 keeps 0.4, 0.3 (mass before 0.3 is 0.4 <= 0.6; before 0.2 is 0.7 > 0.6)
    p6 = top_p_renorm_probs(probs, 0.6)
    assert torch.allclose(p6[0], torch.tensor([0.0, 4 / 7, 0.0, 3 / 7]))
    assert torch.allclose(p6[1], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0]))
    assert torch.equal(top_p_renorm_probs(probs, 1.0), probs)
    with pytest.raises(ValueError, match="top_p"):
        top_p_renorm_probs(probs, 0.0)
    with pytest.raises(ValueError, match="temperature"):
        sampling_probs(probs.log(), -1.0)


def test_top_k_applied_to_p_and_q_consistently() -> None:
    """With top-k 3 on both sides the output follows the filtered p and never leaves its support."""
    g = torch.Generator().manual_seed(11)
    b, gamma = 20_000, 2
    target_logits = torch.log(P).repeat(b, gamma + 1, 1)
    draft_logits = torch.log(Q).repeat(b, gamma, 1)
    q = sampling_probs(draft_logits, 1.0, 3)
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(b, gamma)
    r = verify_chain_from_logits(x, draft_logits, target_logits, top_k=3, generator=g)
    p_filtered = sampling_probs(target_logits[0, 0], 1.0, 3)
    assert set(p_filtered.nonzero().flatten().tolist()) == {0, 1, 2}
    first = r.tokens[:, 0]
    assert set(first.unique().tolist()) <= {0, 1, 2}
    counts = torch.bincount(first, minlength=V)[:3]
    assert chi_square(counts, p_filtered[:3]) < 13.816  # df 2, 0.001


# =========================================================================== sampler rule
def test_sample_from_weights_follows_the_kernel_rule() -> None:
    w = torch.tensor([[0.0, 0.2, 0.0, 0.3, 0.5]] * 5 + [[0.0] * 5])
    u = torch.tensor([0.0, 0.19, 0.39, 0.99, 0.9999999, 0.5])
    # threshold u * sum(w) = u; first i with w > 0 and cumsum(w) > u; all-zero row -> V - 1
    assert sample_from_weights(w, u).tolist() == [1, 1, 3, 4, 4, 4]


# =========================================================================== tree (SGLang op)
def _outputs(b: int, n: int, s: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.full((b * n,), -1, dtype=torch.int32),
        torch.full((b, s), -1, dtype=torch.int32),
        torch.zeros(b, dtype=torch.int32),
    )


def test_tree_links_like_sglang() -> None:
    ri, nt, ns = tree_links_from_parents([[-1, 0, 0, 1, 2, 0], [-1, 0, 1, 2, 3, 4]])
    assert ri.tolist() == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    assert nt.tolist() == [[1, 3, 4, -1, -1, -1], [1, 2, 3, 4, 5, -1]]
    assert ns.tolist() == [[-1, 2, 5, -1, -1, -1], [-1] * 6]
    assert all(t.dtype == torch.int64 for t in (ri, nt, ns))
    with pytest.raises(ValueError, match="parent of node 2"):
        tree_links_from_parents([[-1, 0, 3, 0]])


def test_tree_hand_worked_example() -> None:
    """Root -> {1, 2}; 1 -> {3}; 2 -> {4}. Tokens: 1=5, 2=6, 3=7, 4=2. V = 8, S = 3."""
    cand = torch.tensor([[9 % V, 5, 6, 7, 2]])
    ri, nt, ns = tree_links_from_parents([[-1, 0, 0, 1, 2]])
    tp = torch.zeros(1, 5, V)
    tp[0, 0, 5], tp[0, 0, 6], tp[0, 0, 0] = 0.3, 0.5, 0.2  # after root
    tp[0, 1, 7] = 1.0
    tp[0, 2, 2], tp[0, 2, 3] = 0.6, 0.4  # after node 2
    tp[0, 3, 1] = 1.0
    tp[0, 4, 4], tp[0, 4, 1] = 0.5, 0.5
    uni = torch.tensor([[0.7, 0.0, 0.55, 0.0, 0.0]])

    # thresholds 1: coin 0.7 > p(5) = 0.3; 0.7 <= 0.3 + 0.5 -> take node 2 (token 6); node 2's
    # coin 0.55 <= p(2) = 0.6 -> take node 4 (token 2); S - 1 = 2 accepted -> bonus from row 4:
    # weights [0, .5, 0, 0, .5, 0, 0, 0], final coin 0.75 -> threshold 0.75 -> token 4.
    # The bonus ignores draft_probs (the op reads them only after a rejection): a stray value
    # in row 4 must not change it.
    pred, acc, num = _outputs(1, 5, 3)
    draft = torch.zeros_like(tp)
    draft[0, 4, 4] = 0.5
    tree_speculative_sampling(
        pred, acc, num, cand, ri, nt, ns, uni, torch.tensor([0.75]), tp, draft
    )
    assert pred.tolist() == [6, -1, 2, -1, 4]
    assert acc.tolist() == [[0, 2, 4]]
    assert num.tolist() == [2]
    expected_draft = torch.zeros_like(tp)
    expected_draft[0, 0, 5] = 0.3  # the rejected sibling is written into draft_probs in place
    expected_draft[0, 4, 4] = 0.5
    assert torch.equal(draft, expected_draft)

    # Coin 0.9 at the root rejects both children: residual = p_root without tokens 5 and 6 = {0}.
    pred, acc, num = _outputs(1, 5, 3)
    uni2 = uni.clone()
    uni2[0, 0] = 0.9
    tree_speculative_sampling(
        pred, acc, num, cand, ri, nt, ns, uni2, torch.tensor([0.3]), tp, torch.zeros_like(tp)
    )
    assert pred.tolist() == [0, -1, -1, -1, -1]
    assert acc.tolist() == [[0, -1, -1]]
    assert num.tolist() == [0]

    # threshold_single = threshold_acc = 0: the first child is always taken (SGLang's lossy mode).
    pred, acc, num = _outputs(1, 5, 3)
    tree_speculative_sampling(
        pred,
        acc,
        num,
        cand,
        ri,
        nt,
        ns,
        uni2,
        torch.tensor([0.3]),
        tp,
        torch.zeros_like(tp),
        0.0,
        0.0,
    )
    assert acc.tolist() == [[0, 1, 3]]
    assert pred.tolist()[:4] == [5, 7, -1, 1]


def _random_tree_case(
    g: torch.Generator, b: int, n: int, vocab: int, *, temperature: float
) -> tuple[torch.Tensor, ...]:
    parents = [
        [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)] for _ in range(b)
    ]
    ri, nt, ns = tree_links_from_parents(parents)
    logits = torch.randn(b, n, vocab, generator=g)
    tp = sampling_probs(logits, temperature)
    # Each child's token: the argmax after its parent half of the time, else random (distinct
    # siblings are not required by either op at temperature 0).
    cand = torch.randint(0, vocab, (b, n), generator=g)
    argmax = logits.argmax(-1)
    for row, par in enumerate(parents):
        for i in range(1, n):
            if torch.rand(1, generator=g).item() < 0.5:
                cand[row, i] = argmax[row, par[i]]
    return cand, ri, nt, ns, tp, argmax


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_sampling_at_temperature_zero_equals_greedy(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    b, n, s, vocab = 64, 10, 5, 12
    cand, ri, nt, ns, tp, argmax = _random_tree_case(g, b, n, vocab, temperature=0.0)
    pred_s, acc_s, num_s = _outputs(b, n, s)
    tree_speculative_sampling(
        pred_s, acc_s, num_s, cand, ri, nt, ns,
        torch.rand(b, n, generator=g), torch.rand(b, generator=g), tp, torch.zeros_like(tp),
    )  # fmt: skip
    pred_g, acc_g, num_g = _outputs(b, n, s)
    verify_tree_greedy(pred_g, acc_g, num_g, cand, ri, nt, ns, argmax)
    assert torch.equal(pred_s, pred_g)
    assert torch.equal(acc_s, acc_g)
    assert torch.equal(num_s, num_g)
    assert int(num_g.max()) >= 2 and int(num_g.min()) == 0  # the cases exercise both paths


def test_tree_sampling_is_lossless_with_siblings() -> None:
    """50,000 requests, one tree: root -> {a, b, c} (distinct tokens), a -> {d, e}, b -> {f}.

    The first emitted token follows p_root (TV < 0.02 and chi-square); the token after a,
    given a was accepted, follows p_a; likewise after b and after the leaf c.
    """
    g = torch.Generator().manual_seed(42)
    b, n, s = 50_000, 7, 3
    parents = [-1, 0, 0, 0, 1, 1, 2]
    _, nt1, ns1 = tree_links_from_parents([parents])
    ri = torch.arange(b * n).reshape(b, n)
    nt, ns = nt1.repeat(b, 1), ns1.repeat(b, 1)
    tokens = torch.tensor([0, 3, 4, 0, 1, 2, 5])  # a=3, b=4, c=0; d=1, e=2; f=5
    cand = tokens.repeat(b, 1)
    rows = torch.stack([P.roll(i) for i in range(n)])  # a different p after every node
    tp = rows.repeat(b, 1, 1).contiguous()
    pred, acc, num = _outputs(b, n, s)
    tree_speculative_sampling(
        pred, acc, num, cand, ri, nt, ns,
        torch.rand(b, n, generator=g), torch.rand(b, generator=g), tp, torch.zeros_like(tp),
    )  # fmt: skip
    flat = pred.reshape(b, n).long()
    first = flat[:, 0]
    assert_follows(first, rows[0], tv_max=0.02)
    for node in (1, 2, 3):  # a, b, c
        took = acc[:, 1] == ri[:, node].int()
        assert torch.equal(took, first == tokens[node])
        assert_follows(flat[took, node], rows[node])
    assert int(num.max()) == s - 1 and int(num.min()) == 0


def test_chain_and_tree_agree_for_deterministic_drafts() -> None:
    """A chain is a tree with one child per node; with one-hot q both give identical outputs."""
    g = torch.Generator().manual_seed(9)
    b, gamma, vocab = 512, 4, 10
    p = sampling_probs(torch.randn(b, gamma + 1, vocab, generator=g))
    x = torch.multinomial(p[:, :gamma].reshape(-1, vocab), 1, generator=g).reshape(b, gamma)
    q = torch.nn.functional.one_hot(x, vocab).float()
    u = torch.rand(b, gamma + 1, generator=g)
    u_final = torch.rand(b, generator=g)
    chain = speculative_sample_chain(x, q, p, uniform_samples=u[:, :gamma], uniform_final=u_final)

    ri, nt, ns = tree_links_from_parents([[-1, *range(gamma)]] * b)
    cand = torch.cat([torch.zeros(b, 1, dtype=torch.int64), x], dim=1)
    pred, acc, num = _outputs(b, gamma + 1, gamma + 1)
    tree_speculative_sampling(pred, acc, num, cand, ri, nt, ns, u, u_final, p, torch.zeros_like(p))
    assert torch.equal(num.long(), chain.num_accepted)
    emitted = pred.reshape(b, gamma + 1).long()
    pos = torch.arange(gamma + 1)
    assert torch.equal(
        torch.where(pos <= chain.num_accepted.unsqueeze(-1), emitted, -1), chain.tokens
    )


def test_tree_dtype_and_shape_errors() -> None:
    b, n, s = 1, 3, 2
    ri, nt, ns = tree_links_from_parents([[-1, 0, 0]])
    cand = torch.tensor([[0, 1, 2]])
    tp = torch.full((b, n, 4), 0.25)
    pred, acc, num = _outputs(b, n, s)
    args = (cand, ri, nt, ns, torch.rand(b, n), torch.rand(b), tp, torch.zeros_like(tp))
    with pytest.raises(TypeError, match="'predicts'"):
        tree_speculative_sampling(pred.long(), acc, num, *args)
    with pytest.raises(TypeError, match="'target_probs'"):
        tree_speculative_sampling(pred, acc, num, *args[:6], tp.double(), args[7])
    with pytest.raises(ValueError, match="uniform_samples must be"):
        tree_speculative_sampling(pred, acc, num, *args[:4], torch.rand(b, n + 1), *args[5:])
    with pytest.raises(ValueError, match="threshold"):
        tree_speculative_sampling(pred, acc, num, *args, 1.5)
    with pytest.raises(TypeError, match="'target_predict'"):
        verify_tree_greedy(pred, acc, num, cand, ri, nt, ns, torch.zeros(b, n, dtype=torch.int32))


def test_chain_shape_errors() -> None:
    x = torch.zeros(2, 3, dtype=torch.int64)
    q = torch.full((2, 3, V), 1 / V)
    with pytest.raises(ValueError, match="target_probs must be"):
        speculative_sample_chain(x, q, torch.full((2, 3, V), 1 / V))
    with pytest.raises(ValueError, match="draft token ids"):
        speculative_sample_chain(x + V, q, torch.full((2, 4, V), 1 / V))


def test_speculative_sample_tree_front_end() -> None:
    """The readable front end: emitted tokens follow the accepted path, then p at its end."""
    g = torch.Generator().manual_seed(5)
    b = 20_000
    parents = [-1, 0, 0, 1, 1, 3]
    tokens = torch.tensor([0, 2, 5, 1, 3, 4])
    rows = torch.stack([P.roll(2 * i) for i in range(6)])
    r = speculative_sample_tree([parents] * 2, tokens.repeat(2, 1), rows.repeat(2, 1, 1), 3)
    assert r.tokens.shape == (2, 4) and r.accepted_nodes.shape == (2, 4)

    r = speculative_sample_tree(
        [parents] * b, tokens.repeat(b, 1), rows.repeat(b, 1, 1), 3, generator=g
    )
    assert_follows(r.tokens[:, 0], rows[0], tv_max=0.02)
    assert torch.equal(r.num_emitted, r.num_accepted + 1)
    assert (r.accepted_nodes[:, 0] == 0).all()
    for row in range(200):
        k = int(r.num_accepted[row])
        nodes = r.accepted_nodes[row, : k + 1].tolist()
        assert r.accepted_nodes[row, k + 1 :].eq(-1).all() and r.tokens[row, k + 1 :].eq(-1).all()
        assert all(parents[child] == par for par, child in itertools.pairwise(nodes))
        assert r.tokens[row, :k].tolist() == [int(tokens[i]) for i in nodes[1:]]
    # the deepest path (0 -> 1 -> 3 -> 5) is reached: p_root(2) p_1(1) p_3(4) > 0
    assert int(r.num_accepted.max()) == 3
    with pytest.raises(ValueError, match="max_accept"):
        speculative_sample_tree([parents], tokens.unsqueeze(0), rows.unsqueeze(0), -1)
