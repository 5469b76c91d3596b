"""A window's closed loops (loadtests.closedloop) and their replay (loadtests.plan.replay_day)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from loadtests.closedloop import find_loops
from loadtests.plan import replay_day


def _closed(clients: int, per_client: int, seed: int) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Rows of ``clients`` closed loops (each sends its next request 0.5-4 ms after its last
    response ended), by arrival, and each row's client."""
    rng = random.Random(seed)
    rows: list[tuple[dict[str, Any], int]] = []
    for c in range(clients):
        t = rng.random() * 0.5
        for _ in range(per_client):
            d = rng.lognormvariate(-1.0, 1.0)
            rows.append(({"arrival_s": t, "duration_s": d, "n": 1}, c))
            t += d + rng.uniform(0.0005, 0.004)
    rows.sort(key=lambda x: x[0]["arrival_s"])
    return [r for r, _ in rows], {i: c for i, (_, c) in enumerate(rows)}


def _open(rate: float, count: int, seed: int) -> list[dict[str, Any]]:
    """Poisson arrivals at ``rate`` per second, durations independent of them."""
    rng = random.Random(seed)
    t, rows = 0.0, []
    for _ in range(count):
        t += rng.expovariate(rate)
        rows.append({"arrival_s": t, "duration_s": rng.lognormvariate(-1.0, 1.0), "n": 1})
    return rows


@pytest.mark.parametrize("clients", [1, 3, 8, 32])
def test_each_client_s_requests_are_linked_one_after_the_other(clients: int) -> None:
    for seed in range(5):
        rows, client = _closed(clients, 12, seed)
        loops = find_loops(rows)
        assert loops.closed and loops.rows == len(rows)
        # every request but each client's first follows a response that ended just before it:
        # its own client's previous one, or (many clients) another's that ended in between
        assert len(rows) - clients - 2 <= len(loops.links) <= len(rows) - clients
        for j, (i, gap) in loops.links.items():
            assert 0.0 <= gap <= loops.eps_s
            assert rows[i]["arrival_s"] + rows[i]["duration_s"] + gap == pytest.approx(rows[j]["arrival_s"])
        if clients <= 3:  # few clients: never another's response in a 4 ms gap, in these seeds
            assert len(loops.links) == len(rows) - clients
            assert all(client[i] == client[j] for j, (i, _) in loops.links.items())


@pytest.mark.parametrize("rate", [0.5, 2.0, 10.0, 50.0, 200.0])
def test_open_arrivals_are_not_taken_for_a_closed_loop(rate: float) -> None:
    for seed in range(40):
        for count in (16, 64, 200):
            loops = find_loops(_open(rate, count, seed))
            assert not loops.closed and loops.links == {} and loops.share < 0.6


def test_too_few_single_sequence_rows_stay_open() -> None:
    rows, _ = _closed(1, 7, 0)
    assert not find_loops(rows).closed
    rows, _ = _closed(2, 12, 0)
    for r in rows:
        r["n"] = 2  # several sequences: not linked
    assert find_loops(rows).rows == 0 and not find_loops(rows).closed
    rows, _ = _closed(2, 12, 0)
    assert find_loops([{**r, "duration_s": None} for r in rows]).rows == 0


def test_the_replay_links_the_requests_by_rid() -> None:
    rows, _ = _closed(3, 8, 1)
    doc = {"requests": [{**r, "prompt_tokens": 100, "cached_tokens": 0, "output_tokens": 20, "max_tokens": 32,
                         "temperature_class": "greedy"} for r in rows]}
    doc["requests"].insert(5, {**doc["requests"][5], "n": 3, "duration_s": 9.0})  # 3 sequences, never linked
    requests, follows, loops = replay_day(doc)
    assert len(requests) == len(rows) + 3 and loops.closed
    assert len(follows) == len(rows) - 3
    by_rid = {r.rid: r for r in requests}
    for j, (i, gap) in follows.items():
        assert by_rid[i].arrival_s < by_rid[j].arrival_s and gap < 0.005
    assert {sum(1 for r in requests if r.arrival_s == doc["requests"][5]["arrival_s"])} == {4}
