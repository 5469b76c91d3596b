"""A load test's request log as calibrate-split's day (one target, its measured runs laid end to
end), the measured numbers set beside the predictions, and the goodput's stated objective."""

from __future__ import annotations

import pytest

from loadtests.dayreport import Objective
from loadtests.split import SplitAdvice, SplitError
from loadtests.splitlog import load_test_day, log_targets, measured_summary, target_deployments


def _row(target: str, bucket: str, load: float, rep: int, t: float, e2e: float, *, phase: str = "measure",
         prompt: int = 100, out: int = 16, ttft: float = 0.01, tpot: float = 0.005, error: str | None = None) -> dict:
    return {"target": target, "bucket": bucket, "load": load, "phase": phase, "rep": rep, "t_start": t,
            "e2e_s": e2e, "prompt_tokens": prompt, "output_tokens": out, "max_tokens": 32, "ttft_s": ttft,
            "tpot_s": tpot, "error": error, "temperature": 0.0}


#: Two targets, each with a warm-up and two measured runs whose clocks start at 0 (as the runner's).
ROWS = [
    _row("spec", "64-128", 1, 0, 0.0, 9.0, phase="warmup"),
    _row("spec", "64-128", 1, 0, 0.0, 0.5),
    _row("router", "64-128", 1, 0, 0.0, 9.0, phase="warmup"),
    _row("router", "64-128", 1, 0, 0.0, 0.5, prompt=90, tpot=0.05),
    _row("router", "64-128", 1, 0, 0.1, 0.6, prompt=91),
    _row("spec", "64-128", 2, 0, 0.0, 0.4),
    _row("router", "64-128", 2, 0, 0.0, 0.3, prompt=92, ttft=6.0),
    _row("router", "64-128", 2, 0, 0.2, 0.2, prompt=93),
    _row("router", "64-128", 2, 0, 0.25, None, prompt=94, error="timeout"),  # type: ignore[arg-type]
]


def test_one_targets_measured_runs_are_laid_end_to_end() -> None:
    day = load_test_day(ROWS)  # router by default
    assert day.target == "router" and log_targets(ROWS) == ["spec", "router"]
    # run 1 ends at max(0.0 + 0.5, 0.1 + 0.6) = 0.7 s; run 2 starts there
    assert [(r.rid, round(r.arrival_s, 9), r.prompt_tokens, r.output_tokens, r.max_new_tokens, r.temperature)
            for r in day.requests] == [(0, 0.0, 90, 16, 32, 0.0), (1, 0.1, 91, 16, 32, 0.0),
                                       (2, 0.7, 92, 16, 32, 0.0), (3, 0.9, 93, 16, 32, 0.0)]
    assert [m.e2e_s for m in day.measured] == [0.5, 0.6, 0.3, 0.2]
    assert (day.runs, round(day.span_s, 9)) == (2, 1.1)
    assert day.left_out == {"warmup": 1, "failed": 1, "other targets": 3}
    # run 2 starts when run 1's last response (rid 1, at 0.7 s) ended: its requests follow it
    assert (day.follows, day.chained) == ({2: (1, pytest.approx(0.0)), 3: (1, pytest.approx(0.2))}, 2)
    assert day.describe() == ("day: target 'router' of the load test: 4 measured requests of 2 runs, laid end to "
                              "end at the times its loop sent them (1.1 s); 0 runs replayed as closed loops "
                              "(0 requests sent when a response ended), each run after the previous one's end "
                              "(2 requests); left out: 1 warmup, 1 failed, 3 other targets")


def test_another_target_and_the_overrides() -> None:
    day = load_test_day(ROWS, "spec", temperature=1.0, cached_fraction=0.5)
    assert [(r.arrival_s, r.cached_tokens, r.temperature) for r in day.requests] == [(0.0, 50, 1.0), (0.5, 50, 1.0)]


def test_a_target_must_be_named_or_known() -> None:
    with pytest.raises(SplitError, match="targets spec, plain: choose the one to replay with --target"):
        load_test_day([_row("spec", "b", 1, 0, 0.0, 0.1), _row("plain", "b", 1, 0, 0.0, 0.1)])
    with pytest.raises(SplitError, match="target 'plain' is not in the load test"):
        load_test_day(ROWS, "plain")
    with pytest.raises(SplitError, match="target 'spec' has no measured request"):
        load_test_day([_row("spec", "b", 1, 0, 0.0, 0.1, phase="warmup")])


def test_measured_numbers_use_the_stated_objective() -> None:
    day = load_test_day(ROWS)
    m = measured_summary(day)
    # request 0 misses TPOT (0.05 > 0.035), request 2 TTFT (6 > 5): 2 good over 0.9 s of arrivals
    assert m == {"requests": 4, "mean_s": pytest.approx(0.4), "p90_s": 0.6, "goodput_rps": pytest.approx(2 / 0.9)}
    loose = measured_summary(day, objective=Objective(ttft_slo_s=10.0, tpot_slo_s=0.1))
    assert loose["goodput_rps"] == pytest.approx(4 / 0.9)


