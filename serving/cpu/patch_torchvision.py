"""Make torchvision importable beside a CPU-only torch whose ABI its ``_C.so`` does not match.

PyPI's torchvision wheels are built against CUDA torch. Next to the CPU torch wheel their
compiled ``_C.so`` fails to load, so the ``torchvision::*`` operators are never defined and
``torchvision/_meta_registrations.py`` dies at import on
``@torch.library.register_fake("torchvision::nms")`` with
``RuntimeError: operator torchvision::nms does not exist``. SGLang only needs torchvision's
pure-Python transforms (``sglang/srt/multimodal/internvl_utils.py`` imports
``torchvision.transforms`` at module level), so this script rewrites the two unconditional
fake registrations (``nms`` and ``qnms``) to register only when the operator exists.

Usage: ``python patch_torchvision.py SITE_PACKAGES``; prints what it did. Idempotent: a file
that already carries the marker is left alone. Exit status 1 when the file is missing or its
text no longer matches what this script expects (a torchvision upgrade must be re-checked).
"""

from __future__ import annotations

import sys
from pathlib import Path

MARKER = "# specgate: fake registrations made conditional"
HELPER = f'''
{MARKER}
def _specgate_register_fake_if_defined(qualname):
    ns, name = qualname.split("::")

    def wrapper(fn):
        if hasattr(getattr(torch.ops, ns), name):
            return torch.library.register_fake(qualname)(fn)
        return fn

    return wrapper

'''
OPS = ("torchvision::nms", "torchvision::qnms")


def patch(site_packages: Path) -> str:
    """Patch ``torchvision/_meta_registrations.py`` under ``site_packages``.

    Returns a one-line description. Raises FileNotFoundError when torchvision is absent and
    ValueError when the expected decorator lines are not found.
    """
    path = site_packages / "torchvision" / "_meta_registrations.py"
    text = path.read_text()
    if MARKER in text:
        return f"already patched: {path}"
    anchor = "import torchvision.extension  # noqa: F401\n"
    if anchor not in text:
        raise ValueError(f"import anchor not found in {path}")
    for op in OPS:
        line = f'@torch.library.register_fake("{op}")'
        if line not in text:
            raise ValueError(f"decorator {line!r} not found in {path}")
        text = text.replace(line, f'@_specgate_register_fake_if_defined("{op}")')
    text = text.replace(anchor, anchor + HELPER, 1)
    path.write_text(text)
    return f"patched: {path}"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: patch_torchvision.py SITE_PACKAGES")
    try:
        print(patch(Path(sys.argv[1])))
    except (OSError, ValueError) as exc:
        print(f"patch_torchvision: {exc}", file=sys.stderr)
        sys.exit(1)
