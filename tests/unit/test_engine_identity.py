"""What an engine says it is, continuously: the constants and ``model_name`` of its ``/metrics``,
its ``/v1/models`` and ``/server_info`` parsed, the changes that make the router read them again
(router.state.identity), and how an endpoint judges them (router.state.endpoint.Endpoint)."""

from __future__ import annotations

import logging

import orjson
import pytest

from router.state.endpoint import Endpoint
from router.state.engine_metrics import EngineLoad, parse_sglang_metrics
from router.state.identity import (
    EngineModels,
    ServerInfo,
    parse_model_list,
    parse_server_info,
    recheck_reason,
)

LABELS = 'engine_type="unified",model_name="{m}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'


def scrape(model: str = "m", context: int = 2048, kv: int = 8192, requests: float | None = 3.0) -> str:
    lab = LABELS.format(m=model)
    lines = [f"sglang:context_len{{{lab}}} {context}.0", f"sglang:max_total_num_tokens{{{lab}}} {kv}.0",
             f"sglang:num_running_reqs{{{lab}}} 1.0"]
    if requests is not None:
        lines.append(f'sglang:num_requests_total{{engine_type="unified",is_streaming="false",model_name="{model}"}} '
                     f"{requests}")
    return "\n".join(lines) + "\n"


def test_metrics_carry_context_kv_model_name_and_request_counter():
    load = parse_sglang_metrics(scrape())
    assert (load.context_len, load.max_total_num_tokens, load.model_names, load.num_requests_total,
            load.num_running_reqs) == (2048, 8192, frozenset({"m"}), 3.0, 1)
    bare = parse_sglang_metrics("sglang:num_running_reqs 2\n")
    assert (bare.context_len, bare.model_names, bare.num_requests_total) == (None, frozenset(), None)
    escaped = parse_sglang_metrics('sglang:context_len{model_name="a\\"b"} 10\n')
    assert (escaped.context_len, escaped.model_names) == (10, frozenset())


def test_model_list_max_model_len_and_server_info():
    body = orjson.dumps({"data": [{"id": "m", "parent": None, "max_model_len": 1024},
                                  {"id": "sql", "root": "/a/sql", "parent": "m", "max_model_len": None}]})
    assert parse_model_list(body) == EngineModels(frozenset({"m"}), {"sql": "/a/sql"}, 1024)
    assert parse_model_list(orjson.dumps({"data": [{"id": "m", "max_model_len": True}]})) == EngineModels(
        frozenset({"m"}), {}, None)
    info = parse_server_info(orjson.dumps({"served_model_name": "m", "context_length": None,
                                           "max_total_num_tokens": 4096, "max_req_input_len": 1018,
                                           "startup_time": {"load_weight": 1.5, "scheduler_e2e": 2.0}}))
    assert info == ServerInfo("m", None, 4096, 1018, b'{"load_weight":1.5,"scheduler_e2e":2.0}')
    assert parse_server_info(b"[]") is None and parse_server_info(b"nope") is None


@pytest.mark.parametrize(("after", "why"), [
    (scrape(), None),
    (scrape(requests=5.0), None),
    (scrape(model="other"), "served_model"),
    (scrape(context=1024), "context_length"),
    (scrape(kv=4096), "kv_tokens"),
    (scrape(requests=1.0), "restart"),
    (scrape(requests=None), "restart"),
])
def test_what_makes_the_router_read_the_identity_again(after, why):
    before = parse_sglang_metrics(scrape())
    assert recheck_reason(before, parse_sglang_metrics(after)) == why
    assert recheck_reason(None, parse_sglang_metrics(after)) is None


