"""``specgate drafter eval --launch``: the real SGLang CPU EAGLE-3 pool (topk 1, 3 steps, 4
draft tokens) serving the trained ``models/tiny-llama-eagle3``, at temperature 0 and 1 on
held-out prompts. The greedy mean accept length reaches 2.0; SGLang's per-request accounting
(``spec_correct_drafts_histogram`` summed) equals the verifier simulation of the same requests
cycle for cycle; eval.json holds its invariants. The command starts the one server of this
module after its offline part and stops it before returning. Skipped without the trained
drafter (``make models``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drafters import spec_math

pytestmark = pytest.mark.sglang

PROMPTS, NEW_TOKENS, GAMMA = 8, 48, 3


@pytest.fixture(scope="module")
def trained_draft(eagle3_draft_dir: Path) -> Path:
    if eagle3_draft_dir.name != "tiny-llama-eagle3":
        pytest.skip("needs the trained drafter models/tiny-llama-eagle3 (make models)")
    return eagle3_draft_dir


@pytest.fixture(scope="module")
def engine_histogram(tiny_model_dir: Path, trained_draft: Path) -> list[int]:
    """Accepted-count histogram the engine should report for the greedy requests."""
    import torch

    from drafters.eagle3.data import make_prompts
    from drafters.eagle3.evaluate import engine_counts
    from drafters.eagle3.model import load_draft
    from drafters.eagle3.train import load_target

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = load_target(tiny_model_dir)
        draft = load_draft(trained_draft, model.get_input_embeddings().weight)
        hist = [0] * (GAMMA + 1)
        for p in make_prompts(tok, "heldout", PROMPTS, 0, prompt_tokens=48):
            for a in engine_counts(model, draft, p.ids, GAMMA, NEW_TOKENS):
                hist[a] += 1
    finally:
        torch.set_num_threads(prev)
    return hist


@pytest.fixture(scope="module")
def report(sglang_installed, tiny_model_dir: Path, trained_draft: Path, tmp_path_factory) -> dict:
    from router.cli import main

    out = tmp_path_factory.mktemp("drafter-eval")
    argv = ["drafter", "eval", "--target", str(tiny_model_dir), "--draft", str(trained_draft)]
    argv += ["--launch", "--gamma", str(GAMMA), "--temperature", "0", "--temperature", "1"]
    argv += ["--prompts", str(PROMPTS), "--max-new-tokens", str(NEW_TOKENS), "--out", str(out)]
    assert main(argv) == 0
    assert (out / "acceptance.png").stat().st_size > 0
    assert (out / "sglang.log").stat().st_size > 0  # --launch logs the server it ran there
    return json.loads((out / "eval.json").read_text())


def _check_block(a: dict, c: float) -> None:
    reach = a["position_reach"]
    assert len(reach) == GAMMA and len(a["accepted_histogram"]) == GAMMA + 1
    assert reach == sorted(reach, reverse=True)
    assert a["accept_length"] == pytest.approx(1 + sum(reach), abs=1e-12)
    assert sum(a["accepted_histogram"]) == a["cycles"]
    alpha = spec_math.alpha_from_expected_tokens(a["accept_length"], GAMMA)
    assert a["speedup"]["alpha"] == alpha
    assert a["speedup"]["speedup_at_gamma"] == spec_math.speedup(alpha, GAMMA, c)


def test_greedy_online_accept_length_reaches_two(report: dict) -> None:
    server = report["server"]
    assert (server["launched"], server["speculative_algorithm"]) == (True, "EAGLE3")
    assert (server["speculative_eagle_topk"], server["speculative_num_draft_tokens"]) == (1, 4)
    greedy = report["runs"][0]
    assert greedy["temperature"] == 0.0
    on = greedy["online"]
    assert on["accept_length"] >= 2.0, on
    assert on["requests"] == PROMPTS and on["cycles"] == on["verify_ct"]
    assert on["server_info_avg_accept_length"] is not None
    for run in report["runs"]:
        for source in ("offline", "online"):
            _check_block(run[source], report["c"])
    sampled = report["runs"][1]
    assert sampled["temperature"] == 1.0
    assert sampled["online"]["cycles"] > 0 and sampled["offline"]["cycles"] > 0


def test_online_greedy_accounting_equals_the_verifier_simulation(
    report: dict, engine_histogram: list[int]
) -> None:
    """SGLang's per-request accepted counts, summed, are exactly the simulation's."""
    assert report["runs"][0]["online"]["accepted_histogram"] == engine_histogram
