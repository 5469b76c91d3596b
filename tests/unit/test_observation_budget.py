"""router.decision.learn.ObservationBudget: a token bucket over the caller's clock."""

from __future__ import annotations

import pytest

from router.decision.learn import ObservationBudget


def test_a_second_of_burst_then_the_rate():
    b = ObservationBudget(2.0)
    assert [b.take(10.0) for _ in range(3)] == [True, True, False]
    assert [b.take(10.25), b.take(10.5), b.take(10.5)] == [False, True, False]  # 0.5 + 0.5 tokens
    assert [b.take(20.0), b.take(20.0), b.take(20.0)] == [True, True, False]    # refilled to 2, not 20


def test_a_rate_below_one_still_measures_one_request_then_waits():
    b = ObservationBudget(0.5)
    assert [b.take(0.0), b.take(1.0), b.take(2.0), b.take(2.1)] == [True, False, True, False]


def test_a_clock_that_steps_back_refills_nothing():
    b = ObservationBudget(1.0)
    assert b.take(5.0) and not b.take(4.0) and not b.take(5.5) and b.take(6.0)


def test_the_rate_must_be_positive():
    with pytest.raises(ValueError, match="rate must be > 0"):
        ObservationBudget(0.0)
