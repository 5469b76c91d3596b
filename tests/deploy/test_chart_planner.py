"""helm/specgate's pool planner (values `planner:`): the router's window keys in its config, and
with planner.enabled the `specgate plan` Deployment, its ServiceAccount, its Role on exactly the
two pools' deployments/scale, its metrics Service, and the refusals."""

from __future__ import annotations

import pytest

from . import k8s

#: The least a planner needs: one router pod, an admin key.
ENABLED = {
    "planner": {"enabled": True},
    "router": {"replicas": 1, "autoscaling": {"enabled": False}},
    "auth": {"adminApiKeys": {"devKeys": ["adm-1"]}},
}

SPEC_ENGINE = {"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/d"}


def _with(**planner: object) -> dict:
    return k8s.deep_merge(ENABLED, {"planner": planner})


def _planner_objects(objects: list[dict]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects if k8s.component(o) == "planner")


def _args(objects: list[dict]) -> list[str]:
    dep = k8s.one(objects, "Deployment", "sg-specgate-planner")
    return k8s.container(dep["spec"]["template"], "planner")["args"]


def test_default_render_has_no_planner_and_the_routers_window_defaults() -> None:
    objects = k8s.render()
    assert _planner_objects(objects) == []
    assert k8s.router_config(objects)["planner"] == {"window_requests": 4096, "window_s": 900}
    from router.config.tree import PlannerConfig

    assert k8s.router_validate(objects).planner == PlannerConfig()


def test_only_the_window_keys_reach_the_router_config() -> None:
    objects = k8s.render(_with(window_requests=128, window_s=60.5, metric="p90_s", engines=2))
    assert k8s.router_config(objects)["planner"] == {"window_requests": 128, "window_s": 60.5}
    parsed = k8s.router_validate(objects)  # strict: a Deployment key there would fail
    assert (parsed.planner.window_requests, parsed.planner.window_s) == (128, 60.5)


def test_enabled_renders_the_planner_objects() -> None:
    objects = k8s.render(ENABLED)
    assert _planner_objects(objects) == [
        "Deployment/sg-specgate-planner",
        "Role/sg-specgate-planner",
        "RoleBinding/sg-specgate-planner",
        "Service/sg-specgate-planner",
        "ServiceAccount/sg-specgate-planner",
    ]
    assert k8s.validate_k8s(objects) == []
    k8s.check_stack(objects)


def test_role_allows_exactly_the_two_pools_scale() -> None:
    objects = k8s.render(ENABLED)
    role = k8s.one(objects, "Role", "sg-specgate-planner")
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments/scale"],
                              "resourceNames": ["sg-specgate-pool-spec", "sg-specgate-pool-plain"],
                              "verbs": ["get", "patch", "update"]}]  # fmt: skip
    binding = k8s.one(objects, "RoleBinding", "sg-specgate-planner")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sg-specgate-planner"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sg-specgate-planner", "namespace": "llm"}]
    assert k8s.one(objects, "ServiceAccount", "sg-specgate-planner")["automountServiceAccountToken"] is True
    pod = k8s.one(objects, "Deployment", "sg-specgate-planner")["spec"]["template"]["spec"]
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("sg-specgate-planner", True)
    # The pools it names are the rendered pool Deployments.
    assert {d["metadata"]["name"] for d in k8s.find(objects, "Deployment")} >= set(role["rules"][0]["resourceNames"])
    assert k8s.find(objects, "ClusterRole") == []


