"""router.ops.metrics' lock-free per-request series export what prometheus_client's would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from router.ops.metrics import LoopCounter, LoopHistogram, RouterMetrics


def test_loop_histogram_matches_prometheus_client_histogram():
    reg = CollectorRegistry()
    ref = Histogram("ref_seconds", "ref", ["pool"], buckets=(0.005, 0.01, 0.1), registry=reg)
    ours = LoopHistogram("ours_seconds", "ours", ["pool"], (0.005, 0.01, 0.1))
    values = [0.0, 0.005, 0.0050001, 0.01, 0.05, 0.1, 0.2, 7.0]  # bucket edges are inclusive (le)
    for v in values:
        ref.labels("spec").observe(v)
        ours.observe(("spec",), v)
    want = {(s.labels.get("le"), s.name.rsplit("_", 1)[-1]): s.value
            for s in next(iter(ref.collect())).samples if not s.name.endswith("_created")}
    got = {(s.labels.get("le"), s.name.rsplit("_", 1)[-1]): s.value
           for s in ours.collect().samples}
    assert got == want
    assert got[("0.005", "bucket")] == 2 and got[("+Inf", "bucket")] == len(values)
    assert got[(None, "sum")] == sum(values)


def test_loop_counter_series_and_registry_export():
    m = RouterMetrics(CollectorRegistry(auto_describe=True))
    m.requests.inc(("m", "spec", "speculative", "200"))
    m.requests.inc(("m", "spec", "speculative", "200"), 2)
    m.requests.inc(("none", "none", "context_cap", "400"))
    m.prompt_tokens.observe(("exact",), 300)
    get = m.registry.get_sample_value
    assert get("specgate_requests_total", {"model": "m", "pool": "spec", "reason": "speculative", "status": "200"}) == 3.0
    assert get("specgate_requests_total", {"model": "none", "pool": "none", "reason": "context_cap",
                                           "status": "400"}) == 1.0
    assert get("specgate_prompt_tokens_bucket", {"kind": "exact", "le": "256.0"}) == 0.0
    assert get("specgate_prompt_tokens_bucket", {"kind": "exact", "le": "1024.0"}) == 1.0
    assert get("specgate_upstream_aborts_total", {"pool": "spec"}) is None  # no series before the first event


def test_loop_counter_labels_are_positional():
    c = LoopCounter("x", "doc", ["a", "b"])
    c.inc(("1", "2"))
    (sample,) = c.collect().samples
    assert (sample.name, sample.labels, sample.value) == ("x_total", {"a": "1", "b": "2"}, 1.0)


def test_exposition_has_build_info_and_no_created_series():
    import platform

    m = RouterMetrics(CollectorRegistry(auto_describe=True), version="9.9.9")
    m.requests.inc(("tiny-llama", "spec", "speculative", "200"))
    m.scrape_failures.labels("spec", "http://127.0.0.1:1").inc()
    m.config_reloads.labels("success").inc()
    text = m.exposition().decode()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert f'specgate_build_info{{python="{platform.python_version()}",version="9.9.9"}} 1.0' in lines
    assert not [line for line in lines if "_created" in line]
    assert 'specgate_config_reloads_total{result="success"} 1.0' in lines
    assert 'specgate_requests_total{model="tiny-llama",pool="spec",reason="speculative",status="200"} 1.0' in lines
    # the registry itself still has them (prometheus_client's default), only the exposition drops them
    assert m.registry.get_sample_value("specgate_config_reloads_created", {"result": "success"}) is not None


def test_unknown_accept_length_estimate_is_absent_not_zero():
    from router.ops.metrics import set_or_clear

    m = RouterMetrics(CollectorRegistry(auto_describe=True))
    get = m.registry.get_sample_value
    set_or_clear(m.accept_length_estimate, ("spec", "greedy"), None)    # never set: nothing to remove
    assert get("specgate_accept_length_estimate", {"pool": "spec", "class": "greedy"}) is None
    set_or_clear(m.accept_length_estimate, ("spec", "greedy"), 2.4)
    assert get("specgate_accept_length_estimate", {"pool": "spec", "class": "greedy"}) == 2.4
    set_or_clear(m.accept_length_estimate, ("spec", "greedy"), None)
    assert get("specgate_accept_length_estimate", {"pool": "spec", "class": "greedy"}) is None
