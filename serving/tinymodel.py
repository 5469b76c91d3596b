"""Build a tiny, deterministic Llama target model in Hugging Face format, offline.

    python -m serving.tinymodel --out models/tiny-llama [--seed 0] [--train-seconds N]

What it writes into ``--out`` (all loadable by ``transformers`` and by SGLang):

- ``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json``: a byte-level
  BPE tokenizer (vocabulary ``VOCAB_SIZE`` = 2048 including 5 special tokens) trained with
  ``tokenizers`` on the held-in corpus below. Every encode prepends ``<|begin_of_text|>``
  (like Llama 3). ``tokenizer_config.json`` carries ``CHAT_TEMPLATE``: ChatML-style turns
  (``<|im_start|>ROLE\\n...<|im_end|>\\n``) for the roles system/user/assistant/tool, a
  ``tools`` block in the system turn (one JSON line per tool's ``function`` object),
  assistant ``tool_calls`` rendered as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``
  (the Hermes/Qwen 2.5 layout, which SGLang's ``qwen25`` tool parser reads), and
  ``add_generation_prompt``.
- ``config.json`` (``LlamaForCausalLM``, float32, rope_theta 10000, ``max_position_embeddings``
  8192 so a router can validate a 4096-token context below it) and
  ``generation_config.json`` (stop on ``<|end_of_text|>`` or ``<|im_end|>``).
- ``model.safetensors``: float32 weights trained on CPU for a fixed number of steps.
- ``manifest.json``: the build key (a hash of the builder version, every hyper-parameter,
  the seed and the corpus contents) plus measured numbers (loss, wall time). A second run
  with the same key finds the manifest and returns at once (idempotent); any change
  rebuilds. The build happens in a temporary sibling directory renamed into place, so an
  interrupted build never leaves a half-written model behind a valid manifest.

Corpus (offline, deterministic): the top-level ``*.py`` files of this interpreter's standard
library (``sysconfig.get_paths()["stdlib"]``), sorted by name. A file is *held out* when the
first byte of ``sha256(filename)`` is < 32 (about 1 file in 8); held-out files are never
seen by the tokenizer trainer, the target model or (see ``drafters/eagle3``) the EAGLE-3
drafter, and serve as evaluation prompts. ``stdlib_corpus(split)`` is the one place that
rule lives. A different Python version has different stdlib files, hence a different build
key: weights are reproducible per interpreter, not across them.

Training (deterministic: ``torch.manual_seed(seed)``, a seeded ``torch.Generator`` for the
data order, ``torch.set_num_threads(1)``; two builds with the same arguments on the same
machine give bit-identical ``tokenizer.json`` and weights). One intra-op thread on purpose:
CPU matmul results can depend on the thread count, and on a shared 2-core machine two
OpenMP threads spin against other processes (measured: 7.0 s/step with 2 threads vs 0.45 s
with 1 under load; 1 thread costs < 2x on an idle machine).

- data: the held-in files tokenized and joined with ``<|end_of_text|>``; each sample is
  ``<|begin_of_text|>`` + ``SEQ_LEN - 1`` tokens from a seeded random offset. One sample in
  ``CHAT_EVERY`` is instead a chat conversation rendered with ``CHAT_TEMPLATE`` (user: a code
  excerpt, assistant: the code that follows it, then ``<|im_end|>``), so chat requests get a
  code continuation that ends with a stop token.
- loss: next-token cross entropy, AdamW (lr 3e-3, betas 0.9/0.95, weight decay 0.01),
  linear warm-up then cosine decay to 10 %, gradient clipping at 1.0 (schedule, update step
  and progress bar: ``serving.training``, shared with the EAGLE-3 drafter's trainer).
- length: a fixed number of optimizer steps. ``--train-seconds N`` is converted to steps
  with the reference rate ``REFERENCE_STEPS_PER_SECOND`` (steps per second on one idle x86
  core: ``steps = round(N * rate)``), never with a clock, so the result does not depend on
  how busy the machine is; ``--train-steps`` sets the count directly. Default: 150 s ->
  450 steps.

The target is tiny (4 layers, hidden 128, 2 heads of 64, ~1.4 M parameters) so the real
SGLang server runs it on 2 CPU cores, yet 4 layers leave distinct low/middle/high layers for
EAGLE-3's fused hidden states (``drafters/eagle3``).

Errors: ``FileNotFoundError`` when the stdlib directory has no ``*.py`` files;
``ValueError`` for non-positive step counts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from serving.training import (
    Progress,
    adamw,
    optimizer_step,
    publish,
    staging_dir,
    torch_threads,
    warmup_cosine_lr,
)

__all__ = [
    "BUILDER_VERSION",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "TinyModelSpec",
    "build",
    "main",
    "stdlib_corpus",
    "weights_sha256",
]

BUILDER_VERSION = 1
VOCAB_SIZE = 2048
BOS, EOS, PAD, IM_START, IM_END = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|pad|>",
    "<|im_start|>",
    "<|im_end|>",
)
SPECIAL_TOKENS = (BOS, EOS, PAD, IM_START, IM_END)  # ids 0..4, in this order
REFERENCE_STEPS_PER_SECOND = 3.0  # one x86 core, batch 8 x 256 tokens, model below
DEFAULT_TRAIN_SECONDS = 150.0
HELD_OUT_FIRST_BYTE_BELOW = 32  # sha256(filename)[0] < 32: ~1/8 of files are held out

# A Jinja chat template (rendered by transformers' sandboxed environment, which supplies
# `raise_exception` and a `tojson` filter). Content may be a string or a list of OpenAI
# content parts (only "text" parts are kept). Tool-call arguments may be a JSON string (as
# the OpenAI API sends them) or an object. Each tool renders as its `function` object only
# (name, description, parameters): SGLang 0.5.23 passes tools through its pydantic `Tool`,
# whose dump adds `"defer_loading": null` at the top level, so rendering the whole tool would
# make the engine's prompt longer than a client-side count (10 tokens per tool here).
CHAT_TEMPLATE = (
    "{%- macro text(content) -%}"
    "{%- if content is none -%}"
    "{%- elif content is string -%}{{- content -}}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{{- bos_token -}}"
    "{%- set first = 0 -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system = text(messages[0]['content']) -%}{%- set first = 1 -%}"
    "{%- else -%}{%- set system = '' -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if system -%}{{- system + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Available functions:\\n<tools>' -}}"
    "{%- for tool in tools -%}"
    "{%- set fn = tool['function'] if (tool is mapping and tool.get('function')) else tool -%}"
    "{{- '\\n' + (fn | tojson) -}}"
    "{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nTo call a function, answer with one JSON object per call inside "
    "<tool_call></tool_call> tags:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <arguments-object>}\\n</tool_call>'
    "<|im_end|>\\n' -}}"
    "{%- elif first == 1 -%}"
    "{{- '<|im_start|>system\\n' + system + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages[first:] -%}"
    "{%- set role = message['role'] -%}"
    "{%- if role not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{- raise_exception('unsupported chat role: ' + role) -}}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + role + '\\n' -}}"
    "{%- if role == 'tool' -%}"
    "{{- '<tool_response>\\n' + text(message['content']) + '\\n</tool_response>' -}}"
    "{%- else -%}"
    "{{- text(message['content']) -}}"
    "{%- endif -%}"
    "{%- if role == 'assistant' and message.get('tool_calls') -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call.get('function') else call -%}"
    "{%- if loop.first and text(message['content']) -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' -}}"
    "{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}"
    "{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- if not loop.last -%}{{- '\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Every hyper-parameter of the build; its JSON is part of the build key.

    Sizes are counts (tokens, dimensions), ``lr`` is per optimizer step.
    """

    vocab_size: int = VOCAB_SIZE
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 2
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 8192
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    seq_len: int = 256
    batch_size: int = 8
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    chat_every: int = 8
    chat_pool: int = 256
    threads: int = 1


