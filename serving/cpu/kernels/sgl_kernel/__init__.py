"""specgate's pure-PyTorch stand-in for SGLang's compiled ``sgl_kernel`` CPU ops.

Why: SGLang 0.5.23 needs an ``sgl_kernel`` module to start on CPU, and PyPI carries only GPU
builds of it (the CPU kernels are built from SGLang's source tree). This package implements,
in plain PyTorch, the ops SGLang's CPU engine calls for dense decoder models (Llama family)
with plain decoding and NGRAM / EAGLE(3) speculative decoding, greedy or sampled.

How it is found: ``serving/cpu/install.sh`` writes a ``.pth`` file into the venv that, only
when ``SGLANG_USE_CPU_ENGINE=1`` is set, appends this directory's parent to ``sys.path`` and
runs ``specgate_sglang_cpu.install()`` (see that module for the two adjustments it makes to
SGLang). Without that variable nothing here is importable as ``sgl_kernel``.

Contents (each module's docstring gives every op's shapes, semantics and SGLang source):
- ``ops_basic``: ``apply_rotary_pos_emb_cpu``, ``convert_weight_packed``, ``weight_packed_linear``, ``rmsnorm_cpu``,
  ``fused_add_rmsnorm_cpu``, ``l2norm_cpu``, ``silu_and_mul_cpu``, ``gelu_and_mul_cpu``,
  ``gelu_tanh_and_mul_cpu``, ``rotary_embedding_cpu``, ``store_cache_cpu``,
  ``init_cpu_threads_env``, ``initialize``, ``murmur_hash32_cpu``.
- ``ops_attention``: ``decode_attention_cpu``, ``extend_attention_cpu`` (tree masks included).
- ``ops_memory``: ``assign_req_to_token_pool_cpu``, ``assign_extend_cache_locs_cpu``,
  ``assign_draft_cache_locs_contiguous_cpu``, ``copy_all_layer_kv_cache_cpu``.
- ``ops_spec``: ``build_tree_kernel_efficient_cpu``, ``verify_tree_greedy_cpu``,
  ``reconstruct_indices_from_tree_mask``, ``build_draft_decode_metadata_cpu``,
  ``fill_accept_out_cache_loc_cpu``, ``fill_bonus_tokens_cpu``,
  ``tree_speculative_sampling_target_only`` (delegates to ``serving.verifier``).

All are registered as ``torch.ops.sgl_kernel.<name>`` and exported here under the same
name. Names SGLang uses only on CPU paths this stand-in does not serve (MoE, quantized GEMMs,
multi-layer EAGLE, linear attention, vision) are absent, except those SGLang binds when a
module is imported (``MODULE_LEVEL_STUBS`` below, found by walking SGLang 0.5.23's syntax
trees for ``torch.ops.sgl_kernel.<name>`` outside functions, and ``rotate_input_ids_cpu``,
imported by ``kernels/ops/speculative/multi_layer_eagle.py``): those exist and raise
NotImplementedError when called. Names SGLang probes with ``hasattr`` to pick a path
(``fused_qk_norm_cpu``, ``fused_qk_norm_rope_cpu``, ``gdn_attention``,
``shm_group_initialize``, ``get_device_accessible_ptr``) are deliberately not defined.
"""

from . import ops_attention, ops_basic, ops_memory, ops_spec, speculative
from ._registry import REGISTERED, STUBS, not_implemented, register_stub
from .ops_attention import decode_attention_cpu, extend_attention_cpu
from .ops_basic import (
    apply_rotary_pos_emb_cpu,
    convert_weight_packed,
    fused_add_rmsnorm_cpu,
    gelu_and_mul_cpu,
    gelu_tanh_and_mul_cpu,
    init_cpu_threads_env,
    initialize,
    l2norm_cpu,
    murmur_hash32_cpu,
    rmsnorm_cpu,
    rotary_embedding_cpu,
    silu_and_mul_cpu,
    store_cache_cpu,
    weight_packed_linear,
)
from .ops_memory import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    copy_all_layer_kv_cache_cpu,
)
from .ops_spec import (
    build_draft_decode_metadata_cpu,
    build_tree_kernel_efficient_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    reconstruct_indices_from_tree_mask,
    tree_speculative_sampling_target_only,
    verify_tree_greedy_cpu,
)

MODULE_LEVEL_STUBS = (
    "conv3d_embed_cpu",  # srt/layers/conv.py
    "flash_attn_varlen_func",  # srt/layers/attention/vision.py
    "fused_dual_residual_rmsnorm_cpu",  # srt/models/grok.py
    "fused_gdn_gating_cpu",  # srt/layers/attention/linear/gdn_backend.py
    "fused_moe_router_cpu",  # srt/models/grok.py
    "fused_qk_gemma_rmsnorm_cpu",  # srt/models/qwen3_5.py
    "fused_qk_gemma_rmsnorm_with_gate_cpu",  # srt/models/qwen3_5.py
    "fused_qkvzba_split_reshape_cat_contiguous_cpu",  # srt/models/qwen3_5.py
    "fused_sigmoid_gating_delta_rule_update_cpu",  # srt/layers/attention/linear/kernels/gdn_triton.py
    "fused_sigmoid_mul_cpu",  # srt/models/qwen3_5.py, srt/models/muse_glimmer.py
)
for _name in MODULE_LEVEL_STUBS:
    register_stub(_name)

rotate_input_ids_cpu = not_implemented("rotate_input_ids_cpu")

__version__ = "0.0.0+specgate.cpu"

__all__ = [
    "MODULE_LEVEL_STUBS",
    "REGISTERED",
    "STUBS",
    "apply_rotary_pos_emb_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "convert_weight_packed",
    "copy_all_layer_kv_cache_cpu",
    "decode_attention_cpu",
    "extend_attention_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "fused_add_rmsnorm_cpu",
    "gelu_and_mul_cpu",
    "gelu_tanh_and_mul_cpu",
    "init_cpu_threads_env",
    "initialize",
    "l2norm_cpu",
    "murmur_hash32_cpu",
    "reconstruct_indices_from_tree_mask",
    "rmsnorm_cpu",
    "rotary_embedding_cpu",
    "rotate_input_ids_cpu",
    "silu_and_mul_cpu",
    "speculative",
    "store_cache_cpu",
    "tree_speculative_sampling_target_only",
    "verify_tree_greedy_cpu",
    "weight_packed_linear",
]

del ops_attention, ops_basic, ops_memory, ops_spec, _name
