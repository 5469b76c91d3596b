"""Split advice (replaying a day through every split of N engines) and the speed-model fit from
a load-test report (the commands: tests/integration/test_day_commands.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drafters.spec_math import expected_tokens
from loadtests.calibrate import calibrate
from loadtests.dayreport import read_request_log, summarize, write_request_log
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.dayshapes import default_engine_model, get_shape
from loadtests.daysim import routed, simulate_day
from loadtests.simulate import SimModel, simulate_report
from loadtests.speedfit import FitError, engine_model_from_fit, fit_speed_model
from loadtests.split import SplitError, advise_split, requests_from_log
from loadtests.workload import parse_buckets


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "predict", "best"), [
    ("light", False, "all-spec"), ("heavy", False, "learned 1s+1p"), ("heavy", True, "learned 1s+1p")])
def test_split_advice_on_a_synthetic_day(shape: str, predict: bool, best: str) -> None:
    model = default_engine_model()
    reqs = get_shape(shape).requests(1)
    adv = advise_split(reqs, 2, model, seed=1, predict=predict)
    names = ["all-plain", "routed 1s+1p", "learned 1s+1p", *(["predict 1s+1p"] if predict else []), "all-spec"]
    assert [p["deployment"] for p in adv.predictions] == names
    assert [p["k"] for p in adv.predictions] == [0, 1, 1, *([1] if predict else []), 2]
    fastest = min(adv.predictions, key=lambda p: p["mean_s"])
    assert adv.best == fastest["deployment"] == best
    k = fastest["k"]
    assert adv.best_k == k
    assert f"advice: {k} speculative + {2 - k} plain engines ({best}; best mean_s)" in adv.text()


@pytest.mark.slow
def test_replaying_a_simulator_log_reproduces_the_day(tmp_path: Path) -> None:
    model = default_engine_model()
    shape = get_shape("mixed")
    reqs = shape.requests(2)
    dep = routed(1, 2, lambda: PolicyRouter(settings_for(model)))
    res = simulate_day(reqs, dep, model, seed=2)
    log = write_request_log(res.records, tmp_path / "day.jsonl")
    again = requests_from_log(read_request_log(log))
    assert again == reqs
    adv = advise_split(again, 2, model, seed=2)
    routed_pred = adv.predictions[1]
    direct = summarize(res, day_s=max(r.arrival_s for r in reqs), long_prompt_tokens=32768)
    assert routed_pred["mean_s"] == direct["mean_s"] and routed_pred["reasons"] == direct["reasons"]


def test_requests_from_a_load_test_log() -> None:
    rows = [
        {"t_start": 10.5, "phase": "measure", "prompt_tokens": 900, "output_tokens": 30, "max_tokens": 64},
        {"t_start": 10.0, "phase": "measure", "prompt_tokens": 100, "output_tokens": 20, "max_tokens": 64},
        {"t_start": 9.0, "phase": "warmup", "prompt_tokens": 100, "output_tokens": 20, "max_tokens": 64},
        {"t_start": 11.0, "phase": "measure", "prompt_tokens": None, "output_tokens": 0, "error": "timeout"},
    ]
    reqs = requests_from_log(rows, temperature=1.0, cached_fraction=0.5)
    assert [(r.arrival_s, r.prompt_tokens, r.cached_tokens, r.output_tokens, r.max_new_tokens, r.temperature)
            for r in reqs] == [(0.0, 100, 50, 20, 64, 1.0), (0.5, 900, 450, 30, 64, 1.0)]
    with pytest.raises(SplitError, match="no usable row"):
        requests_from_log(rows[2:])


def test_speed_model_fit_recovers_a_known_model() -> None:
    m = SimModel(t0_s=0.02, batch_knee=40, attn_s_per_token=5e-8, prefill_s_per_token=1e-5, alpha_short=0.8,
                 alpha_knee_tokens=1024, alpha_drop_per_doubling=0.07, gamma=4, c=0.08)
    report = simulate_report(m, parse_buckets("1k-2k,4k-8k,16k-32k,64k-128k"), [1, 4, 16], repetitions=1)
    fit = fit_speed_model(report)
    plain, spec = fit["pools"]["plain"], fit["pools"]["spec"]
    assert plain["t0_s"] == pytest.approx(0.02, rel=1e-4)
    assert plain["batch_knee"] == pytest.approx(40, rel=1e-4)
    assert plain["attn_s_per_token"] == pytest.approx(5e-8, rel=1e-3)
    assert plain["prefill_s_per_token"] == pytest.approx(1e-5, rel=1e-3)
    assert spec["gamma"] == 4
    assert spec["c"] == pytest.approx(0.08, abs=0.01)
    greedy = spec["alpha_greedy"]
    assert greedy["alpha_drop_per_doubling"] == pytest.approx(0.07, abs=0.01)
    assert m.alpha(greedy["alpha_knee_tokens"]) == pytest.approx(greedy["alpha_short"], abs=0.02)
    assert "alpha_sampled not measured (no sampled request reported its accept length; `specgate loadtest " \
           "--sampled-fraction 0.5` measures both classes in one run)" in fit["warnings"]
    em = engine_model_from_fit(fit)
    assert (em.speed.t0_s, em.speed.gamma) == (plain["t0_s"], 4)
    cal = calibrate(report)
    assert cal.evidence["speed_model"]["pools"]["plain"]["t0_s"] == plain["t0_s"]
    text = cal.patch_yaml()
    [plain_patch] = yaml.safe_load(text)["pools"]
    assert plain_patch["name"] == "plain" and plain_patch["speed"] == pytest.approx(
        {"decode_s_per_token": 0.02, "batch_knee": 40.0, "attention_s_per_token": 5e-08, "kv_read_s_per_token": 0.0, "prefill_s_per_token": 1e-05},
        rel=1e-4)
    assert "# warning: the speculative pool's block is left out, it lacks an accept length" in text
    from loadtests.speedfit import speed_blocks
    from router.config.tree import SpeedConfig

    blocks = speed_blocks(fit)
    SpeedConfig(**blocks["plain"])
    assert blocks["spec"]["accept_length_greedy"] == pytest.approx(
        expected_tokens(greedy["alpha_short"], 4))


def test_speed_model_fit_needs_a_plain_target() -> None:
    report = simulate_report(SimModel(), parse_buckets("1k-2k"), [1], repetitions=1)
    report["targets"] = [t for t in report["targets"] if t["role"] != "plain"]
    with pytest.raises(FitError, match="no plain target"):
        fit_speed_model(report)


def test_one_run_with_both_classes_gives_complete_speed_blocks(tmp_path: Path) -> None:
    import json

    from loadtests.calibrate import calibrate_report
    from router.config.tree import parse_config

    m = SimModel(t0_s=0.02, batch_knee=40, attn_s_per_token=5e-8, prefill_s_per_token=1e-5, alpha_short=0.8,
                 alpha_knee_tokens=1024, alpha_drop_per_doubling=0.07, gamma=4, c=0.08)
    report = simulate_report(m, parse_buckets("1k-2k,4k-8k,16k-32k,64k-128k"), [1, 4, 16], repetitions=1,
                             sampled_fraction=0.5, alpha_sampled_short=0.5)
    point = report["points"][0]["targets"]["spec"]["accept_length_by_class"]
    assert set(point) == {"greedy", "sampled"} and point["greedy"]["n"] == point["sampled"]["n"] == 2
    fit = fit_speed_model(report)
    spec = fit["pools"]["spec"]
    knee = spec["alpha_greedy"]["alpha_knee_tokens"]
    assert spec["alpha_greedy"]["alpha_short"] == pytest.approx(m.alpha(knee), abs=0.02)
    assert spec["alpha_sampled"]["alpha_short"] == pytest.approx(m.alpha(knee) - 0.3, abs=0.02)
    assert not any("not measured" in w for w in fit["warnings"])
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    _cal, merged, text, _ = calibrate_report(path)
    pools = {p["name"]: p["speed"] for p in yaml.safe_load(text)["pools"]}
    assert set(pools) == {"spec", "plain"}
    assert pools["spec"]["accept_length_greedy"] == pytest.approx(expected_tokens(m.alpha(knee), 4), rel=0.03)
    assert pools["spec"]["accept_length_sampled"] == pytest.approx(expected_tokens(m.alpha(knee) - 0.3, 4), rel=0.03)
    assert pools["plain"] == pytest.approx({"decode_s_per_token": 0.02, "batch_knee": 40.0,
                                            "attention_s_per_token": 5e-08, "kv_read_s_per_token": 0.0,
                                            "prefill_s_per_token": 1e-05}, rel=1e-4)
    cfg = parse_config(merged)
    assert {p.name: p.speed is not None for p in cfg.pools} == {"spec": True, "plain": True}
    assert "left out" not in text
