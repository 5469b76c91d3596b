"""The folders around the router import only its public surface (``router.__all__``).

``benchmarks/``, ``loadtests/``, ``serving/``, ``drafters/`` and ``scripts/`` use ``from router
import name`` (or ``import router`` and ``router.name``) with ``name`` in ``router.__all__``;
never a submodule (``router.config.tree``, ``router.front.api``...) and never a private name. Every
other module of router/ is internal and may change (docs/architecture.md, "The public
surface"). import-linter cannot say this (``benchmarks/`` and ``scripts/`` are no packages,
and a forbidden contract would have to list every submodule), so this test walks their
syntax trees. Tests may import submodules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import router

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("benchmarks", "loadtests", "serving", "drafters", "scripts")


def violations(path: Path, public: frozenset[str]) -> Iterator[str]:
    """``"file:line: what"`` for each import of ``router`` outside its public surface."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    module_alias = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("router."):
                    yield f"{rel}:{node.lineno}: import {alias.name}"
                elif alias.name == "router" and alias.asname in (None, "router"):
                    module_alias = True
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module.startswith("router."):
                yield f"{rel}:{node.lineno}: from {node.module} import ..."
            elif node.module == "router":
                for alias in node.names:
                    if alias.name not in public:
                        yield f"{rel}:{node.lineno}: from router import {alias.name} (not in router.__all__)"
    if module_alias:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "router" and node.attr not in public):
                yield f"{rel}:{node.lineno}: router.{node.attr} (not in router.__all__)"


def _files() -> Iterator[Path]:
    for folder in FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_outside_folders_import_only_the_public_surface() -> None:
    public = frozenset(router.__all__)
    found = [v for path in _files() for v in violations(path, public)]
    assert found == [], "import these from `router` (extend router/__init__.py's surface if needed)"


def test_the_walk_sees_each_form(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import router\nimport router.app.asgi\nfrom router.config.tree import load_config\n"
                   "from router import create_app, _private\nrouter.create_app\nrouter.loops.scraper\n")
    assert sorted(violations(src, frozenset({"create_app"}))) == [
        "m.py:2: import router.app.asgi", "m.py:3: from router.config.tree import ...",
        "m.py:4: from router import _private (not in router.__all__)",
        "m.py:6: router.loops (not in router.__all__)"]
