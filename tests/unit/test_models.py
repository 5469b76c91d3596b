"""Model resolution (router.state.models), the engine model list (router.state.identity), the fake's LoRA rules."""

from __future__ import annotations

import orjson
import pytest

from router.errors import InvalidRequest, ModelNotFound
from router.state.identity import EngineModels, parse_model_list
from router.state.models import Catalog, Resolved, resolve, resolve_passthrough, split_adapter
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.errors import ClientError
from serving.fake_sglang.lora import check_lora, parse_model

NAMES = {"tiny-llama": "tiny-llama", "tl:8b": "tiny-llama", "gpt-4o-mini": "tiny-llama"}
CAT = Catalog(NAMES, {"sql": "/adapters/sql", "chat": "chat"}, complete=True, max_model_len=4096)
NONE = frozenset()


@pytest.mark.parametrize(("doc", "expected"), [
    ({}, Resolved("tiny-llama", NONE, "tiny-llama")),                                # absent: the model, sent by name
    ({"model": None}, Resolved("tiny-llama", NONE, "tiny-llama")),
    ({"model": "tiny-llama"}, Resolved("tiny-llama")),                              # exact: unchanged
    ({"model": "gpt-4o-mini"}, Resolved("tiny-llama", NONE, "tiny-llama")),         # alias: rewritten
    ({"model": "tl:8b"}, Resolved("tiny-llama", NONE, "tiny-llama")),               # an alias wins over splitting
    ({"model": "tiny-llama:sql"}, Resolved("tiny-llama", frozenset({"sql"}))),      # SGLang's syntax: unchanged
    ({"model": "gpt-4o-mini:sql"}, Resolved("tiny-llama", frozenset({"sql"}), "tiny-llama:sql")),
    ({"model": "tl:8b:sql"}, Resolved("tiny-llama", frozenset({"sql"}), "tiny-llama:sql")),  # the longest name
    ({"model": "tiny-llama: sql "}, Resolved("tiny-llama", frozenset({"sql"}), "tiny-llama:sql")),
    ({"model": "sql"}, Resolved("tiny-llama", frozenset({"sql"}), "tiny-llama:sql")),  # a listed adapter id
    ({"model": "tiny-llama", "lora_path": "sql"}, Resolved("tiny-llama", frozenset({"sql"}))),
    ({"model": "tiny-llama", "lora_path": None}, Resolved("tiny-llama")),
    ({"model": "tiny-llama", "lora_path": ""}, Resolved("tiny-llama")),
    ({"model": "tiny-llama", "lora_path": ["sql", None, "chat"]}, Resolved("tiny-llama", frozenset({"sql", "chat"}))),
    # the adapter in `model` wins over lora_path (SGLang's _resolve_lora_path): lora_path not checked
    ({"model": "tiny-llama:sql", "lora_path": "nope"}, Resolved("tiny-llama", frozenset({"sql"}))),
])
def test_resolve(doc, expected):
    assert resolve(doc, CAT, "tiny-llama") == expected


@pytest.mark.parametrize(("doc", "param"), [
    ({"model": "gpt-4o"}, "model"), ({"model": "Tiny-Llama"}, "model"), ({"model": ""}, "model"),
    ({"model": "tiny-llama:"}, "model"), ({"model": "tiny-llama: "}, "model"),
    ({"model": "tiny-llama:nope"}, "model"), ({"model": "other:sql"}, "model"),
    ({"model": "tl:8b:nope"}, "model"),
    ({"model": "tiny-llama", "lora_path": "nope"}, "lora_path"),
    ({"lora_path": ["sql", "nope"]}, "lora_path"),
])
def test_unknown_names_and_adapters_are_404(doc, param):
    with pytest.raises(ModelNotFound) as exc:
        resolve(doc, CAT, "tiny-llama")
    assert (exc.value.status, exc.value.code, exc.value.param) == (404, "model_not_found", param)


def test_unknown_adapter_before_every_engine_was_read_goes_to_the_decision():
    cat = Catalog(NAMES, {}, complete=False, max_model_len=4096)
    assert resolve({"model": "tiny-llama:nope"}, cat, "tiny-llama") == Resolved("tiny-llama", frozenset({"nope"}))
    with pytest.raises(ModelNotFound):  # an unknown base is unknown however many engines were read
        resolve({"model": "gpt-4o:nope"}, cat, "tiny-llama")


@pytest.mark.parametrize("value", [1, True, {"a": 1}, ["sql", 2]])
def test_lora_path_of_the_wrong_type_is_400(value):
    with pytest.raises(InvalidRequest) as exc:
        resolve({"model": "tiny-llama", "lora_path": value}, CAT, "tiny-llama")
    assert (exc.value.status, exc.value.param) == (400, "lora_path")


def test_split_adapter():
    assert split_adapter("a:b:c", ["a", "a:b"]) == ("a:b", "c")
    assert split_adapter("a:b", ["a"]) == ("a", "b")
    assert split_adapter("ab:c", ["a"]) is None
    assert split_adapter("a", ["a"]) is None


