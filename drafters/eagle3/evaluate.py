"""Offline acceptance of an EAGLE-3 drafter on held-out prompts (chain drafts, any temperature).

    python -m drafters.eagle3.evaluate --target models/tiny-llama \\
        --draft models/tiny-llama-eagle3 [--prompts 64] [--gamma 3] [--temperature 0] [--json]

What it simulates: SGLang's EAGLE-3 decoding with ``--speculative-eagle-topk 1
--speculative-num-steps gamma --speculative-num-draft-tokens gamma+1``, in PyTorch. Every
accept/reject decision is made by the lossless verifier,
:func:`serving.verifier.speculative_sample_chain` (Leviathan et al. 2023, arXiv:2211.17192).
With topk 1 the drafter proposes its argmax token at each step and SGLang verifies it as a
deterministic proposal (q = one-hot: accepted with probability p(x), the correction drawn from
p without x), so q is one-hot here too. Per prompt, two exact paths:

* temperature 0 (:func:`simulate_sequence`): p is one-hot at the target's argmax, so the
  emitted text is exactly the target's greedy continuation ``g`` (``max_new_tokens``, stops at
  EOS, :func:`greedy_sequence`), and one target forward over prompt + ``g`` yields every hidden
  state the engine would have had (causal attention: a prefix's states do not depend on what
  follows). After prefill the engine has emitted the first new token; the draft's real entries
  are (hidden after token p, token p + 1) for every processed p. Each cycle drafts ``gamma``
  tokens from the last real entry (``Eagle3Draft.draft_chain``) and verifies them against
  one-hot rows of ``g``.
* temperature T > 0 (:func:`sample_cycles`): the first token is sampled from the prefill's
  p; each cycle drafts ``gamma`` tokens, runs one target forward over the text + drafts (no KV
  cache: the tiny target makes that cheap), verifies with p = softmax(logits / T) at the
  ``gamma + 1`` positions and a seeded generator, and appends the emitted tokens (up to EOS or
  ``max_new_tokens``). At T = 0 this path gives the same counts as the first (a test checks it).

Counting (both paths): a cycle that starts ``s`` tokens into the continuation (s >= 1: the
prefill emitted token 0) counts iff its whole window fits the final continuation of ``L``
tokens, ``s + gamma + 1 <= L``, so no cycle is cut short by EOS or the budget (no end-of-text
bias). :func:`simulate_sequence` with an int ``max_new_tokens`` instead runs as the engine
does and returns every cycle (``len`` = SGLang's ``spec_verify_ct``); :func:`engine_counts`
gives each cycle's accepted count as SGLang reports it (``spec_correct_drafts_histogram``).

Reported (``EvalResult``): the fields of :class:`drafters.acceptance.AcceptanceStats`
(cycles; ``accept_length`` = mean tokens emitted per cycle = accepted + 1, SGLang's
``spec_accept_length``; ``position_acceptance[k]`` = P(draft token k+1 accepted | tokens
1..k accepted); ``position_reach[k]`` = P(draft token k+1 accepted); ``accepted_histogram[a]``
= cycles with a accepted drafts; ``alpha`` = the i.i.d. rate with E[tau] = accept_length),
rounded to 4 decimals, plus the code/chat split.

Prompts: ``drafters.eagle3.data.make_prompts(tokenizer, "heldout", ...)``: held-out stdlib
files (``serving.tinymodel.stdlib_corpus("heldout")``), which neither the tokenizer, the target
nor the drafter saw; one prompt in 4 is chat-formatted (:data:`PROMPT_SOURCE`).

Measured (seed 0; ``models/tiny-llama`` 450 steps, drafter 300 steps; Python 3.11.7):
64 held-out prompts, 2185 cycles, mean accepted length 2.727 (code 2.869, chat 2.373),
conditional acceptance per draft position [0.750, 0.728, 0.792], reach [0.750, 0.546, 0.432].
The real SGLang 0.5.23 CPU server with the export (EAGLE3, topk 1, 3 steps, 4 draft tokens),
same 64 prompts, ``max_new_tokens`` 96: greedy tokens equal to ``transformers`` on 64/64,
``spec_verify_ct`` equal to ``simulate_sequence(..., max_new_tokens=96)`` on 64/64, and
``/server_info`` ``avg_spec_accept_length`` 2.725 (this simulation in that mode: 2.708).
``specgate drafter eval --launch --temperature 0 --temperature 1`` (same prompts and server
settings): T = 0 offline 2.727 (2185 cycles), SGLang per-request 2.724 (2260 cycles, every
one; its histogram equals :func:`engine_counts` cycle for cycle); T = 1 offline 1.168 (4729
cycles, seed 0), SGLang 1.179 (4872 cycles).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from drafters.acceptance import AcceptanceStats, acceptance_from_counts
from serving.verifier import sample_from_weights, sampling_probs, speculative_sample_chain

__all__ = [
    "PROMPT_SOURCE",
    "EvalResult",
    "OfflineRun",
    "engine_counts",
    "evaluate",
    "greedy_sequence",
    "main",
    "offline_counts",
    "sample_cycles",
    "simulate_sequence",
]

#: Where the held-out prompts come from (reported with every result).
PROMPT_SOURCE = (
    'drafters.eagle3.data.make_prompts(tokenizer, "heldout", ...): excerpts of the held-out '
    'CPython stdlib files serving.tinymodel.stdlib_corpus("heldout") (sha256(name)[0] < 32; '
    "never seen by the tokenizer, the target or the drafter), one prompt in 4 chat-formatted"
)


@dataclass(frozen=True)
class EvalResult:
    prompts: int
    gamma: int
    temperature: float
    cycles: int
    tokens_emitted: int
    accept_length: float
    alpha: float
    position_acceptance: list[float]
    position_reach: list[float]
    accepted_histogram: list[int]
    chat_accept_length: float
    code_accept_length: float


@dataclass(frozen=True)
class OfflineRun:
    """Per-prompt accepted-draft counts of the counted cycles, and the prompts' metadata."""

    gamma: int
    temperature: float
    counts: list[list[int]]
    chat: list[bool]
    sources: list[str]


