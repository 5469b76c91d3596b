"""No function in router/ is longer than :data:`MAX_LINES` lines of code.

A function's length is the lines from its ``def`` to its last line, without its docstring
(a nested function counts within its parent's lines too). The exceptions are listed by name
in :data:`EXCEPTIONS`, each with the plan for splitting it in docs/architecture.md ("Where
a change goes"); an exception that has been split below the limit must leave the list.

``python -m tests.unit.test_function_size [N]`` lists router/'s functions longer than N lines
(default: the limit).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROUTER = Path(__file__).resolve().parents[2] / "router"

#: The longest a router/ function may be (lines of code, docstring excluded).
MAX_LINES = 80

#: Functions allowed past the limit for now: ``module.py::qualified.name``.
EXCEPTIONS: frozenset[str] = frozenset()


def function_lengths(root: Path = ROUTER) -> Iterator[tuple[str, int]]:
    """``("module.py::Class.method", lines)`` for every function and method under ``root``."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        yield from _walk(ast.parse(path.read_text(encoding="utf-8")), rel, "")


def _walk(node: ast.AST, rel: str, prefix: str) -> Iterator[tuple[str, int]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{rel}::{prefix}{child.name}", _length(child)
            yield from _walk(child, rel, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _walk(child, rel, f"{prefix}{child.name}.")


def _length(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    total = (fn.end_lineno or fn.lineno) - fn.lineno + 1
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        total -= (first.end_lineno or first.lineno) - first.lineno + 1
    return total


def test_no_function_in_router_is_over_the_limit() -> None:
    long = {name: n for name, n in function_lengths() if n > MAX_LINES}
    assert {name: n for name, n in long.items() if name not in EXCEPTIONS} == {}, (
        f"split these below {MAX_LINES} lines (or, with a reason, list them in EXCEPTIONS)")
    assert sorted(EXCEPTIONS - long.keys()) == [], "these are within the limit now: drop them from EXCEPTIONS"


def test_the_length_leaves_out_the_docstring(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('def f():\n    """Doc\n    string."""\n    a = 1\n    return a\n\n\n'
                                   "class C:\n    def g(self):\n        def h():\n            pass\n"
                                   "        return h\n")
    assert dict(function_lengths(tmp_path)) == {"m.py::f": 3, "m.py::C.g": 4, "m.py::C.g.h": 2}


if __name__ == "__main__":
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else MAX_LINES
    for name, n in sorted(function_lengths(), key=lambda item: -item[1]):
        if n > limit:
            print(f"{n:4d}  router/{name}{'  (listed exception)' if name in EXCEPTIONS else ''}")
