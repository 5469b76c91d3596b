"""``sgl_kernel.speculative``: the submodule SGLang imports the NGRAM tree-mask op from.

``sglang/kernels/ops/speculative/reconstruct_tree.py`` does
``from sgl_kernel.speculative import reconstruct_indices_from_tree_mask`` on CPU; the op is
defined in ``ops_spec.py``.
"""

from .ops_spec import reconstruct_indices_from_tree_mask

__all__ = ["reconstruct_indices_from_tree_mask"]