def _one_hot_rows(tokens: Sequence[int | None], vocab: int) -> torch.Tensor:
    """[len(tokens), vocab] float32 rows, one-hot at each token; all zero for None."""
    rows = torch.zeros(len(tokens), vocab)
    for i, t in enumerate(tokens):
        if t is not None:
            rows[i, t] = 1.0
    return rows


def _verify_one(
    drafted: Sequence[int], target_probs: torch.Tensor, generator: torch.Generator | None
) -> tuple[int, list[int]]:
    """Verify one chain of deterministic (q = one-hot) drafts against p [gamma + 1, V] with
    :func:`speculative_sample_chain`; returns (accepted drafts, emitted tokens)."""
    v = target_probs.shape[-1]
    x = torch.tensor([list(drafted)])
    res = speculative_sample_chain(
        x,
        _one_hot_rows(drafted, v)[None],
        target_probs[None],
        generator=generator,
        # a one-hot p or q makes the accept test deterministic: u = 0 accepts iff p(x) > 0
        uniform_samples=None if generator is not None else torch.zeros(1, len(drafted)),
        uniform_final=None if generator is not None else torch.zeros(1),
    )
    a = int(res.num_accepted[0])
    return a, res.tokens[0, : a + 1].tolist()


def simulate_sequence(
    draft: Any,
    aux: torch.Tensor,
    seq: list[int],
    first_new: int,
    gamma: int,
    max_new_tokens: int | None = None,
    end: int | None = None,
) -> list[int]:
    """Accepted-draft counts per verify cycle for one greedy sequence (temperature 0).

    Args:
        draft: an ``Eagle3Draft``.
        aux: [len(seq), 3H] target hidden states of ``seq``.
        seq: prompt + greedy continuation (target token ids).
        first_new: index of the first generated token (= prompt length).
        gamma: draft tokens per cycle.
        max_new_tokens: None: count only cycles whose window fits the continuation (the
            offline metric, see the module docstring). An int: run as the engine does for a
            request with that ``max_new_tokens`` (cycles until that many tokens or the end of
            ``seq``; a cycle at the end may be cut short), so ``len(result)`` is SGLang's
            ``spec_verify_ct``.
        end: where the request's text ends in ``seq`` (exclusive; default ``len(seq)``).
            ``seq`` may run on past it (the target's greedy tokens, see
            :func:`engine_counts`): drafts are verified against those too, as the engine does
            in a request's last cycle, whose accepted count SGLang reports uncut by
            ``max_new_tokens``.
    """
    counts: list[int] = []
    cur = first_new + 1  # prefill emitted seq[first_new]
    tokens = torch.tensor(seq)
    vocab = draft.spec.vocab_size
    stop = len(seq) if end is None else end

    def more() -> bool:
        if max_new_tokens is None:
            return cur + gamma < stop
        return cur - first_new < max_new_tokens and cur < stop

    while more():
        drafted = draft.draft_chain(aux[: cur - 1], tokens[:cur], gamma)
        # p = one-hot at the greedy continuation; past its end, zero rows (nothing accepted)
        window = [seq[cur + i] if cur + i < len(seq) else None for i in range(gamma + 1)]
        accepted, _ = _verify_one(drafted, _one_hot_rows(window, vocab), None)
        counts.append(accepted)
        cur += accepted + 1
    return counts


