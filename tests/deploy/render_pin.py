"""Byte pins of the chart's single-model renders: sha256 of every template's output.

    .venv/bin/python -m tests.deploy.render_pin          # rewrite tests/deploy/render_pin.json
    .venv/bin/python -m tests.deploy.render_pin --check  # exit 1 when a render moved

``tests/deploy/test_chart_models.py`` asserts that each value set of ``value_sets.VALUE_SETS``
named in ``SETS`` (one model: top-level ``model``, ``limits``, ``routing``, ``pools``) still
renders exactly the bytes pinned here, template by template, so a change made for ``models:``
cannot move an existing release by a byte. Rewrite the file only for a change meant to alter those renders,
and say so in the commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import k8s
from .value_sets import VALUE_SETS

PIN = Path(__file__).with_name("render_pin.json")
#: The one-model value sets of value_sets.VALUE_SETS whose renders are pinned.
SETS = ("cpu-dev", "default", "every-router-key", "gpu-eagle3-redis", "lws", "static-endpoints")


def digests(values: Mapping[str, Any]) -> dict[str, str]:
    """{template path: sha256 hex of its rendered text} of ``helm template sg -n llm``."""
    import helm_python

    with helm_python.Chart.load(str(k8s.CHART)) as chart:
        manifests = chart.render(dict(values), name="sg", namespace="llm")
    return {path: hashlib.sha256(text.encode()).hexdigest() for path, text in sorted(manifests.items())}


def current() -> dict[str, dict[str, str]]:
    """{value set name: digests} of every pinned value set (SETS)."""
    return {name: digests(VALUE_SETS[name]) for name in SETS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a render differs from the pin")
    args = parser.parse_args(argv)
    now = current()
    if args.check:
        pinned = json.loads(PIN.read_text())
        moved = [f"{n}: {p}" for n in now for p in now[n] if pinned.get(n, {}).get(p) != now[n][p]]
        if moved or set(pinned) != set(now):
            print("moved: " + ", ".join(moved or ["the value sets"]), file=sys.stderr)
            return 1
        return 0
    PIN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
