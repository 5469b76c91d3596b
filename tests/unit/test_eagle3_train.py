"""drafters.eagle3: TTT unroll == inference chain, short seeded training, export format.

One tiny target (3 training steps) and a ~40-step drafter run into tmp_path; well under a
minute on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drafters.eagle3 import train as train_mod
from drafters.eagle3.model import DraftSpec, Eagle3Draft, exported_shapes, load_draft
from serving import tinymodel

SMALL = train_mod.TrainConfig(
    seed=0,
    steps=40,
    batch_size=4,
    ttt_steps=3,
    lr=3e-3,
    warmup_steps=5,
    draft_vocab_size=256,
    prompts=24,
    prompt_tokens=24,
    max_new_tokens=24,
)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("target") / "tiny"
    tinymodel.build(out, train_steps=3, progress=False)
    return out


@pytest.fixture(scope="module")
def trained(target: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("draft") / "eagle3"
    manifest = train_mod.train(target, out, SMALL, progress=False)
    return out, manifest


def _tiny_draft() -> Eagle3Draft:
    torch.manual_seed(0)
    spec = DraftSpec(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=50,
        draft_vocab_size=20,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=512,
        aux_layer_ids=(0, 1, 2),
    )
    draft = Eagle3Draft(spec, torch.randn(50, 32))
    draft.set_vocab(torch.arange(0, 40, 2))
    return draft


@pytest.mark.slow
def test_ttt_unroll_equals_incremental_chain() -> None:
    draft = _tiny_draft()
    aux, tokens = torch.randn(2, 12, 96), torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        unrolled = draft.ttt_logits(aux, tokens, 4)
    worst = 0.0
    for b in range(2):
        for t in range(11):
            steps = min(4, 11 - t)
            forced = [int(tokens[b, t + 1 + k]) for k in range(1, steps)]
            with torch.no_grad():
                _, logits = draft.chain(aux[b, : t + 1], tokens[b, : t + 2], steps, forced)
            for k in range(steps):
                worst = max(worst, float((logits[k] - unrolled[k][b, t]).abs().max()))
    assert worst < 1e-4


def test_vocab_maps_are_offsets() -> None:
    draft = _tiny_draft()
    assert draft.d2t.tolist() == list(range(20))  # id i -> 2i, offset i
    assert draft.draft_ids.tolist() == list(range(0, 40, 2))
    assert int(draft.t2d.sum()) == 20 and bool(draft.t2d[38]) and not bool(draft.t2d[39])
    with pytest.raises(ValueError):
        draft.set_vocab(torch.arange(19, -1, -1))


def test_aux_layers() -> None:
    assert train_mod.default_aux_layers(4) == (0, 1, 2)
    assert train_mod.default_aux_layers(32) == (1, 15, 28)  # SpecForge's rule
    with pytest.raises(ValueError):
        train_mod.default_aux_layers(3)


@pytest.mark.slow
def test_loss_falls(trained: tuple[Path, dict]) -> None:
    out, manifest = trained
    log = json.loads((out / "train_log.json").read_text())
    assert len(log["loss"]) == SMALL.steps
    first, last = sum(log["loss"][:5]) / 5, sum(log["loss"][-5:]) / 5
    assert last < first, (first, last)
    # The 3-step target is nearly uniform, so most of the cross entropy is the teacher's
    # entropy; the reducible part, KL(target || draft), must fall for every draft step.
    for k, series in enumerate(log["step_kl"]):
        kl_first, kl_last = sum(series[:5]) / 5, sum(series[-5:]) / 5
        assert kl_last < kl_first / 3, (k, kl_first, kl_last)
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert manifest["aux_layer_ids"] == [0, 1, 2]


@pytest.mark.slow
def test_export_names_shapes_and_config(trained: tuple[Path, dict], target: Path) -> None:
    from safetensors import safe_open

    out, _ = trained
    config = json.loads((out / "config.json").read_text())
    target_config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["num_hidden_layers"] == 1
    assert config["draft_vocab_size"] == SMALL.draft_vocab_size
    assert config["vocab_size"] == target_config["vocab_size"]
    assert config["hidden_size"] == target_config["hidden_size"]
    assert config["max_position_embeddings"] >= target_config["max_position_embeddings"]
    assert config["eagle_config"] == {
        "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
        "use_aux_hidden_state": True,
    }
    spec = DraftSpec.from_target_config(
        type("C", (), target_config)(), SMALL.draft_vocab_size, (0, 1, 2)
    )
    want = exported_shapes(spec)
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names = list(f.keys())
        got = {name: tuple(f.get_slice(name).get_shape()) for name in names}
        d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
        assert f.get_tensor("fc.weight").dtype == torch.float32
    assert got == want
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool
    hot = d2t + torch.arange(d2t.numel())  # SGLang: hot_token_id = d2t + arange
    assert hot.tolist() == torch.nonzero(t2d).flatten().tolist()


@pytest.mark.slow
def test_second_run_is_skipped_and_deterministic(
    trained: tuple[Path, dict], target: Path, tmp_path: Path
) -> None:
    out, _ = trained
    assert train_mod.train(target, out, SMALL, progress=False)["skipped"] is True
    short = train_mod.TrainConfig(**{**SMALL.__dict__, "steps": 6})
    a = train_mod.train(target, tmp_path / "a", short, progress=False)
    b = train_mod.train(target, tmp_path / "b", short, progress=False)
    assert a["skipped"] is False and b["skipped"] is False
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (
        tmp_path / "b" / "model.safetensors"
    ).read_bytes()


@pytest.mark.slow
def test_load_and_evaluate(trained: tuple[Path, dict], target: Path) -> None:
    from drafters.eagle3.evaluate import evaluate

    out, _ = trained
    model, _ = train_mod.load_target(target)
    draft = load_draft(out, model.get_input_embeddings().weight)
    assert draft.spec.draft_vocab_size == SMALL.draft_vocab_size
    res = evaluate(target, out, prompts=4, gamma=3, max_new_tokens=16, prompt_tokens=24)
    assert res.prompts == 4 and res.cycles == sum(res.accepted_histogram) > 0
    assert 1.0 <= res.accept_length <= 4.0
    assert len(res.position_acceptance) == 3
