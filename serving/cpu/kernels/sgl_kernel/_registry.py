"""Registration of the stand-in ops under ``torch.ops.sgl_kernel``.

SGLang reaches the CPU kernels two ways: ``torch.ops.sgl_kernel.<name>(...)`` (positional or
keyword arguments, sometimes ``.default``) and ``from sgl_kernel import <name>``. Every op here
is defined once with a TorchScript schema (argument names follow SGLang's call sites, mutated
tensors are annotated ``(a!)``) and implemented for ``CompositeExplicitAutograd``, which covers
CPU tensors and ops without tensor arguments alike.

The ``torch.library.Library`` handle must outlive the process's use of the ops (dropping it
deregisters them), so it lives in this module for the life of the interpreter. The namespace
is opened as a FRAGMENT so that importing this module next to another provider of
``sgl_kernel`` ops fails loudly on a clash of names rather than silently replacing them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

NAMESPACE = "sgl_kernel"

_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")

REGISTERED: dict[str, str] = {}
"""Op name -> schema string, for every op this package defined (read by tests and docs)."""

STUBS: list[str] = []
"""Names registered by ``register_stub`` (defined, but raise NotImplementedError)."""


def register(schema: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Define ``sgl_kernel::<name>`` with ``schema`` and implement it with the decorated function.

    ``schema`` is a TorchScript signature such as ``"rmsnorm_cpu(Tensor input, Tensor weight,
    float eps) -> Tensor"``. Returns the Python function unchanged, so modules can re-export it
    for ``from sgl_kernel import name``. Raises RuntimeError (from torch) when the name is
    already defined in the namespace.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = schema.split("(", 1)[0].strip()
        _LIB.define(schema)
        _LIB.impl(name, fn, "CompositeExplicitAutograd")
        REGISTERED[name] = schema
        return fn

    return decorator


def not_implemented(name: str) -> Callable[..., Any]:
    """A placeholder for an ``sgl_kernel`` name SGLang imports on a CPU path we do not run.

    Importing it succeeds (SGLang imports some names at module load); calling it raises
    NotImplementedError naming the op.
    """

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not implemented by specgate's pure-PyTorch CPU stand-in"
        )

    stub.__name__ = name
    stub.__qualname__ = name
    return stub


_STUB_ARGS = ", ".join(f"Any? a{i}=None" for i in range(32))


def register_stub(name: str) -> None:
    """Define ``sgl_kernel::<name>`` as an op that raises NotImplementedError when called.

    For names SGLang binds at module import (``x = torch.ops.sgl_kernel.name``) on CPU paths this
    stand-in does not serve (other model families); the binding must succeed for the module to
    import. The schema takes up to 32 positional arguments of any type. Never used for names
    SGLang probes with ``hasattr`` to choose a code path.
    """
    _LIB.define(f"{name}({_STUB_ARGS}) -> ()")
    _LIB.impl(name, not_implemented(name), "CompositeExplicitAutograd")
    STUBS.append(name)