# ----------------------------------------------------------------------------- corpus


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _held_out(name: str) -> bool:
    return hashlib.sha256(name.encode()).digest()[0] < HELD_OUT_FIRST_BYTE_BELOW


def stdlib_corpus(split: str = "train") -> list[Path]:
    """Top-level ``*.py`` files of the standard library, sorted by name.

    ``split``: ``"train"`` (held-in, ~7/8), ``"heldout"`` (~1/8) or ``"all"``.
    Raises ``FileNotFoundError`` if the directory holds no such file, ``ValueError`` for an
    unknown split.
    """
    if split not in ("train", "heldout", "all"):
        raise ValueError(f"unknown split {split!r}")
    files = sorted(p for p in _stdlib_dir().glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no *.py files under {_stdlib_dir()}")
    if split == "all":
        return files
    want_held_out = split == "heldout"
    return [p for p in files if _held_out(p.name) == want_held_out]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _corpus_digest(files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


# -------------------------------------------------------------------------- tokenizer


def _train_tokenizer(texts: Sequence[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer, length=len(texts))
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
            ),
        ]
    )
    return tok


def _hf_tokenizer(tok: Any, spec: TinyModelSpec) -> Any:
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=spec.max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def _write_tokenizer_files(out: Path, tok: Any, spec: TinyModelSpec) -> None:
    """Write tokenizer.json and a hand-made tokenizer_config.json (byte-stable)."""
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True), encoding="utf-8")
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    added = {
        str(ids[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "additional_special_tokens": [IM_START, IM_END],
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": spec.max_position_embeddings,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special_map = {
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "additional_special_tokens": [IM_START, IM_END],
    }
    (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")


# ----------------------------------------------------------------------------- model


def _llama_config(spec: TinyModelSpec, tok: Any) -> Any:
    from transformers import LlamaConfig

    eos_ids = [tok.token_to_id(EOS), tok.token_to_id(IM_END)]
    return LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        hidden_act="silu",
        max_position_embeddings=spec.max_position_embeddings,
        rms_norm_eps=spec.rms_norm_eps,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=tok.token_to_id(BOS),
        eos_token_id=eos_ids,
        pad_token_id=tok.token_to_id(PAD),
        dtype="float32",
        architectures=["LlamaForCausalLM"],
    )


def _chat_samples(
    texts: Sequence[str], hf_tok: Any, spec: TinyModelSpec, gen: Any
) -> list[list[int]]:
    """A fixed pool of chat-formatted token sequences (length <= seq_len)."""
    import torch

    pool: list[list[int]] = []
    for _ in range(spec.chat_pool):
        i = int(torch.randint(len(texts), (1,), generator=gen))
        text = texts[i]
        if len(text) < 800:
            continue
        start = int(torch.randint(len(text) - 700, (1,), generator=gen))
        prompt_chars = 120 + int(torch.randint(240, (1,), generator=gen))
        prompt = text[start : start + prompt_chars]
        answer = text[start + prompt_chars : start + prompt_chars + 260]
        messages = [
            {"role": "user", "content": "Continue this code:\n" + prompt},
            {"role": "assistant", "content": answer},
        ]
        if int(torch.randint(2, (1,), generator=gen)):
            messages.insert(0, {"role": "system", "content": "You are a Python assistant."})
        rendered = hf_tok.apply_chat_template(messages, tokenize=False)
        ids = hf_tok(rendered, add_special_tokens=False)["input_ids"]
        pool.append(ids[: spec.seq_len])
    return pool


def _train(
    spec: TinyModelSpec,
    tok: Any,
    hf_tok: Any,
    texts: Sequence[str],
    steps: int,
    seed: int,
    progress: bool,
) -> tuple[Any, list[float]]:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    eos_id, bos_id, pad_id = (tok.token_to_id(t) for t in (EOS, BOS, PAD))
    stream: list[int] = []
    for text in texts:
        stream.extend(tok.encode(text, add_special_tokens=False).ids)
        stream.append(eos_id)
    data = torch.tensor(stream, dtype=torch.long)
    chat = _chat_samples(texts, hf_tok, spec, gen)

    config = _llama_config(spec, tok)
    model = LlamaForCausalLM(config).float()
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = adamw(
        [
            {"params": decay, "weight_decay": spec.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=spec.lr,
    )

    body = spec.seq_len - 1
    losses: list[float] = []
    with Progress(progress) as bar:
        task = bar.task("train target", steps)
        for step in range(steps):
            batch = torch.full((spec.batch_size, spec.seq_len), pad_id, dtype=torch.long)
            offsets = torch.randint(len(data) - body, (spec.batch_size,), generator=gen)
            for row in range(spec.batch_size):
                sample = step * spec.batch_size + row
                if chat and sample % spec.chat_every == spec.chat_every - 1:
                    ids = chat[int(torch.randint(len(chat), (1,), generator=gen))]
                    batch[row, : len(ids)] = torch.tensor(ids)
                else:
                    o = int(offsets[row])
                    batch[row, 0] = bos_id
                    batch[row, 1:] = data[o : o + body]
            labels = batch.masked_fill(batch == pad_id, -100)
            loss = model(input_ids=batch, labels=labels).loss
            lr = warmup_cosine_lr(
                step,
                lr=spec.lr,
                warmup_steps=spec.warmup_steps,
                total_steps=steps,
                min_lr_ratio=spec.min_lr_ratio,
            )
            optimizer_step(opt, loss, model.parameters(), lr=lr, grad_clip=spec.grad_clip)
            losses.append(loss.item())
            bar.advance(task, 1, f"loss {losses[-1]:.3f}")
    model.eval()
    return model, losses


# ----------------------------------------------------------------------------- build


def weights_sha256(model_dir: str | os.PathLike[str]) -> str:
    """SHA-256 over every tensor (name, dtype, shape, raw bytes) of model.safetensors."""
    import torch
    from safetensors import safe_open

    h = hashlib.sha256()
    with safe_open(str(Path(model_dir) / "model.safetensors"), framework="pt") as f:
        for name in sorted(f.keys()):
            t = f.get_tensor(name).contiguous()
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _steps_for(train_seconds: float | None, train_steps: int | None) -> int:
    if train_steps is not None:
        steps = train_steps
    else:
        seconds = DEFAULT_TRAIN_SECONDS if train_seconds is None else train_seconds
        steps = round(seconds * REFERENCE_STEPS_PER_SECOND)
    if steps <= 0:
        raise ValueError(f"training needs at least one step, got {steps}")
    return steps


def _build_key(spec: TinyModelSpec, seed: int, steps: int, corpus_digest: str) -> str:
    import tokenizers
    import torch
    import transformers

    payload = {
        "builder_version": BUILDER_VERSION,
        "spec": asdict(spec),
        "seed": seed,
        "steps": steps,
        "corpus": corpus_digest,
        "chat_template": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


_OUTPUT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "manifest.json",
)


def _existing_manifest(out: Path, key: str) -> dict[str, Any] | None:
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("build_key") != key:
        return None
    if not all((out / name).is_file() for name in _OUTPUT_FILES):
        return None
    return manifest


def build(
    out: str | os.PathLike[str],
    *,
    seed: int = 0,
    train_seconds: float | None = None,
    train_steps: int | None = None,
    spec: TinyModelSpec | None = None,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Build (or find) the tiny target in ``out``; returns the manifest dict.

    ``train_seconds`` is converted to a step count with ``REFERENCE_STEPS_PER_SECOND``;
    ``train_steps`` overrides it. ``force`` rebuilds even when the manifest matches.
    The manifest has ``skipped: true`` when an up-to-date build was found.
    """
    from transformers import GenerationConfig

    spec = spec or TinyModelSpec()
    out = Path(out)
    steps = _steps_for(train_seconds, train_steps)
    files = stdlib_corpus("train")
    key = _build_key(spec, seed, steps, _corpus_digest(files))
    if not force:
        found = _existing_manifest(out, key)
        if found is not None:
            return {**found, "skipped": True}

    t0 = time.monotonic()
    with torch_threads(spec.threads):
        texts = [_read(p) for p in files]
        tok = _train_tokenizer(texts, spec.vocab_size)
        hf_tok = _hf_tokenizer(tok, spec)
        model, losses = _train(spec, tok, hf_tok, texts, steps, seed, progress)

    tmp = staging_dir(out)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    gen_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id,
        eos_token_id=model.config.eos_token_id,
        pad_token_id=model.config.pad_token_id,
        do_sample=False,
    )
    gen_config.save_pretrained(tmp)
    _write_tokenizer_files(tmp, tok, spec)
    tail = losses[-min(20, len(losses)) :]
    manifest = {
        "build_key": key,
        "builder_version": BUILDER_VERSION,
        "seed": seed,
        "steps": steps,
        "spec": asdict(spec),
        "corpus": {
            "stdlib": str(_stdlib_dir()),
            "train_files": len(files),
            "heldout_files": [p.name for p in stdlib_corpus("heldout")],
            "held_out_rule": f"sha256(filename)[0] < {HELD_OUT_FIRST_BYTE_BELOW}",
        },
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "loss_first": losses[0],
        "loss_final_mean20": sum(tail) / len(tail),
        "build_seconds": round(time.monotonic() - t0, 1),
        "weights_sha256": weights_sha256(tmp),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    publish(tmp, out)
    return {**manifest, "skipped": False}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m serving.tinymodel", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", required=True, help="output directory (models/tiny-llama)")
    parser.add_argument("--seed", type=int, default=0)
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--train-seconds",
        type=float,
        default=None,
        help=f"training budget at the reference rate of {REFERENCE_STEPS_PER_SECOND} steps/s "
        f"(converted to a fixed step count; default {DEFAULT_TRAIN_SECONDS:g})",
    )
    group.add_argument("--train-steps", type=int, default=None, help="exact step count")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    manifest = build(
        args.out,
        seed=args.seed,
        train_seconds=args.train_seconds,
        train_steps=args.train_steps,
        force=args.force,
        progress=not args.quiet,
    )
    if manifest["skipped"]:
        print(f"{args.out}: up to date (build key {manifest['build_key'][:12]})")
    else:
        print(
            f"{args.out}: built in {manifest['build_seconds']} s, {manifest['steps']} steps, "
            f"loss {manifest['loss_first']:.3f} -> {manifest['loss_final_mean20']:.3f}, "
            f"{manifest['num_parameters']} parameters"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
