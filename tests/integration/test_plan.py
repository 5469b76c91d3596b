"""``GET /admin/plan/window`` on the router over the fakes, and ``specgate plan --once --json`` against it."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.config import write_router_yaml
from tests.support.stack import Stack

ADMIN = "adm-plan-1"


@pytest.fixture
def plan_stack(tmp_path: Path, tokenizer_dir: Path):
    s = Stack(tmp_path, tokenizer_dir, auth={"admin_api_key": ADMIN},
              **{"routing.learning": {"enabled": True}, "planner": {"window_requests": 64, "window_s": 600.0}})
    try:
        yield s
    finally:
        s.close()


def _send(s: Stack, count: int) -> None:
    for i in range(count):
        r = s.client.post("/v1/chat/completions", json={
            "model": "tiny-llama", "messages": [{"role": "user", "content": f"question {i} " + "word " * (i % 5)}],
            "max_tokens": 16 + i % 3, "temperature": 0 if i % 2 == 0 else 0.7})
        assert r.status_code == 200, r.text


def test_window_needs_the_admin_key(plan_stack: Stack) -> None:
    assert plan_stack.client.get("/admin/plan/window").status_code == 401
    r = plan_stack.client.get("/admin/plan/window", params={"model": "nope"},
                              headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


def test_window_serves_the_finished_requests_and_the_pools(plan_stack: Stack) -> None:
    _send(plan_stack, 6)
    r = plan_stack.client.get("/admin/plan/window", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200
    doc = r.json()
    assert doc["model"] == "tiny-llama"
    assert doc["window"]["requests"] == 6 and doc["window"]["window_requests"] == 64
    rows = doc["requests"]
    assert [row["max_tokens"] for row in rows] == [16, 17, 18, 16, 17, 18]
    assert [row["temperature_class"] for row in rows] == ["greedy", "sampled"] * 3
    assert rows[0]["arrival_s"] == 0.0
    assert all(b["arrival_s"] >= a["arrival_s"] for a, b in itertools.pairwise(rows))
    assert all(row["n"] == 1 and row["pool"] in {"spec", "plain"} and row["output_tokens"] >= 1 for row in rows)
    assert {row["speculation"] for row in rows} == {"auto"}
    pools = {p["name"]: p for p in doc["pools"]}
    assert set(pools) == {"spec", "plain"}
    assert pools["spec"]["speculative"] is True and pools["plain"]["speculative"] is False
    assert pools["spec"]["speed"]["gamma"] == 3 and pools["plain"]["speed"]["gamma"] == 0
    assert pools["spec"]["speed_source"] == "learned"
    assert sum(p["fit"]["observations"] for p in pools.values()) >= 1
    assert {p["endpoints"] for p in pools.values()} == {1}
    # the context each pool admits (the speculative pool's own cap; the plain one's the limits')
    assert (pools["spec"]["limit_tokens"], pools["plain"]["limit_tokens"]) == (2048, 4096)


def test_window_rows_carry_the_client_s_speculation_hint(plan_stack: Stack) -> None:
    for hint in ("off", "on", None):
        headers = {"x-specgate-speculation": hint} if hint else {}
        r = plan_stack.client.post("/v1/chat/completions", headers=headers, json={
            "model": "tiny-llama", "messages": [{"role": "user", "content": "a question"}], "max_tokens": 8})
        assert r.status_code == 200, r.text
    r = plan_stack.client.post("/v1/chat/completions", json={
        "model": "tiny-llama", "messages": [{"role": "user", "content": "a question"}], "max_tokens": 8,
        "specgate_speculation": "off"})
    assert r.status_code == 200, r.text
    doc = plan_stack.client.get("/admin/plan/window", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    rows = doc["requests"]
    assert [(row["speculation"], row["pool"]) for row in rows] == [
        ("off", "plain"), ("on", "spec"), ("auto", rows[2]["pool"]), ("off", "plain")]


def test_window_keeps_the_newest_requests(plan_stack: Stack) -> None:
    cfg = yaml.safe_load(plan_stack.config_path.read_text())
    cfg["planner"] = {"window_requests": 3, "window_s": 600.0}
    before = plan_stack.router.state.reloads
    write_router_yaml(plan_stack.config_path, cfg)
    plan_stack.router.wait_reloads(before + 1)
    _send(plan_stack, 5)
    got = plan_stack.client.get("/admin/plan/window", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert got["window"]["requests"] == 3 and got["window"]["recorded"] == 5
    assert [row["max_tokens"] for row in got["requests"]] == [18, 16, 17]


def test_plan_once_json_against_the_router(plan_stack: Stack, tmp_path: Path) -> None:
    _send(plan_stack, 12)
    key_file = tmp_path / "admin.key"
    key_file.write_text("# the router's admin key\n" + ADMIN + "\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("SPECGATE_ADMIN_KEY", None)
    out = subprocess.run([sys.executable, "-m", "router.cli", "plan", "--router", plan_stack.router.base_url,
                          "--engines", "3", "--once", "--json", "--admin-key-file", str(key_file)],
                         capture_output=True, text=True, timeout=120, env=env, check=False)
    assert out.returncode == 0, out.stderr
    advice = json.loads(out.stdout)  # exactly one JSON object on stdout
    assert set(advice) >= {"advised", "splits", "window", "metric", "current", "trusted"}
    k = advice["advised"]["speculative"]
    assert advice["advised"] == {"speculative": k, "plain": 3 - k} and 0 <= k <= 3
    assert [(s["speculative"], s["plain"]) for s in advice["splits"]] == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert all(isinstance(s["predicted_mean_s"], float) and s["predicted_mean_s"] > 0 for s in advice["splits"])
    best = min(advice["splits"], key=lambda s: (s["predicted_mean_s"], s["speculative"]))
    assert best["speculative"] == k
    assert advice["window"]["requests"] == 12 and advice["window"]["seconds"] > 0
    assert advice["current"] == {"speculative": 1, "plain": 1}
    assert advice["metric"] == "mean_s"


def test_plan_without_an_admin_key_exits_2(plan_stack: Stack) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPECGATE_ADMIN_KEY"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-m", "router.cli", "plan", "--router", plan_stack.router.base_url,
                          "--engines", "2", "--once", "--json"], capture_output=True, text=True, timeout=60, env=env,
                         check=False)
    assert out.returncode == 2
    assert out.stdout == ""
    assert "no admin key" in out.stderr


def test_plan_apply_moves_one_engine_at_a_time_on_the_fake_kubernetes_api(plan_stack: Stack, tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    from loadtests.plancli import _round, _scaler
    from loadtests.planloop import Hysteresis, PlanLoop, PlanMetrics
    from router.cli import build_parser
    from tests.support.fake_kube import FakeKubeAPI

    kube = FakeKubeAPI().start()
    try:
        kube.set_replicas("pool-spec", 0)  # below the speculative floor: the first round restores it
        kube.set_replicas("pool-plain", 3)
        _send(plan_stack, 12)
        args = build_parser().parse_args([
            "plan", "--router", plan_stack.router.base_url, "--engines", "3", "--apply", "--kube-api", kube.base_url,
            "--spec-deployment", "pool-spec", "--plain-deployment", "pool-plain", "--floor-speculative", "1",
            "--floor-plain", "1", "--step-s", "0", "--dwell-s", "0", "--change-cost-s", "0", "--max-error", "1e9"])
        loop = PlanLoop(3, Hysteresis(dwell_s=0, step_s=0, change_cost_s=0, floor_speculative=1, floor_plain=1))
        metrics, scaler = PlanMetrics(), _scaler(args)
        splits = [scaler.split()]
        with caplog.at_level("WARNING", logger="specgate.plan"):
            for _ in range(4):
                _round(args, ADMIN, loop, metrics, scaler, ValueError)
                splits.append(scaler.split())
        assert splits[:2] == [(0, 3), (1, 2)]
        for before, after in itertools.pairwise(splits):  # one engine at a time, the total held
            assert abs(after[0] - before[0]) <= 1 and sum(after) == 3 and after[0] >= 1 and after[1] >= 1
        changes = [(a, b) for a, b in itertools.pairwise(splits) if a != b]
        # each move: the giver scaled down first, then the taker up
        writes = kube.scale_writes
        assert len(writes) == 2 * len(changes)
        for (before, after), (down, up) in zip(changes, zip(writes[::2], writes[1::2], strict=True), strict=True):
            giver = "pool-plain" if after[0] > before[0] else "pool-spec"
            assert down == (giver, (before[1] if giver == "pool-plain" else before[0]) - 1)
            assert up[0] != giver
        logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plan: change")]
        assert len(logged) == len(changes)
        assert logged[0].startswith("plan: change 0+3 -> 1+2 (floor")
        get = metrics.registry.get_sample_value
        assert get("specgate_plan_changes_total", {"reason": "floor"}) == 1
        assert get("specgate_plan_changes_total", {"reason": "gain"}) + \
            get("specgate_plan_changes_total", {"reason": "retreat"}) == len(changes) - 1
        assert get("specgate_plan_last_change_timestamp_seconds") > 0
        assert sum(get("specgate_plan_rounds_total", {"outcome": o}) for o in
                   ("untrusted", "floor", "retreat", "at_advice", "no_prediction", "below_min_gain", "below_cost",
                    "dwell", "step_wait", "gain")) == 4
        assert get("specgate_plan_current_engines", {"pool": "speculative"}) == splits[-1][0]
        assert get("specgate_plan_advised_engines", {"pool": "speculative"}) + \
            get("specgate_plan_advised_engines", {"pool": "plain"}) == 3
    finally:
        kube.close()
