"""The real SGLang CPU server with EAGLE-3 speculation (draft tree of topk 2, 3 steps, 6 draft
tokens): greedy output equals ``transformers``' token for token, and at temperature 1
verified tokens follow the target distribution. The draft is the trained
``models/tiny-llama-eagle3`` when present (drafts get accepted, so tree masks and accepted
paths matter), else a seeded random head (losslessness holds for any drafter)."""

from __future__ import annotations

import pytest

from ._checks import assert_greedy_equal, sampled_pit
from ._stats import ks_uniform

pytestmark = pytest.mark.sglang

GREEDY_TOKENS = 96
SAMPLES, SAMPLE_TOKENS = 32, 10


@pytest.fixture(scope="module")
def server(cpu_server, eagle3_draft_dir):
    return cpu_server(
        [
            "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(eagle3_draft_dir),
            "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "2",
            "--speculative-num-draft-tokens", "6",
        ]
    )


def test_greedy_equals_transformers(server, hf_model, prompts, eagle3_draft_dir):
    metas = assert_greedy_equal(server.base_url, hf_model, prompts, GREEDY_TOKENS)
    assert all(m["spec_verify_ct"] >= 1 for m in metas)
    if eagle3_draft_dir.name == "tiny-llama-eagle3":  # the trained draft: paths get accepted
        assert sum(m["spec_num_correct_drafts"] for m in metas) > 0


def test_sampled_verification_follows_target_distribution(server, hf_model, prompts):
    u, _ = sampled_pit(
        server.base_url,
        hf_model,
        prompts[0],
        batch=SAMPLES,
        max_new_tokens=SAMPLE_TOKENS,
        temperature=1.0,
        first_position=1,
        seed=1234,
    )
    d, p = ks_uniform(u)
    assert p > 1e-3, f"KS D={d:.4f} p={p:.2e}: verified samples do not follow the target"
