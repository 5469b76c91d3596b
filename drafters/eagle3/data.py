"""Training and evaluation data for the EAGLE-3 drafter: the target's own rollouts.

EAGLE (arXiv:2401.15077, section 4) and EAGLE-3 (arXiv:2503.01840) train the draft head on
text the *target* generates rather than on a fixed corpus, so the tokens paired with the
target's hidden states come from the distribution the drafter meets at serving time.
SpecForge does the same with ``scripts/regenerate_train_data.py`` (an SGLang server answering
the prompts) followed by ``scripts/prepare_hidden_states.py`` (offline capture); here both
run in-process with ``transformers`` on CPU.

Prompts (deterministic for a seed):
- *held-in*: ``serving.tinymodel.stdlib_corpus("train")`` files, the same files the target
  was trained on; *held-out*: ``stdlib_corpus("heldout")`` (sha256(filename)[0] < 32, ~1 file
  in 8), never used to train the tokenizer, the target or the drafter. Training uses only
  held-in prompts; ``evaluate.py`` uses only held-out prompts.
- each prompt is a code excerpt starting at a line boundary at a seeded offset of a seeded
  file, ``prompt_tokens`` long; one prompt in ``chat_every`` is instead wrapped in the chat
  template (user: ``"Continue this code:\\n" + excerpt``, generation prompt on), so the
  drafter also sees chat-formatted contexts as served through ``/v1/chat/completions``.

Rollouts: ``max_new_tokens`` tokens per prompt, greedy for most prompts and sampled
(temperature ``sample_temperature``) for one in ``sample_every``, stopping at the target's
EOS tokens. Capture: one target forward over prompt + rollout returning, per position, the
residual stream after the target layers ``aux_layer_ids`` (concatenated, [T, 3H]) and the
final normed hidden state ([T, H]) from which the teacher logits are recomputed with the
target's ``lm_head`` (SpecForge's offline mode stores the same pair).

Shapes: ``Rollouts.tokens`` [N, T] int64 (pad-filled), ``lengths`` [N], ``prompt_lengths`` [N],
``aux`` [N, T, 3H] float32, ``final_hidden`` [N, T, H] float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from serving import tinymodel

__all__ = ["Prompt", "Rollouts", "make_prompts", "rollout"]


@dataclass(frozen=True)
class Prompt:
    """One prompt: its token ids (BOS first), where it came from, and its format."""

    ids: tuple[int, ...]
    source: str  # "file.py:char_offset"
    chat: bool


@dataclass
class Rollouts:
    tokens: torch.Tensor
    lengths: torch.Tensor
    prompt_lengths: torch.Tensor
    aux: torch.Tensor
    final_hidden: torch.Tensor
    sources: list[str]


def make_prompts(
    tokenizer: Any,
    split: str,
    count: int,
    seed: int,
    *,
    prompt_tokens: int = 48,
    chat_every: int = 4,
) -> list[Prompt]:
    """``count`` prompts from the ``split`` ("train" or "heldout") stdlib files.

    Raises ``ValueError`` if the split has no file long enough.
    """
    files = [p for p in tinymodel.stdlib_corpus(split) if p.stat().st_size > 4000]
    if not files:
        raise ValueError(f"no stdlib file in split {split!r} is long enough for prompts")
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    gen = torch.Generator().manual_seed(seed)
    prompts: list[Prompt] = []
    while len(prompts) < count:
        i = int(torch.randint(len(files), (1,), generator=gen))
        text = texts[i]
        offset = int(torch.randint(len(text) - 2000, (1,), generator=gen))
        offset = text.rfind("\n", 0, offset) + 1
        body = tokenizer(text[offset : offset + 1500], add_special_tokens=False)["input_ids"]
        chat = len(prompts) % chat_every == chat_every - 1
        if chat:
            excerpt = tokenizer.decode(body[: prompt_tokens - 12])
            messages = [{"role": "user", "content": "Continue this code:\n" + excerpt}]
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            ids = tokenizer(ids, add_special_tokens=False)["input_ids"]
        else:
            ids = [tokenizer.bos_token_id] + body[: prompt_tokens - 1]
        prompts.append(Prompt(tuple(ids), f"{files[i].name}:{offset}", chat))
    return prompts


@torch.no_grad()
def _generate(
    model: Any,
    prompts: list[Prompt],
    max_new_tokens: int,
    sample: bool,
    temperature: float,
    pad_id: int,
    eos_ids: list[int],
) -> list[list[int]]:
    """Left-padded batched ``generate``; returns prompt + new tokens, cut after an EOS."""
    width = max(len(p.ids) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p.ids) :] = torch.tensor(p.ids)
        mask[row, width - len(p.ids) :] = 1
    kwargs: dict[str, Any] = {"do_sample": False}
    if sample:
        kwargs = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad_id,
        eos_token_id=eos_ids,
        **kwargs,
    )
    seqs: list[list[int]] = []
    for row, p in enumerate(prompts):
        new = out[row, width:].tolist()
        for j, tok in enumerate(new):
            if tok in eos_ids:
                new = new[: j + 1]
                break
        seqs.append(list(p.ids) + new)
    return seqs


@torch.no_grad()
def capture(
    model: Any, seqs: list[list[int]], aux_layer_ids: tuple[int, ...], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded target forward: (tokens [N, T], aux [N, T, 3H], final hidden [N, T, H])."""
    width = max(len(s) for s in seqs)
    tokens = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        tokens[row, : len(s)] = torch.tensor(s)
    out = model.model(input_ids=tokens, output_hidden_states=True, use_cache=False)
    hs = out.hidden_states  # (embeddings, after layer 0, ..., final normed)
    aux = torch.cat([hs[j + 1] for j in aux_layer_ids], dim=-1)
    return tokens, aux.float(), out.last_hidden_state.float()