def test_the_planner_runs_specgate_plan_with_the_charts_values() -> None:
    objects = k8s.render(_with(metric="goodput_rps", maxError=0.25, maxReplayError=0.75, hedge=1.0, intervalSeconds=30, dwellSeconds=900,
                               stepSeconds=60, changeCostSeconds=240.5, minGain=0.1, reverseGain=0.3,
                               sustainedGain=0.01, sustainedRounds=4, smoothRounds=1,
                               retreatRatio=2.5, retreatRounds=3,
                               floors={"speculative": 1, "plain": 0}, metricsPort=9500))
    args = _args(objects)
    assert args == [
        "plan", "--router", "http://sg-specgate-router.llm.svc:8000", "--engines", "2", "--model", "tiny-llama",
        "--admin-key-file", "/etc/specgate-auth/admin-api-keys/admin-api-keys", "--metric", "goodput_rps",
        "--max-error", "0.25", "--max-replay-error", "0.75", "--hedge", "1", "--interval", "30", "--dwell-s", "900", "--step-s", "60", "--change-cost-s", "240.5",
        "--min-gain", "0.1", "--reverse-gain", "0.3", "--sustained-gain", "0.01", "--sustained-rounds", "4",
        "--smooth-rounds", "1", "--retreat-ratio", "2.5", "--retreat-rounds", "3", "--floor-speculative", "1", "--floor-plain", "0", "--metrics-port", "9500",
        "--apply", "--namespace", "llm", "--spec-deployment", "sg-specgate-pool-spec",
        "--plain-deployment", "sg-specgate-pool-plain",
    ]  # fmt: skip
    # specgate's own parser takes them (the image's entrypoint is `specgate`).
    from router.cli import build_parser

    ns = build_parser().parse_args(args)
    assert (ns.engines, ns.metric, ns.max_error, ns.interval, ns.dwell_s, ns.change_cost_s) == (
        2, "goodput_rps", 0.25, 30.0, 900.0, 240.5)
    assert (ns.apply, ns.namespace, ns.spec_deployment, ns.plain_deployment) == (
        True, "llm", "sg-specgate-pool-spec", "sg-specgate-pool-plain")
    assert (ns.floor_speculative, ns.floor_plain, ns.metrics_port, ns.once) == (1, 0, 9500, False)
    assert (ns.min_gain, ns.reverse_gain, ns.sustained_gain, ns.sustained_rounds, ns.smooth_rounds) == (
        0.1, 0.3, 0.01, 4, 1)
    assert (ns.retreat_ratio, ns.retreat_rounds, ns.max_replay_error, ns.hedge) == (2.5, 3, 0.75, 1.0)
    # The admin key file is the router's admin-key Secret, mounted where --admin-key-file says.
    dep = k8s.one(objects, "Deployment", "sg-specgate-planner")
    c = k8s.container(dep["spec"]["template"], "planner")
    mount = next(m for m in c["volumeMounts"] if m["name"] == "admin-api-keys")
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "admin-api-keys")
    assert mount == {"name": "admin-api-keys", "mountPath": "/etc/specgate-auth/admin-api-keys", "readOnly": True}
    assert volume["secret"] == {"secretName": "sg-specgate-auth", "defaultMode": 288,
                                "items": [{"key": "admin-api-keys", "path": "admin-api-keys"}]}
    assert c["ports"] == [{"name": "metrics", "containerPort": 9500, "protocol": "TCP"}]
    assert c["image"] == "specgate/router:0.1.0"
    assert (dep["spec"]["replicas"], dep["spec"]["strategy"]) == (1, {"type": "Recreate"})
    svc = k8s.one(objects, "Service", "sg-specgate-planner")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9500, "targetPort": "metrics", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_an_existing_admin_secret_is_the_key_file() -> None:
    values = k8s.deep_merge(_with(), {"auth": {"adminApiKeys": {"devKeys": [], "existingSecret": "ops-admin",
                                                                "key": "planner"}}})
    objects = k8s.render(values)
    args = _args(objects)
    assert args[args.index("--admin-key-file") + 1] == "/etc/specgate-auth/admin-api-keys/planner"
    dep = k8s.one(objects, "Deployment", "sg-specgate-planner")
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "admin-api-keys")
    assert (volume["secret"]["secretName"], volume["secret"]["items"]) == ("ops-admin", [{"key": "planner", "path": "planner"}])


def test_advise_only_has_no_role_and_no_token() -> None:
    objects = k8s.render(_with(apply=False))
    assert _planner_objects(objects) == ["Deployment/sg-specgate-planner", "Service/sg-specgate-planner",
                                         "ServiceAccount/sg-specgate-planner"]
    args = _args(objects)
    assert "--apply" not in args and "--spec-deployment" not in args
    assert k8s.one(objects, "ServiceAccount", "sg-specgate-planner")["automountServiceAccountToken"] is False


def test_engines_is_the_two_pools_replicas_and_other_pools_are_left_alone() -> None:
    pools = [{"name": "fast", "speculative": True, "engine": SPEC_ENGINE, "k8s": {"replicas": 3}},
             {"name": "bulk", "speculative": False, "engine": {"model_path": "/m"}, "k8s": {"replicas": 5}},
             {"name": "embed", "speculative": False, "engine": {"model_path": "/e"}, "serves": ["embeddings"]}]
    objects = k8s.render(k8s.deep_merge(_with(engines=8), {"pools": pools}))
    args = _args(objects)
    assert args[args.index("--engines") + 1] == "8"
    assert k8s.one(objects, "Role", "sg-specgate-planner")["rules"][0]["resourceNames"] == [
        "sg-specgate-pool-fast", "sg-specgate-pool-bulk"]
    # helm template has no cluster to look up: the values' replicas are the first split.
    assert {n: k8s.pool_workload(objects, n)["spec"]["replicas"] for n in ("fast", "bulk", "embed")} == {
        "fast": 3, "bulk": 5, "embed": 1}


