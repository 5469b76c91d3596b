"""SGLang's CPU engine support: the pure-PyTorch ``sgl_kernel`` stand-in (``sgl_kernel/``) and
the boot hook (``specgate_sglang_cpu.py``).

``serving/cpu/install.sh`` puts this folder on ``sys.path`` in the engine's interpreters, where
both import as top-level modules (``sgl_kernel``, ``specgate_sglang_cpu``); nothing imports
this package under its own name. It is a package so that ``make lint``'s import contracts see
its modules as part of ``serving`` (which imports nothing of ``drafters``): the lossless
verifier they call is :mod:`serving.verifier`.
"""
