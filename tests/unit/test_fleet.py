"""One runtime per model (router.state.fleet) and resolution across models (router.state.models)."""

from __future__ import annotations

import copy

import pytest

from router.config.tree import Overrides, parse_config
from router.errors import InvalidRequest, ModelNotFound
from router.state.fleet import Fleet, build_fleet
from router.state.models import fleet_card, fleet_cards, model_runtime, resolve_fleet
from tests.support.config_docs import two_models


def counters(cfg) -> dict:
    return dict.fromkeys((m.name for m in cfg.models), None)  # no tokenizer needed here


def fleet_of(doc) -> tuple[Fleet, object]:
    cfg = parse_config(doc)
    return build_fleet(cfg, counters(cfg)), cfg


def with_adapter(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    doc["models"][0]["pools"][1]["lora_adapters"] = ["sql"]  # model a's plain pool declares adapter sql
    return doc


def test_one_runtime_per_model_each_serving_one_model():
    fleet, _ = fleet_of(two_models())
    assert list(fleet.runtimes) == ["a", "b"]
    a, b = fleet.runtime("a"), fleet.runtime("b")
    assert fleet.default is a
    assert [p.name for p in a.pools] == ["spec", "plain"] and [p.name for p in b.pools] == ["b-plain"]
    assert (a.config.model.name, b.config.model.name) == ("a", "b")
    assert (a.routing.long_prompt_tokens, b.routing.long_prompt_tokens) == (1024, 512)
    assert b.config.limits.default_max_tokens == 64
    assert fleet.names == {"a": "a", "a-latest": "a", "b": "b", "b:8b": "b"}
    assert fleet.runtime_of_pool("b-plain") is b and fleet.model_of_pool("spec") == "a"
    assert fleet.model_of_pool("gone") == "none"
    assert sorted(e.url for e in fleet.endpoints()) == [
        "http://127.0.0.1:30001", "http://127.0.0.1:30002", "http://127.0.0.1:30003"]
    assert fleet.ready() == {"a": False, "b": False}
    with pytest.raises(KeyError):
        fleet.runtime("a-latest")  # a name, not an alias: resolve first


def test_one_model_config_is_a_fleet_of_one():
    from tests.support.config_docs import BASE

    cfg = parse_config(BASE)
    fleet = build_fleet(cfg, {"tiny-llama": None})
    assert list(fleet.runtimes) == ["tiny-llama"] and fleet.default.config is cfg


def test_reload_keeps_a_model_still_there_adds_and_removes_models():
    fleet, _ = fleet_of(two_models())
    ep_a = fleet.runtime("a").endpoint("http://127.0.0.1:30002")
    ep_b = fleet.runtime("b").endpoint("http://127.0.0.1:30003")
    lease_a, lease_b = ep_a.lease(), ep_b.lease()  # a request in flight on each model
    fleet.default.set_overrides(Overrides.model_validate({"routing": {"long_prompt_tokens": 900}}))
    doc = two_models()
    doc["models"][1] = {"name": "c", "tokenizer": "/tmp/tok-c",
                        "limits": {"max_context_tokens": 2048},
                        "pools": [{"name": "c-plain", "speculative": False, "endpoints": ["http://127.0.0.1:30004"]}],
                        "routing": {"long_prompt_tokens": 700, "saturation": {"enter": 4, "exit": 2}}}
    new_cfg = parse_config(doc)
    new = build_fleet(new_cfg, counters(new_cfg), fleet)
    assert list(new.runtimes) == ["a", "c"]
    assert new.runtime("a").endpoint("http://127.0.0.1:30002") is ep_a and ep_a.inflight == 1
    assert new.runtime("a") is not fleet.runtime("a")
    assert new.runtime("a").routing.long_prompt_tokens == 900  # overrides carried over
    c = new.runtime("c")
    assert c.endpoint("http://127.0.0.1:30004").state == "unknown"
    assert c.routing.long_prompt_tokens == 900  # the one override set applies to an added model too
    assert new.runtime_of_url("http://127.0.0.1:30003") is None
    # the removed model's in-flight request still holds its endpoint and finishes
    assert ep_b.inflight == 1
    lease_b.release()
    lease_a.release()
    assert (ep_b.inflight, ep_a.inflight) == (0, 0)


def test_a_model_keeps_its_name_while_its_pool_moves_to_another_model():
    fleet, _ = fleet_of(two_models())
    doc = two_models()
    moved = doc["models"][0]["pools"].pop(1)  # plain leaves model a for model b
    doc["models"][1]["pools"].append(moved)
    cfg = parse_config(doc)
    new = build_fleet(cfg, counters(cfg), fleet)
    assert [p.name for p in new.runtime("b").pools] == ["b-plain", "plain"]
    assert new.runtime_of_pool("plain") is new.runtime("b")


@pytest.mark.parametrize("model,runtime,adapters,forward", [
    (None, "a", frozenset(), "a"),
    ("a", "a", frozenset(), None),
    ("a-latest", "a", frozenset(), "a"),
    ("b", "b", frozenset(), None),
    ("b:8b", "b", frozenset(), "b"),          # an alias with a colon wins over splitting
    ("a:sql", "a", frozenset({"sql"}), None),
    ("a-latest:sql", "a", frozenset({"sql"}), "a:sql"),
    ("sql", "a", frozenset({"sql"}), "a:sql"),  # a bare adapter: the model that has it
])
def test_resolution_across_models(model, runtime, adapters, forward):
    fleet, _ = fleet_of(with_adapter(two_models()))
    doc = {"messages": []} if model is None else {"model": model, "messages": []}
    rt, resolved = resolve_fleet(fleet, doc)
    assert rt is fleet.runtime(runtime)
    assert (resolved.name, resolved.adapters, resolved.forward) == (runtime, adapters, forward)
    assert model_runtime(fleet, doc) is rt


@pytest.mark.parametrize("model", ["gpt-4o", "b:sql", "c:sql", "a:"])
def test_unknown_names_and_other_models_adapters_are_404(model):
    fleet, _ = fleet_of(with_adapter(two_models()))
    for ep in fleet.endpoints():
        ep.served_models = frozenset()  # every list read: an unknown adapter does not exist
    with pytest.raises(ModelNotFound) as exc:
        resolve_fleet(fleet, {"model": model})
    assert (exc.value.status, exc.value.param) == (404, "model")


def test_a_model_that_is_not_a_string_is_400():
    fleet, _ = fleet_of(two_models())
    with pytest.raises(InvalidRequest) as exc:
        resolve_fleet(fleet, {"model": ["a"]})
    assert exc.value.param == "model"
    assert model_runtime(fleet, {"model": ["a"]}) is fleet.default
    assert model_runtime(fleet, [1]) is fleet.default


def test_models_list_and_retrieve_over_every_model():
    fleet, _ = fleet_of(with_adapter(two_models()))
    cards = fleet_cards(fleet)
    assert [(c["id"], c["root"], c["parent"], c["max_model_len"]) for c in cards] == [
        ("a", "a", None, 4096), ("a-latest", "a", None, 4096), ("sql", "sql", "a", None),
        ("b", "b", None, 8192), ("b:8b", "b", None, 8192)]
    assert fleet_card(fleet, "b:8b")["root"] == "b"
    assert (fleet_card(fleet, "a-latest:sql")["id"], fleet_card(fleet, "a-latest:sql")["parent"]) == ("a-latest:sql", "a")
    for missing in ("b:sql", "c"):
        with pytest.raises(ModelNotFound):
            fleet_card(fleet, missing)
