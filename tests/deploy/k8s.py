"""Render, build and check the Kubernetes artifacts (helm/specgate, deploy/).

Helm's own engine renders the chart: ``helm-python-sdk`` binds Helm's Go SDK (v4), so
``render`` is ``helm template`` and ``lint`` is ``helm lint`` without a helm binary.
``kubectl kustomize`` (the pinned kubectl wheel) builds the overlays. ``check_stack`` holds
the invariants every rendering and every overlay must keep: each pool's ``--context-length``
is exactly its validated cap, its speculative flags agree with the router config, discovery
selects exactly the pool's serving pods. ``validate_k8s`` checks built-in kinds against the
Kubernetes OpenAPI schemas (``kubernetes-validate``, strict: unknown fields fail).

The tools come from ``deploy/install-helm.sh``; ``ensure_tools`` runs it when they are
missing and raises if they still cannot be loaded, so no test is ever skipped for them.
"""

from __future__ import annotations

import copy
import importlib
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "specgate"
DEPLOY = REPO / "deploy"
VENV_BIN = Path(sys.prefix) / "bin"
KUBECTL = VENV_BIN / "kubectl"
HADOLINT = VENV_BIN / "hadolint"

#: Kubernetes versions whose OpenAPI schemas every built-in object must satisfy.
K8S_VERSIONS = ("1.29.0", "1.37.0")
#: Custom resources (no schema in kubernetes-validate); their pod templates are validated.
CRD_KINDS = {"LeaderWorkerSet", "ServiceMonitor", "PrometheusRule"}
CONFIG_PATH = "/etc/specgate/config.yaml"


class ToolError(RuntimeError):
    """A deploy tool is missing and could not be installed."""


def ensure_tools() -> None:
    """Make the deploy tools importable/runnable, installing them if needed; raise if not."""
    modules = ("helm_python", "kubernetes_validate", "dockerfile_parse", "promql_parser")

    def missing() -> list[str]:
        out = []
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                out.append(name)
        out += [str(p) for p in (KUBECTL, HADOLINT) if not p.exists()]
        return out

    if missing():
        proc = subprocess.run(
            ["bash", str(DEPLOY / "install-helm.sh"), sys.prefix],
            capture_output=True,
            text=True,
            check=False,
        )
        importlib.invalidate_caches()
        still = missing()
        if proc.returncode != 0 or still:
            raise ToolError(
                f"deploy/install-helm.sh failed (rc={proc.returncode}); missing {still}\n"
                f"{proc.stdout}\n{proc.stderr}"
            )


# ----------------------------------------------------------------------------- helm


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of two values files: maps merge key by key, the rest is replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def values_file(name: str) -> dict[str, Any]:
    """A values set from helm/specgate/ci/ (the chart's own test value sets)."""
    return yaml.safe_load((CHART / "ci" / name).read_text())