@torch.no_grad()
def sample_cycles(
    model: Any,
    draft: Any,
    prompt_ids: Sequence[int],
    gamma: int,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator,
) -> tuple[list[int], list[int]]:
    """Speculative decoding of one prompt at ``temperature`` (> 0, or 0 for greedy).

    Returns (accepted-draft counts of the counted cycles, the continuation's token ids). See
    the module docstring for the cycle and the counting rule; ``generator`` draws every coin.
    """
    from drafters.eagle3.data import capture

    cfg = model.config
    eos = set(cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id])
    pad = cfg.pad_token_id
    aux_ids = draft.spec.aux_layer_ids

    def target(ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        _, aux, final = capture(model, [ids], aux_ids, pad)
        return aux[0], model.lm_head(final[0]).float()

    seq = list(prompt_ids)
    first_new = len(seq)
    aux, logits = target(seq)
    p0 = sampling_probs(logits[-1:], temperature)
    seq.append(int(sample_from_weights(p0, torch.rand(1, generator=generator))[0]))
    starts: list[tuple[int, int]] = []  # (s, accepted) per cycle

    def done() -> bool:
        return seq[-1] in eos or len(seq) - first_new >= max_new_tokens

    while not done():
        cur = len(seq)
        drafted = draft.draft_chain(aux[: cur - 1], torch.tensor(seq), gamma)
        aux, logits = target(seq + drafted)
        p = sampling_probs(logits[cur - 1 : cur + gamma], temperature)
        accepted, emitted = _verify_one(drafted, p, generator)
        starts.append((cur - first_new, accepted))
        for tok in emitted:
            seq.append(tok)
            if done():
                break
    length = len(seq) - first_new
    return [a for s, a in starts if s + gamma + 1 <= length], seq[first_new:]


@torch.no_grad()
def offline_counts(
    target: str | os.PathLike[str],
    draft_dir: str | os.PathLike[str],
    *,
    prompts: int = 64,
    gamma: int = 3,
    temperature: float = 0.0,
    max_new_tokens: int = 96,
    prompt_tokens: int = 48,
    seed: int = 0,
    threads: int = 1,
    progress: Any = None,
) -> OfflineRun:
    """Counted cycles of every held-out prompt (see the module docstring).

    ``progress``: optional callable(n_prompts_done) called after each prompt. Sampling at
    T > 0 uses ``torch.Generator().manual_seed(seed)`` for the whole run.

    Raises:
        ValueError: ``temperature`` < 0, ``gamma`` < 1.
    """
    from drafters.eagle3.data import capture, make_prompts
    from drafters.eagle3.model import load_draft
    from drafters.eagle3.train import load_target

    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {gamma!r}")
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model, tok = load_target(target)
        draft = load_draft(Path(draft_dir), model.get_input_embeddings().weight)
        pad = model.config.pad_token_id
        held = make_prompts(tok, "heldout", prompts, seed, prompt_tokens=prompt_tokens)
        gen = torch.Generator().manual_seed(seed)
        counts: list[list[int]] = []
        for i, p in enumerate(held):
            if temperature == 0:
                seq = greedy_sequence(model, p.ids, max_new_tokens)
                _, aux, _ = capture(model, [seq], draft.spec.aux_layer_ids, pad)
                counts.append(simulate_sequence(draft, aux[0], seq, len(p.ids), gamma))
            else:
                cs, _ = sample_cycles(model, draft, p.ids, gamma, max_new_tokens, temperature, gen)
                counts.append(cs)
            if progress is not None:
                progress(i + 1)
    finally:
        torch.set_num_threads(prev)
    return OfflineRun(
        gamma=gamma,
        temperature=float(temperature),
        counts=counts,
        chat=[p.chat for p in held],
        sources=[p.source for p in held],
    )


@torch.no_grad()
def greedy_sequence(model: Any, prompt_ids: Sequence[int], max_new_tokens: int) -> list[int]:
    """Prompt + the target's unbatched greedy continuation (stops at any config EOS id)."""
    cfg = model.config
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
    ids = torch.tensor([list(prompt_ids)])
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=eos,
        pad_token_id=cfg.pad_token_id,
    )
    return out[0].tolist()


