"""Prefix routing through the Runtime: reloads that change endpoints, endpoints that go unhealthy,
the matched share a failover observes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from router.config.tree import parse_config
from router.decision.policy import Decision, RequestFeatures
from router.decision.prefix import PickReason, prefix_chain, rendezvous_score
from router.front.context import GenerationContext
from router.front.pipeline import _redecide
from router.loops.scraper import EngineLoad
from router.ops.metrics import RouterMetrics
from router.reasons import Reason
from router.state.runtime import Runtime

A, B, C = "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"
LOAD = EngineLoad(0, 0, 0.0, None, None)


def config(tmp: Path, endpoints: list[str], **prefix: Any):
    return parse_config({
        "model": {"name": "m", "tokenizer": str(tmp)},
        "limits": {"max_context_tokens": 4096},
        "pools": [{"name": "plain", "speculative": False, "endpoints": endpoints}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}, "learning": {"enabled": False},
                    "prefix_cache": {"block_chars": 8, **prefix}},
    })


def healthy(rt: Runtime, *urls: str) -> None:
    for ep in rt.all_endpoints():
        if ep.url in urls:
            ep.record_success(LOAD, now=0.0)
            ep.record_success(LOAD, now=0.0)
        else:
            ep.mark_down()
    rt.prune_prefix()   # what each scrape round does


def turn(i: int, t: int) -> tuple[str, bool]:
    """Conversation ``i`` at turn ``t``: the rendered text (8-char blocks) and whether continued."""
    text = f"<sys>brief</sys><user>question number {i:03d}</user>"
    for k in range(t):
        text += f"<asst>answer {k:02d}</asst><user>follow-up {k:02d}</user>"
    return text, t > 0


def route(rt: Runtime, i: int, t: int) -> tuple[str, str | None]:
    text, continued = turn(i, t)
    end = text.index("</user>")
    chain = prefix_chain(text, block_chars=8, max_blocks=512, anchor_end=end, continued=continued)
    p = len(text) // 4
    decision = rt.decide(RequestFeatures(prompt_tokens=p, max_new_tokens=16), 0.0, chain=chain,
                         matches=rt.prefix_matches(chain, p))
    assert decision.endpoint is not None
    rt.record_prefix(decision, chain)
    return decision.endpoint, decision.endpoint_reason


def test_affinity_then_unhealthy_endpoint_moves_and_comes_back_empty(tmp_path: Path) -> None:
    rt = Runtime(config(tmp_path, [A, B, C]), counter=None)
    healthy(rt, A, B, C)
    homes = [route(rt, i, 0)[0] for i in range(9)]
    assert homes == [max((A, B, C), key=lambda u, i=i: rendezvous_score(u, _anchor(i))) for i in range(9)]
    assert [route(rt, i, 1) for i in range(9)] == [(h, PickReason.PREFIX_MATCH) for h in homes]
    healthy(rt, B, C)   # A goes down: its index entries are forgotten
    assert rt.prefix["plain"].endpoints() == sorted({h for h in homes if h != A})
    moved = [route(rt, i, 2)[0] for i in range(9)]
    assert A not in moved
    assert [m for h, m in zip(homes, moved) if h != A] == [h for h in homes if h != A]
    healthy(rt, A, B, C)   # A is back, empty: the moved conversations stay where their cache is
    assert [route(rt, i, 3) for i in range(9)] == [(m, PickReason.PREFIX_MATCH) for m in moved]


def _anchor(i: int) -> int:
    text, _ = turn(i, 0)
    return prefix_chain(text, block_chars=8, max_blocks=512, anchor_end=text.index("</user>")).anchor or 0


def test_reload_keeps_the_index_and_drops_removed_endpoints(tmp_path: Path) -> None:
    rt = Runtime(config(tmp_path, [A, B]), counter=None)
    healthy(rt, A, B)
    homes = [route(rt, i, 0)[0] for i in range(10)]   # 7 on A, 3 on B (the fixed hash)
    index = rt.prefix["plain"]
    assert set(index.endpoints()) == set(homes) == {A, B}
    rt2 = Runtime(config(tmp_path, [B, C], max_blocks_per_endpoint=500), previous=rt, counter=None)
    assert rt2.prefix["plain"] is index and index.max_blocks_per_endpoint == 500
    healthy(rt2, B, C)
    assert index.endpoints() == [B]
    # B's conversations keep their affinity after the reload; A's go to their rendezvous choice
    for i, h in enumerate(homes):
        got, why = route(rt2, i, 1)
        if h == B:
            assert (got, why) == (B, PickReason.PREFIX_MATCH)
        else:
            assert why == PickReason.RENDEZVOUS and got == max((B, C), key=lambda u, i=i: rendezvous_score(u, _anchor(i)))
    rt3 = Runtime(config(tmp_path, [B, C], max_blocks_per_endpoint=5), previous=rt2, counter=None)
    healthy(rt3, B, C)
    assert index.entries() > 5
    got = route(rt3, 0, 2)[0]
    assert index.entries(got) == 5   # a lower cap holds from the next record on


def test_reload_with_another_block_size_or_disabled_starts_over(tmp_path: Path) -> None:
    rt = Runtime(config(tmp_path, [A, B]), counter=None)
    healthy(rt, A, B)
    route(rt, 0, 0)
    rt2 = Runtime(config(tmp_path, [A, B], block_chars=16), previous=rt, counter=None)
    assert rt2.prefix["plain"] is not rt.prefix["plain"] and rt2.prefix["plain"].entries() == 0
    rt3 = Runtime(config(tmp_path, [A, B], enabled=False), previous=rt2, counter=None)
    assert rt3.prefix == {}
    text, _ = turn(0, 1)
    chain = prefix_chain(text, block_chars=8, max_blocks=512)
    d = rt3.decide(RequestFeatures(prompt_tokens=10, max_new_tokens=16), 0.0, chain=chain, matches={})
    assert d.endpoint_reason is None   # least load, ties round robin: the router's older choice


def two_pools(tmp: Path, **prefix: Any):
    return parse_config({
        "model": {"name": "m", "tokenizer": str(tmp)},
        "limits": {"max_context_tokens": 4096},
        "pools": [{"name": "spec", "speculative": True, "endpoints": [A]},
                  {"name": "plain", "speculative": False, "endpoints": [B]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}, "learning": {"enabled": False},
                    "min_flip_interval_s": 0, "prefix_cache": {"block_chars": 8, **prefix}},
    })


def routed(rt: Runtime, i: int, t: int) -> tuple[str | None, str, str | None]:
    text, continued = turn(i, t)
    chain = prefix_chain(text, block_chars=8, max_blocks=512, anchor_end=text.index("</user>"),
                         continued=continued)
    p = len(text) // 4
    d = rt.decide(RequestFeatures(prompt_tokens=p, max_new_tokens=16), 0.0, chain=chain,
                  matches=rt.prefix_matches(chain, p))
    rt.record_prefix(d, chain)
    return d.pool, d.reason.value, d.endpoint_reason


def test_saturated_spec_keeps_its_conversations_below_the_ceiling_and_sheds_new_ones(tmp_path: Path) -> None:
    # enter 8 * sticky_load_factor 2.0: the ceiling is 16 requests on the cached endpoint
    rt = Runtime(two_pools(tmp_path), counter=None)
    healthy(rt, A, B)
    assert routed(rt, 1, 0) == ("spec", "speculative", "rendezvous")
    busy = rt.endpoint(A)
    busy.record_success(EngineLoad(10, 0, 0.0, None, None), now=0.0)   # saturated, under 16
    assert routed(rt, 1, 1) == ("spec", "prefix_affinity", "prefix_match")
    assert routed(rt, 2, 0) == ("plain", "saturated", "rendezvous")   # a new conversation is shed
    busy.record_success(EngineLoad(16, 0, 0.0, None, None), now=0.0)   # at the ceiling
    assert routed(rt, 1, 2) == ("plain", "saturated", "rendezvous")
    busy.record_success(EngineLoad(0, 0, 0.0, None, None), now=0.0)    # the bypass turns off
    assert routed(rt, 1, 3) == ("plain", "prefix_affinity", "prefix_match")  # cached on plain now
    assert routed(rt, 2, 1) == ("plain", "prefix_affinity", "prefix_match")
    assert routed(rt, 3, 0) == ("spec", "speculative", "rendezvous")


def test_a_back_pressured_endpoint_keeps_no_conversation(tmp_path: Path) -> None:
    rt = Runtime(two_pools(tmp_path), counter=None)
    healthy(rt, A, B)
    assert routed(rt, 1, 0) == ("spec", "speculative", "rendezvous")
    rt.endpoint(A).backpressure_until = 10.0   # a capacity refusal holds (load 0: counts as the ceiling)
    assert routed(rt, 1, 1) == ("plain", "saturated", "rendezvous")


def test_sticky_load_factor_zero_moves_every_turn_off_a_saturated_pool(tmp_path: Path) -> None:
    rt = Runtime(two_pools(tmp_path, sticky_load_factor=0), counter=None)
    healthy(rt, A, B)
    assert routed(rt, 1, 0) == ("spec", "speculative", "rendezvous")
    rt.endpoint(A).record_success(EngineLoad(10, 0, 0.0, None, None), now=0.0)
    assert routed(rt, 1, 1) == ("plain", "saturated", "rendezvous")
    rt.endpoint(A).record_success(EngineLoad(0, 0, 0.0, None, None), now=0.0)
    assert routed(rt, 1, 2) == ("spec", "speculative", "prefix_match")


def test_an_override_of_saturation_moves_the_ceiling_and_the_back_pressure_floor(tmp_path: Path) -> None:
    # the runtime derives both from `routing` once per value: an override (a new value) and its
    # removal must each take effect at the next decision
    from router.config.overrides import Overrides, parse_overrides

    rt = Runtime(two_pools(tmp_path), counter=None)
    healthy(rt, A, B)
    assert routed(rt, 1, 0) == ("spec", "speculative", "rendezvous")
    busy = rt.endpoint(A)
    busy.record_success(EngineLoad(10, 0, 0.0, None, None), now=0.0)   # saturated, under 16 = 2.0 * 8
    assert routed(rt, 1, 1) == ("spec", "prefix_affinity", "prefix_match")
    rt.set_overrides(parse_overrides({"routing": {"saturation": {"enter": 5, "exit": 2}}}))  # ceiling 10
    assert routed(rt, 1, 2) == ("plain", "saturated", "rendezvous")
    busy.record_success(EngineLoad(0, 0, 0.0, None, None), now=0.0)
    busy.backpressure_until = 10.0   # a held refusal counts as the larger of enter and the ceiling
    assert rt.snapshots(0.0)[0].endpoints[0].load == 10
    rt.set_overrides(Overrides())
    assert rt.snapshots(0.0)[0].endpoints[0].load == 16


def test_a_failover_observes_the_matched_share_of_the_predicted_prompt(tmp_path: Path) -> None:
    """The first decision and a failover's observe ``specgate_prefix_match_ratio`` over the same
    denominator, the predicted prompt tokens the matches were computed for (not the byte bound)."""
    rt = Runtime(config(tmp_path, [A, B]), counter=None)
    healthy(rt, A, B)
    text, _ = turn(0, 2)
    chain = prefix_chain(text, block_chars=8, max_blocks=512, anchor_end=text.index("</user>"), continued=True)
    predicted = len(text) // 4
    for url in (A, B):  # the conversation is cached on both replicas
        rt.record_prefix(Decision("plain", url, Reason.PLAIN_ONLY), chain)
    features = RequestFeatures(prompt_tokens=4 * predicted, prompt_tokens_lower=predicted // 2,
                               prompt_tokens_estimate=predicted, max_new_tokens=16)
    matches = rt.prefix_matches(chain, predicted)
    first = rt.decide(features, 0.0, chain=chain, matches=matches)
    assert first.endpoint is not None and first.endpoint_reason == PickReason.PREFIX_MATCH
    metrics = RouterMetrics(CollectorRegistry())
    state = SimpleNamespace(fleet=SimpleNamespace(runtimes={}), clock=lambda: 0.0, metrics=metrics)
    ctx = GenerationContext("r", "/v1/completions", state, state.fleet, None, "r", {}, None, {}, None, 0.0)  # type: ignore[arg-type]
    ctx.runtime, ctx.features, ctx.chain, ctx.matches = rt, features, chain, matches
    other = B if first.endpoint == A else A
    failover = _redecide(ctx, frozenset({first.endpoint}))
    assert failover.decision.endpoint == other and failover.lease is not None
    failover.lease.release()
    cached = matches["plain"][other]
    assert 0 < cached <= predicted
    (_, total), = metrics.prefix_match_ratio.series.values()
    assert total == [cached / predicted]
