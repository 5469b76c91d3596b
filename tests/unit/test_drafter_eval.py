"""specgate drafter eval: SGLang's per-request accounting summed (MockTransport), the offline
verifier paths (T = 0 two ways, seeded T = 1), and the offline command's eval.json / plot on the
tiny models (skipped when ``make models`` has not built them)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from drafters import spec_math
from drafters.drafter_eval import (
    SCHEMA,
    EvalError,
    launch_args,
    measure_online,
    server_speculative_config,
)

ROOT = Path(__file__).resolve().parents[2]
TARGET, DRAFT = ROOT / "models" / "tiny-llama", ROOT / "models" / "tiny-llama-eagle3"
needs_models = pytest.mark.skipif(
    not (TARGET / "config.json").exists() or not (DRAFT / "model.safetensors").exists(),
    reason="models/tiny-llama{,-eagle3} not built (make models)",
)

SERVER_INFO = {
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "version": "0.5.23",
    "internal_states": [{"avg_spec_accept_length": 2.5}],
}
# three requests as SGLang 0.5.23 reports them; the last finished at prefill (no spec keys)
METAS = [
    {"completion_tokens": 11, "spec_verify_ct": 4, "spec_num_correct_drafts": 6,
     "spec_correct_drafts_histogram": [1, 1, 1, 1]},
    {"completion_tokens": 6, "spec_verify_ct": 2, "spec_num_correct_drafts": 3,
     "spec_correct_drafts_histogram": [1, 0, 0, 1]},
    {"completion_tokens": 1},
]  # fmt: skip


def _mock(metas: list[dict], seen: list[dict]) -> httpx.Client:
    it = iter(metas)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            seen.append(json.loads(request.content))
            return httpx.Response(200, json={"output_ids": [], "meta_info": next(it)})
        if request.url.path == "/server_info":
            return httpx.Response(200, json=SERVER_INFO)
        if request.url.path == "/metrics":
            return httpx.Response(200, text='sglang:spec_accept_length{model_name="m"} 2.25\n')
        return httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_online_sums_sglang_accounting() -> None:
    seen: list[dict] = []
    with _mock(METAS, seen) as client:
        res = measure_online(
            client, "http://s", [[1, 2], [3], [4]], temperature=1.0, max_new_tokens=9, gamma=3
        )
    assert seen[0] == {
        "input_ids": [1, 2],
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 9},
    }
    assert (res.requests, res.completion_tokens, res.verify_ct, res.correct_drafts) == (3, 18, 6, 9)
    assert res.accept_length == 2.5
    assert res.meta_accept_length == 3.0  # counts the prefill's token too
    assert res.stats is not None
    assert res.stats.accepted_histogram == [2, 1, 1, 2]
    assert res.stats.accept_length == 2.5
    assert res.stats.position_reach == pytest.approx([4 / 6, 3 / 6, 2 / 6], abs=1e-12)
    assert (res.server_info_avg_accept_length, res.metrics_spec_accept_length) == (2.5, 2.25)


def test_online_without_histograms_keeps_tau_only() -> None:
    metas = [{k: v for k, v in m.items() if k != "spec_correct_drafts_histogram"} for m in METAS]
    with _mock(metas, []) as client:
        res = measure_online(client, "http://s", [[1]] * 3, temperature=0, max_new_tokens=9, gamma=3)
    assert res.stats is None and res.accept_length == 2.5


@pytest.mark.parametrize(
    ("metas", "message"),
    [
        ([{"completion_tokens": 3, "spec_verify_ct": 2, "spec_num_correct_drafts": 1,
           "spec_correct_drafts_histogram": [2]}], "disagrees"),
        ([{"completion_tokens": 3, "spec_verify_ct": 1, "spec_num_correct_drafts": 4,
           "spec_correct_drafts_histogram": [0, 0, 0, 0, 1]}], "gamma=3"),
        ([{"completion_tokens": 1}], "no verify cycle"),
    ],
)  # fmt: skip
def test_online_rejects_inconsistent_answers(metas: list[dict], message: str) -> None:
    with _mock(metas, []) as client, pytest.raises(EvalError, match=message):
        measure_online(client, "http://s", [[1]], temperature=0, max_new_tokens=9, gamma=3)


def test_server_config_and_launch_args() -> None:
    assert server_speculative_config(SERVER_INFO)["speculative_num_draft_tokens"] == 4
    with pytest.raises(EvalError, match="no speculative"):
        server_speculative_config({"speculative_algorithm": None})
    args = launch_args("d", 3)
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "4"
    assert args[args.index("--speculative-eagle-topk") + 1] == "1"


@pytest.fixture(scope="module")
def tiny():
    import torch

    from drafters.eagle3.data import make_prompts
    from drafters.eagle3.model import load_draft
    from drafters.eagle3.train import load_target

    torch.set_num_threads(1)
    model, tok = load_target(TARGET)
    draft = load_draft(DRAFT, model.get_input_embeddings().weight)
    return model, draft, make_prompts(tok, "heldout", 4, 0, prompt_tokens=48)


@pytest.mark.slow  # the tiny models: about 5 s to load (once per module), 1-7 s to run on CPU
@needs_models
def test_sampling_path_at_t0_equals_the_greedy_path(tiny) -> None:
    """The two offline paths agree: the verifier at T = 0 on fresh target passes gives the
    same text and the same counted cycles as greedy decoding + one capture."""
    import torch

    from drafters.eagle3.data import capture
    from drafters.eagle3.evaluate import greedy_sequence, sample_cycles, simulate_sequence

    model, draft, prompts = tiny
    gen = torch.Generator().manual_seed(0)
    for p in prompts:
        seq = greedy_sequence(model, p.ids, 40)
        _, aux, _ = capture(model, [seq], draft.spec.aux_layer_ids, model.config.pad_token_id)
        counts, text = sample_cycles(model, draft, p.ids, 3, 40, 0.0, gen)
        assert text == seq[len(p.ids) :]
        assert counts == simulate_sequence(draft, aux[0], seq, len(p.ids), 3)


@pytest.mark.slow  # the tiny models: about 5 s to load (once per module), 1-7 s to run on CPU
@needs_models
def test_sampled_path_is_seeded(tiny) -> None:
    import torch

    from drafters.eagle3.evaluate import sample_cycles

    model, draft, prompts = tiny
    runs = [
        sample_cycles(model, draft, prompts[0].ids, 3, 32, 1.0, torch.Generator().manual_seed(7))
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    counts, text = runs[0]
    assert len(text) <= 32 and all(0 <= a <= 3 for a in counts)


@pytest.mark.slow  # the tiny models: about 5 s to load (once per module), 1-7 s to run on CPU
@needs_models
def test_offline_command_writes_schema_and_plot(tmp_path: Path, capsys) -> None:
    from drafters.eagle3.evaluate import evaluate
    from router.cli import main

    argv = ["drafter", "eval", "--target", str(TARGET), "--draft", str(DRAFT), "--prompts", "4"]
    argv += ["--max-new-tokens", "24", "--temperature", "0", "--temperature", "1"]
    argv += ["--c", "0.1", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and out.count(" offline ") == 2
    doc = json.loads((tmp_path / "eval.json").read_text())
    assert (tmp_path / "acceptance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert doc["schema"] == SCHEMA
    assert set(doc) == {"schema", "target", "draft", "prompts", "drafting", "c", "server", "runs"}
    assert doc["prompts"]["split"] == "heldout" and doc["prompts"]["count"] == 4
    assert "stdlib_corpus(\"heldout\")" in doc["prompts"]["source"]
    assert doc["drafting"] == {"gamma": 3, "topk": 1, "num_draft_tokens": 4}
    assert doc["server"] is None and doc["c"] == 0.1
    assert [r["temperature"] for r in doc["runs"]] == [0.0, 1.0]
    for run in doc["runs"]:
        assert run["online"] is None
        a = run["offline"]
        assert len(a["position_acceptance"]) == len(a["position_reach"]) == 3
        assert len(a["accepted_histogram"]) == 4 and sum(a["accepted_histogram"]) == a["cycles"]
        reach = a["position_reach"]
        assert reach == sorted(reach, reverse=True)  # cumulative acceptance never rises
        assert a["accept_length"] == pytest.approx(1 + sum(reach), abs=1e-12)
        assert a["tokens_emitted"] == sum((k + 1) * h for k, h in enumerate(a["accepted_histogram"]))
        s = a["speedup"]
        alpha = spec_math.alpha_from_expected_tokens(a["accept_length"], 3)
        assert s["alpha"] == a["alpha"] == alpha
        assert s["gamma_opt"] == spec_math.optimal_gamma(alpha, 0.1)
        for row in s["table"]:
            assert row["speedup"] == spec_math.speedup(alpha, row["gamma"], 0.1)
    greedy = evaluate(TARGET, DRAFT, prompts=4, gamma=3, max_new_tokens=24)
    off = doc["runs"][0]["offline"]
    assert (off["cycles"], off["accepted_histogram"]) == (greedy.cycles, greedy.accepted_histogram)


def test_command_rejects_bad_arguments(tmp_path: Path, capsys) -> None:
    from router.cli import main

    base = ["drafter", "eval", "--out", str(tmp_path)]
    assert main([*base, "--temperature", "-1"]) == 2
    assert main([*base, "--no-offline"]) == 2
    assert main([*base, "--target", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "--temperature" in err and "--no-offline needs" in err and "no config.json" in err