def rollout(
    model: Any,
    prompts: list[Prompt],
    *,
    aux_layer_ids: tuple[int, ...],
    max_new_tokens: int,
    seed: int,
    sample_every: int = 3,
    sample_temperature: float = 0.8,
    batch_size: int = 32,
    progress: Any = None,
) -> Rollouts:
    """Generate from every prompt with the target and capture its hidden states."""
    cfg = model.config
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else eos[0]
    seqs: list[list[int] | None] = [None] * len(prompts)
    groups = {
        False: [i for i in range(len(prompts)) if i % sample_every != sample_every - 1],
        True: [i for i in range(len(prompts)) if i % sample_every == sample_every - 1],
    }
    torch.manual_seed(seed)
    for sample, idx in groups.items():
        for start in range(0, len(idx), batch_size):
            chunk = idx[start : start + batch_size]
            outs = _generate(
                model,
                [prompts[i] for i in chunk],
                max_new_tokens,
                sample,
                sample_temperature,
                pad,
                eos,
            )
            for i, s in zip(chunk, outs, strict=True):
                seqs[i] = s
            if progress is not None:
                progress(len(chunk))
    done = [s for s in seqs if s is not None]
    tokens, auxes, finals = [], [], []
    for start in range(0, len(done), batch_size):
        t, a, f = capture(model, done[start : start + batch_size], aux_layer_ids, pad)
        tokens.append(t)
        auxes.append(a)
        finals.append(f)
    width = max(t.shape[1] for t in tokens)

    def pad_to(x: torch.Tensor, value: float) -> torch.Tensor:
        extra = width - x.shape[1]
        if extra == 0:
            return x
        shape = (x.shape[0], extra, *x.shape[2:])
        return torch.cat([x, torch.full(shape, value, dtype=x.dtype)], dim=1)

    return Rollouts(
        tokens=torch.cat([pad_to(t, pad) for t in tokens]),
        lengths=torch.tensor([len(s) for s in done]),
        prompt_lengths=torch.tensor([len(p.ids) for p in prompts]),
        aux=torch.cat([pad_to(a, 0.0) for a in auxes]),
        final_hidden=torch.cat([pad_to(f, 0.0) for f in finals]),
        sources=[p.source for p in prompts],
    )
