"""The pure parts of the multi-turn benchmarks (``benchmarks/multiturn.py``,
``benchmarks/multiturn_mixed.py``): the workload, the counters read from real engines, and the
pool-change count that docs/performance.md reports."""

from __future__ import annotations

from benchmarks.multiturn import conversations, prefill_work, requests_total
from benchmarks.multiturn_mixed import arrivals, parse_phases, pool_changes


def test_conversations_are_seeded_and_answer_range_is_honoured() -> None:
    a = conversations(3, 4, seed=7, answer=(8, 16))
    assert a == conversations(3, 4, seed=7, answer=(8, 16))
    assert a != conversations(3, 4, seed=8, answer=(8, 16))
    assert [len(c) for c in a] == [4, 4, 4]
    assert all(8 <= m <= 16 for c in a for _, m in c)
    # the default range keeps the fake-engine workload of docs/performance.md unchanged
    assert conversations(2, 3, seed=0) == conversations(2, 3, seed=0, answer=(16, 48))


def test_prefill_work_skips_first_turns() -> None:
    records = [{"turn": 0, "prompt_tokens": 100, "cached_tokens": 0},
               {"turn": 1, "prompt_tokens": 150, "cached_tokens": 120},
               {"turn": 2, "prompt_tokens": 200, "cached_tokens": 0}]
    assert prefill_work(records) == 30 + 200


def test_requests_total_sums_every_series_and_ignores_created() -> None:
    text = """# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="bench"} 12.0
sglang:num_requests_total{engine_type="unified",is_streaming="true",model_name="bench"} 3.0
sglang:num_requests_created{model_name="bench"} 1.7e9
sglang:prompt_tokens_total{model_name="bench"} 999.0
"""
    assert requests_total(text) == 15.0
    assert requests_total('sglang_num_requests_total{dp_rank="0"} 4.0\nsglang_num_requests_total{dp_rank="1"} 5.0') == 9.0
    assert requests_total("") == 0.0


def test_parse_phases() -> None:
    assert parse_phases("6:0.5,10:4") == [(6.0, 0.5), (10.0, 4.0)]


def test_arrivals_are_seeded_sorted_and_inside_their_phase() -> None:
    phases = [(10.0, 1.0), (10.0, 0.0), (10.0, 5.0)]
    starts = arrivals(phases, seed=3)
    assert starts == arrivals(phases, seed=3)
    assert starts == sorted(starts)
    assert not [t for t in starts if 10.0 <= t < 20.0]  # rate 0: nobody arrives
    low = [t for t in starts if t < 10.0]
    high = [t for t in starts if t >= 20.0]
    assert all(t < 30.0 for t in starts)
    assert len(high) > 2 * len(low) > 0  # 50 expected against 10


def test_pool_changes_counts_moves_and_bounces() -> None:
    def rec(conv: int, turn: int, pool: str) -> dict[str, object]:
        return {"conversation": conv, "turn": turn, "pool": pool}

    records = [
        rec(0, 0, "spec"), rec(0, 1, "spec"), rec(0, 2, "spec"),                      # stays
        rec(1, 0, "spec"), rec(1, 1, "plain"), rec(1, 2, "plain"),                    # moves once
        rec(2, 2, "spec"), rec(2, 0, "spec"), rec(2, 1, "plain"), rec(2, 3, "plain"),  # out of order: 2 moves
    ]
    assert pool_changes(records) == {"changes": 4, "conversations_moved": 2, "conversations_bounced": 1,
                                     "transitions": 7}
