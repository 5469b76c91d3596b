"""helm/specgate with several models (values `models:`), by Helm's own engine.

The one-model layout keeps its bytes (tests/deploy/render_pin.json); a `models` list renders
one router (its ConfigMap lists the models, each with its limits, routing and pools) and
every model's pools with the same pool template, each engine serving its model's name.
"""

from __future__ import annotations

import copy
import json

import pytest

from . import k8s, render_pin

TWO = k8s.values_file("two-models-values.yaml")


def _two(**changes: object) -> dict:
    """The two-model value set with top-level keys replaced."""
    values = copy.deepcopy(TWO)
    values.update(copy.deepcopy(changes))
    return values


def _with_model(index: int, **changes: object) -> dict:
    """The two-model value set with keys of models[index] replaced."""
    values = copy.deepcopy(TWO)
    values["models"][index].update(copy.deepcopy(changes))
    return values


def _pool_args(objects: list[dict], pool: str) -> dict[str, str | None]:
    workload = k8s.pool_workload(objects, pool)
    assert workload is not None, pool
    return k8s.flags(k8s.container(k8s.serving_template(workload), "sglang")["args"])


def check_models_stack(objects: list[dict]) -> dict:
    """The cross-object invariants of a `models` rendering; returns the router config.

    One router Deployment and one router ConfigMap whose config has `models` and no
    one-model keys; every pool of every model has its workload, Service, PDB and
    NetworkPolicy; its engine serves the model's name with --context-length = its cap
    (max_context_tokens, else the model's limits.max_context_tokens) <= the model's limit;
    its discovery block selects exactly its serving pods and its Service.
    """
    cfg = k8s.router_config(objects)
    assert not {"model", "pools", "limits", "routing"} & set(cfg), sorted(cfg)
    routers = [d for d in k8s.find(objects, "Deployment") if k8s.component(d) == "router"]
    assert len(routers) == 1
    names = [p["name"] for m in cfg["models"] for p in m["pools"]]
    assert len(names) == len(set(names)), names
    for model in cfg["models"]:
        limit = model["limits"]["max_context_tokens"]
        for pool in model["pools"]:
            name = pool["name"]
            cap = pool.get("max_context_tokens", limit)
            assert cap <= limit and pool["engine"]["context_length"] == cap, (name, cap, limit)
            f = _pool_args(objects, name)
            assert f["--served-model-name"] == pool["engine"].get("served_model_name", model["name"]), name
            assert f["--context-length"] == str(cap), name
            assert f["--model-path"] == pool["engine"]["model_path"], name
            assert (f.get("--speculative-algorithm") is not None) == pool["speculative"], name
            full = f"sg-specgate-pool-{name}"
            k8s.one(objects, "Service", full)
            k8s.one(objects, "PodDisruptionBudget", full)
            k8s.one(objects, "NetworkPolicy", full)
            disc = pool["discovery"]
            labels = k8s.serving_template(k8s.pool_workload(objects, name))["metadata"]["labels"]
            assert k8s.selector_matches(disc["label_selector"], labels), (disc, labels)
            matched = [s["metadata"]["name"] for s in k8s.find(objects, "Service")
                       if k8s.selector_matches(disc["label_selector"], s["metadata"].get("labels", {}))]
            assert matched == [full], (name, matched)
    return cfg


# ----------------------------------------------------------------------------- one model


def test_one_model_value_sets_render_the_pinned_bytes() -> None:
    pinned = json.loads(render_pin.PIN.read_text())
    assert render_pin.current() == pinned


# ----------------------------------------------------------------------------- two models


def test_two_models_lint_strict_is_clean() -> None:
    report = k8s.lint(TWO)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_two_models_objects() -> None:
    objects = k8s.render(TWO)
    pools = ("llama-plain", "llama-spec", "qwen-plain")
    assert sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects) == sorted(
        ["ConfigMap/sg-specgate-config", "Deployment/sg-specgate-redis", "Deployment/sg-specgate-router",
         "HorizontalPodAutoscaler/sg-specgate-router", "PodDisruptionBudget/sg-specgate-router",
         "Role/sg-specgate-discovery", "RoleBinding/sg-specgate-discovery", "Service/sg-specgate-redis",
         "Service/sg-specgate-router", "ServiceAccount/sg-specgate"]
        + [f"{kind}/sg-specgate-pool-{p}" for p in pools
           for kind in ("Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy")]
    )  # fmt: skip
    assert k8s.validate_k8s(objects) == []
    for obj in objects:
        assert obj["metadata"]["namespace"] == "llm", obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "sg"


