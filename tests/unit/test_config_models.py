"""The ``models:`` list (router.config.models): both forms, the cross-model checks, the views."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from router.cli import main
from router.config.tree import ConfigError, parse_config
from tests.support.config_docs import BASE, two_models


def test_one_model_form_is_a_list_of_one():
    cfg = parse_config(BASE)
    assert [m.name for m in cfg.models] == ["tiny-llama"]
    assert cfg.model is cfg.models[0]
    assert cfg.limits.max_context_tokens == 4096
    assert [p.name for p in cfg.pools] == ["spec", "plain"]
    assert cfg.for_model("tiny-llama") is cfg
    assert cfg.max_request_bytes == 33554432


def test_several_models_each_with_limits_pools_routing():
    cfg = parse_config(two_models())
    assert cfg.pools and cfg.max_request_bytes  # computed and cached before the views are taken
    assert [m.name for m in cfg.models] == ["a", "b"]
    assert [p.name for p in cfg.pools] == ["spec", "plain", "b-plain"]
    assert cfg.model_of("b-plain").name == "b"
    assert cfg.pool_limit(cfg.pool("b-plain")) == 8192
    assert cfg.pool_limit(cfg.pool("plain")) == 4096
    assert cfg.max_request_bytes == 33554432  # the largest: the body is read before the model is known
    b = cfg.for_model("b")
    assert (b.model.name, b.limits.default_max_tokens, b.routing.long_prompt_tokens) == ("b", 64, 512)
    assert [p.name for p in b.pools] == ["b-plain"] and b.max_request_bytes == 2_000_000
    assert b.upstream == cfg.upstream and b.scrape == cfg.scrape
    with pytest.raises(ConfigError, match=r"this config serves 2 models \(a, b\)"):
        _ = cfg.model
    with pytest.raises(KeyError):
        cfg.for_model("c")


@pytest.mark.parametrize("key", ["model", "limits", "pools", "routing"])
def test_both_forms_at_once_is_an_error(key):
    doc = two_models()
    doc[key] = copy.deepcopy(BASE[key])
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    assert str(exc.value) == (
        "config: use either `model:` with top-level `limits`/`pools`/`routing` (one model) or "
        "`models:` (a list, each entry with its own limits, pools and routing), not both; "
        f"found `models` and `{key}` at the top level")


def _mutate(path: str, value):
    doc = two_models()
    node = doc
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    node[int(keys[-1]) if keys[-1].isdigit() else keys[-1]] = value
    return doc


@pytest.mark.parametrize("path,value,message", [
    ("models.1.name", "a", "model name or alias 'a' is used by models 'a' and 'a'"),
    ("models.1.aliases", ["a-latest"], "model name or alias 'a-latest' is used by models 'a' and 'b'"),
    ("models.1.aliases", ["a"], "model name or alias 'a' is used by models 'a' and 'b'"),
    ("models.1.pools.0.name", "plain",
     "duplicate pool name 'plain' (models 'a' and 'b'; pool names are unique across the deployment)"),
    ("models.1.pools.0.endpoints", ["http://127.0.0.1:30002/"],
     "an endpoint URL appears in more than one pool: http://127.0.0.1:30002 (pools 'plain' and 'b-plain')"),
    ("models", [], "models: at least one model is required"),
    ("models.1.pools.0.max_context_tokens", 9000,
     "models[b].pools[b-plain].max_context_tokens (9000) exceeds models[b].limits.max_context_tokens (8192)"),
    ("models.1.pools", [], "models[b]: at least one pool is required"),
])
def test_cross_model_checks(path, value, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(_mutate(path, value))
    assert message in str(exc.value)


def test_field_errors_name_the_entry():
    with pytest.raises(ConfigError) as exc:
        parse_config(_mutate("models.1.limits.max_context_tokens", "8k"))
    assert "  models.1.limits.max_context_tokens: Input should be a valid integer (got '8k')" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        parse_config(_mutate("models.1.routing.long_promt_tokens", 5))
    assert "  models.1.routing.long_promt_tokens: unknown key; did you mean 'long_prompt_tokens'?" in str(exc.value)


def test_one_model_errors_keep_the_files_key_paths():
    doc = copy.deepcopy(BASE)
    doc["pools"][1]["endpoints"] = ["not a url"]
    doc["model"]["tokenizr"] = "/x"
    with pytest.raises(ConfigError) as exc:
        parse_config(doc)
    lines = str(exc.value).splitlines()
    assert "  pools.1.endpoints.0: String should match pattern '^https?://[^\\s/]+(:\\d+)?/?$' (got 'not a url')" in lines
    assert "  model.tokenizr: unknown key; did you mean 'tokenizer'?" in lines


def test_relative_tokenizers_resolve_per_model(tmp_path):
    doc = two_models()
    doc["models"][1]["tokenizer"] = "tok-b"
    cfg = parse_config(doc, base_dir=tmp_path)
    assert cfg.for_model("b").model.tokenizer == str(tmp_path / "tok-b")


def test_config_check_prints_the_models(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(two_models()))
    assert main(["config", "check", "--no-paths", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in out["models"]] == ["a", "b"]
    assert out["models"][1]["aliases"] == ["b:8b"]
    assert out["models"][1]["pools"][0]["effective_max_context_tokens"] == 8192
    assert out["models"][0]["pools"][0]["effective_max_context_tokens"] == 2048
    assert "pools" not in out and "model" not in out


def test_the_operator_guides_example_is_valid():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "operator-guide.md").read_text()
    section = text[text.index("### Several base models behind one router"):]
    cfg = parse_config(yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0]))
    assert [m.name for m in cfg.models] == ["llama-3.1-8b", "qwen3-32b"]
    assert cfg.max_request_bytes == 67108864
    assert cfg.for_model("qwen3-32b").limits.default_max_tokens is None