@torch.no_grad()
def engine_counts(
    model: Any, draft: Any, prompt_ids: Sequence[int], gamma: int, max_new_tokens: int
) -> list[int]:
    """Accepted-draft counts of every verify cycle of a greedy SGLang request (``temperature``
    0, ``max_new_tokens``, stops at EOS): what the engine reports for it in
    ``meta_info.spec_correct_drafts_histogram`` (``len`` = ``spec_verify_ct``). The last
    cycle's drafts are verified against the target's greedy tokens past the request's end,
    as SGLang does (its accepted count is not cut at ``max_new_tokens``); an EOS inside that
    overhang ends the reference early (the engine would verify past it)."""
    from drafters.eagle3.data import capture

    cfg = model.config
    eos = set(cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id])
    first_new = len(prompt_ids)
    seq = greedy_sequence(model, prompt_ids, max_new_tokens + gamma)
    end = min(len(seq), first_new + max_new_tokens)
    end = next((i + 1 for i in range(first_new, end) if seq[i] in eos), end)
    _, aux, _ = capture(model, [seq], draft.spec.aux_layer_ids, cfg.pad_token_id)
    return simulate_sequence(draft, aux[0], seq, first_new, gamma, max_new_tokens, end=end)


def result_from_run(run: OfflineRun) -> EvalResult:
    """Summarise an :class:`OfflineRun` (4-decimal floats). Raises ValueError if no cycle."""

    def stats(rows: list[list[int]]) -> AcceptanceStats:
        return acceptance_from_counts([c for r in rows for c in r], run.gamma)

    def mean_len(rows: list[list[int]]) -> float:
        return round(stats(rows).accept_length, 4) if any(rows) else 0.0

    s = stats(run.counts)
    return EvalResult(
        prompts=len(run.counts),
        gamma=run.gamma,
        temperature=run.temperature,
        cycles=s.cycles,
        tokens_emitted=s.tokens_emitted,
        accept_length=round(s.accept_length, 4),
        alpha=round(s.alpha, 4),
        position_acceptance=[round(x, 4) for x in s.position_acceptance],
        position_reach=[round(x, 4) for x in s.position_reach],
        accepted_histogram=s.accepted_histogram,
        chat_accept_length=mean_len([r for r, c in zip(run.counts, run.chat, strict=True) if c]),
        code_accept_length=mean_len(
            [r for r, c in zip(run.counts, run.chat, strict=True) if not c]
        ),
    )


def evaluate(
    target: str | os.PathLike[str],
    draft_dir: str | os.PathLike[str],
    *,
    prompts: int = 64,
    gamma: int = 3,
    temperature: float = 0.0,
    max_new_tokens: int = 96,
    prompt_tokens: int = 48,
    seed: int = 0,
    threads: int = 1,
) -> EvalResult:
    """:func:`offline_counts` summarised by :func:`result_from_run`."""
    return result_from_run(
        offline_counts(
            target,
            draft_dir,
            prompts=prompts,
            gamma=gamma,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            prompt_tokens=prompt_tokens,
            seed=seed,
            threads=threads,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m drafters.eagle3.evaluate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--prompts", type=int, default=64, help="held-out prompts")
    parser.add_argument("--gamma", type=int, default=3, help="draft tokens per cycle")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the result JSON here too")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    res = evaluate(
        args.target,
        args.draft,
        prompts=args.prompts,
        gamma=args.gamma,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    payload = json.dumps(asdict(res), indent=2)
    if args.out:
        Path(args.out).write_text(payload + "\n")
    if args.json:
        print(payload)
    else:
        print(
            f"held-out prompts {res.prompts}, cycles {res.cycles}, gamma {res.gamma} "
            f"(topk 1, {res.gamma + 1} draft tokens), temperature {res.temperature:g}\n"
            f"mean accepted length {res.accept_length:.3f} tokens/cycle "
            f"(code {res.code_accept_length:.3f}, chat {res.chat_accept_length:.3f}), "
            f"alpha {res.alpha:.3f}\n"
            f"acceptance per draft position (conditional): {res.position_acceptance}\n"
            f"reach per draft position (unconditional):    {res.position_reach}\n"
            f"accepted-drafts histogram 0..{res.gamma}: {res.accepted_histogram}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
