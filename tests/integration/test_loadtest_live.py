"""The load tester against paced fake SGLang pools (and the real router) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from loadtests.report import SCHEMA_NAME, build_report, load_report, validate_report, write_report
from loadtests.runner import LoadTest, Target, expected_requests
from loadtests.simulate import SimServer
from loadtests.workload import Workload, parse_buckets
from router.cli import main as specgate
from tests.support import RouterServer
from tests.support.sim import MODEL


def _metrics(url: str) -> tuple[str, ...]:
    return (url + "/metrics",)


def test_compare_spec_plain_router(router_over_pair: tuple[RouterServer, SimServer, SimServer],
                                   tmp_path: Path) -> None:
    router, spec, plain = router_over_pair
    w = Workload(buckets=parse_buckets("32-48,512-768"), loads=(1, 4), output_tokens=(8, 8),
                 requests_per_run=4, warmup_runs=1, repetitions=3, metrics_interval_s=0.05, seed=5)
    targets = [Target("spec", spec.base_url, "spec", _metrics(spec.base_url)),
               Target("plain", plain.base_url, "plain", _metrics(plain.base_url)),
               Target("router", router.base_url, "router",
                      _metrics(spec.base_url) + _metrics(plain.base_url))]
    test = LoadTest(w, targets)
    asyncio.run(test.run())
    report = build_report(test, speculation={"gamma": MODEL.gamma, "drafter_cost_ratio": MODEL.c})
    validate_report(report)
    assert report["schema"] == {"name": SCHEMA_NAME, "version": 1}
    assert report["model"] == "sim-model"

    exp = expected_requests(w, 3)
    assert exp == {"warmup": 2 * 3 * (1 + 4), "measured": 2 * 2 * 3 * 3 * 4, "total": 174}
    c = report["counts"]
    assert (c["planned"], c["sent"], c["warmup"], c["measured"], c["ok"], c["not_sent"]) == \
        (174, 174, 30, 144, 174, 0)
    assert report["stopped"]["reason"] == "completed"

    points = {(p["bucket"], p["load"]): p for p in report["points"]}
    assert sorted(points) == [("32-48", 1.0), ("32-48", 4.0), ("512-768", 1.0), ("512-768", 4.0)]
    for p in points.values():
        for name, tp in p["targets"].items():
            assert tp["requests"] == {"planned": 12, "sent": 12, "ok": 12}, name
            assert tp["errors_by_status"] == {}
            assert [r["rep"] for r in tp["runs"]] == [0, 1, 2]
            assert tp["output_tokens"]["min"] == tp["output_tokens"]["max"] == 8.0
            assert tp["ttft_s"]["n"] == 12 and tp["itl_s"]["n"] == 12 * 7
        assert set(p["ratios"]) == {"spec_vs_plain", "router_vs_plain", "router_vs_spec"}
    # The router sends short prompts to the spec pool and long ones to the plain pool, except
    # those it keeps on spec because the plain engine is busier when they arrive (plain_busier).
    for load in (1.0, 4.0):
        short, long_ = points[("32-48", load)]["targets"]["router"], points[("512-768", load)]["targets"]["router"]
        assert (short["routed"], short["reasons"]) == ({"spec": 12}, {"speculative": 12})
        kept = long_["reasons"].get("plain_busier", 0)
        assert long_["reasons"] == {"long_context": 12 - kept, **({"plain_busier": kept} if kept else {})}
        assert long_["routed"] == {"plain": 12 - kept, **({"spec": kept} if kept else {})}
    # The spec fake's accept length follows the model: E[tau](0.8, 4) short, 1 long.
    acc_short = points[("32-48", 1.0)]["targets"]["spec"]["pool_metrics"]["accept_length"]["mean"]
    acc_long = points[("512-768", 1.0)]["targets"]["spec"]["pool_metrics"]["accept_length"]["mean"]
    assert acc_short == pytest.approx(MODEL.accept_length(40), abs=1e-6)
    assert acc_long == pytest.approx(1.0)
    assert points[("32-48", 1.0)]["targets"]["plain"]["pool_metrics"]["accept_length"] is None
    # Speculation pays at short context / concurrency 1 (model 2.04x) and costs at long
    # context / concurrency 4 (model 0.39x); the margins are wide against timer noise, and the
    # median of 3 paired runs survives one run stalled by a busy machine.
    s = report["tables"]["spec_vs_plain"]["rows"]
    assert s[0]["values"]["1"] > 1.1 and s[1]["values"]["4"] < 0.8

    paths = write_report(report, tmp_path / "out", results=[r for rec in test.records for r in rec.results])
    names = sorted(p.name for p in paths)
    assert names == ["accept_length.png", "latency_percentiles.png", "report.json", "report.md",
                     "requests.jsonl", "speedup_heatmap.png"]
    for p in paths:
        assert p.stat().st_size > 0
    assert (tmp_path / "out" / "speedup_heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert load_report(tmp_path / "out" / "report.json")["counts"]["sent"] == 174
    assert len((tmp_path / "out" / "requests.jsonl").read_text().splitlines()) == 174
    assert "## spec vs plain: decode speedup" in (tmp_path / "out" / "report.md").read_text()


def test_open_loop_counts_and_errors_by_status(sim_pair: tuple[SimServer, SimServer]) -> None:
    _, plain = sim_pair
    r = httpx.post(plain.base_url + "/_fake/script",
                   json=[{"path": "/v1/chat/completions", "status": 429, "count": 2}])
    assert r.status_code == 200
    w = Workload(buckets=parse_buckets("10-20"), loads=(50.0, 100.0), mode="open", output_tokens=(4, 4),
                 requests_per_run=6, warmup_runs=0, repetitions=1, metrics_interval_s=0.05)
    test = LoadTest(w, [Target("target", plain.base_url, "target", _metrics(plain.base_url))])
    asyncio.run(test.run())
    report = build_report(test)
    assert report["grid"]["load_kind"] == "rate_rps"
    c = report["counts"]
    assert (c["planned"], c["sent"], c["ok"], c["warmup"]) == (12, 12, 10, 0)
    first = report["points"][0]["targets"]["target"]
    assert first["errors_by_status"] == {"429": 2}
    assert first["status_counts"] == {"200": 4, "429": 2}
    assert report["points"][1]["targets"]["target"]["errors_by_status"] == {}
    assert set(report["tables"]) == {"target"}


def test_time_limit_stops_by_itself(sim_pair: tuple[SimServer, SimServer]) -> None:
    _, plain = sim_pair
    w = Workload(buckets=parse_buckets("10-20"), loads=(2,), output_tokens=(4, 4), requests_per_run=10_000,
                 warmup_runs=1, repetitions=3, max_duration_s=0.3)
    test = LoadTest(w, [Target("target", plain.base_url)])
    t0 = time.monotonic()
    asyncio.run(test.run())
    assert time.monotonic() - t0 < 5
    report = build_report(test)
    c = report["counts"]
    assert report["stopped"]["reason"] == "time_limit"
    assert c["planned"] == 2 + 30_000 and c["sent"] + c["not_sent"] == c["planned"] and c["not_sent"] > 0
    assert c["sent"] == c["ok"]


def test_cli_single_target(sim_pair: tuple[SimServer, SimServer], tmp_path: Path) -> None:
    spec, _ = sim_pair
    out = tmp_path / "lt"
    rc = specgate(["loadtest", "--target", spec.base_url, "--grid", "ctx=20-30;conc=1,2",
                   "--output-tokens", "4", "--requests", "3", "--warmup", "1", "--repetitions", "3",
                   "--metrics-interval-s", "0.05", "--out", str(out), "--quiet"])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    validate_report(report)
    c = report["counts"]
    assert (c["sent"], c["warmup"], c["measured"], c["ok"]) == (1 + 2 + 3 * 3 * 2, 3, 18, 21)
    assert report["workload"]["loads"] == [1.0, 2.0] and report["grid"]["buckets"] == \
        [{"name": "20-30", "lo": 20, "hi": 30}]
    assert report["targets"] == [{"name": "target", "url": spec.base_url, "role": "target",
                                  "metrics_urls": [spec.base_url + "/metrics"]}]
    tp = report["points"][0]["targets"]["target"]
    assert tp["spread"]["metric"] == "decode_tps_p50" and tp["spread"]["n"] == 3
    for name in ("report.md", "speedup_heatmap.png", "latency_percentiles.png", "accept_length.png"):
        assert (out / name).exists()
    assert specgate(["loadtest", "--spec", spec.base_url, "--out", str(out), "--quiet"]) == 2
    assert specgate(["loadtest", "--target", spec.base_url, "--grid", "ctx=1-2;bogus=1",
                     "--out", str(out)]) == 2


def test_client_drops_idle_connections_before_sglang_does() -> None:
    """Regression: with aiohttp's default 15 s keep-alive, a run that started just as SGLang's
    uvicorn (5 s keep-alive) closed the pooled connections lost its first requests as
    ``connection`` errors (10 of 12 at concurrency 12 in the first local-stack grid; a
    uvicorn server with a 1 s keep-alive and idle gaps scanned across 1 s reproduced 61
    failures with a 15 s client keep-alive and none with 0.5 s). The client must always be
    the side that closes an idle connection."""
    import importlib.util
    import re

    from loadtests.runner import KEEPALIVE_S

    sglang_keepalive_s = 5.0
    spec = importlib.util.find_spec("sglang")
    if spec is not None and spec.submodule_search_locations:
        environ = Path(next(iter(spec.submodule_search_locations))) / "srt" / "environ.py"
        m = re.search(r"SGLANG_TIMEOUT_KEEP_ALIVE = EnvInt\((\d+)\)", environ.read_text())
        assert m, "SGLang's keep-alive setting moved: recheck KEEPALIVE_S"
        sglang_keepalive_s = float(m.group(1))
    assert 0 < KEEPALIVE_S <= sglang_keepalive_s / 2


def test_a_router_with_client_keys_is_load_tested_with_the_targets_api_key(
        sim_pair: tuple[SimServer, SimServer], tmp_path: Path, tokenizer_dir: Path) -> None:
    """``Target.api_key`` (``specgate loadtest --api-key``) goes out as ``Authorization: Bearer``;
    without it every request of a router with ``auth.api_keys`` is a 401, and the key never
    reaches the report."""
    from tests.support.config import write_router_yaml
    from tests.support.sim import sim_router_config

    spec, plain = sim_pair
    key = "sk-loadtest-key-0123"
    doc = sim_router_config(tokenizer_dir, spec.base_url, plain.base_url)
    doc["auth"] = {"api_keys": [key]}
    router = RouterServer(write_router_yaml(tmp_path / "router.yaml", doc)).start(ready=True)
    try:
        w = Workload(buckets=parse_buckets("32-48"), loads=(1,), output_tokens=(4, 4),
                     requests_per_run=3, warmup_runs=0, repetitions=1, metrics_interval_s=0.05,
                     seed=3, model="sim-model")
        reports = {}
        for name, api_key in (("with_key", key), ("without_key", None)):
            test = LoadTest(w, [Target("target", router.base_url, "target", api_key=api_key)])
            asyncio.run(test.run())
            reports[name] = build_report(test)
    finally:
        router.stop()
    points = {name: r["points"][0]["targets"]["target"] for name, r in reports.items()}
    assert points["with_key"]["requests"] == {"planned": 3, "sent": 3, "ok": 3}
    assert points["without_key"]["requests"] == {"planned": 3, "sent": 3, "ok": 0}
    assert points["without_key"]["errors_by_status"] == {"401": 3}
    assert key not in json.dumps(reports["with_key"])


def test_the_paced_spec_fake_reports_each_requests_own_accept_length(sim_pair: tuple[SimServer, SimServer]) -> None:
    """A request's ``spec_tokens_details`` carries E[tau] at its own context (what it is paced
    by), not the short-context figure: a long prompt's is lower (the model's alpha falls with context)."""
    from serving.fake_sglang.tokens import simple_chat_tokens
    from tests.support.sim import MODEL

    spec, _ = sim_pair
    got = {}
    for words in (4, 600):
        messages = [{"role": "user", "content": " ".join(["word"] * words)}]
        body = {"model": "sim-model", "messages": messages, "max_tokens": 4, "return_spec_tokens_details": True}
        r = httpx.post(spec.base_url + "/v1/chat/completions", json=body, timeout=10)
        assert r.status_code == 200, r.text
        got[words] = (r.json()["sglext"]["spec_tokens_details"]["spec_accept_length"],
                      MODEL.accept_length(simple_chat_tokens(messages)))
    assert got[4][0] == pytest.approx(got[4][1]) and got[600][0] == pytest.approx(got[600][1])
    assert got[600][0] < got[4][0] - 0.5
