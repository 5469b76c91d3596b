"""Train an EAGLE-3 draft head for a Llama target on CPU and export it for SGLang.

    python -m drafters.eagle3.train --target models/tiny-llama --out models/tiny-llama-eagle3 \\
        [--seed 0] [--steps 300] [--quiet]

Pipeline (EAGLE-3: Li et al. 2025, arXiv:2503.01840; SpecForge: github.com/sgl-project/SpecForge):

1. Prompts: held-in stdlib files only (``drafters.eagle3.data``; the held-out files are left
   for ``evaluate.py``). ``prompts`` excerpts of ``prompt_tokens`` tokens, one in 4 chat-wrapped.
2. Data = the target's own rollouts (``max_new_tokens``, greedy, one in 3 sampled at T=0.8)
   with the target's hidden states captured after layers ``aux_layer_ids`` (low, middle,
   high) and its final hidden state (teacher logits = target ``lm_head`` of it).
   Layer choice: SpecForge takes ids (1, L//2 - 1, L - 4) (``specforge/core/eagle3.py``:
   ``hidden_states[1 + offset]``, ``[L//2 - 1 + offset]``, ``[L - 4 + offset]``); for the
   4-layer tiny target that gives (1, 1, 0), not three distinct layers, so when the rule
   does not give strictly increasing non-negative ids we use (0, L//2 - 1, L - 2) = (0, 1, 2):
   after the first layer, after the middle one, and after the last-but-one (never the final
   layer, whose output is the next-token prediction itself). SGLang is told the same ids
   through ``eagle_config.eagle_aux_hidden_state_layer_ids`` in the exported config.
3. Draft vocabulary (``draft_vocab_size`` Vd): the Vd most frequent tokens of the rollouts'
   generated parts (ties: prompt-part frequency, then lower id; then lowest unused ids), as
   SpecForge's ``generate_vocab_mapping_file`` / ``process_token_dict_to_mappings``; stored as
   ``d2t`` (draft id -> target id offset) and ``t2d`` (bool over the target vocabulary).
4. Model (``drafters.eagle3.model``): ``fc`` 3H -> H, one decoder layer ``midlayer`` with 2H
   attention input, ``norm``, ``lm_head`` H -> Vd; embedding = the target's, frozen. Init:
   PyTorch defaults, except ``lm_head`` = the target's ``lm_head`` rows of the draft
   vocabulary and ``norm`` = the target's final norm (a warm start that makes a few hundred
   CPU steps enough; SpecForge trains those from scratch over far more data).
5. Loss (EAGLE-3 training-time test, SpecForge ``OnlineEagle3Model.forward``): for draft steps
   k = 0..ttt_steps-1, soft cross entropy between the target distribution restricted to the
   draft vocabulary (softmax of the target logits at ``t2d``) and the draft's log-softmax, on
   positions inside the generated part whose target argmax is in the draft vocabulary; step
   weights 0.8^k; each step's loss is a masked mean (SpecForge divides by all positions; the
   optimum is the same). Step k >= 1 feeds the previous step's hidden state and the true
   next token, with the inference-time attention mask (see ``model.py``).
6. Optimiser: AdamW (lr ``lr``, betas 0.9/0.95, weight decay 0), linear warm-up 20 steps,
   cosine decay to 10 %, grad-norm clip 0.5 (SpecForge's ``max_grad_norm``), fixed ``steps``
   of ``batch_size`` sequences drawn by a seeded generator: deterministic for a seed on one
   machine (``torch.set_num_threads(1)``: results can depend on the thread count, and one
   thread is also the fastest on a shared 2-core machine; see ``serving.tinymodel``). The
   schedule, the update step and the progress bar are ``serving.training``'s, shared with
   the target's trainer.
7. Export to ``--out``: ``config.json`` (``architectures: ["LlamaForCausalLMEagle3"]``,
   ``num_hidden_layers: 1``, ``draft_vocab_size``, ``eagle_config``, the target's
   ``max_position_embeddings``), ``model.safetensors`` (float32: ``fc.weight``,
   ``midlayer.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``), plus
   ``train_log.json``, ``loss_curve.png``, ``data.json`` (prompt sources) and
   ``manifest.json`` (build key; an up-to-date output is skipped).

Where SpecForge could do a step, and why it does not here: SpecForge's
``scripts/regenerate_train_data.py`` (rollouts through an SGLang server),
``prepare_hidden_states.py`` (offline capture with SGLang) and ``train_eagle3.py`` (online /
offline TTT training, FSDP) cover steps 1-6 and export the same checkpoint format. It pins its
own torch and SGLang builds (CUDA wheels, flex-attention kernels, distributed init), which
would replace this project's CPU torch 2.13 / transformers 5.19 pins; the tiny target trains
in minutes on 2 CPU cores, so the same algorithm in ~400 lines of PyTorch is cheaper than a
second environment. For a real target on GPUs, use SpecForge and keep ``evaluate.py``.

Errors: ``ValueError`` for a target with fewer than 4 layers or a draft vocabulary larger
than the target's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from serving.training import (
    Progress,
    adamw,
    optimizer_step,
    publish,
    staging_dir,
    torch_threads,
    warmup_cosine_lr,
)

__all__ = ["TrainConfig", "default_aux_layers", "main", "train", "ttt_loss"]

TRAINER_VERSION = 1
STEP_WEIGHT = 0.8  # EAGLE-3 / SpecForge per-step loss decay


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of a training run; its JSON (plus the target's weights) is the build key."""

    seed: int = 0
    steps: int = 300
    batch_size: int = 8
    ttt_steps: int = 4
    lr: float = 3e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1
    grad_clip: float = 0.5
    draft_vocab_size: int = 1024
    prompts: int = 384
    prompt_tokens: int = 48
    max_new_tokens: int = 80
    threads: int = 1


