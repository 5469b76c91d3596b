"""The real SGLang CPU server with NGRAM speculation (``--speculative-num-draft-tokens 4``).

Greedy output equals ``transformers``' token for token (lossless verification with tree masks
from the n-gram corpus), drafts are accepted on a repetitive prompt, and at temperature 1 the
tokens emitted by sampled tree verification follow the target distribution.
"""

from __future__ import annotations

import pytest

from ._checks import assert_greedy_equal, sampled_pit
from ._stats import ks_uniform

pytestmark = pytest.mark.sglang

GREEDY_TOKENS = 128
SAMPLES, SAMPLE_TOKENS = 64, 16
REPETITIVE = 2  # index of the repetitive prompt in the ``prompts`` fixture


@pytest.fixture(scope="module")
def server(cpu_server):
    return cpu_server(
        ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"]
    )


def test_greedy_equals_transformers(server, hf_model, prompts):
    metas = assert_greedy_equal(server.base_url, hf_model, prompts, GREEDY_TOKENS)
    # every decode step was a verify step of 4 draft tokens
    assert all(m["spec_verify_ct"] >= 1 for m in metas)
    # the repetitive prompt's continuation is found in the corpus: drafts were accepted
    rep = metas[REPETITIVE]
    assert rep["spec_num_correct_drafts"] > 0, rep
    assert rep["spec_verify_ct"] < GREEDY_TOKENS - 1, rep


def test_sampled_verification_follows_target_distribution(server, hf_model, prompts):
    u, metas = sampled_pit(
        server.base_url,
        hf_model,
        prompts[REPETITIVE],
        batch=SAMPLES,
        max_new_tokens=SAMPLE_TOKENS,
        temperature=1.0,
        first_position=1,  # token 0 comes from prefill, later ones from verification
        seed=1234,
    )
    assert u.shape == (SAMPLES * (SAMPLE_TOKENS - 1),)
    # the accept path of sampled verification ran, not only rejections
    assert sum(m["spec_num_correct_drafts"] for m in metas) > 0
    d, p = ks_uniform(u)
    assert p > 1e-3, f"KS D={d:.4f} p={p:.2e}: verified samples do not follow the target"
