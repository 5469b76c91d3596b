"""The real SGLang CPU server without speculation: exact greedy output, exact sampling.

Also validates the sampling check itself: on the plain server the PIT values of temperature-1
samples are uniform, and the same check rejects greedy output read as if it were sampled (the
failure mode of SGLang's stock CPU verification at temperature > 0).
"""

from __future__ import annotations

import numpy as np
import pytest

from ._checks import assert_greedy_equal, sampled_pit
from ._reference import generate, hf_conditionals
from ._stats import ks_uniform, randomized_pit

pytestmark = pytest.mark.sglang

GREEDY_TOKENS = 128
SAMPLES, SAMPLE_TOKENS = 64, 16


@pytest.fixture(scope="module")
def server(cpu_server):
    return cpu_server([])


def test_greedy_equals_transformers(server, hf_model, prompts):
    metas = assert_greedy_equal(server.base_url, hf_model, prompts, GREEDY_TOKENS)
    assert [m["completion_tokens"] for m in metas] == [GREEDY_TOKENS] * len(prompts)


def test_sampled_tokens_follow_target_distribution(server, hf_model, prompts):
    u, _ = sampled_pit(
        server.base_url,
        hf_model,
        prompts[0],
        batch=SAMPLES,
        max_new_tokens=SAMPLE_TOKENS,
        temperature=1.0,
        first_position=0,
        seed=1234,
    )
    assert u.shape == (SAMPLES * SAMPLE_TOKENS,)
    d, p = ks_uniform(u)
    assert p > 1e-3, f"KS D={d:.4f} p={p:.2e}: samples do not follow softmax(logits)"


def test_check_rejects_greedy_output_read_as_samples(server, hf_model, prompts):
    prompt = prompts[0]
    out = generate(
        server.base_url,
        prompt,
        {"temperature": 0.0, "max_new_tokens": SAMPLE_TOKENS, "ignore_eos": True},
    )["output_ids"]
    probs = hf_conditionals(hf_model, prompt, out, 1.0)
    rng = np.random.default_rng(1234)
    u = np.asarray(
        [randomized_pit(probs[j], out[j], float(rng.random())) for j in range(len(out))] * SAMPLES
    )
    _, p = ks_uniform(u)
    assert p < 1e-6

