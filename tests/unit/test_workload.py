"""Workload definition: buckets, scaling, seeded prompts, token counts, traces, planning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.runner import Target, expected_requests, plan_runs
from loadtests.workload import (
    Bucket,
    PromptFactory,
    TokenCounter,
    Workload,
    WorkloadError,
    arrival_times,
    parse_buckets,
    parse_range,
    scaled_buckets,
)


def test_parse_buckets_and_ranges() -> None:
    assert parse_buckets("1k-2k, 8k-16k") == (Bucket("1k-2k", 1024, 2048), Bucket("8k-16k", 8192, 16384))
    assert parse_buckets("100-200")[0] == Bucket("100-200", 100, 200)
    assert parse_range("64") == (64, 64)
    assert parse_range("32-128") == (32, 128)
    for bad in ("2k-1k", "a-b", "1-2-3", "0-4"):
        with pytest.raises(WorkloadError):
            parse_buckets(bad)


def test_scaled_buckets_reproduce_domain_table_at_128k() -> None:
    # docs/loadtests.md's GPU operating points: 1-2K, 8-16K, 80-128K of a 128K context; the top capped for output.
    b = scaled_buckets(131072, output_tokens=256)
    assert [(x.lo, x.hi) for x in b] == [(1024, 2048), (8192, 16384), (81920, 131072 - 256 - 2048)]
    assert b[0].name == "1k-2k" and b[1].name == "8k-16k"


def test_scaled_buckets_small_context() -> None:
    b = scaled_buckets(4096, output_tokens=64)
    assert [(x.lo, x.hi) for x in b] == [(32, 64), (256, 512), (2560, 4096 - 64 - 64)]
    with pytest.raises(WorkloadError):
        scaled_buckets(128, output_tokens=100)


def test_workload_from_dict_strict_and_round_trip() -> None:
    w = Workload.from_dict({"buckets": "1k-2k", "loads": "1,4", "output_tokens": "16-32", "seed": 3})
    assert w.buckets == (Bucket("1k-2k", 1024, 2048),) and w.loads == (1.0, 4.0)
    assert Workload.from_dict(json.loads(json.dumps(w.as_dict()))) == w
    with pytest.raises(WorkloadError, match="unknown workload keys"):
        Workload.from_dict({"concurency": [1]})
    with pytest.raises(WorkloadError):
        Workload(loads=(1.5,))  # closed loop: integer concurrency
    with pytest.raises(WorkloadError):
        Workload(copy_fraction=1.5)


def _factory(**kw: object) -> PromptFactory:
    return PromptFactory(Workload(buckets=parse_buckets("40-60"), **kw), TokenCounter())  # type: ignore[arg-type]


def test_prompts_are_seeded_and_identical_across_targets_but_cache_busted() -> None:
    f = _factory(copy_fraction=0.5, output_tokens=(4, 12), seed=7)
    b = f.workload.buckets[0]
    a1 = [f.make(b, 4, "measure", 1, i, salt="spec") for i in range(8)]
    a2 = [f.make(b, 4, "measure", 1, i, salt="spec") for i in range(8)]
    c = [f.make(b, 4, "measure", 1, i, salt="plain") for i in range(8)]
    assert a1 == a2
    for x, y in zip(a1, c):
        assert (x.max_tokens, x.task, x.prompt_tokens_target) == (y.max_tokens, y.task, y.prompt_tokens_target)
        tx, ty = x.messages[0]["content"], y.messages[0]["content"]
        assert tx != ty and tx.split("\n", 1)[1] == ty.split("\n", 1)[1]  # only the run line differs
    assert {x.task for x in a1} == {"copy", "free"}
    assert all(4 <= x.max_tokens <= 12 for x in a1)


def test_approximate_counts_are_exact_words() -> None:
    f = _factory()
    b = f.workload.buckets[0]
    for i in range(10):
        r = f.make(b, 1, "measure", 0, i)
        assert 40 <= r.prompt_tokens_target <= 60
        assert r.prompt_tokens_counted == r.prompt_tokens_target == len(r.messages[0]["content"].split())


def test_tokenizer_counts(tokenizer_dir: Path) -> None:
    counter = TokenCounter(str(tokenizer_dir))
    f = PromptFactory(Workload(buckets=parse_buckets("200-300")), counter)
    b = f.workload.buckets[0]
    for i in range(5):
        r = f.make(b, 1, "measure", 0, i)
        text = r.messages[0]["content"]
        assert r.prompt_tokens_counted == counter.count(text)
        assert abs(r.prompt_tokens_counted - r.prompt_tokens_target) <= 2
    with pytest.raises(WorkloadError):
        TokenCounter("/nonexistent/tokenizer")


def test_corpus_and_trace(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(f"w{i}" for i in range(500)))
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"prompt_tokens": 50, "output_tokens": 7}\n{"prompt_tokens": 900}\n')
    w = Workload(buckets=parse_buckets("40-60"), corpus=str(corpus), trace=str(trace))
    f = PromptFactory.from_workload(w)
    r = f.make(w.buckets[0], 1, "measure", 0, 0)
    assert r.prompt_tokens_target == 50 and r.max_tokens == 7
    words = r.messages[0]["content"].split()
    assert words[-1].startswith("w") and r.prompt_tokens_counted == 50
    csv_trace = tmp_path / "trace.csv"
    csv_trace.write_text("prompt_tokens,output_tokens\n45,\n")
    f2 = PromptFactory.from_workload(Workload(buckets=parse_buckets("40-60"), trace=str(csv_trace),
                                              output_tokens=(9, 9)))
    assert f2.make(w.buckets[0], 1, "measure", 0, 0).max_tokens == 9
    f3 = PromptFactory.from_workload(Workload(buckets=parse_buckets("1k-2k"), trace=str(trace)))
    with pytest.raises(WorkloadError, match="no prompt in bucket"):
        f3.make(f3.workload.buckets[0], 1, "measure", 0, 0)


def test_arrival_times_seeded() -> None:
    a = arrival_times(10.0, 5, "s")
    assert a == arrival_times(10.0, 5, "s") and a[0] == 0.0 and a == sorted(a)
    assert a != arrival_times(10.0, 5, "t")


def test_plan_interleaves_and_rotates() -> None:
    w = Workload(buckets=parse_buckets("10-20"), loads=(2,), warmup_runs=1, repetitions=3, requests_per_run=5)
    ts = [Target("spec", "http://a", "spec"), Target("plain", "http://b", "plain"),
          Target("router", "http://c", "router")]
    plans = plan_runs(w, ts)
    order = [(p.phase, p.rep, p.target.name) for p in plans]
    assert order == [("warmup", 0, "spec"), ("warmup", 0, "plain"), ("warmup", 0, "router"),
                     ("measure", 0, "spec"), ("measure", 0, "plain"), ("measure", 0, "router"),
                     ("measure", 1, "plain"), ("measure", 1, "router"), ("measure", 1, "spec"),
                     ("measure", 2, "router"), ("measure", 2, "spec"), ("measure", 2, "plain")]
    assert [p.n for p in plans[:3]] == [2, 2, 2] and all(p.n == 5 for p in plans[3:])
    assert expected_requests(w, 3) == {"warmup": 6, "measured": 45, "total": 51}


def test_locustfile_imports_without_locust_and_shares_the_workload(tmp_path: Path) -> None:
    import loadtests.locustfile as lf

    wfile = tmp_path / "w.yaml"
    wfile.write_text("buckets: 10-20,30-40\noutput_tokens: 5\nseed: 2\n")
    shared = lf.LocustWorkload.from_env({"SPECGATE_WORKLOAD": str(wfile), "SPECGATE_BUCKETS": "30-40"})
    bucket, body = shared.request(3, 0, "m")
    assert bucket.name == "30-40" and body["max_tokens"] == 5 and body["model"] == "m"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    spec = shared.factory.make(bucket, 0.0, "locust", 3, 0, salt="locust-3")
    assert body["messages"] == [dict(m) for m in spec.messages]
    assert shared.request(3, 0, "m") == (bucket, body)
    with pytest.raises(WorkloadError, match="unknown buckets"):
        lf.LocustWorkload.from_env({"SPECGATE_WORKLOAD": str(wfile), "SPECGATE_BUCKETS": "1-2"})


def _loadtest_args(tmp_path: Path, *extra: str):
    from router.cli import build_parser
    return build_parser().parse_args(
        ["loadtest", "--target", "http://127.0.0.1:1", "--out", str(tmp_path / "out"), *extra])


def test_loadtest_temperature_flag_sets_the_sampled_workload(tmp_path: Path) -> None:
    from loadtests.cli import _workload_from_args
    assert _workload_from_args(_loadtest_args(tmp_path)).temperature == 0.0
    assert _workload_from_args(_loadtest_args(tmp_path, "--temperature", "1")).temperature == 1.0
    wl = tmp_path / "wl.yaml"
    wl.write_text("temperature: 0.7\n")
    assert _workload_from_args(_loadtest_args(tmp_path, "--workload", str(wl))).temperature == 0.7
    # the flag wins over the file, 0 included
    args = _loadtest_args(tmp_path, "--workload", str(wl), "--temperature", "0")
    assert _workload_from_args(args).temperature == 0.0


def test_loadtest_negative_temperature_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    from router.cli import main
    assert main(["loadtest", "--target", "http://127.0.0.1:1", "--out", str(tmp_path / "out"),
                 "--temperature", "-1"]) == 2
    assert capsys.readouterr().err == "specgate loadtest: temperature must be a finite number >= 0\n"
    with pytest.raises(WorkloadError, match="temperature must be a finite number >= 0"):
        Workload(temperature=float("nan"))


def test_a_sampled_fraction_interleaves_the_classes_evenly() -> None:
    from loadtests.workload import Workload

    w = Workload(buckets=parse_buckets("32-48"), sampled_fraction=0.5)
    assert [w.temperature_of(i) for i in range(6)] == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    w = Workload(buckets=parse_buckets("32-48"), sampled_fraction=0.25)
    assert [w.temperature_of(i) for i in range(8)] == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert Workload(buckets=parse_buckets("32-48"), temperature=0.7).temperature_of(3) == 0.7
    with pytest.raises(WorkloadError, match="sampled_fraction"):
        Workload(buckets=parse_buckets("32-48"), sampled_fraction=1.5)


def test_the_client_reads_the_requests_own_accept_length() -> None:
    from loadtests.client import _accept_length

    assert _accept_length({"sglext": {"spec_tokens_details": {"spec_accept_length": 2.5}}}) == 2.5
    assert _accept_length({"sglext": {"spec_tokens_details": [{"spec_accept_length": 2.0},
                                                              {"spec_accept_length": 3.0}]}}) == 2.5
    assert _accept_length({"choices": []}) is None and _accept_length({"sglext": None}) is None
