"""How a speed fit recovers from a calibration wrong by 2x either way (router.decision.learn)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from router.decision.learn import Observation, SpeedFit, prior_precision
from router.decision.predict import SpeedModel, completion_s

# the kv_limited engine family's speed (loadtests/dayfamilies.py): t0 20 ms, knee 40 sequences
TRUE = SpeedModel(decode_s_per_token=0.02, batch_knee=40.0, attention_s_per_token=5e-9, prefill_s_per_token=1e-5)

# (prompt tokens, output tokens, batch): inside the traffic's range and out to twice its batch
PROBES = ((600, 300, 1), (6000, 1000, 8), (2000, 500, 24), (8000, 200, 4))


def _scaled(model: SpeedModel, k: float) -> SpeedModel:
    """Every time of ``model`` times ``k`` (benchmarks/outofbox.py's ``prior x<k>``)."""
    return replace(model, decode_s_per_token=model.decode_s_per_token * k,
                   attention_s_per_token=model.attention_s_per_token * k,
                   prefill_s_per_token=model.prefill_s_per_token * k)


def _probe_error(model: SpeedModel, true: SpeedModel, tau: float | None) -> float:
    """The largest relative error of ``model``'s completion time over :data:`PROBES`."""
    worst = 0.0
    for p, m, b in PROBES:
        want = completion_s(true, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=tau)
        got = completion_s(model, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=tau)
        worst = max(worst, abs(got / want - 1))
    return worst


def _errors(spec: bool, k: float, n: int, seed: int = 7) -> list[float]:
    """The probe error after each of ``n`` seeded observations of a fit whose prior is the
    truth times ``k``: prompts 512-8192 tokens (log-uniform), outputs 50-1000, batches 1-12,
    durations +-3% noise."""
    gamma, c, tau = (4, 0.08, 3.0) if spec else (0, 0.0, None)
    true = replace(TRUE, gamma=gamma, c=c)
    fit = SpeedFit(_scaled(true, k), prior_weight=0.05, forgetting=0.995)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, m, b = int(512 * 16 ** rng.random()), rng.randint(50, 1000), rng.randint(1, 12)
        y = completion_s(true, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=tau)
        fit.observe(Observation(p, 0, m, b, y * rng.uniform(0.97, 1.03), tau), float(i))
        out.append(_probe_error(fit.model, true, tau))
    return out


@pytest.mark.parametrize("spec", [False, True])
@pytest.mark.parametrize("k", [0.5, 2.0])
def test_a_prior_wrong_by_two_either_way_is_within_four_percent_after_64_requests(spec, k):
    errors = _errors(spec, k, 200)
    assert errors[0] > 0.1  # the first observation does not fix the batch slope
    assert max(errors[63:]) < 0.04
    assert errors[-1] < 0.02


@pytest.mark.parametrize("spec", [False, True])
def test_a_right_prior_stays_within_three_percent_from_the_first_request(spec):
    assert max(_errors(spec, 1.0, 200)) < 0.03


def test_a_direction_the_traffic_does_not_excite_keeps_its_prior():
    # attention is 0.15% of a step at these contexts: the fit keeps the halved prior's value
    fit = SpeedFit(_scaled(TRUE, 0.5), prior_weight=0.05, forgetting=0.995)
    rng = random.Random(3)
    for i in range(200):
        p, m, b = int(512 * 16 ** rng.random()), rng.randint(50, 1000), rng.randint(1, 12)
        y = completion_s(TRUE, batch=b, prompt_tokens=p, cached_tokens=0, output_tokens=m, accept_length=None)
        fit.observe(Observation(p, 0, m, b, y * rng.uniform(0.97, 1.03)), float(i))
    assert fit.model.attention_s_per_token == pytest.approx(2.5e-9, rel=0.01)
    assert fit.model.decode_s_per_token == pytest.approx(0.02, rel=0.02)


def test_the_prior_precision_is_scaled_by_the_larger_of_prior_and_fit():
    assert prior_precision([0.01, 2e-4], [0.02, 1e-4], 0.05) == [pytest.approx(0.05 / 0.02 ** 2),
                                                                pytest.approx(0.05 / 2e-4 ** 2)]
    assert prior_precision([0.0], [0.0], 1.0) == [pytest.approx(1e24)]  # floored at 1e-12 s
