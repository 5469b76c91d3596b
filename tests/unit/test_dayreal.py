"""The real-pool day's plan and response checks (loadtests.dayreal); the run itself needs real
SGLang engines (``benchmarks/day.py --real``)."""

from __future__ import annotations

from loadtests.dayreal import RealRequest, check, lossless, lossless_plan, plan

POOLS = {"spec", "plain"}


def _ok(**kw: object) -> RealRequest:
    r = RealRequest("r", "morning", 0.0, "def f():", 0.0, False, 32)
    r.status, r.pool, r.reason, r.finish_reason = 200, "spec", "speculative", "length"
    r.prompt_tokens, r.completion_tokens, r.total_tokens, r.text = 5, 32, 37, "x"
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_the_plan_is_seeded_and_has_every_phase() -> None:
    a, b = plan(0, 512), plan(0, 512)
    assert [(r.name, r.at_s, r.prompt, r.temperature, r.stream) for r in a] == [
        (r.name, r.at_s, r.prompt, r.temperature, r.stream) for r in b]
    assert [r.at_s for r in plan(1, 512)] != [r.at_s for r in a]
    phases = [r.phase for r in a]
    assert sorted(set(phases)) == ["burst", "evening", "long", "morning"]
    assert phases.count("burst") == 12 and phases.count("long") == 3
    assert {r.at_s for r in a if r.phase == "burst"} == {38.0}
    # the idle gap: nothing between the last long prompt (23 s) and the burst (38 s)
    assert not [r for r in a if 23.0 < r.at_s < 38.0]
    assert {r.temperature for r in a} == {0.0, 0.8} and {r.stream for r in a} == {True, False}
    pinned = lossless_plan()
    assert [(r.hint, r.temperature) for r in pinned[:2]] == [("on", 0.0), ("off", 0.0)]
    assert len({r.prompt for r in pinned}) == 4


def test_check_accepts_a_full_response_and_names_each_defect() -> None:
    assert check(_ok(), POOLS) == []
    assert check(_ok(finish_reason="stop", completion_tokens=7, total_tokens=12), POOLS) == []
    assert check(_ok(status=503, error="busy"), POOLS) == ["status 503 busy"]
    assert check(_ok(finish_reason=None), POOLS) == ["finish_reason None"]
    assert check(_ok(total_tokens=None), POOLS) == ["usage 5/32/None"]
    assert check(_ok(total_tokens=36), POOLS) == ["total_tokens 36 != 5 + 32"]
    assert check(_ok(completion_tokens=31, total_tokens=36), POOLS) == [
        "31 tokens for max_tokens 32, finish length"]
    assert check(_ok(pool=None), POOLS) == ["headers pool=None reason='speculative'"]


def test_lossless_compares_greedy_outputs_across_pools_only() -> None:
    same = [_ok(text="a"), _ok(pool="plain", text="a"), _ok(pool="plain", text="a")]
    sampled = [_ok(temperature=0.8, text="b"), _ok(temperature=0.8, pool="plain", text="c")]
    one_pool = [_ok(prompt="g()", text="d"), _ok(prompt="g()", text="d")]
    assert lossless(same + sampled + one_pool) == {"keys_on_both_pools": 1, "identical": 1, "mismatches": []}
    res = lossless([_ok(text="a"), _ok(pool="plain", text="z")])
    assert (res["keys_on_both_pools"], res["identical"]) == (1, 0)
    assert res["mismatches"] == [{"prompt": "def f():", "max_tokens": 32, "by_pool": {"spec": ["a"], "plain": ["z"]}}]
