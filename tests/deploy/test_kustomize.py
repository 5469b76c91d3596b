"""deploy/: the Kustomize base is the chart's rendering, and both overlays build and hold."""

from __future__ import annotations

import subprocess
import sys

import pytest

from . import k8s

OVERLAYS = {"cpu-dev": "specgate-dev", "gpu-prod": "specgate"}


@pytest.fixture(scope="module", params=sorted(OVERLAYS))
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict]]:
    return request.param, k8s.kustomize(k8s.DEPLOY / "overlays" / request.param)


def test_base_is_the_current_chart_rendering() -> None:
    proc = subprocess.run(
        [sys.executable, str(k8s.DEPLOY / "render_base.py"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_base_builds_alone() -> None:
    objects = k8s.kustomize(k8s.DEPLOY / "base")
    assert not [o for o in objects if o["kind"] in k8s.CRD_KINDS]
    assert all("namespace" not in o["metadata"] for o in objects)
    k8s.check_stack(objects)


def test_overlay_keeps_the_stack_invariants(overlay: tuple[str, list[dict]]) -> None:
    name, objects = overlay
    cfg = k8s.check_stack(objects)
    for pool in cfg["pools"]:
        assert pool["discovery"]["namespace"] == OVERLAYS[name]


def test_overlay_validates_against_kubernetes_schemas(overlay: tuple[str, list[dict]]) -> None:
    name, objects = overlay
    expected = {
        "cpu-dev": [],
        "gpu-prod": ["PrometheusRule/specgate", "ServiceMonitor/specgate-pools", "ServiceMonitor/specgate-router"],
    }[name]
    assert k8s.validate_k8s(objects) == expected


def test_overlay_namespaces_everything(overlay: tuple[str, list[dict]]) -> None:
    name, objects = overlay
    namespace = OVERLAYS[name]
    assert [o["metadata"]["name"] for o in k8s.find(objects, "Namespace")] == [namespace]
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == namespace, obj["kind"]
    (binding,) = k8s.find(objects, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "specgate", "namespace": namespace}]


def test_overlay_config_passes_specgate_config_check(overlay: tuple[str, list[dict]], tmp_path) -> None:
    _, objects = overlay
    path = tmp_path / "config.yaml"
    path.write_text(k8s.router_config_text(objects))
    proc = subprocess.run(
        # this checkout's CLI (the venv's console script may belong to another checkout)
        [sys.executable, "-m", "router.cli", "config", "check", "--no-paths", str(path)],
        capture_output=True, text=True, check=False, cwd=k8s.REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_cpu_dev() -> None:
    objects = k8s.kustomize(k8s.DEPLOY / "overlays" / "cpu-dev")
    assert sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects) == [
        "ConfigMap/specgate-config",
        "Deployment/specgate-pool-plain",
        "Deployment/specgate-pool-spec",
        "Deployment/specgate-router",
        "Namespace/specgate-dev",
        "NetworkPolicy/specgate-pool-plain",
        "NetworkPolicy/specgate-pool-spec",
        "PodDisruptionBudget/specgate-pool-plain",
        "PodDisruptionBudget/specgate-pool-spec",
        "Role/specgate-discovery",
        "RoleBinding/specgate-discovery",
        "Service/specgate-pool-plain",
        "Service/specgate-pool-spec",
        "Service/specgate-router",
        "ServiceAccount/specgate",
    ]
    assert "nvidia.com/gpu" not in str(objects)
    cfg = k8s.router_config(objects)
    assert [(p["name"], p["engine"].get("speculative_algorithm"), p["engine"]["cpu"]) for p in cfg["pools"]] == [
        ("spec", "NGRAM", True),
        ("plain", None, True),
    ]
    for pool in ("spec", "plain"):
        tpl = k8s.one(objects, "Deployment", f"specgate-pool-{pool}")["spec"]["template"]
        c = k8s.container(tpl, "sglang")
        assert c["image"] == "specgate/cpu-pool:0.1.0"
        assert "tolerations" not in tpl["spec"]
        assert tpl["spec"]["volumes"][0] == {
            "name": "models", "hostPath": {"path": "/var/lib/specgate/models", "type": "Directory"},
        }  # fmt: skip
    router = k8s.one(objects, "Deployment", "specgate-router")
    assert router["spec"]["replicas"] == 1
    cm = k8s.one(objects, "ConfigMap", "specgate-config")
    assert "specgate.dev/config-sha256" not in cm["metadata"].get("annotations", {})
    # One router, per-process state: the base's Redis and its state checksum are gone.
    assert k8s.router_validate(objects).state.backend == "memory"
    assert [o for o in objects if k8s.component(o) == "redis"] == []
    assert router["spec"]["template"]["metadata"]["annotations"] == {}


def test_gpu_prod() -> None:
    objects = k8s.kustomize(k8s.DEPLOY / "overlays" / "gpu-prod")
    cfg = k8s.router_config(objects)
    assert cfg["limits"]["max_context_tokens"] == 245760
    assert [(p["name"], p["engine"]["context_length"]) for p in cfg["pools"]] == [("spec", 32768), ("plain", 245760)]
    for pool in ("spec", "plain"):
        dep = k8s.one(objects, "Deployment", f"specgate-pool-{pool}")
        assert dep["spec"]["replicas"] == 2
        tpl = dep["spec"]["template"]
        c = k8s.container(tpl, "sglang")
        assert c["image"] == "lmsysorg/sglang:v0.5.23"
        assert c["resources"] == {
            "requests": {"cpu": "16", "memory": "128Gi"},
            "limits": {"memory": "256Gi", "nvidia.com/gpu": 1},
        }
        assert tpl["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert tpl["spec"]["volumes"][1] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
    plain = k8s.flags(k8s.container(k8s.one(objects, "Deployment", "specgate-pool-plain")["spec"]["template"], "sglang")["args"])
    assert plain["--context-length"] == "245760"
    for kind in ("ServiceMonitor", "PrometheusRule"):
        for obj in k8s.find(objects, kind):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert k8s.one(objects, "ConfigMap", "specgate-dashboard")["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert k8s.one(objects, "HorizontalPodAutoscaler")["spec"]["minReplicas"] == 2
    # The autoscaled routers (up to 6) share their state through the base's Redis, in this
    # namespace (a bare Service name resolves in the pod's own namespace).
    state = k8s.router_validate(objects).state
    assert (state.backend, state.redis_url, state.key_prefix) == ("redis", "redis://specgate-redis:6379/0", "specgate")
    router = k8s.one(objects, "Deployment", "specgate-router")
    assert k8s.router_max_replicas(objects, router) == 6
    for kind in ("Deployment", "Service"):
        assert k8s.one(objects, kind, "specgate-redis")["metadata"]["namespace"] == "specgate"
    assert k8s.one(objects, "Service", "specgate-redis")["spec"]["ports"][0]["port"] == 6379