def default_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """Low/middle/high target layer ids (output of layer j) for a target of ``num_layers``."""
    if num_layers < 4:
        raise ValueError(f"EAGLE-3 needs a target with >= 4 layers, got {num_layers}")
    specforge = (1, num_layers // 2 - 1, num_layers - 4)
    if specforge[0] < specforge[1] < specforge[2]:
        return specforge
    return (0, num_layers // 2 - 1, num_layers - 2)


def choose_vocab(
    tokens: torch.Tensor,
    lengths: torch.Tensor,
    prompt_lengths: torch.Tensor,
    vocab_size: int,
    draft_vocab_size: int,
) -> torch.Tensor:
    """Sorted target ids of the draft vocabulary (see step 3 of the module docstring)."""
    if draft_vocab_size > vocab_size:
        raise ValueError(f"draft vocabulary {draft_vocab_size} > target vocabulary {vocab_size}")
    gen_count: Counter[int] = Counter()
    prompt_count: Counter[int] = Counter()
    for row in range(tokens.shape[0]):
        n, p = int(lengths[row]), int(prompt_lengths[row])
        prompt_count.update(tokens[row, :p].tolist())
        gen_count.update(tokens[row, p:n].tolist())
    ranked = sorted(range(vocab_size), key=lambda t: (-gen_count[t], -prompt_count[t], t))
    return torch.tensor(sorted(ranked[:draft_vocab_size]), dtype=torch.long)


def ttt_loss(
    draft: Any,
    lm_head: torch.nn.Module,
    aux: torch.Tensor,
    tokens: torch.Tensor,
    final_hidden: torch.Tensor,
    lengths: torch.Tensor,
    prompt_lengths: torch.Tensor,
    steps: int,
) -> tuple[torch.Tensor, dict[str, list[float]]]:
    """Weighted TTT loss for one batch; returns (loss, per-step statistics).

    Shapes: aux [B, T, 3H], tokens [B, T], final_hidden [B, T, H], lengths / prompt_lengths [B].
    Step k, root t predicts token t + 2 + k, supervised by the target's logits at t + 1 + k.
    Statistics, one value per step k: ``ce`` (the soft cross entropy optimised), ``kl``
    (``ce`` minus the restricted teacher's entropy: what training can remove), ``acc`` (draft
    argmax equals the target argmax, both in draft ids, on masked positions).
    """
    t_len = tokens.shape[1]
    e = t_len - 1
    with torch.no_grad():
        teacher = lm_head(final_hidden)  # [B, T, V]
        in_draft = draft.t2d[teacher.argmax(-1)]  # [B, T]
        teacher_p = torch.softmax(teacher[..., draft.t2d], dim=-1)  # [B, T, Vd]
    logits = draft.ttt_logits(aux, tokens, steps)
    roots = torch.arange(e)
    total = aux.new_zeros(())
    stats: dict[str, list[float]] = {"ce": [], "kl": [], "acc": []}
    for k, lg in enumerate(logits):
        src = roots + 1 + k  # teacher position for each root
        pred = src + 1  # index of the predicted token
        ok = (pred[None, :] < lengths[:, None]) & (pred[None, :] >= prompt_lengths[:, None])
        src_c = src.clamp(max=t_len - 1)
        p = teacher_p[:, src_c]
        mask = (ok & in_draft[:, src_c]).float()
        logp = torch.log_softmax(lg.float(), dim=-1)
        per = -(p * logp).sum(-1)
        denom = mask.sum().clamp(min=1.0)
        loss_k = (per * mask).sum() / denom
        total = total + (STEP_WEIGHT**k) * loss_k
        with torch.no_grad():
            entropy = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
            hit = (lg.argmax(-1) == p.argmax(-1)).float()
            stats["ce"].append(loss_k.item())
            stats["kl"].append(float(((per - entropy) * mask).sum() / denom))
            stats["acc"].append(float((hit * mask).sum() / denom))
    return total, stats


def _build_key(cfg: TrainConfig, target_dir: Path) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"v": TRAINER_VERSION, **asdict(cfg)}, sort_keys=True).encode())
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        h.update(hashlib.sha256((target_dir / name).read_bytes()).digest())
    return h.hexdigest()


