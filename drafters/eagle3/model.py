"""The EAGLE-3 draft head in plain PyTorch, numerically matching SGLang's ``llama_eagle3.py``.

Architecture (EAGLE-3, Li et al. 2025, arXiv:2503.01840; module names and forward pass as in
SGLang 0.5.23 ``python/sglang/srt/models/llama_eagle3.py`` and SpecForge
``specforge/modeling/draft/llama3_eagle.py``). Shapes use B batch, T positions, H the target's
hidden size (the draft uses the same H), V the target vocabulary, Vd the draft vocabulary:

- ``fc``: Linear(3H -> H, no bias) over the concatenated target hidden states of the
  low/middle/high layers ``aux_layer_ids`` (SGLang's ``eagle_aux_hidden_state_layer_ids``:
  id j is the residual stream *after* target layer j, i.e. Hugging Face
  ``output_hidden_states[j + 1]``; SGLang captures it before layer j + 1).
- ``midlayer``: one Llama decoder layer whose attention reads 2H inputs:
  ``x = cat(input_layernorm(embed(token)), hidden_norm(h))``, ``residual = h``;
  ``a = o_proj(attn(q/k/v_proj(x)))`` with RoPE at the entry's position;
  ``r1 = a + residual``; ``m = mlp(post_attention_layernorm(r1))``; ``r2 = m + r1``.
- ``norm`` then ``lm_head``: logits over the Vd draft tokens = ``lm_head(norm(r2))``.
  ``r2`` (pre-norm) is the hidden state fed to the next draft step (SGLang's default,
  ``norm_output`` false).
- ``d2t`` [Vd] int64: draft id i is target id ``i + d2t[i]`` (offsets, SGLang's
  ``hot_token_id = d2t + arange``). ``t2d`` [V] bool: target id is in the draft vocabulary.
- ``embed_tokens``: the target's input embedding, frozen and not exported (SGLang replaces
  the draft's embedding with the target's, ``set_embed``).

Entries and positions. Entry t pairs the target hidden state after token t with token
``t + 1`` and sits at position t; it predicts token ``t + 2``. A chain draft step k >= 1 rooted
at entry t pairs the previous step's ``r2`` with the token of step k (teacher forced in
training, the draft's own argmax at inference), sits at position ``t + k`` and attends to all
real entries ``0..t`` plus its own chain's entries of steps ``1..k`` (exactly what SGLang's draft
decode sees: the whole draft KV cache of the request plus the tokens it drafted this cycle).

``ttt_logits`` unrolls that chain for every t at once (EAGLE-3's training-time test), with the
mask above. SpecForge additionally masks real entry ``t - k + 1`` at step k (its mask shift,
questioned in SafeAILab/EAGLE issue #247); we do not, so training matches inference.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "EXPORTED_WEIGHTS",
    "DraftSpec",
    "Eagle3Draft",
    "exported_shapes",
    "load_draft",
    "rms_norm",
    "save_draft",
]


@dataclass(frozen=True)
class DraftSpec:
    """Sizes of the draft head (copied from the target config, plus the draft vocabulary)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    draft_vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    aux_layer_ids: tuple[int, int, int]

    @classmethod
    def from_target_config(
        cls, config: Any, draft_vocab_size: int, aux_layer_ids: tuple[int, int, int]
    ) -> DraftSpec:
        rope = getattr(config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        heads = config.num_attention_heads
        return cls(
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_attention_heads=heads,
            num_key_value_heads=getattr(config, "num_key_value_heads", heads),
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            vocab_size=config.vocab_size,
            draft_vocab_size=draft_vocab_size,
            rms_norm_eps=config.rms_norm_eps,
            rope_theta=float(theta),
            max_position_embeddings=config.max_position_embeddings,
            aux_layer_ids=tuple(aux_layer_ids),  # type: ignore[arg-type]
        )


# name -> shape as a function of the spec; the exact tensors SGLang's loader consumes.
def _exported_shapes(s: DraftSpec) -> dict[str, tuple[int, ...]]:
    h, nh, nkv, hd = s.hidden_size, s.num_attention_heads, s.num_key_value_heads, s.head_dim
    return {
        "fc.weight": (h, 3 * h),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (nh * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": (nkv * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": (nkv * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, nh * hd),
        "midlayer.mlp.gate_proj.weight": (s.intermediate_size, h),
        "midlayer.mlp.up_proj.weight": (s.intermediate_size, h),
        "midlayer.mlp.down_proj.weight": (h, s.intermediate_size),
        "norm.weight": (h,),
        "lm_head.weight": (s.draft_vocab_size, h),
        "d2t": (s.draft_vocab_size,),
        "t2d": (s.vocab_size,),
    }


EXPORTED_WEIGHTS = tuple(
    _exported_shapes(
        DraftSpec(1, 1, 1, 1, 1, 1, 1, 1e-5, 1.0, 1, (0, 0, 0))  # names only
    )
)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm in float32: ``weight * x / sqrt(mean(x^2) + eps)``."""
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class _Attention(nn.Module):
    def __init__(self, s: DraftSpec) -> None:
        super().__init__()
        self.nh, self.nkv, self.hd = s.num_attention_heads, s.num_key_value_heads, s.head_dim
        self.q_proj = nn.Linear(2 * s.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * s.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * s.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, s.hidden_size, bias=False)
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x [B, heads, T, hd]; positions [B, T] or [T]; neox-style rotate-half, as HF Llama.
        freqs = positions.float()[..., None] * self.inv_freq  # [.., T, hd/2]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos(), emb.sin()
        if cos.dim() == 3:
            cos, sin = cos[:, None], sin[:, None]
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2 :]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def qkv(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, 2H] -> q [B, nh, T, hd], k/v [B, nh, T, hd] (kv heads repeated)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q, k = self._rope(q, positions), self._rope(k, positions)
        rep = self.nh // self.nkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return q, k, v

    def out(self, o: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, t, self.nh * self.hd))


class _MLP(nn.Module):
    def __init__(self, s: DraftSpec) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, s: DraftSpec) -> None:
        super().__init__()
        self.input_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.hidden_norm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.post_attention_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = _Attention(s)
        self.mlp = _MLP(s)


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft head; see the module docstring for the forward pass and conventions."""

    def __init__(self, spec: DraftSpec, target_embedding: torch.Tensor) -> None:
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding.from_pretrained(target_embedding.detach().clone())
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(3 * spec.hidden_size, spec.hidden_size, bias=False)
        self.midlayer = _MidLayer(spec)
        self.norm = _RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.lm_head = nn.Linear(spec.hidden_size, spec.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(spec.vocab_size, dtype=torch.bool))

    # ------------------------------------------------------------------ vocab maps

    def set_vocab(self, draft_to_target: torch.Tensor) -> None:
        """``draft_to_target`` [Vd]: sorted target ids of the draft vocabulary."""
        ids = draft_to_target.long()
        if ids.numel() != self.spec.draft_vocab_size or not bool((ids[1:] > ids[:-1]).all()):
            raise ValueError("draft vocabulary must be Vd strictly increasing target ids")
        self.d2t.copy_(ids - torch.arange(ids.numel()))
        self.t2d.zero_()
        self.t2d[ids] = True

    @property
    def draft_ids(self) -> torch.Tensor:
        """[Vd] target id of each draft id."""
        return self.d2t + torch.arange(self.d2t.numel())

    # ------------------------------------------------------------------ pieces

    def _layer_input(self, tokens: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        m = self.midlayer
        emb = m.input_layernorm(self.embed_tokens(tokens))
        return torch.cat([emb, m.hidden_norm(hidden)], dim=-1)

    def _finish(self, attn: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        r1 = self.midlayer.self_attn.out(attn) + residual
        return self.midlayer.mlp(self.midlayer.post_attention_layernorm(r1)) + r1

    def logits(self, r2: torch.Tensor) -> torch.Tensor:
        """Pre-norm hidden [.., H] -> draft logits [.., Vd]."""
        return self.lm_head(self.norm(r2))

    # ------------------------------------------------------------------ training

    def ttt_logits(self, aux: torch.Tensor, tokens: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Training-time test over every root entry at once.

        Args:
            aux: [B, T, 3H] target hidden states (low, mid, high) after tokens 0..T-1.
            tokens: [B, T] the token sequence.
            steps: number of draft steps k = 0..steps-1 to unroll (>= 1).

        Returns:
            ``steps`` tensors [B, E, Vd] with E = T - 1 root entries; element k at root t is
            the draft's logits for token ``t + 2 + k`` (valid while ``t + 2 + k < T``; the
            caller masks the rest). Step k >= 1 is fed the true token ``t + 1 + k``.
        """
        b, t_len, _ = aux.shape
        e = t_len - 1
        attn = self.midlayer.self_attn
        pos = torch.arange(e, device=aux.device)
        hidden = self.fc(aux[:, :e])
        x = self._layer_input(tokens[:, 1:], hidden)
        q0, k0, v0 = attn.qkv(x, pos)
        causal = torch.ones(e, e, dtype=torch.bool, device=aux.device).tril()
        o = F.scaled_dot_product_attention(q0, k0, v0, attn_mask=causal)
        r2 = self._finish(o, hidden)
        out = [self.logits(r2)]
        scale = 1.0 / math.sqrt(attn.hd)
        chain_k: list[torch.Tensor] = []
        chain_v: list[torch.Tensor] = []
        neg = torch.finfo(aux.dtype).min
        for k in range(1, steps):
            # token t+1+k for root t; roots past the end read padding (masked by the caller)
            nxt = torch.zeros(b, e, dtype=tokens.dtype, device=tokens.device)
            avail = max(0, t_len - 1 - k)
            nxt[:, :avail] = tokens[:, 1 + k : 1 + k + avail]
            hidden = r2
            x = self._layer_input(nxt, hidden)
            q, kk, vv = attn.qkv(x, pos + k)
            chain_k.append(kk)
            chain_v.append(vv)
            real = (q @ k0.transpose(-1, -2)) * scale  # [B, nh, E, E]
            real = real.masked_fill(~causal, neg)
            own = torch.stack([(q * ck).sum(-1) for ck in chain_k], dim=-1) * scale  # [B,nh,E,k]
            w = torch.softmax(torch.cat([real, own], dim=-1).float(), dim=-1).to(q.dtype)
            o = w[..., :e] @ v0
            for i, cv in enumerate(chain_v):
                o = o + w[..., e + i, None] * cv
            r2 = self._finish(o, hidden)
            out.append(self.logits(r2))
        return out

    # ------------------------------------------------------------------ inference

    @torch.no_grad()
    def draft_chain(self, aux: torch.Tensor, tokens: torch.Tensor, gamma: int) -> list[int]:
        """Greedy chain draft of ``gamma`` tokens after ``tokens`` (one sequence).

        Args:
            aux: [n, 3H] target hidden states after tokens 0..n-1 (the last emitted token
                ``tokens[n]`` has not been through the target yet).
            tokens: [n + 1] token ids.
            gamma: number of tokens to draft (SGLang ``--speculative-num-steps``).

        Returns:
            ``gamma`` target token ids.
        """
        return self.chain(aux, tokens, gamma)[0]

    def chain(
        self,
        aux: torch.Tensor,
        tokens: torch.Tensor,
        gamma: int,
        forced: Sequence[int] | None = None,
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Chain drafting as SGLang's draft extend + decode steps do it.

        Real entries p = 0..n-1 pair ``aux[p]`` with ``tokens[p + 1]`` at position p; step
        s >= 1 pairs the previous step's pre-norm hidden state with the previous draft token
        (or ``forced[s - 1]``) at position ``n - 1 + s`` and attends to every real entry and
        to the chain's earlier entries. Returns (drafted target ids, logits [Vd] per step).
        """
        n = aux.shape[0]
        attn = self.midlayer.self_attn
        hidden = self.fc(aux[None])
        x = self._layer_input(tokens[None, 1 : n + 1], hidden)
        q0, k0, v0 = attn.qkv(x, torch.arange(n))
        o = F.scaled_dot_product_attention(q0, k0, v0, is_causal=True)
        r2 = self._finish(o, hidden)[:, -1:]
        ids = self.draft_ids
        drafted: list[int] = []
        all_logits: list[torch.Tensor] = []
        keys, values = k0, v0
        for step in range(gamma):
            logits = self.logits(r2)[0, -1]
            all_logits.append(logits)
            tok = ids[int(logits.argmax())]
            drafted.append(int(tok))
            if step == gamma - 1:
                break
            if forced is not None:
                tok = torch.tensor(forced[step])
            hidden = r2
            x = self._layer_input(tok.view(1, 1), hidden)
            q, kk, vv = attn.qkv(x, torch.tensor([n + step]))
            keys, values = torch.cat([keys, kk], 2), torch.cat([values, vv], 2)
            o = F.scaled_dot_product_attention(q, keys, values)
            r2 = self._finish(o, hidden)
        return drafted, all_logits

    # ------------------------------------------------------------------ export / load

    def exported_state(self) -> dict[str, torch.Tensor]:
        """Tensors named as SGLang's EAGLE-3 loader expects (float32, contiguous)."""
        sd = self.state_dict()
        out: dict[str, torch.Tensor] = {}
        for name in _exported_shapes(self.spec):
            t = sd[name].detach().clone().contiguous()
            out[name] = t if t.dtype in (torch.long, torch.bool) else t.float()
        return out

    def hf_config(self, target_config: dict[str, Any]) -> dict[str, Any]:
        """The draft's config.json: the target's, plus the EAGLE-3 fields SGLang reads."""
        cfg = dict(target_config)
        for key in ("_name_or_path", "transformers_version", "dtype", "torch_dtype"):
            cfg.pop(key, None)
        cfg.update(
            architectures=["LlamaForCausalLMEagle3"],
            model_type="llama",
            num_hidden_layers=1,
            draft_vocab_size=self.spec.draft_vocab_size,
            tie_word_embeddings=False,
            torch_dtype="float32",
            max_position_embeddings=max(
                self.spec.max_position_embeddings, int(target_config["max_position_embeddings"])
            ),
            eagle_config={
                "eagle_aux_hidden_state_layer_ids": list(self.spec.aux_layer_ids),
                "use_aux_hidden_state": True,
            },
        )
        return cfg


def exported_shapes(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Public view of the exported tensor names and shapes for ``spec``."""
    return _exported_shapes(spec)


def save_draft(draft: Eagle3Draft, out: Path, target_config: dict[str, Any]) -> None:
    """Write ``config.json`` + ``model.safetensors`` (the SGLang EAGLE-3 checkpoint format)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(draft.exported_state(), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(draft.hf_config(target_config), indent=2) + "\n")
    spec = {**asdict(draft.spec), "aux_layer_ids": list(draft.spec.aux_layer_ids)}
    (out / "draft_spec.json").write_text(json.dumps(spec, indent=2) + "\n")


def load_draft(draft_dir: Path, target_embedding: torch.Tensor) -> Eagle3Draft:
    """Load an exported draft (ours or any SGLang EAGLE-3 checkpoint with ``midlayer.*``)."""
    from safetensors.torch import load_file

    cfg = json.loads((Path(draft_dir) / "config.json").read_text())
    ids = cfg.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
    if not ids or len(ids) != 3:
        raise ValueError(f"{draft_dir}: config lacks 3 eagle_aux_hidden_state_layer_ids")

    class _C:  # attribute view of the JSON config
        pass

    c = _C()
    c.__dict__.update(cfg)
    spec = DraftSpec.from_target_config(c, int(cfg["draft_vocab_size"]), tuple(ids))
    draft = Eagle3Draft(spec, target_embedding)
    state = load_file(str(Path(draft_dir) / "model.safetensors"))
    missing = set(_exported_shapes(spec)) - set(state)
    if missing:
        raise ValueError(f"{draft_dir}: missing tensors {sorted(missing)}")
    draft.load_state_dict({**draft.state_dict(), **state})
    return draft.eval()