def test_two_models_router_config_is_exact() -> None:
    objects = k8s.render(TWO)
    cfg = check_models_stack(objects)
    default = k8s.router_config(k8s.render())
    for key in ("scrape", "health", "upstream", "server", "canary", "tracing", "state"):
        assert cfg[key] == default[key], key  # the global sections stay as they were
    llama, qwen = cfg["models"]
    assert {k: v for k, v in llama.items() if k not in ("pools", "routing")} == {
        "name": "tiny-llama", "aliases": ["gpt-4o-mini"], "tokenizer": "/models/tiny-llama",
        "limits": default["limits"],
    }  # fmt: skip
    assert llama["routing"] == default["routing"]
    assert [p["name"] for p in llama["pools"]] == ["llama-spec", "llama-plain"]
    assert [p["engine"]["context_length"] for p in llama["pools"]] == [2048, 4096]
    assert {k: v for k, v in qwen.items() if k not in ("pools", "routing")} == {
        "name": "tiny-qwen", "tokenizer": "/models/tiny-qwen", "multimodal": {"image_tokens": 1290},
        "limits": {**default["limits"], "max_context_tokens": 8192, "default_max_tokens": 512},
    }  # fmt: skip
    # routing overrides merge key by key over the top-level routing
    assert qwen["routing"] == {**default["routing"], "long_prompt_tokens": 2048,
                               "saturation": {"enter": 16, "exit": 12}}  # fmt: skip
    assert qwen["pools"] == [{
        "name": "qwen-plain", "speculative": False, "engine_keepalive_s": 75,
        "engine": {"model_path": "/models/tiny-qwen", "tp_size": 2, "context_length": 8192},
        "discovery": {"namespace": "llm", "port": 30000, "label_selector":
                      "app.kubernetes.io/name=specgate,app.kubernetes.io/instance=sg,app.kubernetes.io/component=pool-qwen-plain"},
    }]  # fmt: skip


def test_two_models_load_with_the_routers_own_loader() -> None:
    objects = k8s.render(TWO)
    k8s.check_stack(objects)  # every pool's args are engine_argv of the parsed config
    parsed = k8s.router_validate(objects)
    assert [m.name for m in parsed.models] == ["tiny-llama", "tiny-qwen"]
    assert parsed.model_of("qwen-plain").name == "tiny-qwen"
    qwen = parsed.for_model("tiny-qwen")
    assert (qwen.limits.max_context_tokens, qwen.limits.default_max_tokens) == (8192, 512)
    assert (qwen.routing.saturation.enter, qwen.routing.saturation.exit, qwen.routing.long_prompt_tokens) == (16, 12, 2048)
    assert qwen.model.multimodal is not None and qwen.model.multimodal.image_tokens == 1290
    llama = parsed.for_model("tiny-llama")
    assert llama.model.aliases == ("gpt-4o-mini",)
    assert parsed.pool_limit(parsed.pool("llama-spec")) == 2048 and parsed.pool_limit(parsed.pool("llama-plain")) == 4096