def test_each_target_maps_onto_the_deployment_of_its_engines() -> None:
    report = {"targets": [
        {"name": "spec", "role": "spec", "metrics_urls": ["http://a/metrics"]},
        {"name": "plain", "role": "plain", "metrics_urls": ["http://b/metrics", "http://c/metrics"]},
        {"name": "router", "role": "router", "metrics_urls": ["http://a/metrics", "http://b/metrics",
                                                              "http://c/metrics"]},
        {"name": "other", "role": "router", "metrics_urls": ["http://z/metrics"]},
    ]}  # fmt: skip
    made = []
    deps = target_deployments(report, lambda k, n: made.append((k, n)) or f"router {k}/{n}")  # type: ignore[func-returns-value]
    assert {name: (label, n) for name, (label, n, _) in deps.items()} == {
        "spec": ("all-spec", 1), "plain": ("all-plain", 2), "router": ("learned 1s+2p", 3)}
    assert deps["spec"][2].pools == (("spec", True, 1),) and deps["plain"][2].pools == (("plain", False, 2),)
    assert made == [(1, 3)] and deps["router"][2] == "router 1/3"


def test_the_table_states_the_objective_and_sets_the_measured_row_beside_its_prediction() -> None:
    def row(k: int, name: str, mean: float) -> dict:
        return {"k": k, "deployment": name, "mean_s": mean, "p90_s": 2 * mean, "long_mean_s": None,
                "goodput_rps": 3.0, "reasons": {"round_robin": 4}}

    adv = SplitAdvice(2, "mean_s", 0, "all-plain", [row(0, "all-plain", 0.1), row(1, "learned 1s+1p", 0.2)],
                      {"day_s": 0.9, "objective": {"ttft_slo_s": 5.0, "tpot_slo_s": 0.035}},
                      measured={"learned 1s+1p": {"requests": 4, "mean_s": 0.25, "p90_s": 0.5, "goodput_rps": 2.5}})
    assert adv.text().splitlines() == [
        ("goodput/s: requests per second of the day (first to last arrival, 0.9 s) finishing with TTFT <= 5 s "
         "and TPOT <= 0.035 s"),
        "split                    mean s    p90 s   long s  goodput/s  reasons",
        "all-plain                 0.100    0.200        -      3.000  round_robin 4",
        "learned 1s+1p             0.200    0.400        -      3.000  round_robin 4",
        "  measured                0.250    0.500        -      2.500  the same 4 requests  predicted mean -20% of it",
        "advice: 0 speculative + 2 plain engines (all-plain; best mean_s)",
    ]
    assert adv.as_dict()["measured"] == adv.measured


def test_a_closed_loop_run_is_replayed_closed_and_an_open_one_at_its_times() -> None:
    # run 1: 2 workers, each sending its next request 1 ms after its last response ended (6 each);
    # run 2: 12 requests every 0.3 s, each 0.5 s long (an open loop: no request waits for one)
    rows = []
    for w, e2e in ((0, 0.5), (1, 0.7)):
        t = 0.01 * w
        for _ in range(6):
            rows.append(_row("router", "64-128", 2, 0, t, e2e))
            t += e2e + 0.001
    rows.sort(key=lambda r: r["t_start"])
    rows += [_row("router", "64-128", 3.3, 0, 0.3 * i, 0.5) for i in range(12)]
    day = load_test_day(rows)
    assert (day.runs, day.closed_runs) == (2, 1)
    # every request of run 1 but each worker's first follows its worker's previous one, 1 ms after
    # run 1 ends at 0.01 + 6 x 0.701 s; run 2 starts there
    assert day.requests[12].arrival_s == pytest.approx(0.01 + 6 * 0.701 - 0.001)
    loops = {j: link for j, link in day.follows.items() if j < 12}
    assert len(loops) == 10 and day.chained == 12
    # run 2's requests follow run 1's last response (worker 1's sixth, rid 11) at their own times
    assert {j: (i, round(gap, 9)) for j, (i, gap) in day.follows.items() if j >= 12} == \
        {12 + k: (11, round(0.3 * k, 9)) for k in range(12)}
    by_rid = {r.rid: r for r in day.requests}
    for j, (i, gap) in loops.items():
        assert gap == pytest.approx(0.001)
        assert by_rid[i].arrival_s + day.measured[i].e2e_s + gap == pytest.approx(by_rid[j].arrival_s)
        assert day.measured[i].e2e_s == day.measured[j].e2e_s  # the same worker's request


def test_a_replay_slower_than_the_engines_carries_no_backlog_from_one_run_into_the_next() -> None:
    # three runs, each one wave of 4 requests sent at once and measured at 0.1 s; the replay's engine
    # (a knee of one sequence) takes about 3 s per wave, so without the run-to-run link each wave
    # arrives while the previous one still runs; with it, each wave starts when the previous one ended
    from dataclasses import replace

    from loadtests.dayshapes import default_engine_model
    from loadtests.daysim import all_plain, simulate_day

    rows = [_row("plain", "64-128", 4, rep, 0.001 * i, 0.1, out=32) for rep in range(3) for i in range(4)]
    day = load_test_day(rows)
    assert (day.chained, sorted(day.follows)) == (8, list(range(4, 12)))
    model = default_engine_model()
    model = replace(model, speed=replace(model.speed, batch_knee=1.0))
    chained = simulate_day(day.requests, all_plain(1), model, follows=day.follows)
    waves = [[r.e2e_s for r in chained.records[4 * k:4 * k + 4]] for k in range(3)]
    assert waves[0][0] > 3.0   # the replay is slower than the 0.1 s measured
    assert waves[1] == pytest.approx(waves[0], rel=1e-9) and waves[2] == pytest.approx(waves[0], rel=1e-9)
    open_loop = simulate_day(day.requests, all_plain(1), model)
    # open loop, the 12 requests share one batch: each waits for all (the backlog the link removes)
    assert min(r.e2e_s for r in open_loop.records) > 2 * max(waves[0])
