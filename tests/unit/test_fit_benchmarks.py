"""benchmarks/outofbox_seeds.py's seed lists and benchmarks/fit_cost.py's seeded observations."""

from __future__ import annotations

import pytest

from benchmarks.fit_cost import main as fit_cost_main
from benchmarks.fit_cost import observations
from benchmarks.outofbox_seeds import _seeds


def test_seeds_are_a_range_or_a_list() -> None:
    assert _seeds("0-3") == [0, 1, 2, 3]
    assert _seeds("5") == [5]
    assert _seeds("0,3,7") == [0, 3, 7]


def test_fit_cost_observations_are_seeded(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = observations(20, 4), observations(20, 4)
    assert a == b and a != observations(20, 5)
    assert all(o.duration_s > 0 and o.accept_length is not None for o, _ in a)
    assert fit_cost_main(["--observations", "40", "--repeats", "1"]) == 0
    assert capsys.readouterr().out.startswith("SpeedFit.observe: ")
