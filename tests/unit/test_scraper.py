"""Pure parsing of SGLang /metrics text (router.loops.scraper.parse_sglang_metrics)."""

from router.loops.scraper import EngineLoad, parse_sglang_metrics

COLON = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="tiny",tp_rank="0"} 3.0
sglang:num_queue_reqs{engine_type="unified",model_name="tiny",tp_rank="0"} 2.0
sglang:token_usage{engine_type="unified",model_name="tiny",tp_rank="0"} 0.25
sglang:spec_accept_length{engine_type="unified",model_name="tiny",tp_rank="0"} 2.5
sglang:spec_accept_rate{engine_type="unified",model_name="tiny",tp_rank="0"} 0.5
sglang:num_running_reqs_total 99
sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="tiny"} 7.0
"""


def test_colon_spelling():
    assert parse_sglang_metrics(COLON) == EngineLoad(3, 2, 0.25, 2.5, 0.5)


def test_underscore_spelling_and_dp_ranks_summed():
    text = "\n".join([  # noqa: FLY002  one exposition line per item
        'sglang_num_running_reqs{dp_rank="0"} 4', 'sglang_num_running_reqs{dp_rank="1"} 5',
        'sglang_num_queue_reqs{dp_rank="0"} 1', 'sglang_num_queue_reqs{dp_rank="1"} 0',
        'sglang_token_usage{dp_rank="0"} 0.1', 'sglang_token_usage{dp_rank="1"} 0.7',
        'sglang_spec_accept_length{dp_rank="0"} 0', 'sglang_spec_accept_length{dp_rank="1"} 3.0',
    ])
    load = parse_sglang_metrics(text)
    assert load == EngineLoad(9, 1, 0.7, 3.0, None)
    assert load.load == 10


def test_zero_accept_length_is_unknown_and_garbage_ignored():
    text = 'sglang:spec_accept_length{a="1"} 0.0\nsglang:num_running_reqs NaN\nsglang:num_queue_reqs{x="}"} 2\nnot a metric\nsglang:token_usage abc\n'
    assert parse_sglang_metrics(text) == EngineLoad(0, 2, 0.0, None, None)
    assert parse_sglang_metrics("") == EngineLoad()
