"""Operator YAML validation (router.config.tree)."""

from __future__ import annotations

import json

import pytest
import yaml

from router.cli import main
from router.config.tree import ConfigError, load_config, parse_config
from tests.support.config_docs import BASE, with_


def test_issue_example_is_valid():
    cfg = parse_config(BASE)
    assert cfg.pool_limit(cfg.pool("spec")) == 2048
    assert cfg.pool_limit(cfg.pool("plain")) == 4096
    assert cfg.pool("spec").reserved_tokens == 4
    assert cfg.health.failure_threshold == 3


@pytest.mark.parametrize("path,value,fragment", [
    ("routing.saturation.exit", 8, "must be < saturation.enter"),
    ("routing.saturation.exit", 9, "must be < saturation.enter"),
    ("pools.0.max_context_tokens", 5000, "exceeds limits.max_context_tokens"),
    ("limits.max_context_tokens", "4096", "limits.max_context_tokens"),
    ("limits.max_context_tokens", 4096.0, "limits.max_context_tokens"),
    ("limits.max_context_tokens", True, "limits.max_context_tokens"),
    ("limits.max_context_tokens", 0, "limits.max_context_tokens"),
    ("routing.long_prompt_tokens", KeyError, "routing.long_prompt_tokens"),
    ("routing.typo", 1, "routing.typo"),
    ("routing.prefix_cache", {"pool_affinity_ratio": 0.99}, "routing.prefix_cache.pool_affinity_ratio"),
    ("routing.prefix_cache", {"pool_affinity_ratio": 1.2, "new_affinity_ratio": 1.25},
     "new_affinity_ratio must be at most pool_affinity_ratio"),
    ("extra", {}, "extra"),
    ("pools.1.endpoints", ["http://127.0.0.1:30001"], "more than one pool"),
    ("pools.1.endpoints", ["not a url"], "pools.1.endpoints.0"),
    ("pools.1.name", "spec", "duplicate pool name"),
    ("pools", [], "at least one pool"),
    ("scrape.stale_after_s", 0.1, "stale_after_s"),
    ("model.name", "", "model.name"),
    ("model.aliases", ["a", "a"], "model.aliases repeats a name"),
    ("model.aliases", ["tiny-llama"], "model.aliases repeats a name"),
    ("model.aliases", [""], "model.aliases.0"),
])
def test_invalid_configs_name_the_key(path, value, fragment):
    with pytest.raises(ConfigError) as exc:
        parse_config(with_(path, value))
    assert fragment in str(exc.value)


def test_model_names():
    cfg = parse_config(with_("model.aliases", ["gpt-4o-mini"]))
    assert cfg.model.names == ("tiny-llama", "gpt-4o-mini")  # resolution: tests/unit/test_models.py


def test_engine_reserved_tokens_and_draft_positions(tmp_path):
    engine = {"model_path": "/m", "context_length": 2048, "speculative_algorithm": "EAGLE3",
              "speculative_draft_model_path": str(tmp_path / "draft"), "speculative_num_steps": 3,
              "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    doc = with_("pools.0", {"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:1"],
                            "engine": engine})
    cfg = parse_config(doc)
    assert cfg.pool("spec").reserved_tokens == 4   # max(1*3, 4)
    assert cfg.pool_limit(cfg.pool("spec")) == 2048
    # a declared reserved count that disagrees with the engine is refused
    bad = with_("pools.0", {"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:1"],
                            "engine": engine, "draft_reserved_tokens": 3})
    with pytest.raises(ConfigError, match="differs from the engine"):
        parse_config(bad)
    # the drafter's max positions (read from its config.json) must cover the pool's limit (sglang#3574)
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps({"max_position_embeddings": 1024}))
    with pytest.raises(ConfigError, match="max positions"):
        parse_config(doc)
    (tmp_path / "draft" / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    assert parse_config(doc).pool("spec").engine.draft_max_positions == 4096


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_relative_tokenizer_resolved_against_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(with_("model.tokenizer", "models/tok")))
    assert load_config(f).model.tokenizer == str((tmp_path / "models/tok").resolve())


def test_config_check_cli(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(BASE))
    assert main(["config", "check", "--no-paths", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pools"][0]["effective_max_context_tokens"] == 2048
    assert out["pools"][1]["effective_draft_reserved_tokens"] == 0
    f.write_text(yaml.safe_dump(with_("routing.saturation.exit", 8)))
    assert main(["config", "check", "--no-paths", str(f)]) == 2
    assert "saturation.exit" in capsys.readouterr().err


def test_default_max_tokens_engine_spells_null():
    for value in (None, "engine"):
        assert parse_config(with_("limits.default_max_tokens", value)).limits.default_max_tokens is None
    assert parse_config(BASE).limits.default_max_tokens == 256


def test_errors_suggest_the_key_echo_the_value_and_name_the_file(tmp_path):
    doc = with_("routing", {"long_promt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}})
    doc["pools"][0]["draft_reserved_tokens"] = "four"
    doc["scrape"]["intervall_s"] = 1.0
    doc["auth"] = {"api_keys": [12], "admin_api_key": 7}
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    assert str(exc.value).splitlines() == [
        "invalid config:",
        "  pools.0.draft_reserved_tokens: Input should be a valid integer (got 'four')",
        "  routing.long_promt_tokens: unknown key; did you mean 'long_prompt_tokens'?",
        "  scrape.intervall_s: unknown key; did you mean 'interval_s'?",
        "  auth.api_keys.0: Input should be a valid string",        # a key's value is never echoed
        "  auth.admin_api_key: Input should be a valid string",
    ]
    with pytest.raises(ConfigError) as exc:
        parse_config(with_("pools.1.zzz", 1))
    assert str(exc.value).splitlines()[1:] == ["  pools.1.zzz: unknown key"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {name: x\nlimits: [\n")
    with pytest.raises(ConfigError) as exc:
        load_config(bad)
    assert f'in "{bad}", line 1, column 8' in str(exc.value) and "<unicode string>" not in str(exc.value)