def test_passthrough_models():
    cat = Catalog(NAMES, {}, complete=True, max_model_len=4096, passthrough=frozenset({"bge"}))
    assert resolve_passthrough(None, cat, generating=False, listed=True) is None
    assert resolve_passthrough("bge", cat, generating=False, listed=True) is None
    assert resolve_passthrough("gpt-4o-mini", cat, generating=True, listed=True) == "tiny-llama"
    with pytest.raises(InvalidRequest) as exc:
        resolve_passthrough("tiny-llama", cat, generating=False, listed=True)
    assert exc.value.code == "model_not_supported"
    with pytest.raises(ModelNotFound):
        resolve_passthrough("junk", cat, generating=False, listed=True)
    assert resolve_passthrough("junk", cat, generating=False, listed=False) is None  # the engine judges


def test_parse_model_list():
    body = orjson.dumps({"object": "list", "data": [
        {"id": "tiny-llama", "root": "tiny-llama", "parent": None},
        {"id": "sql", "root": "/adapters/sql", "parent": "tiny-llama"}, {"id": "x", "parent": "tiny-llama"}]})
    assert parse_model_list(body) == EngineModels(frozenset({"tiny-llama"}), {"sql": "/adapters/sql", "x": "x"})
    for bad in (b"nope", b"[]", b'{"data": 1}', b'{"data": [{"id": 1}]}'):
        assert parse_model_list(bad) is None


@pytest.mark.parametrize(("model", "expected"), [
    ("tiny-llama", ("tiny-llama", None)), ("tiny-llama:sql", ("tiny-llama", "sql")),
    ("tl:8b", ("tl", "8b")), ("anything:sql", ("anything", "sql")), ("tiny-llama:", ("tiny-llama", None)),
])
def test_fake_parses_model_as_sglang(model, expected):
    assert parse_model(model, "tiny-llama") == expected


def test_fake_lora_errors():
    plain = FakeConfig(model_name="tiny-llama")
    lora = FakeConfig(model_name="tiny-llama", enable_lora=True, lora_paths=("sql=/a/sql", "/a/chat"))
    assert lora.lora_adapters == {"sql": "/a/sql", "/a/chat": "/a/chat"}
    assert check_lora(plain, {"model": "tiny-llama"}, "chat") is None
    assert check_lora(lora, {"model": "tiny-llama:sql"}, "chat") == "sql"
    assert check_lora(lora, {"model": "tiny-llama", "lora_path": "sql"}, "chat") == "sql"
    with pytest.raises(ClientError, match="LoRA adapter '8b' was requested, but LoRA is not enabled"):
        check_lora(plain, {"model": "tl:8b"}, "chat")
    with pytest.raises(ClientError, match="The following requested LoRA adapters are not loaded: nope"):
        check_lora(lora, {"model": "tiny-llama:nope"}, "completions")
    assert check_lora(lora, {"model": "tiny-llama:nope", "lora_path": "sql"}, "generate") == "sql"


def test_adapter_traffic_is_kept_out_of_the_acceptance_estimate():
    from router.decision.acceptance import AcceptanceTracker

    t = AcceptanceTracker()
    kw = {"weight": 1.0, "refresh_tokens": 1.0, "running_reqs": 1}
    t.started("greedy")
    assert t.scraped(2.0, 0.0, 0.0, **kw) is False  # the first counter reading: nothing decoded yet
    t.started("greedy", adapter=True)
    assert t.scraped(1.2, 100.0, 1.0, **kw) is False  # an adapter request decoded in this window
    assert t.accept_length("greedy", 1.0, 10.0) is None
    t.finished("greedy", adapter=True)
    assert t.scraped(1.3, 200.0, 2.0, **kw) is False  # it ended before this reading: still in it
    assert t.scraped(1.4, 300.0, 3.0, **kw) is False  # and its last steps may be in the next one
    assert t.scraped(2.5, 400.0, 4.0, **kw) is True   # the base request alone
    assert t.accept_length("greedy", 4.0, 10.0) == pytest.approx(2.5)


def test_prefix_chain_is_keyed_by_adapter():
    from router.decision.prefix import prefix_chain

    text = "system prompt " * 40
    base = prefix_chain(text, block_chars=64, max_blocks=8)
    sql = prefix_chain(text, block_chars=64, max_blocks=8, salt="sql")
    assert base == prefix_chain(text, block_chars=64, max_blocks=8, salt="")
    assert sql == prefix_chain(text, block_chars=64, max_blocks=8, salt="sql")
    assert not set(base.keys) & set(sql.keys) and base.anchor != sql.anchor
    assert not set(sql.keys) & set(prefix_chain(text, block_chars=64, max_blocks=8, salt="chat").keys)


def test_pool_lora_config_and_launch_args():
    from router.config.tree import ConfigError, parse_config
    from serving.launch import check_with_sglang, engine_argv

    doc = {"model": {"name": "m", "tokenizer": "/t"}, "limits": {"max_context_tokens": 4096},
           "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
           "pools": [{"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:1"],
                      "lora_adapters": ["chat"],
                      "engine": {"model_path": "/m", "lora_paths": ["sql=/a/sql", "/a/x"]}}]}
    cfg = parse_config(doc)
    assert cfg.pools[0].declared_adapters == frozenset({"chat", "sql", "/a/x"})
    argv = engine_argv(cfg, "plain")
    assert argv[argv.index("--enable-lora"):argv.index("--enable-lora") + 4] == [
        "--enable-lora", "--lora-paths", "sql=/a/sql", "/a/x"]
    check_with_sglang(argv)  # SGLang's own parser takes them (False, unchecked, where it is not installed)
    doc["pools"][0]["lora_adapters"] = ["sql"]
    with pytest.raises(ConfigError, match="named twice"):
        parse_config(doc)