def test_labels_and_lists_judge_the_identity_and_log_once(caplog):
    caplog.set_level(logging.INFO, logger="specgate")
    ep = Endpoint("http://e:1", "spec")
    ep.record_labels(parse_sglang_metrics(scrape()), "m")
    assert (ep.identity_error, ep.engine_context) == (None, 2048)
    ep.record_labels(parse_sglang_metrics(scrape(model="other", context=1024)), "m")
    assert (ep.identity_error, ep.healthy, ep.context_length) == ("is labelled other, not m", False, 1024)
    ep.record_models(EngineModels(frozenset({"other"}), {}, 1024), "m", 1.0)
    assert ep.identity_error == "serves other, not m"
    ep.record_models(EngineModels(frozenset({"m"}), {}, 4096), "m", 2.0)
    assert ep.identity_error == "is labelled other, not m"  # the labels still say so
    ep.record_labels(parse_sglang_metrics(scrape(context=4096)), "m")
    assert (ep.identity_error, ep.engine_context) == (None, 4096)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", ("endpoint http://e:1 of pool spec is unhealthy (identity_mismatch): it is labelled other, "
                    "not m; it gets no request until it serves m again")),
        ("WARNING", ("endpoint http://e:1 of pool spec is unhealthy (identity_mismatch): it serves other, not m; "
                    "it gets no request until it serves m again")),
        ("WARNING", ("endpoint http://e:1 of pool spec is unhealthy (identity_mismatch): it is labelled other, "
                    "not m; it gets no request until it serves m again")),
        ("INFO", "endpoint http://e:1 of pool spec serves m")]


def test_engine_context_is_the_smaller_of_context_and_kv_and_server_info_counts_restarts():
    ep = Endpoint("http://e:1", "spec")
    assert ep.engine_context is None
    assert ep.record_server_info(ServerInfo("m", 2048, 1000, 994, b"1"), "m") is False
    assert (ep.engine_context, ep.served_models, ep.identity_error) == (1000, frozenset({"m"}), None)
    assert ep.record_server_info(ServerInfo("m", 2048, 1000, 994, b"1"), "m") is False
    assert ep.record_server_info(ServerInfo("m", 512, None, None, b"2"), "m") is True
    assert ep.engine_context == 512


def test_a_failed_scrape_or_a_broken_connection_asks_for_a_recheck():
    ep = Endpoint("http://e:1", "spec")
    ep.record_success(EngineLoad(), now=0.0)
    assert ep.recheck is None
    ep.record_failure(slow=True, now=1.0)
    assert ep.recheck == "reconnect"
    ep.recheck = None
    ep.mark_down()
    assert ep.recheck == "reconnect"


@pytest.mark.parametrize(("doc", "expected"), [
    ({"speculative_algorithm": "EAGLE3"}, "EAGLE3"), ({"speculative_algorithm": None}, ""),
    ({"speculative_algorithm": "NONE"}, ""), ({}, None), ({"speculative_algorithm": 3}, "")])
def test_server_info_says_whether_the_engine_speculates(doc, expected):
    info = parse_server_info(orjson.dumps({"served_model_name": "m", **doc}))
    assert info is not None and info.speculative_algorithm == expected


def test_a_plain_pools_endpoint_that_speculates_is_not_routed_to(caplog):
    ep = Endpoint("http://e:1", "plain", speculative=False, state="healthy")
    with caplog.at_level(logging.WARNING, logger="specgate"):
        ep.record_server_info(ServerInfo("m", 2048, None, None, b"1", "EAGLE3"), "m")
        ep.record_server_info(ServerInfo("m", 2048, None, None, b"1", "EAGLE3"), "m")
    assert (ep.identity_error, ep.healthy) == ("runs speculative decoding (EAGLE3), but its pool is plain", False)
    assert len([r for r in caplog.records if "identity_mismatch" in r.getMessage()]) == 1
    ep.record_server_info(ServerInfo("m", 2048, None, None, b"2", ""), "m")  # restarted without it
    assert (ep.identity_error, ep.healthy) == (None, True)
    ep.record_server_info(ServerInfo("m", 2048, None, None, b"3", None), "m")  # a later read that does not say
    assert (ep.speculation, ep.identity_error) == ("", None)


def test_a_speculative_pools_endpoint_without_speculation_is_routed_and_logged_once(caplog):
    ep = Endpoint("http://e:1", "spec", speculative=True, state="healthy")
    with caplog.at_level(logging.WARNING, logger="specgate"):
        for _ in range(2):
            ep.record_server_info(ServerInfo("m", 2048, None, None, b"1", ""), "m")
    assert (ep.identity_error, ep.healthy, ep.speculation) == (None, True, "")
    assert [r.getMessage() for r in caplog.records] == [
        ("endpoint http://e:1 of pool spec runs no speculative decoding (its /server_info); it is routed to as a "
         "speculative engine at plain speed")]
    unchecked = Endpoint("http://e:2", "embed", speculative=None, state="healthy")
    unchecked.record_server_info(ServerInfo("m", 2048, None, None, b"1", "EAGLE3"), "m")
    assert unchecked.identity_error is None
