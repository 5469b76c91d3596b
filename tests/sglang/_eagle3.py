"""An untrained EAGLE-3 draft head in the checkpoint format SGLang 0.5.23 loads.

SGLang's ``LlamaForCausalLMEagle3`` (``sglang/srt/models/llama_eagle3.py``) reads:
``config.json`` with ``architectures: ["LlamaForCausalLMEagle3"]``, one decoder layer
(``num_hidden_layers: 1``), ``draft_vocab_size`` and ``eagle_config.
eagle_aux_hidden_state_layer_ids`` (the target layers whose outputs feed ``fc``; SGLang's
default ``[2, L // 2, L - 3]`` collapses to two distinct layers for a 4-layer target, so the
ids are explicit); weights ``midlayer.*`` (its q/k/v projections take 2 x hidden: the token
embedding next to the fused target features), ``fc`` (3 x hidden -> hidden), ``norm``,
``lm_head`` [draft_vocab, hidden] and ``d2t`` (draft id -> target id offsets; zeros when the
draft vocabulary is the target's). The token embedding is the target's (SGLang shares it).

Speculative decoding is lossless for any drafter, so random weights suffice for
greedy-equality and sampling-distribution tests; they are seeded, hence reproducible.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def build_random_eagle3_head(target_dir: Path, out_dir: Path, seed: int = 0) -> Path:
    """Write a seeded random EAGLE-3 head for the Llama target in ``target_dir`` to ``out_dir``.

    Uses the target's hidden/intermediate sizes, heads and vocabulary; aux layers are
    ``[0, (L - 1) // 2, L - 2]`` (low, middle, high; L = target layers). SGLang captures the
    output of layer i as the input of layer i + 1, so ids run 0..L-2 and three distinct ones
    need L >= 4. Returns ``out_dir``. Raises ValueError for a target with fewer than 4 layers.
    """
    cfg = json.loads((target_dir / "config.json").read_text())
    layers = int(cfg["num_hidden_layers"])
    if layers < 4:
        raise ValueError(f"EAGLE-3 needs a target with >= 4 layers, got {layers}")
    aux_ids = [0, (layers - 1) // 2, layers - 2]
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or h // heads
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int, std: float = 0.05) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    weights = {
        "midlayer.self_attn.q_proj.weight": rand(heads * head_dim, 2 * h),
        "midlayer.self_attn.k_proj.weight": rand(kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.v_proj.weight": rand(kv_heads * head_dim, 2 * h),
        "midlayer.self_attn.o_proj.weight": rand(h, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": rand(inter, h),
        "midlayer.mlp.up_proj.weight": rand(inter, h),
        "midlayer.mlp.down_proj.weight": rand(h, inter),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "fc.weight": rand(h, 3 * h),
        "norm.weight": torch.ones(h),
        "lm_head.weight": rand(vocab, h, std=0.2),
        "d2t": torch.zeros(vocab, dtype=torch.int64),
    }
    keep = (
        "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
        "head_dim", "rms_norm_eps", "max_position_embeddings", "vocab_size", "hidden_act",
        "bos_token_id", "eos_token_id", "pad_token_id", "rope_parameters", "rope_theta",
        "attention_bias", "mlp_bias",
    )
    config = {k: cfg[k] for k in keep if k in cfg}
    config.update(
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "draft_vocab_size": vocab,
            "target_hidden_size": h,
            "tie_word_embeddings": False,
            "dtype": "float32",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux_ids},
        }
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: t.contiguous() for k, t in weights.items()}, str(out_dir / "model.safetensors"))
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir
