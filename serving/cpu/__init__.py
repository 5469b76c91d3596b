"""Running the real SGLang 0.5.23 server on CPU-only machines.

- ``install.sh VENV`` / ``requirements.txt``: what to install (``--no-deps``) and how.
- ``patch_torchvision.py``: makes PyPI's CUDA-linked torchvision importable beside CPU torch.
- ``kernels/``: put on ``sys.path`` only in CPU mode (``SGLANG_USE_CPU_ENGINE=1``) by the
  ``.pth`` file ``install.sh`` writes; holds the pure-PyTorch ``sgl_kernel`` stand-in and the
  boot hook ``specgate_sglang_cpu``. It is deliberately not a package of ``serving``: the ops
  must be registered once, under the module name ``sgl_kernel``.

Starting and stopping a server: ``serving.local``.
"""