def _plot(log: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    steps = range(1, len(log["loss"]) + 1)
    ax1.plot(steps, log["loss"], lw=0.8, label="weighted TTT loss (sum 0.8^k CE_k)")
    for k, series in enumerate(log["step_loss"]):
        ax1.plot(steps, series, lw=0.6, alpha=0.7, label=f"CE step {k}")
    ax1.set_xlabel("optimizer step")
    ax1.set_ylabel("nats")
    ax1.legend(fontsize=7)
    ax1.set_title("EAGLE-3 drafter training loss")
    for k, series in enumerate(log["step_kl"]):
        ax2.plot(steps, series, lw=0.6, label=f"step {k}")
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("KL(target || draft), nats")
    ax2.set_yscale("log")
    ax2.legend(fontsize=7)
    ax2.set_title("reducible part of the loss")
    for k, series in enumerate(log["step_acc"]):
        ax3.plot(steps, series, lw=0.6, label=f"step {k}")
    ax3.set_xlabel("optimizer step")
    ax3.set_ylabel("top-1 agreement with target")
    ax3.set_ylim(0, 1)
    ax3.legend(fontsize=7)
    ax3.set_title("per-step accuracy (training batches)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def load_target(target: str | os.PathLike[str]) -> tuple[Any, Any]:
    """(model float32 eval, tokenizer) of a Hugging Face Llama directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model, AutoTokenizer.from_pretrained(str(target))


def train(
    target: str | os.PathLike[str],
    out: str | os.PathLike[str],
    cfg: TrainConfig | None = None,
    *,
    progress: bool = True,
    force: bool = False,
) -> dict[str, Any]:
    """Train and export; returns the manifest (``skipped: true`` if already up to date)."""
    from drafters.eagle3 import data as data_mod
    from drafters.eagle3.model import DraftSpec, Eagle3Draft, save_draft

    cfg = cfg or TrainConfig()
    target_dir, out_dir = Path(target), Path(out)
    key = _build_key(cfg, target_dir)
    if not force and (out_dir / "manifest.json").is_file():
        try:
            found = json.loads((out_dir / "manifest.json").read_text())
        except ValueError:
            found = {}
        if found.get("build_key") == key and (out_dir / "model.safetensors").is_file():
            return {**found, "skipped": True}

    t0 = time.monotonic()
    with torch_threads(cfg.threads), Progress(progress) as bar:
        torch.manual_seed(cfg.seed)
        model, tok = load_target(target_dir)
        tcfg = model.config
        aux_ids = default_aux_layers(tcfg.num_hidden_layers)
        prompts = data_mod.make_prompts(
            tok, "train", cfg.prompts, cfg.seed, prompt_tokens=cfg.prompt_tokens
        )
        gen_task = bar.task("target rollouts", len(prompts))
        ro = data_mod.rollout(
            model,
            prompts,
            aux_layer_ids=aux_ids,
            max_new_tokens=cfg.max_new_tokens,
            seed=cfg.seed,
            progress=lambda n: bar.advance(gen_task, n),
        )
        t_data = time.monotonic() - t0
        vocab = choose_vocab(
            ro.tokens, ro.lengths, ro.prompt_lengths, tcfg.vocab_size, cfg.draft_vocab_size
        )
        spec = DraftSpec.from_target_config(tcfg, cfg.draft_vocab_size, aux_ids)
        torch.manual_seed(cfg.seed)
        draft = Eagle3Draft(spec, model.get_input_embeddings().weight)
        draft.set_vocab(vocab)
        with torch.no_grad():
            draft.lm_head.weight.copy_(model.lm_head.weight[vocab])
            draft.norm.weight.copy_(model.model.norm.weight)
        params = [p for p in draft.parameters() if p.requires_grad]
        opt = adamw(params, lr=cfg.lr)
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        log: dict[str, Any] = {
            "loss": [],
            "step_loss": [[] for _ in range(cfg.ttt_steps)],
            "step_kl": [[] for _ in range(cfg.ttt_steps)],
            "step_acc": [[] for _ in range(cfg.ttt_steps)],
        }
        n = ro.tokens.shape[0]
        train_task = bar.task("train drafter", cfg.steps)
        draft.train()
        for step in range(cfg.steps):
            idx = torch.randint(n, (cfg.batch_size,), generator=gen)
            width = int(ro.lengths[idx].max())
            loss, stats = ttt_loss(
                draft,
                model.lm_head,
                ro.aux[idx, :width],
                ro.tokens[idx, :width],
                ro.final_hidden[idx, :width],
                ro.lengths[idx],
                ro.prompt_lengths[idx],
                cfg.ttt_steps,
            )
            lr = warmup_cosine_lr(
                step,
                lr=cfg.lr,
                warmup_steps=cfg.warmup_steps,
                total_steps=cfg.steps,
                min_lr_ratio=cfg.min_lr_ratio,
            )
            optimizer_step(opt, loss, params, lr=lr, grad_clip=cfg.grad_clip)
            log["loss"].append(loss.item())
            for k in range(cfg.ttt_steps):
                log["step_loss"][k].append(stats["ce"][k])
                log["step_kl"][k].append(stats["kl"][k])
                log["step_acc"][k].append(stats["acc"][k])
            info = f"loss {log['loss'][-1]:.3f} acc0 {stats['acc'][0]:.2f}"
            bar.advance(train_task, 1, info)
        draft.eval()

    tmp = staging_dir(out_dir)
    target_config = json.loads((target_dir / "config.json").read_text())
    save_draft(draft, tmp, target_config)
    (tmp / "train_log.json").write_text(json.dumps(log) + "\n")
    _plot(log, tmp / "loss_curve.png")
    (tmp / "data.json").write_text(
        json.dumps(
            {
                "split": "train (held-in stdlib files)",
                "aux_layer_ids": list(aux_ids),
                "prompts": ro.sources,
                "prompt_lengths": ro.prompt_lengths.tolist(),
                "sequence_lengths": ro.lengths.tolist(),
            }
        )
        + "\n"
    )
    tail = max(1, min(20, cfg.steps // 5))
    manifest = {
        "build_key": key,
        "trainer_version": TRAINER_VERSION,
        "target": str(target_dir),
        "config": asdict(cfg),
        "aux_layer_ids": list(aux_ids),
        "draft_vocab_coverage": _coverage(ro, vocab),
        "num_trainable_parameters": sum(p.numel() for p in params),
        "loss_first_mean": sum(log["loss"][:tail]) / tail,
        "loss_final_mean": sum(log["loss"][-tail:]) / tail,
        "kl_first_mean": [sum(s[:tail]) / tail for s in log["step_kl"]],
        "kl_final_mean": [sum(s[-tail:]) / tail for s in log["step_kl"]],
        "step_acc_final_mean": [sum(s[-tail:]) / tail for s in log["step_acc"]],
        "data_seconds": round(t_data, 1),
        "total_seconds": round(time.monotonic() - t0, 1),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    publish(tmp, out_dir)
    return {**manifest, "skipped": False}


def _coverage(ro: Any, vocab: torch.Tensor) -> float:
    """Fraction of generated tokens that lie in the draft vocabulary."""
    inside = torch.zeros(int(ro.tokens.max()) + 1, dtype=torch.bool)
    inside[vocab[vocab < inside.numel()]] = True
    hit = total = 0
    for row in range(ro.tokens.shape[0]):
        gen = ro.tokens[row, int(ro.prompt_lengths[row]) : int(ro.lengths[row])]
        hit += int(inside[gen].sum())
        total += gen.numel()
    return round(hit / max(1, total), 4)


def main(argv: Sequence[str] | None = None) -> int:
    d = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="python -m drafters.eagle3.train", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--target", required=True, help="target model dir (models/tiny-llama)")
    parser.add_argument("--out", required=True, help="output dir (models/tiny-llama-eagle3)")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--steps", type=int, default=d.steps, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--ttt-steps", type=int, default=d.ttt_steps, help="TTT unroll length")
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--draft-vocab-size", type=int, default=d.draft_vocab_size)
    parser.add_argument("--prompts", type=int, default=d.prompts, help="held-in prompts")
    parser.add_argument("--prompt-tokens", type=int, default=d.prompt_tokens)
    parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    parser.add_argument("--force", action="store_true", help="retrain even if up to date")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    cfg = TrainConfig(
        seed=args.seed,
        steps=args.steps,
        batch_size=args.batch_size,
        ttt_steps=args.ttt_steps,
        lr=args.lr,
        draft_vocab_size=args.draft_vocab_size,
        prompts=args.prompts,
        prompt_tokens=args.prompt_tokens,
        max_new_tokens=args.max_new_tokens,
    )
    m = train(args.target, args.out, cfg, progress=not args.quiet, force=args.force)
    if m["skipped"]:
        print(f"{args.out}: up to date (build key {m['build_key'][:12]})")
    else:
        accs = ", ".join(f"{a:.2f}" for a in m["step_acc_final_mean"])
        print(
            f"{args.out}: trained in {m['total_seconds']} s (data {m['data_seconds']} s), "
            f"loss {m['loss_first_mean']:.3f} -> {m['loss_final_mean']:.3f}, "
            f"step accuracies [{accs}], draft vocab coverage {m['draft_vocab_coverage']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
