"""The conversion drill: the planner moves engines between two discovered pools on the fake
Kubernetes API while clients keep sending, and no request is lost.

The day and the cluster are :mod:`tests.support.plan_drill`'s: both pools discovered from their
EndpointSlices, a controller that follows the Deployments' replicas as Kubernetes does (the giver's
pod terminating first and serving its in-flight requests, the taker's new pod ready after a
startup delay), step-driven fake engines whose speeds the router learns. The split moves because
the traffic changes, not because an input of the planner is forced: short, mostly greedy chat
makes two speculative engines predict faster than one (the planner's own prediction
from the router's window), then long documents (above the speculative pool's context, so the
router sends them to the plain pool) make two plain engines predict far faster. The planner's
documented settings that differ from production: ``--step-s 0 --dwell-s 0 --change-cost-s 0``
(the drill waits for each converted pod to be ready and routed before the next round instead of
a wall-clock step), ``--min-gain 0.03`` (the chat phase's first advice predicted a 4-30% gain in the
runs here), ``--max-error 1.0`` (a fit learned from two phases of a few dozen requests is not
held to the 0.3 default) and ``--max-replay-error 1.0`` (nor its replay of the current split to
the 0.5 default: the documents phase's first window mixes both phases), floors of 1 engine per pool;
the router checks its predictions without falling back from them (``routing.learning.check.enabled:
false``: a fallback makes every advice untrusted, and the documents' new lengths tripped it on a
loaded machine). Every pod holds a long stream when a round
runs, so each converted pod is serving when it turns terminating.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from loadtests.planloop import OUTCOMES
from tests.support.plan_drill import ENGINES, run_drill

pytestmark = pytest.mark.slow

SPEC, PLAIN = "sg-pool-spec", "sg-pool-plain"


def test_the_planner_converts_engines_one_at_a_time_under_traffic_without_losing_a_request(
        tmp_path: Path, tokenizer_dir: Path) -> None:
    rounds = 3
    res = run_drill(tmp_path, tokenizer_dir, rounds=rounds, window=24, clients=3, seed=38)
    seen = "\n".join(str(r) for r in res.rounds)  # each round's step and predictions, for a failure's message

    # every request whole: both phases, streamed and not, greedy and sampled
    assert res.failures == []
    assert {kind for kind in res.sent if kind[0] != "held"} == set(
        itertools.product(("chat", "documents"), ("stream", "json"), ("greedy", "sampled")))
    assert sum(n for kind, n in res.sent.items() if kind[0] != "held") >= 2 * (36 + rounds * 12)
    assert sum(n for kind, n in res.sent.items() if kind[0] == "held") >= ENGINES

    # the chat phase moves one engine to the speculative pool, the documents phase moves it back
    changed = [(a, b) for a, b in itertools.pairwise(res.splits) if a != b]
    assert res.splits[0] == (1, 2)
    assert changed == [((1, 2), (2, 1)), ((2, 1), (1, 2))], seen
    assert res.splits[:rounds + 1][-1] == (2, 1) and res.splits[-1] == (1, 2)
    for split in res.splits:  # the total held at N, the floors held
        assert sum(split) == ENGINES and min(split) >= 1

    # each change: the giver scaled down first, then the taker up
    assert res.scale_writes == [(PLAIN, 1), (SPEC, 2), (SPEC, 1), (PLAIN, 2)]

    # the pods: each conversion terminated the giver's pod before the taker's pod was created, the
    # terminating pod served its requests and stopped only when idle (none cut at the grace period), never more than
    # N engines ready (N - 1 while one converts)
    moves = [e for e in res.events[6:]]  # after the three first pods (created, ready)
    assert [(pool, what) for pool, _, what in moves if what in ("terminating", "created")] == [
        ("plain", "terminating"), ("spec", "created"), ("spec", "terminating"), ("plain", "created")]
    assert res.killed == []
    assert all(n >= 1 for _, n in res.drains), res.drains  # each stopped pod was serving when it left
    ready = 0
    for _, _, what in res.events:
        ready += {"ready": 1, "terminating": -1}.get(what, 0)
        assert ready <= ENGINES
    assert ready == ENGINES
    assert [ip for ip, _ in res.drains] == [ip for _, ip, what in moves if what == "stopped"]

    # each change logged and counted
    assert res.changes == [m for m in res.changes if m.startswith("plan: change ")]
    assert [m.split(" (")[0] for m in res.changes] == ["plan: change 1+2 -> 2+1", "plan: change 2+1 -> 1+2"]
    assert all("(gain; predicted gain " in m for m in res.changes)
    get = res.metrics.registry.get_sample_value
    assert get("specgate_plan_changes_total", {"reason": "gain"}) == 2
    assert get("specgate_plan_changes_total", {"reason": "floor"}) == 0
    assert get("specgate_plan_rounds_total", {"outcome": "gain"}) == 2
    assert sum(get("specgate_plan_rounds_total", {"outcome": o}) for o in OUTCOMES) == 2 * rounds
    assert get("specgate_plan_errors_total", {"stage": "apply"}) == 0
    assert get("specgate_plan_current_engines", {"pool": "speculative"}) == 1
    assert get("specgate_plan_current_engines", {"pool": "plain"}) == 2
    assert get("specgate_plan_last_change_reason", {"reason": "gain"}) == 1

    # the router ends routing to exactly the final split's pods, all healthy
    assert {k: len(v) for k, v in res.ready.items()} == {"spec": 1, "plain": 2}
    assert res.healthy == res.routed == res.ready
