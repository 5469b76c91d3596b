"""Pool and endpoint limits follow what the engines report, below the configured caps
(router.state.engine_limits, ``Runtime.follow_engine_limits``), and the decision uses them."""

from __future__ import annotations

import logging
from pathlib import Path

from router.config.tree import parse_config
from router.decision.policy import Outcome, Reason
from router.loops.scraper import EngineLoad
from router.request.features import RequestFeatures
from router.state.engine_limits import LimitChange, SmallEndpoint, endpoint_limit, too_small
from router.state.runtime import Runtime

A1, A2, B = "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"


def runtime(tmp: Path) -> Runtime:
    rt = Runtime(parse_config({
        "model": {"name": "m", "tokenizer": str(tmp)},
        "limits": {"max_context_tokens": 4096},
        "pools": [{"name": "spec", "speculative": True, "endpoints": [A1, A2], "max_context_tokens": 2048,
                   "draft_reserved_tokens": 4},
                  {"name": "plain", "speculative": False, "endpoints": [B]}],
        "routing": {"long_prompt_tokens": 4096, "saturation": {"enter": 4, "exit": 2}},
    }), counter=None)
    for ep in rt.all_endpoints():
        ep.record_success(EngineLoad(), now=0.0)
    return rt


def chat(prompt: int, budget: int = 16) -> RequestFeatures:
    return RequestFeatures(prompt, budget, temperature_class="greedy")


def test_endpoint_limit_never_above_the_configured_cap():
    assert [endpoint_limit(2048, e) for e in (None, 1024, 2048, 8192)] == [2048, 1024, 2048, 2048]


def test_a_pool_follows_its_engines_down_and_back_up(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="specgate")
    rt = runtime(tmp_path)
    spec = rt.pools[0]
    caplog.clear()
    assert rt.follow_engine_limits() == [] and spec.limit == 2048
    assert rt.decide(chat(1500), 1.0).pool == "spec"
    for url in (A1, A2):
        rt.endpoint(url).context_length = 1024
    assert rt.follow_engine_limits() == [LimitChange("spec", 2048, 1024, 2048)]
    assert [r.getMessage() for r in caplog.records] == [
        f"pool spec: context limit 2048 -> 1024 tokens (configured 2048; its engines report {A1}: 1024, {A2}: 1024)"]
    decision = rt.decide(chat(1500), 1.0)
    assert (decision.pool, decision.reason) == ("plain", Reason.LONG_CONTEXT)
    assert rt.decide(chat(900), 1.0).pool == "spec"
    assert rt.snapshots(1.0)[0].limit == 1024
    rt.endpoint(A1).context_length, rt.endpoint(A2).kv_tokens = 8192, 512  # bigger than the cap; a small KV pool
    assert rt.follow_engine_limits() == [LimitChange("spec", 1024, 2048, 2048)]
    assert rt.decide(chat(1500), 1.0).endpoint == A1


def test_one_small_endpoint_takes_only_what_it_holds(tmp_path):
    rt = runtime(tmp_path)
    rt.endpoint(A2).context_length = 1024
    assert rt.follow_engine_limits() == []  # A1 still holds 2048: the pool's limit stays
    assert rt._small == (SmallEndpoint(A2, 1024, 4, True),)
    assert {rt.decide(chat(1500), 1.0, exclude=frozenset()).endpoint for _ in range(6)} == {A1}
    assert {rt.decide(chat(500), 1.0).endpoint for _ in range(6)} == {A1, A2}
    # P + n * M + K on a speculative pool: 1000 + 2 * 12 + 4 = 1028 > 1024 does not fit A2
    assert too_small(rt._small, RequestFeatures(1000, 12, n=2)) == frozenset({A2})
    assert too_small(rt._small, RequestFeatures(1000, 4)) == frozenset()


def test_nothing_fits_any_more_is_the_routers_clean_refusal(tmp_path):
    rt = runtime(tmp_path)
    for url in (A1, A2, B):
        rt.endpoint(url).context_length = 1024
    assert [c.pool for c in rt.follow_engine_limits()] == ["spec", "plain"]
    decision = rt.decide(chat(1341), 1.0)
    assert (decision.outcome, decision.reason) == (Outcome.REFUSED, Reason.CONTEXT_CAP)
    assert 1024 - 16 in rt.flip_points(16, 1)  # the prompt sizing sees the new limits


def test_a_wrong_model_or_draining_endpoint_does_not_hold_the_limit_up(tmp_path):
    rt = runtime(tmp_path)
    rt.endpoint(A1).context_length = 1024
    rt.endpoint(A2).identity_error = "serves other, not m"
    assert rt.follow_engine_limits() == [LimitChange("spec", 2048, 1024, 2048)]
    rt.endpoint(A2).identity_error = None
    rt.endpoint(A2).draining = True
    assert rt.follow_engine_limits() == [] and rt.pools[0].limit == 1024


def test_a_pool_that_does_not_follow_its_engines_keeps_its_configured_limit(tmp_path):
    doc = {"model": {"name": "m", "tokenizer": str(tmp_path)}, "limits": {"max_context_tokens": 16384},
           "pools": [{"name": "spec", "speculative": True, "endpoints": [A1], "draft_reserved_tokens": 4,
                      "follow_engine_context": False},
                     {"name": "plain", "speculative": False, "endpoints": [B], "follow_engine_context": False}],
           "routing": {"long_prompt_tokens": 4096, "saturation": {"enter": 4, "exit": 2}}}
    rt = Runtime(parse_config(doc), counter=None)
    for ep in rt.all_endpoints():
        ep.record_success(EngineLoad(), now=0.0)
        ep.context_length = 8192  # the load-test fakes report their context in words, not the router's tokens
    assert rt.follow_engine_limits() == [] and [p.limit for p in rt.pools] == [16384, 16384]
    assert rt.decide(chat(9000), 1.0).outcome is Outcome.ROUTED