def test_two_models_name_the_one_planned() -> None:
    import helm_python

    values = k8s.deep_merge(k8s.values_file("two-models-values.yaml"), ENABLED)
    with pytest.raises(helm_python.HelmRenderError, match="planner.model: name the model"):
        k8s.render(values)
    objects = k8s.render(k8s.deep_merge(values, {"planner": {"model": "tiny-llama"}}))
    args = _args(objects)
    assert args[args.index("--model") + 1] == "tiny-llama"
    assert k8s.one(objects, "Role", "sg-specgate-planner")["rules"][0]["resourceNames"] == [
        "sg-specgate-pool-llama-spec", "sg-specgate-pool-llama-plain"]
    # tiny-qwen has no speculative pool to size
    with pytest.raises(helm_python.HelmRenderError, match="has 0 speculative pools"):
        k8s.render(k8s.deep_merge(values, {"planner": {"model": "tiny-qwen"}}))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (k8s.deep_merge(ENABLED, {"router": {"replicas": 2}}), "planner.enabled needs exactly one router pod"),
        (k8s.deep_merge(ENABLED, {"router": {"autoscaling": {"enabled": True}}}),
         "needs exactly one router pod (router.replicas: 1, router.autoscaling.enabled: false), not 6"),
        (k8s.deep_merge(ENABLED, {"auth": {"adminApiKeys": {"devKeys": []}}}), "planner.enabled needs an admin key"),
        (k8s.deep_merge(ENABLED, {"auth": {"adminApiKeys": {"devKeys": []}, "apiKeys": {"devKeys": ["c"]}}}),
         "planner.enabled needs an admin key"),
        (_with(engines=3), "planner.engines (3) differs from the replicas of pools \"spec\" and \"plain\" together (2)"),
        (_with(floors={"speculative": 2, "plain": 1}), "planner.floors (2 speculative + 1 plain) exceed the 2 engines"),
        (_with(plainPool="nope"), "planner.plainPool \"nope\" is not a plain pool of model \"tiny-llama\""),
        (_with(model="other"), "planner.model \"other\" is not a model of this release"),
        (k8s.deep_merge(_with(), {"pools": [
            {"name": "s1", "speculative": True, "engine": SPEC_ENGINE},
            {"name": "s2", "speculative": True, "engine": SPEC_ENGINE},
            {"name": "p", "speculative": False, "engine": {"model_path": "/m"}}]}),
         "planner.speculativePool: model \"tiny-llama\" has 2 speculative pools"),
        # the planner scales Deployments: a LeaderWorkerSet pool is no candidate
        (k8s.deep_merge(_with(), {"pools": [
            {"name": "s", "speculative": True, "engine": {**SPEC_ENGINE, "tp_size": 2},
             "k8s": {"multiNode": {"enabled": True, "size": 2}}},
            {"name": "p", "speculative": False, "engine": {"model_path": "/m"}}]}),
         "planner.speculativePool: model \"tiny-llama\" has 0 speculative pools"),
    ],
)  # fmt: skip
def test_render_refuses_a_planner_it_cannot_run_right(values: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmRenderError) as info:
        k8s.render(values)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("planner", "message"),
    [
        ({"metric": "median"}, "at '/planner/metric'"),
        ({"floors": {"speculative": 0, "plain": -1}}, "at '/planner/floors/plain'"),
        ({"window_requests": 0}, "at '/planner/window_requests'"),
        ({"window_s": 0}, "at '/planner/window_s'"),
        ({"engines": 0}, "at '/planner/engines'"),
        ({"speculativePool": "Bad_Name"}, "at '/planner/speculativePool'"),
        ({"intervalSeconds": 0}, "at '/planner/intervalSeconds'"),
        ({"metricsPort": 70000}, "at '/planner/metricsPort'"),
        ({"interval": 60}, "at '/planner': additional properties 'interval' not allowed"),
    ],
)
def test_schema_rejects_bad_planner_values(planner: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmValuesError) as info:
        k8s.validate_schema({"planner": planner})
    assert message in str(info.value)


def test_service_monitor_scrapes_the_planner() -> None:
    objects = k8s.render(k8s.deep_merge(ENABLED, {"monitoring": {"serviceMonitor": {"enabled": True, "scrapePools": False}}}))
    sm = k8s.one(objects, "ServiceMonitor", "sg-specgate-planner")
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s",
                                        "scrapeTimeout": "10s"}]
    svc = k8s.one(objects, "Service", "sg-specgate-planner")
    assert all(svc["metadata"]["labels"][k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert k8s.find(k8s.render(ENABLED), "ServiceMonitor") == []


def test_values_yaml_documents_the_window_keys_with_their_units() -> None:
    text = (k8s.CHART / "values.yaml").read_text()
    lines = text.splitlines()
    for key, unit in (("window_requests", "(count)"), ("window_s", "Seconds")):
        n = lines.index(f"  {key}: {4096 if key == 'window_requests' else 900.0}")
        assert unit in lines[n - 1], key
