"""The tests' shared code rule (tests/README.md, "Shared code"): no module under tests/ imports
a conftest or a test module; what several use lives in ``tests/support`` (or a directory's own
helper module, such as ``tests/redis/cluster.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported(path: Path) -> list[str]:
    """The modules ``path`` imports (``from . import x`` read as ``x``), relative ones as written."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names += [base] if node.module else [base + a.name for a in node.names]
    return names


def _forbidden(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def test_no_module_under_tests_imports_a_conftest_or_a_test_module() -> None:
    offenders = sorted(f"{p.relative_to(TESTS)}: {name}" for p in TESTS.rglob("*.py")
                       for name in _imported(p) if _forbidden(name))
    assert offenders == []


def test_the_rule_sees_each_form_of_import(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import tests.unit.test_config\nfrom tests.contract.conftest import Backend\n"
                   "from .test_chart import VALUE_SETS\nfrom . import conftest\nfrom tests.support import wait_until\n")
    assert [n for n in _imported(src) if _forbidden(n)] == [
        "tests.unit.test_config", "tests.contract.conftest", ".test_chart", ".conftest"]