def test_each_models_pools_use_the_pool_template_and_pool_defaults() -> None:
    objects = k8s.render(_two(poolDefaults={"keepAliveTimeoutSeconds": 90, "shmSize": "8Gi"}))
    qwen = k8s.pool_workload(objects, "qwen-plain")
    assert qwen["spec"]["replicas"] == 2
    pod = qwen["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"name": "SGLANG_TIMEOUT_KEEP_ALIVE", "value": "90"} in pod["containers"][0]["env"]
    assert next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "8Gi"
    assert _pool_args(objects, "qwen-plain")["--tp-size"] == "2"
    assert _pool_args(objects, "llama-spec")["--speculative-algorithm"] == "EAGLE3"
    cfg = k8s.router_config(objects)
    assert [p["engine_keepalive_s"] for m in cfg["models"] for p in m["pools"]] == [90, 90, 90]


def test_a_pool_may_serve_another_name_than_its_model() -> None:
    values = copy.deepcopy(TWO)
    values["models"][1]["pools"][0]["engine"]["served_model_name"] = "qwen-internal"
    assert _pool_args(k8s.render(values), "qwen-plain")["--served-model-name"] == "qwen-internal"


def test_a_model_may_run_elsewhere() -> None:
    values = copy.deepcopy(TWO)
    values["models"][1]["pools"][0].update(endpoints=["http://10.0.0.7:30000"], engine_keepalive_s=75,
                                           k8s={"enabled": False})  # fmt: skip
    objects = k8s.render(values)
    assert k8s.pool_workload(objects, "qwen-plain") is None
    assert k8s.router_config(objects)["models"][1]["pools"][0]["endpoints"] == ["http://10.0.0.7:30000"]


def test_notes_name_each_pools_model() -> None:
    import helm_python

    with helm_python.Chart.load(str(k8s.CHART)) as loaded:
        manifests = loaded.render(TWO, name="sg", namespace="llm")
    text = next(t for p, t in manifests.items() if p.endswith("NOTES.txt"))
    assert ("  - llama-spec (speculative: true), model tiny-llama\n"
            "  - llama-plain (speculative: false), model tiny-llama\n"
            "  - qwen-plain (speculative: false), model tiny-qwen\n") in text  # fmt: skip


def test_a_one_entry_models_list_renders_the_same_pools_as_the_one_model_layout() -> None:
    default = k8s.values_file("../values.yaml")
    one = {"model": None, "pools": None,
           "models": [{**default["model"], "pools": default["pools"]}]}  # fmt: skip
    objects, reference = k8s.render(one), k8s.render()
    for name in ("spec", "plain"):
        assert k8s.pool_workload(objects, name) == k8s.pool_workload(reference, name), name
    cfg, ref = k8s.router_config(objects), k8s.router_config(reference)
    assert cfg["models"] == [{**ref["model"], "limits": ref["limits"], "routing": ref["routing"],
                              "pools": ref["pools"]}]  # fmt: skip
    # and the router reads both as the same config
    assert k8s.router_validate(objects) == k8s.router_validate(reference)


# ----------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"models": TWO["models"]},
         ("model and models are both set: a release serves one model (model, limits, routing, pools) or several "
          "(models, each with its own limits, routing and pools); with models set model: null and pools: null")),
        ({"model": None, "models": TWO["models"]},
         "pools and models are both set: with models, each model lists its own pools (models[].pools); set pools: null"),
        ({"model": None}, "no model: set model and pools (one model), or models (several models, each with its pools)"),
        ({"pools": None}, "pools is empty: list the model's pools in pools"),
        (_with_model(1, pools=[{"name": "llama-plain", "speculative": False, "engine": {"model_path": "/m"}}]),
         ('models: pool name "llama-plain" is used by model "tiny-llama" and by model "tiny-qwen": pool names are '
          "unique across models")),
        (_with_model(1, pools=[{"name": "q", "speculative": False, "engine": {"model_path": "/m"}}] * 2),
         'model "tiny-qwen": duplicate pool name "q"'),
        (_with_model(1, name="tiny-llama"),
         'models: the name "tiny-llama" is given twice: model names and aliases are unique across models'),
        (_with_model(1, aliases=["gpt-4o-mini"]),
         'models: the name "gpt-4o-mini" is served by model "tiny-llama" and by model "tiny-qwen"'),
        (_with_model(0, limits={"max_context_tokens": 1024}),
         'model "tiny-llama": pool "llama-spec": max_context_tokens 2048 exceeds limits.max_context_tokens 1024'),
        (_with_model(1, routing={"saturation": {"exit": 16}}),
         'model "tiny-qwen": routing.saturation.exit (16) must be < routing.saturation.enter (8)'),
        (_with_model(1, pools=[{"name": "q", "speculative": False, "engine": {"model_path": "/m"},
                                "serves": ["embeddings"]}]),
         'model "tiny-qwen": pools: no pool serves `generate`'),
    ],
)  # fmt: skip
def test_render_refuses_inconsistent_models(values: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmError) as info:
        k8s.render(values)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (_with_model(0, bogus=1), "at '/models/0': additional properties 'bogus' not allowed"),
        (_with_model(0, limits={"max_tokens": 1}), "at '/models/0/limits': additional properties 'max_tokens' not allowed"),
        (_with_model(0, limits={"max_context_tokens": 0}), "at '/models/0/limits/max_context_tokens'"),
        (_with_model(1, routing={"saturation": {"enter": 0}}), "at '/models/1/routing/saturation/enter'"),
        (_with_model(1, routing={"saturation": {"hold": 1}}),
         "at '/models/1/routing/saturation': additional properties 'hold' not allowed"),
        (_with_model(1, routing={"prefix_cache": {"block_size": 64}}),
         "at '/models/1/routing/prefix_cache': additional properties 'block_size' not allowed"),
        (_with_model(1, pools=[]), "at '/models/1/pools'"),
        (_with_model(1, pools=[{"name": "Q_1", "speculative": False, "engine": {"model_path": "/m"}}]),
         "at '/models/1/pools/0/name'"),
        (_with_model(1, aliases=["a", "a"]), "at '/models/1/aliases': items at 0 and 1 are equal"),
        (_with_model(1, multimodal={"pixels": 1}), "at '/models/1/multimodal': additional properties 'pixels' not allowed"),
        (_two(models=[{"name": "m", "tokenizer": "/t"}]), "at '/models/0': missing property 'pools'"),
        (_two(models=[{"tokenizer": "/t", "pools": TWO["models"][1]["pools"]}]), "at '/models/0': missing property 'name'"),
    ],
)  # fmt: skip
def test_schema_rejects_bad_models(values: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmValuesError) as info:
        k8s.validate_schema(values)
    assert message in str(info.value)


def test_the_operator_guides_two_model_example_renders() -> None:
    import yaml

    text = (k8s.REPO / "docs" / "operator-guide.md").read_text()
    section = text.split("**Several models in one release.**", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    objects = k8s.render(yaml.safe_load(block))
    cfg = check_models_stack(objects)
    k8s.check_stack(objects)
    assert [(m["name"], [p["name"] for p in m["pools"]]) for m in cfg["models"]] == [
        ("llama-8b", ["llama-spec", "llama-plain"]), ("qwen-32b", ["qwen-plain"])]  # fmt: skip
    assert _pool_args(objects, "qwen-plain")["--served-model-name"] == "qwen-32b"