def render(
    values: Mapping[str, Any] | None = None,
    *,
    name: str = "sg",
    namespace: str = "llm",
    chart: Path = CHART,
) -> list[dict[str, Any]]:
    """``helm template`` the chart; returns every rendered object (NOTES.txt excluded)."""
    import helm_python

    with helm_python.Chart.load(str(chart)) as loaded:
        manifests = loaded.render(dict(values or {}), name=name, namespace=namespace)
    objects: list[dict[str, Any]] = []
    for path in sorted(manifests):
        if path.endswith("NOTES.txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(manifests[path]) if doc]
    return objects


def notes(values: Mapping[str, Any] | None = None) -> str:
    import helm_python

    with helm_python.Chart.load(str(CHART)) as loaded:
        manifests = loaded.render(dict(values or {}), name="sg", namespace="llm")
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def lint(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``helm lint --strict``; returns Helm's report."""
    import helm_python

    return helm_python.lint(str(CHART), dict(values or {}), strict=True)


def validate_schema(values: Mapping[str, Any]) -> None:
    """Validate values against values.schema.json (raises HelmValuesError)."""
    import helm_python

    with helm_python.Chart.load(str(CHART)) as loaded:
        loaded.validate_schema(dict(values))


# ----------------------------------------------------------------------------- kustomize


def kustomize(path: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize PATH`` with the pinned kubectl; returns the objects."""
    proc = subprocess.run(
        [str(KUBECTL), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {path} failed:\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


# ----------------------------------------------------------------------------- lookups


def find(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> list[dict]:
    return [
        o
        for o in objects
        if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict:
    hits = find(objects, kind, name)
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def component(obj: dict[str, Any]) -> str | None:
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def router_config(objects: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The router's operator YAML, parsed, from the router ConfigMap."""
    cms = [
        o
        for o in find(objects, "ConfigMap")
        if component(o) == "router" and "config.yaml" in o.get("data", {})
    ]
    assert len(cms) == 1, f"expected one router ConfigMap, found {len(cms)}"
    return yaml.safe_load(cms[0]["data"]["config.yaml"])


def router_config_text(objects: Iterable[dict[str, Any]]) -> str:
    cms = [
        o
        for o in find(objects, "ConfigMap")
        if component(o) == "router" and "config.yaml" in o.get("data", {})
    ]
    assert len(cms) == 1
    return cms[0]["data"]["config.yaml"]


def pool_workload(objects: Iterable[dict[str, Any]], pool: str) -> dict[str, Any] | None:
    hits = [
        o
        for o in objects
        if o["kind"] in ("Deployment", "LeaderWorkerSet")
        and o["metadata"].get("labels", {}).get("specgate.dev/pool") == pool
    ]
    assert len(hits) <= 1, f"pool {pool}: {len(hits)} workloads"
    return hits[0] if hits else None


def serving_template(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod template that serves HTTP: the Deployment's, or the LWS leader's."""
    if workload["kind"] == "LeaderWorkerSet":
        return workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    return workload["spec"]["template"]


def container(template: dict[str, Any], name: str) -> dict[str, Any]:
    hits = [c for c in template["spec"]["containers"] if c["name"] == name]
    assert len(hits) == 1, f"container {name}: {len(hits)}"
    return hits[0]


def flags(args: list[str]) -> dict[str, str | None]:
    """SGLang args as {flag: value}; a flag followed by another flag has value None."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        assert arg.startswith("--"), f"stray argument {arg!r} in {shlex.join(args)}"
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[arg] = args[i + 1]
            i += 2
        else:
            out[arg] = None
            i += 1
    return out


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """An equality-based label selector string (k=v,k2=v2) against a label map."""
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


# ----------------------------------------------------------------------------- invariants


def config_pools(cfg: Mapping[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """``(model name, its limits.max_context_tokens, pool)`` for every pool of a rendered router
    config, in either form: one model (top-level ``model``, ``limits``, ``pools``) or ``models``."""
    models = cfg.get("models") or [{"name": cfg["model"]["name"], "limits": cfg["limits"], "pools": cfg["pools"]}]
    return [(m["name"], m["limits"]["max_context_tokens"], p) for m in models for p in m["pools"]]


def router_validate(objects: list[dict[str, Any]]) -> Any:
    """The ConfigMap's config.yaml through the router's own strict loader
    (router.config.tree.parse_config, what `specgate config check` and the router run)."""
    from router.config.tree import parse_config

    return parse_config(router_config(objects))


def check_stack(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Assert the cross-object invariants of one rendering; returns the router config.

    - the router's own loader accepts the ConfigMap's config.yaml;
    - every pool's container args are exactly serving.launch.engine_argv (what
      `specgate serve --pool NAME` would exec), then the LeaderWorkerSet flags;
    - the router mounts the ConfigMap as a directory (no subPath: the kubelet's symlink swap
      must reach the router's watcher) and runs ``router --config`` on it;
    - every pool: engine.context_length == cap == the workload's ``--context-length``, where
      cap is max_context_tokens (else its model's limits.max_context_tokens) and cap <= that
      limit (one model, or every model of a ``models`` list);
    - speculative iff --speculative-algorithm, with the engine's algorithm and draft flags;
    - --model-path, --served-model-name (the pool's model's name unless
      engine.served_model_name), --tp-size, --port, --enable-metrics as configured;
    - the pool's engine_keepalive_s is the pods' SGLANG_TIMEOUT_KEEP_ALIVE (unset: SGLang's 5 s),
      above upstream.keepalive_timeout_s;
    - a discovery block selects the pool's serving pods (and its Service), not LWS workers,
      in the workload's namespace, on the serving port; static endpoints are URLs;
    - a pool without a workload here runs elsewhere and is only checked for its shape;
    - more than one router pod (the HPA's maxReplicas, else the Deployment's replicas) means
      state.backend redis; an inline Redis URL with a bare host names a Service of this
      rendering (right port) that selects a running Deployment, else the router's env sets
      state.redis_url_env;
    - no API key sits in the ConfigMap; every auth.*_file is a key of a Secret volume
      mounted (as a directory) exactly where the file is.
    """
    from serving.launch import engine_argv

    cfg = router_config(objects)
    parsed = router_validate(objects)

    router = [d for d in find(objects, "Deployment") if component(d) == "router"]
    assert len(router) == 1, "one router Deployment"
    rtpl = router[0]["spec"]["template"]
    rc = container(rtpl, "router")
    assert rc["args"] == ["router", "--config", CONFIG_PATH], rc["args"]
    mount = next(m for m in rc["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == str(Path(CONFIG_PATH).parent) and "subPath" not in mount
    volume = next(v for v in rtpl["spec"]["volumes"] if v["name"] == "config")
    cm_names = {o["metadata"]["name"] for o in find(objects, "ConfigMap") if component(o) == "router"}
    assert volume["configMap"]["name"] in cm_names
    assert rc["ports"][0]["containerPort"] == cfg["server"]["port"]
    check_router_state(objects, router[0], parsed)
    assert not parsed.auth.api_keys and parsed.auth.admin_api_key is None, "keys in the ConfigMap"
    for path in (parsed.auth.api_keys_file, parsed.auth.admin_api_key_file):
        if path is not None:
            secret_source(objects, path)

    for model_name, limit, pool in config_pools(cfg):
        name = pool["name"]
        engine = pool["engine"]
        cap = pool.get("max_context_tokens", limit)
        assert cap <= limit, f"pool {name}: cap {cap} > limit {limit}"
        assert engine["context_length"] == cap, f"pool {name}: engine {engine} vs cap {cap}"
        assert ("endpoints" in pool) != ("discovery" in pool), f"pool {name}: endpoints xor discovery"

        workload = pool_workload(objects, name)
        if workload is None:  # runs elsewhere: static URLs or an explicit discovery block
            for url in pool.get("endpoints", []):
                assert url.startswith(("http://", "https://")), url
            continue

        tpl = serving_template(workload)
        sg = container(tpl, "sglang")
        args = list(sg["args"])
        if workload["kind"] == "LeaderWorkerSet":
            assert args[-6:] == [
                "--dist-init-addr", args[-5], "--nnodes", "$(LWS_GROUP_SIZE)",
                "--node-rank", "$(LWS_WORKER_INDEX)",
            ], args[-6:]  # fmt: skip
            assert args[-5].startswith("$(LWS_LEADER_ADDRESS):")
            args = args[:-6]
        port = int(flags(args)["--port"])
        assert args == engine_argv(parsed, name, host="0.0.0.0", port=port), (
            f"pool {name}: pod args differ from engine_argv"
        )
        env = {e["name"]: e.get("value") for e in sg.get("env", [])}
        assert (env.get("SGLANG_USE_CPU_ENGINE") == "1") == bool(engine.get("cpu")), env
        # the router's view of the engines' keep-alive is the one the pods run with (unset:
        # SGLang's uvicorn default, 5 s)
        assert float(env.get("SGLANG_TIMEOUT_KEEP_ALIVE") or 5) == parsed.pool(name).engine_keepalive_s, env
        assert parsed.upstream.keepalive_timeout_s < parsed.pool(name).engine_keepalive_s
        f = flags(sg["args"])
        assert f["--context-length"] == str(cap), f"pool {name}: {f['--context-length']} != {cap}"
        assert "--enable-metrics" in f and f["--enable-metrics"] is None
        assert f["--model-path"] == engine["model_path"]
        assert f["--served-model-name"] == engine.get("served_model_name", model_name)
        assert parsed.model_of(name).name == model_name
        assert f["--tp-size"] == str(engine.get("tp_size", 1))
        assert sg["ports"][0] == {"name": "http", "containerPort": port, "protocol": "TCP"}

        algo = engine.get("speculative_algorithm")
        assert pool["speculative"] == (algo is not None), f"pool {name}: speculative vs engine"
        assert f.get("--speculative-algorithm") == algo, f"pool {name}: algorithm flag"
        for key in (
            "speculative_draft_model_path",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
        ):
            flag = "--" + key.replace("_", "-")
            expected = None if key not in engine else str(engine[key])
            assert f.get(flag) == expected, f"pool {name}: {flag} {f.get(flag)} != {expected}"
        if workload["kind"] == "LeaderWorkerSet":
            worker = workload["spec"]["leaderWorkerTemplate"]["workerTemplate"]
            assert flags(container(worker, "sglang")["args"]) == f, "leader/worker args differ"

        if "discovery" in pool:
            disc = pool["discovery"]
            labels = tpl["metadata"]["labels"]
            assert selector_matches(disc["label_selector"], labels), (disc, labels)
            assert disc["port"] == port
            namespace = workload["metadata"].get("namespace")
            if namespace is not None:
                assert disc["namespace"] == namespace, (disc, namespace)
            if workload["kind"] == "LeaderWorkerSet":
                wl = workload["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
                assert not selector_matches(disc["label_selector"], wl), "selector hits workers"
            services = [
                s
                for s in find(objects, "Service")
                if selector_matches(disc["label_selector"], s["metadata"].get("labels", {}))
            ]
            assert len(services) == 1, f"pool {name}: {len(services)} Services match discovery"
            svc = services[0]
            assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
            assert svc["spec"]["ports"][0]["port"] == port
    return cfg


def router_max_replicas(objects: list[dict[str, Any]], deployment: dict[str, Any]) -> int:
    """The most router pods that can run: the HPA's maxReplicas, else spec.replicas (1)."""
    hpas = [
        h
        for h in find(objects, "HorizontalPodAutoscaler")
        if h["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    ]
    if hpas:
        return int(hpas[0]["spec"]["maxReplicas"])
    return int(deployment["spec"].get("replicas", 1))


def check_router_state(objects: list[dict[str, Any]], deployment: dict[str, Any], parsed: Any) -> None:
    """Replicas vs state backend, and where the router's Redis URL comes from (see check_stack)."""
    from urllib.parse import urlsplit

    state = parsed.state
    pods = router_max_replicas(objects, deployment)
    assert pods == 1 or state.backend == "redis", f"{pods} router pods with {state.backend} state"
    if state.backend != "redis":
        return
    rc = container(deployment["spec"]["template"], "router")
    env = {e["name"] for e in rc.get("env", [])}
    if state.redis_url is None:
        assert state.redis_url_env in env, f"no redis_url and no ${state.redis_url_env}"
        return
    assert state.redis_url_env not in env, "a Redis URL both in the ConfigMap and in the env"
    url = urlsplit(state.redis_url)
    assert url.username is None and url.password is None, "credentials in the ConfigMap"
    if url.scheme == "redis" and url.hostname and "." not in url.hostname:
        svc = one(objects, "Service", url.hostname)
        assert url.port in [p["port"] for p in svc["spec"]["ports"]], (url.port, svc["spec"]["ports"])
        backends = [
            d
            for d in find(objects, "Deployment")
            if all(
                d["spec"]["template"]["metadata"]["labels"].get(k) == v
                for k, v in svc["spec"]["selector"].items()
            )
        ]
        assert len(backends) == 1, f"Service {url.hostname} selects {len(backends)} Deployments"


def secret_source(objects: list[dict[str, Any]], path: str) -> tuple[str, str]:
    """(Secret name, key) that the router pod sees as the file ``path``: a Secret volume
    mounted (a directory mount, no subPath) at the file's directory with an item ``key`` ->
    the file's name. Fails when there is none. When the Secret is one of ``objects``, the key
    must be in it."""
    deployment = next(d for d in find(objects, "Deployment") if component(d) == "router")
    tpl = deployment["spec"]["template"]
    rc = container(tpl, "router")
    file = Path(path)
    mounts = [m for m in rc["volumeMounts"] if m["mountPath"] == str(file.parent)]
    assert len(mounts) == 1, f"{path}: {len(mounts)} mounts at {file.parent}"
    assert "subPath" not in mounts[0] and mounts[0].get("readOnly") is True, mounts[0]
    volume = next(v for v in tpl["spec"]["volumes"] if v["name"] == mounts[0]["name"])
    assert "secret" in volume, f"{path}: volume {volume['name']} is not a Secret"
    keys = [i["key"] for i in volume["secret"]["items"] if i["path"] == file.name]
    assert len(keys) == 1, f"{path}: no item of Secret {volume['secret']['secretName']} is {file.name}"
    name = volume["secret"]["secretName"]
    rendered = find(objects, "Secret", name)
    if rendered:
        assert keys[0] in rendered[0].get("data", {}), f"Secret {name} has no key {keys[0]}"
    return name, keys[0]


# ----------------------------------------------------------------------------- schemas


def _pod_template_object(template: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name},
        "template": template,
    }


def validate_k8s(objects: list[dict[str, Any]]) -> list[str]:
    """Validate every built-in object (and every LWS pod template) against the Kubernetes
    OpenAPI schemas of K8S_VERSIONS, strictly; returns "Kind/name" of the custom resources
    whose top level has no schema here (the caller asserts that list exactly)."""
    import kubernetes_validate

    crds: list[str] = []
    for obj in objects:
        ident = f"{obj['kind']}/{obj['metadata']['name']}"
        targets = [obj]
        if obj["kind"] in CRD_KINDS:
            crds.append(ident)
            targets = []
            if obj["kind"] == "LeaderWorkerSet":
                lwt = obj["spec"]["leaderWorkerTemplate"]
                targets = [
                    _pod_template_object(lwt["leaderTemplate"], obj["metadata"]["name"] + "-leader"),
                    _pod_template_object(lwt["workerTemplate"], obj["metadata"]["name"] + "-worker"),
                ]
        for target in targets:
            for version in K8S_VERSIONS:
                try:
                    kubernetes_validate.validate(target, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    raise AssertionError(
                        f"{ident} invalid for Kubernetes {version} at "
                        f"{'/'.join(str(p) for p in exc.absolute_path)}: {exc.message}"
                    ) from None
    return sorted(crds)
