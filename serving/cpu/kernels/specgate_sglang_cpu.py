"""Boot hook for SGLang's CPU engine with specgate's ``sgl_kernel`` stand-in.

Run by the ``.pth`` file that ``serving/cpu/install.sh`` writes, in every interpreter of the
venv, and only when ``SGLANG_USE_CPU_ENGINE=1`` (the variable that puts SGLang in CPU mode, so
the SGLang server, its scheduler and detokenizer subprocesses all get it). ``install()``
registers two post-import adjustments of SGLang 0.5.23 modules; nothing else is changed.

1. ``sglang.srt.utils.common.is_amx_tile_supported = True``. SGLang routes its CPU engine
   through the ``sgl_kernel`` CPU ops (weight "packing", RMSNorm, RoPE, ``intel_amx``
   attention, which is the only CPU attention backend that can run speculative verification)
   only when ``cpu_has_amx_support()`` holds, i.e. when the processor reports Intel AMX tiles
   *and* ``torch.ops.sgl_kernel.convert_weight_packed`` exists. The stand-in's ops are plain
   PyTorch and need no AMX, so the first condition is forced: every x86 machine (Intel with
   AMX, Intel without, AMD) then runs the same code path. Without it, a machine without AMX
   silently falls back to ``--attention-backend torch_native`` (``arg_groups/overrides.py:
   _attention_backend_platform_fallbacks``), which cannot verify drafts.

2. Sampled speculative verification. ``sglang/srt/speculative/eagle_utils.py`` verifies
   greedily on CPU whatever the temperature (``_verify_uses_greedy`` returns True when
   ``is_cpu``) because no CPU kernel for ``tree_speculative_sampling_target_only`` exists
   (``kernels/ops/speculative/verify_sampling.py`` sets it to None off CUDA/MUSA). Stock
   behaviour therefore emits the target's argmax for a temperature-1 request on a
   speculative CPU server, which is not the target distribution. When
   ``serving.verifier`` is importable, this hook drops the ``is_cpu`` term and points
   ``eagle_utils.tree_speculative_sampling_target_only`` at
   ``sgl_kernel.tree_speculative_sampling_target_only`` (which calls
   ``serving.verifier.tree_speculative_sampling``), and, where SGLang has no CPU kernel for
   them (``kernels/ops/sampling/renorm.py`` leaves them None), ``eagle_utils.top_k_renorm_prob``
   / ``top_p_renorm_prob`` at ``serving.verifier.top_k_renorm_probs`` / ``top_p_renorm_probs``:
   a batch mixing greedy requests (top_k 1) and sampled ones verifies on the sampled path with
   top-k renormalisation, and the stock None crashed the scheduler (``TypeError: 'NoneType'
   object is not callable`` in ``eagle_sample``). Set ``SPECGATE_CPU_SAMPLED_VERIFY=0`` to keep
   SGLang's stock greedy verification.

Both hooks apply at import of the target module (or at once when it is already imported).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

logger = logging.getLogger("specgate.sglang_cpu")

Hook = Callable[[ModuleType], None]


class _HookedLoader(importlib.abc.Loader):
    """Delegates to the real loader and runs ``hook(module)`` right after the module executes."""

    def __init__(self, loader: Any, hook: Hook) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds hooked modules with the other finders and wraps their loaders."""

    def __init__(self, hooks: dict[str, Hook]) -> None:
        self._hooks = hooks

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hook = self._hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _HookedLoader(spec.loader, hook)
                return spec
        return None


def _force_cpu_kernel_path(common: ModuleType) -> None:
    common.is_amx_tile_supported = True


def _enable_sampled_verify(eagle_utils: ModuleType) -> None:
    if os.environ.get("SPECGATE_CPU_SAMPLED_VERIFY", "1") == "0":
        return
    if importlib.util.find_spec("serving") is None or importlib.util.find_spec(
        "serving.verifier"
    ) is None:
        logger.warning(
            "serving.verifier is not importable: speculative verification stays greedy on CPU "
            "even for temperature > 0 (SGLang's stock CPU behaviour)"
        )
        return
    import sgl_kernel

    stock = eagle_utils._verify_uses_greedy

    def _verify_uses_greedy(
        *,
        is_all_greedy: bool,
        is_cpu: bool,
        is_hip: bool,
        is_xpu: bool,
        use_rejection_sampling: bool,
    ) -> bool:
        return bool(
            stock(
                is_all_greedy=is_all_greedy,
                is_cpu=False,
                is_hip=is_hip,
                is_xpu=is_xpu,
                use_rejection_sampling=use_rejection_sampling,
            )
        )

    eagle_utils._verify_uses_greedy = _verify_uses_greedy
    eagle_utils.tree_speculative_sampling_target_only = (
        sgl_kernel.tree_speculative_sampling_target_only
    )
    # A batch that mixes greedy requests (SGLang's top_k 1) with sampled ones verifies on the
    # sampled path with need_top_k_sampling set, and calls these; off CUDA/HIP they are None
    # (kernels/ops/sampling/renorm.py), which crashed the scheduler.
    from serving.verifier import top_k_renorm_probs, top_p_renorm_probs

    if getattr(eagle_utils, "top_k_renorm_prob", None) is None:
        eagle_utils.top_k_renorm_prob = top_k_renorm_probs
    if getattr(eagle_utils, "top_p_renorm_prob", None) is None:
        eagle_utils.top_p_renorm_prob = top_p_renorm_probs


HOOKS: dict[str, Hook] = {
    "sglang.srt.utils.common": _force_cpu_kernel_path,
    "sglang.srt.speculative.eagle_utils": _enable_sampled_verify,
}


def install() -> None:
    """Register the post-import hooks (idempotent); apply them to modules already imported."""
    if any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        return
    pending = {}
    for name, hook in HOOKS.items():
        module = sys.modules.get(name)
        if module is not None:
            hook(module)
        else:
            pending[name] = hook
    sys.meta_path.insert(0, _PostImportFinder(pending))
