"""router.decision.drift: the time-decayed mean and the CUSUM change detector, exact and seeded."""

from __future__ import annotations

import math
import random

import pytest

from router.decision.drift import Cusum, DecayedMean


def test_a_decayed_mean_is_a_plain_mean_until_its_cap_then_an_ewma():
    m = DecayedMean(memory_s=1e9, max_weight=4)
    assert m.value is None and m.weight(0.0) == 0.0
    for i, x in enumerate([1.0, 2.0, 3.0]):
        m.add(x, float(i))
    assert m.value == pytest.approx(2.0) and m.count == 3
    m.add(6.0, 3.0)  # weight 4: (1 + 2 + 3 + 6) / 4
    assert m.value == pytest.approx(3.0)
    m.add(7.0, 4.0)  # capped at 4: 3 + (7 - 3) / 4
    assert m.value == pytest.approx(4.0)


def test_a_decayed_mean_forgets_with_time_whatever_its_rate():
    m = DecayedMean(memory_s=10.0, max_weight=200)
    for i in range(100):
        m.add(3.0, i * 0.1)  # 100 observations within 10 s
    assert m.weight(9.9) == pytest.approx(sum(math.exp(-0.01 * k) for k in range(100)), rel=1e-9)
    m.add(2.0, 9.9 + 60.0)  # after a minute of silence the old mean holds e^-6 of its weight
    w_old = sum(math.exp(-0.01 * k) for k in range(100)) * math.exp(-6.0)
    assert m.value == pytest.approx(3.0 + (2.0 - 3.0) / (w_old + 1.0))
    assert m.value < 2.2


def test_decayed_mean_rejects_bad_parameters():
    with pytest.raises(ValueError, match="memory_s"):
        DecayedMean(0.0, 10)
    with pytest.raises(ValueError, match="max_weight"):
        DecayedMean(1.0, 0.5)


def test_cusum_is_quiet_on_noise_and_alarms_soon_after_a_shift():
    rng = random.Random(7)
    c = Cusum()
    alarms = [i for i in range(2000) if c.add(rng.gauss(0.1, 0.05))]
    assert alarms == []  # a biased, noisy residual is its own baseline
    at = [i for i in range(2000, 2100) if c.add(rng.gauss(0.4, 0.05))]  # a shift of 6 deviations
    assert at and at[0] - 2000 <= 3 and c.alarms == len(at)


def test_cusum_waits_for_its_warmup_and_rejects_bad_parameters():
    c = Cusum(warmup=5)
    assert [c.add(x) for x in (0.0, 0.01, 0.0, 5.0, 5.0)] == [False] * 5
    for kw in ({"k": 0.0}, {"h": -1.0}, {"memory": 1.0}, {"warmup": -1}):
        with pytest.raises(ValueError):
            Cusum(**kw)
