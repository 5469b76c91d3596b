"""``benchmarks/router_overhead.py``'s base revision, resolved by ``git`` (a subprocess, so not a
unit test; the gate's arithmetic is tests/unit/test_bench_gate.py)."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks.router_overhead import ROOT, git_base


def test_base_revision_resolves_to_a_commit():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert git_base("HEAD") == head
    with pytest.raises(subprocess.CalledProcessError):
        git_base("no-such-revision-xyz")
