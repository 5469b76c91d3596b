"""Plumbing shared by the two deterministic CPU trainers: the tiny target
(:mod:`serving.tinymodel`) and its EAGLE-3 drafter (:mod:`drafters.eagle3.train`).

- :func:`warmup_cosine_lr`: the learning rate (per optimizer step) at step ``step`` (0-based)
  of ``total_steps``: linear warm-up ``lr * (step + 1) / warmup_steps`` over the first
  ``warmup_steps`` steps, then cosine decay from ``lr`` to ``min_lr_ratio * lr`` at the last
  step, ``lr * (m + (1 - m) * 0.5 * (1 + cos(pi * t)))`` with
  ``t = (step - warmup_steps) / max(1, total_steps - warmup_steps)`` (the usual LLM schedule,
  e.g. SpecForge's and nanoGPT's).
- :func:`adamw`: AdamW with betas (0.9, 0.95), the betas both trainers use.
- :func:`optimizer_step`: set the learning rate, zero the gradients, back-propagate, clip the
  global gradient norm at ``grad_clip``, step.
- :func:`torch_threads`: run a block with ``n`` intra-op threads (both trainers use one: CPU
  results can depend on the thread count, see :mod:`serving.tinymodel`).
- :class:`Progress`: a rich progress bar with one task per phase, or nothing when disabled.
- :func:`staging_dir` / :func:`publish`: build into a temporary sibling directory and rename it
  over the output, so an interrupted build never leaves half-written weights behind a valid
  manifest.

torch and rich are imported inside the functions: importing this module (and so the trainers'
modules) costs neither, so ``specgate --help`` stays light.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Self

__all__ = [
    "Progress",
    "adamw",
    "optimizer_step",
    "publish",
    "staging_dir",
    "torch_threads",
    "warmup_cosine_lr",
]


def warmup_cosine_lr(
    step: int, *, lr: float, warmup_steps: int, total_steps: int, min_lr_ratio: float
) -> float:
    """Learning rate of optimizer step ``step`` (0-based); see the module docstring."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def adamw(params: Iterable[Any], *, lr: float, weight_decay: float = 0.0) -> Any:
    """``torch.optim.AdamW`` with betas (0.9, 0.95); ``params`` may be parameter groups
    (each group's own ``weight_decay`` wins over the default given here)."""
    import torch

    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)


def optimizer_step(
    opt: Any, loss: Any, params: Iterable[Any], *, lr: float, grad_clip: float
) -> None:
    """One update: every group's lr = ``lr``, zero grads, ``loss.backward()``, clip the global
    gradient norm of ``params`` at ``grad_clip``, ``opt.step()``."""
    import torch

    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)``; the previous count is restored."""
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


class Progress:
    """A rich progress bar (description, bar, done/total, elapsed, remaining, info text), one
    task per phase; every method does nothing when ``enabled`` is false. Use it as a context
    manager (or call :meth:`close`)."""

    def __init__(self, enabled: bool) -> None:
        self._p: Any = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as _RichProgress

            self._p = _RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
            )
            self._p.start()

    def task(self, label: str, total: int) -> Any:
        """A new task of ``total`` units; its handle for :meth:`advance` (None when disabled)."""
        if self._p is None:
            return None
        return self._p.add_task(label, total=total, info="")

    def advance(self, task: Any, n: int = 1, info: str = "") -> None:
        """``n`` more units of ``task`` done; ``info`` replaces its trailing text."""
        if self._p is not None and task is not None:
            self._p.update(task, advance=n, info=info)

    def close(self) -> None:
        """Stop the bar (idempotent)."""
        if self._p is not None:
            self._p.stop()
            self._p = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def staging_dir(out: Path) -> Path:
    """An empty, not yet created sibling ``<out>.tmp-<pid>`` to build ``out`` in (a stale one
    of the same name is removed)."""
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp


def publish(tmp: Path, out: Path) -> None:
    """Replace ``out`` (if any) with the finished build ``tmp`` (a rename)."""
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
