"""benchmarks/request_cost.py's router configs: one model as before, N models as a list the
router's own loader accepts, each model on its own backend."""

from __future__ import annotations

from benchmarks.request_cost import _config
from router.config.tree import parse_config


def test_one_model_is_the_one_model_file() -> None:
    assert _config(["bench"], [31000], "/t") == {
        "model": {"name": "bench", "tokenizer": "/t"},
        "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
        "pools": [{"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:31000"]}],
        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100000, "exit": 99999}},
        "scrape": {"interval_s": 1.0, "timeout_s": 1.0, "stale_after_s": 5.0},
        "server": {"log_requests": False},
    }


def test_three_models_each_on_its_own_backend() -> None:
    cfg = parse_config(_config(["bench", "bench-2", "bench-3"], [31000, 31001, 31002], "/t"))
    assert [(m.name, [(p.name, p.endpoints) for p in m.pools]) for m in cfg.models] == [
        ("bench", [("plain", ("http://127.0.0.1:31000",))]),
        ("bench-2", [("plain-2", ("http://127.0.0.1:31001",))]),
        ("bench-3", [("plain-3", ("http://127.0.0.1:31002",))]),
    ]
    one = parse_config(_config(["bench"], [31000], "/t"))
    assert cfg.for_model("bench").models == one.models  # the first model is the one-model config
