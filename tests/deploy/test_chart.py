"""helm/specgate rendered by Helm's own engine: exact objects for each value set."""

from __future__ import annotations

import json

import pytest
import yaml

from . import k8s
from .value_sets import EVERY_ROUTER_KEY, PLAIN_POOL, SPEC_ENGINE, SPEC_POOL, VALUE_SETS, digest


def kinds(objects: list[dict]) -> list[str]:
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objects)


# ----------------------------------------------------------------------------- every set


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_strict_is_clean(name: str) -> None:
    report = k8s.lint(VALUE_SETS[name])
    assert report["errors"] == []
    # Only informational findings (severity 1: "icon is recommended") are tolerated.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendering_keeps_the_stack_invariants(name: str) -> None:
    objects = k8s.render(VALUE_SETS[name])
    k8s.check_stack(objects)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_validate_against_kubernetes_schemas(name: str) -> None:
    objects = k8s.render(VALUE_SETS[name])
    expected_crds = {
        "default": [],
        "every-router-key": [],
        "cpu-dev": [],
        "gpu-eagle3-redis": [
            "PrometheusRule/sg-specgate",
            "ServiceMonitor/sg-specgate-pools",
            "ServiceMonitor/sg-specgate-router",
        ],
        "lws": ["LeaderWorkerSet/sg-specgate-pool-spec"],
        "static-endpoints": [],
        "two-models": [],
        "planner": [],
    }[name]
    assert k8s.validate_k8s(objects) == expected_crds


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_object_is_namespaced_and_labelled(name: str) -> None:
    for obj in k8s.render(VALUE_SETS[name], namespace="llm"):
        meta = obj["metadata"]
        assert meta["namespace"] == "llm", obj["kind"]
        assert meta["labels"]["app.kubernetes.io/instance"] == "sg"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"


# ----------------------------------------------------------------------------- defaults


def test_default_objects() -> None:
    assert kinds(k8s.render()) == [
        "ConfigMap/sg-specgate-config",
        "Deployment/sg-specgate-pool-plain",
        "Deployment/sg-specgate-pool-spec",
        "Deployment/sg-specgate-redis",
        "Deployment/sg-specgate-router",
        "HorizontalPodAutoscaler/sg-specgate-router",
        "NetworkPolicy/sg-specgate-pool-plain",
        "NetworkPolicy/sg-specgate-pool-spec",
        "PodDisruptionBudget/sg-specgate-pool-plain",
        "PodDisruptionBudget/sg-specgate-pool-spec",
        "PodDisruptionBudget/sg-specgate-router",
        "Role/sg-specgate-discovery",
        "RoleBinding/sg-specgate-discovery",
        "Service/sg-specgate-pool-plain",
        "Service/sg-specgate-pool-spec",
        "Service/sg-specgate-redis",
        "Service/sg-specgate-router",
        "ServiceAccount/sg-specgate",
    ]


def test_model_aliases_reach_the_router_config() -> None:
    cfg = k8s.router_validate(k8s.render({"model": {"aliases": ["gpt-4o-mini"]}}))
    assert (cfg.model.name, cfg.model.aliases) == ("tiny-llama", ("gpt-4o-mini",))


def test_default_router_config_is_exact() -> None:
    assert k8s.router_config(k8s.render()) == {
        "model": {"name": "tiny-llama", "tokenizer": "/models/tiny-llama"},
        "limits": {
            "max_context_tokens": 4096,
            "default_max_tokens": 256,
            "max_request_bytes": 33554432,
            "max_n": 128,
        },
        "pools": [
            {
                "name": "spec",
                "speculative": True,
                "max_context_tokens": 2048,
                "discovery": {
                    "namespace": "llm",
                    "label_selector": "app.kubernetes.io/name=specgate,"
                    "app.kubernetes.io/instance=sg,app.kubernetes.io/component=pool-spec",
                    "port": 30000,
                },
                "engine": {
                    "model_path": "/models/tiny-llama",
                    "context_length": 2048,
                    "mem_fraction_static": 0.8,
                    "tp_size": 1,
                    "speculative_algorithm": "EAGLE3",
                    "speculative_draft_model_path": "/models/tiny-llama-eagle3",
                    "speculative_num_steps": 3,
                    "speculative_eagle_topk": 1,
                    "speculative_num_draft_tokens": 4,
                    "extra_args": [],
                },
                "engine_keepalive_s": 75,
            },
            {
                "name": "plain",
                "speculative": False,
                "discovery": {
                    "namespace": "llm",
                    "label_selector": "app.kubernetes.io/name=specgate,"
                    "app.kubernetes.io/instance=sg,app.kubernetes.io/component=pool-plain",
                    "port": 30000,
                },
                "engine": {
                    "model_path": "/models/tiny-llama",
                    "context_length": 4096,
                    "mem_fraction_static": 0.8,
                    "tp_size": 1,
                    "extra_args": [],
                },
                "engine_keepalive_s": 75,
            },
        ],
        "routing": {
            "long_prompt_tokens": 1024,
            "saturation": {"enter": 8, "exit": 6},
            "acceptance": {"enabled": True, "min_expected_speedup": 1.0, "exit_speedup": 1.05,
                           "max_age_s": 10.0, "weight": 0.5},
            "min_flip_interval_s": 1.0,
            "seed": 0,
            "prefix_cache": {"enabled": True, "block_chars": 64, "max_blocks": 512, "anchor_blocks": 4,
                             "max_blocks_per_endpoint": 32768, "cache_threshold": 0.3,
                             "balance_abs_threshold": 64, "balance_rel_threshold": 1.5,
                             "hash_load_factor": 1.5, "sticky_load_factor": 2.0, "pool_affinity_ratio": 1.25,
                             "new_affinity_ratio": 1.1},
            "learning": {"enabled": True, "forgetting": 0.995, "prior_weight": 0.05, "explore_every": 50,
                         "explore_ratio": 1.5, "marginal_cost": True,
                         "check": {"enabled": True, "window": 64, "min_checks": 16, "max_age_s": 300,
                                   "fallback_enter": 0.5, "fallback_exit": 0.3}},
        },
        "scrape": {"interval_s": 0.25, "timeout_s": 1.0, "stale_after_s": 2.0, "models_interval_s": 10.0},
        "health": {"failure_threshold": 3, "success_threshold": 2, "retry_after_s": 5,
                   "warmup": {"enabled": True, "successes": 3, "timeout_s": 30.0, "interval_s": 1.0,
                              "path": "/v1/chat/completions"}},
        "upstream": {
            "client": "httptools",
            "connect_timeout_s": 2.0,
            "first_byte_timeout_s": 60.0,
            "first_byte_s_per_1k_tokens": 1.0,
            "idle_timeout_s": 120.0,
            "stream_keepalive_s": 15.0,
            "nonstream_timeout_s": 600.0,
            "max_connections": 4096,
            "max_attempts": 3,
            "abort_timeout_s": 2.0,
            "keepalive_timeout_s": 30.0,
            "backpressure_hold_s": 2.0,
            "backpressure_max_hold_s": 30.0,
        },
        "server": {"host": "0.0.0.0", "port": 8000, "reload_interval_s": 1.0, "log_requests": True,
                   "drain_listen_s": 5, "drain_timeout_s": 30, "body_timeout_s": 20.0, "body_min_rate_bytes_s": 500,
                   "keepalive_timeout_s": 30.0, "linger_s": 5.0,
                   "headers": {"max_bytes": 65536, "max_fields": 100, "max_field_bytes": 8192,
                               "head_timeout_s": 30.0}},
        "tracing": {"enabled": False, "endpoint": "http://otel-collector:4318/v1/traces", "sampler_ratio": 1.0,
                    "service_name": "specgate-router", "resource_attributes": {}, "forward_baggage": False,
                    "export_timeout_s": 10.0},
        "planner": {"window_requests": 4096, "window_s": 900},
        "canary": {
            "enabled": False, "interval_s": 300.0, "check_s": 1.0, "max_tokens": 32, "timeout_s": 60.0,
            "prompts": ["Count from one to twenty in words, separated by commas.",
                        "Write a Python function that returns the n-th Fibonacci number."],
            "on_mismatch": "alert",
        },
        "state": {
            "backend": "redis",
            "topology": "standalone",
            "sentinel_master": "mymaster",
            "redis_url": "redis://sg-specgate-redis:6379/0",
            "key_prefix": "sg-specgate",
            "op_timeout_s": 0.05,
            "lease_ttl_s": 15.0,
            "renew_interval_s": 5.0,
            "circuit_breaker": {"failure_threshold": 3, "reset_after_s": 1.0},
        },
    }


def test_every_router_key_lands_in_the_rendered_config_exactly() -> None:
    objects = k8s.render(EVERY_ROUTER_KEY)
    cfg = k8s.router_config(objects)
    assert cfg["model"] == {"name": "tiny-llama", "tokenizer": "/models/tiny-llama",
                            "multimodal": {"image_tokens": 1290, "audio_tokens": 750, "video_tokens": 4096}}
    assert cfg["routing"] == {
        "long_prompt_tokens": 1024,
        "saturation": {"enter": 8, "exit": 6},
        "acceptance": {"enabled": True, "min_expected_speedup": 1.0, "exit_speedup": 1.05,
                       "max_age_s": 20.0, "weight": 0.25},
        "min_flip_interval_s": 2.5,
        "seed": 0,
        "prefix_cache": EVERY_ROUTER_KEY["routing"]["prefix_cache"],
        "learning": EVERY_ROUTER_KEY["routing"]["learning"],
    }
    assert {k: cfg["upstream"][k] for k in EVERY_ROUTER_KEY["upstream"]} == EVERY_ROUTER_KEY["upstream"]
    assert cfg["canary"] == EVERY_ROUTER_KEY["canary"]
    assert cfg["auth"] == {"speculation_defaults": {digest("client-a"): "off", digest("client-b"): "on"},
                           "priority": EVERY_ROUTER_KEY["auth"]["priority"],
                           "rate_limits": EVERY_ROUTER_KEY["auth"]["rate_limits"]}
    selector = ("app.kubernetes.io/name=specgate,app.kubernetes.io/instance=sg,"
                "app.kubernetes.io/component=pool-{}")  # fmt: skip
    spec, plain, embed, ext = cfg["pools"]
    assert spec == {
        "name": "spec", "speculative": True, "max_context_tokens": 2048,
        "discovery": {"namespace": "llm", "label_selector": selector.format("spec"), "port": 30000,
                      "resync_s": 30.0, "serve_terminating_when_empty": True},
        "engine": {**SPEC_ENGINE, "context_length": 2048, "tool_call_parser": "qwen25", "reasoning_parser": "qwen3"},
        "engine_keepalive_s": 90,
        "speed": EVERY_ROUTER_KEY["pools"][0]["speed"],
        "capabilities": ["tool_calls", "reasoning"],
        "serves": ["generate", "responses"],
    }  # fmt: skip
    assert plain == {
        "name": "plain", "speculative": False,
        "discovery": {"namespace": "llm", "label_selector": selector.format("plain"), "port": 30000},
        "engine": {"model_path": "/models/tiny-llama", "context_length": 4096,
                   "tool_call_parser": "qwen25", "reasoning_parser": "qwen3"},
        "engine_keepalive_s": 60,
        "speed": {"decode_s_per_token": 0.01, "batch_knee": 32.0},
        "serves": ["generate", "responses", "score"],
    }  # fmt: skip
    assert embed == {
        "name": "embed", "speculative": False,
        "discovery": {"namespace": "llm", "label_selector": selector.format("embed"), "port": 30000},
        "engine": {"model_path": "/models/bge", "context_length": 4096},
        "engine_keepalive_s": 90,
        "serves": ["embeddings", "rerank"],
    }  # fmt: skip
    assert ext == {
        "name": "ext", "speculative": False, "endpoints": ["http://10.0.0.31:30000"],
        "engine": {"model_path": "/models/cls", "context_length": 4096},
        "engine_keepalive_s": 120.5, "serves": ["classify"],
    }  # fmt: skip
    # Go writes 0.00004 as 4e-05, a string to YAML 1.1 (PyYAML): the chart adds the point.
    assert "prefill_s_per_token: 4.0e-05" in k8s.router_config_text(objects)
    assert isinstance(spec["speed"]["prefill_s_per_token"], float)
    # The router reads each as set (a key it did not know would fail here: extra="forbid").
    parsed = k8s.router_validate(objects)
    assert parsed.model.media_tokens == {"image": 1290, "audio": 750, "video": 4096}
    assert (parsed.routing.min_flip_interval_s, parsed.routing.acceptance.weight) == (2.5, 0.25)
    assert parsed.routing.prefix_cache.enabled is False and parsed.canary.on_mismatch == "eject"
    assert parsed.auth.speculation_defaults == {digest("client-a"): "off", digest("client-b"): "on"}
    assert parsed.auth.priority.keys[digest("client-a")].max == 100 and parsed.auth.priority.default == 0
    assert parsed.auth.rate_limits.keys[digest("client-a")].concurrent_requests == 32
    assert parsed.auth.rate_limits.local_fraction == 0.5
    assert [p.engine_keepalive_s for p in parsed.pools] == [90.0, 60.0, 90.0, 120.5]
    assert parsed.pools[0].served_capabilities == frozenset({"tool_calls", "reasoning"})
    assert parsed.pools[0].speed.accept_length_sampled == 1.9
    assert parsed.pools[0].discovery.serve_terminating_when_empty is True
    # The engines get the parsers, and a pool without `generate` runs as an embedding server.
    for pool, extra in (("spec", ["--tool-call-parser", "qwen25", "--reasoning-parser", "qwen3"]),
                        ("plain", ["--tool-call-parser", "qwen25", "--reasoning-parser", "qwen3"]),
                        ("embed", ["--is-embedding"])):
        c = k8s.container(k8s.serving_template(k8s.pool_workload(objects, pool)), "sglang")
        assert [a for a in c["args"] if a in extra or a in {"qwen25", "qwen3"}] == extra, pool
        keep_alive = {e["name"]: e["value"] for e in c["env"]}["SGLANG_TIMEOUT_KEEP_ALIVE"]
        assert float(keep_alive) == cfg["pools"][[p["name"] for p in cfg["pools"]].index(pool)]["engine_keepalive_s"]
    assert k8s.pool_workload(objects, "ext") is None


def _config_defaults() -> dict:
    from router.config.tree import AuthConfig, CanaryConfig, Config, RoutingConfig

    fields = Config.model_fields
    out = {name: fields[name].default.model_dump(mode="json")
           for name in ("scrape", "health", "upstream", "server", "planner")}
    routing = RoutingConfig.model_fields
    out["routing"] = {k: routing[k].default.model_dump(mode="json") if hasattr(routing[k].default, "model_dump")
                      else routing[k].default for k in ("acceptance", "min_flip_interval_s", "seed", "prefix_cache")}
    out["canary"] = CanaryConfig().model_dump(mode="json")
    out["auth"] = {"speculation_defaults": AuthConfig().speculation_defaults,
                   "priority": AuthConfig().priority.model_dump(mode="json"),
                   "rate_limits": AuthConfig().rate_limits.model_dump(mode="json"),
                   "engine_fields": AuthConfig().engine_fields.model_dump(mode="json")}
    return out


#: Where values.yaml differs from the router's own default on purpose (the comment says why).
CHART_OWN_DEFAULTS = {
    "upstream.keepalive_timeout_s": 30.0,  # the chart's engines keep idle connections 75 s
    "server.host": None, "server.port": None,  # rendered from router.port, listening on 0.0.0.0
    "server.tokenizer_threads": None,  # left unset: the router sizes it from the pod's CPU quota
}  # fmt: skip


def test_values_defaults_equal_the_routers_defaults() -> None:
    values = k8s.values_file("../values.yaml")
    for section, defaults in _config_defaults().items():
        for key, default in defaults.items():
            path = f"{section}.{key}"
            if path in CHART_OWN_DEFAULTS:
                assert values[section].get(key) == CHART_OWN_DEFAULTS[path], path
                continue
            value = values[section][key]
            assert (list(value) if isinstance(value, tuple) else value) == default, path
    # Pool keys left out of values.yaml take the router's defaults: no speed model, serves
    # [generate], no capabilities; engine_keepalive_s is the pods' keep-alive.
    for pool in values["pools"]:
        assert not {"speed", "serves", "capabilities", "engine_keepalive_s"} & set(pool), pool["name"]
    assert "multimodal" not in values["model"]


def test_default_spec_pool_container() -> None:
    dep = k8s.one(k8s.render(), "Deployment", "sg-specgate-pool-spec")
    pod = dep["spec"]["template"]["spec"]
    c = k8s.container(dep["spec"]["template"], "sglang")
    assert c["image"] == "lmsysorg/sglang:v0.5.23"
    assert c["command"] == ["python3", "-m", "sglang.launch_server"]
    assert c["args"] == [
        "--model-path", "/models/tiny-llama",
        "--served-model-name", "tiny-llama",
        "--host", "0.0.0.0",
        "--port", "30000",
        "--context-length", "2048",
        "--tp-size", "1",
        "--enable-metrics",
        "--log-level-http", "warning",
        "--mem-fraction-static", "0.8",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "/models/tiny-llama-eagle3",
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip
    assert c["resources"] == {
        "requests": {"cpu": "4", "memory": "32Gi"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": 1},
    }
    assert c["startupProbe"] == {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 25,
        "failureThreshold": 180,
    }
    assert c["readinessProbe"] == {
        "httpGet": {"path": "/health_generate", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 25,
        "failureThreshold": 3,
    }
    assert c["livenessProbe"] == {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 30,
        "timeoutSeconds": 25,
        "failureThreshold": 5,
    }
    assert c["volumeMounts"] == [
        {"name": "models", "mountPath": "/models", "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    assert pod["volumes"] == [
        {"name": "models", "persistentVolumeClaim": {"claimName": "specgate-models", "readOnly": True}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
    ]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["automountServiceAccountToken"] is False
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }


def test_engine_tracing_flags_render_as_specgate_serve_writes_them() -> None:
    values = {"pools": [{"name": "plain", "speculative": False,
                         "engine": {"model_path": "/models/tiny-llama", "otlp_traces_endpoint": "otel:4317",
                                    "otlp_service_name": "sglang-plain"}}],
              "tracing": {"enabled": True, "endpoint": "http://otel:4318/v1/traces"}}
    objects = k8s.render(values)
    args = k8s.container(k8s.one(objects, "Deployment", "sg-specgate-pool-plain")["spec"]["template"], "sglang")["args"]
    i = args.index("--enable-trace")
    assert args[i:i + 5] == ["--enable-trace", "--otlp-traces-endpoint", "otel:4317", "--otlp-service-name",
                             "sglang-plain"]
    cfg = k8s.router_validate(objects)
    assert cfg.tracing.enabled and cfg.tracing.endpoint == "http://otel:4318/v1/traces"
    assert cfg.pool("plain").engine.otlp_traces_endpoint == "otel:4317"


def test_plain_pool_has_no_speculative_flags() -> None:
    dep = k8s.one(k8s.render(), "Deployment", "sg-specgate-pool-plain")
    args = k8s.container(dep["spec"]["template"], "sglang")["args"]
    assert not [a for a in args if a.startswith("--speculative")]
    assert k8s.flags(args)["--context-length"] == "4096"


def test_context_length_is_the_validated_cap_245760() -> None:
    values = {
        "limits": {"max_context_tokens": 245760},
        "pools": [
            {"name": "long", "speculative": False, "max_context_tokens": 245760,
             "engine": {"model_path": "/models/target", "context_length": 245760}},
            {"name": "spec", "speculative": True, "max_context_tokens": 32768,
             "engine": {"model_path": "/models/target", "speculative_algorithm": "EAGLE3",
                        "speculative_draft_model_path": "/models/target-eagle3"}},
        ],
    }  # fmt: skip
    objects = k8s.render(values)
    args = k8s.container(k8s.one(objects, "Deployment", "sg-specgate-pool-long")["spec"]["template"], "sglang")["args"]
    i = args.index("--context-length")
    assert args[i : i + 2] == ["--context-length", "245760"]
    cfg = k8s.check_stack(objects)
    assert [p["engine"]["context_length"] for p in cfg["pools"]] == [245760, 32768]


def test_router_deployment() -> None:
    dep = k8s.one(k8s.render(), "Deployment", "sg-specgate-router")
    tpl = dep["spec"]["template"]
    c = k8s.container(tpl, "router")
    assert "replicas" not in dep["spec"]  # the HPA owns it
    assert c["image"] == "specgate/router:0.1.0"
    assert c["args"] == ["router", "--config", "/etc/specgate/config.yaml"]
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert c["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert tpl["spec"]["securityContext"]["runAsNonRoot"] is True
    assert tpl["spec"]["serviceAccountName"] == "sg-specgate"
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]} == {
        "config": "/etc/specgate",
        "tmp": "/tmp",
        "models": "/models",
    }
    assert [e["name"] for e in c["env"]] == ["POD_NAMESPACE", "HF_HOME"]
    assert k8s.one(k8s.render(), "HorizontalPodAutoscaler")["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sg-specgate-router"},
        "minReplicas": 2,
        "maxReplicas": 6,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}],
    }  # fmt: skip
    assert k8s.one(k8s.render(), "PodDisruptionBudget", "sg-specgate-router")["spec"]["minAvailable"] == 1


def test_autoscaling_off_sets_replicas() -> None:
    objects = k8s.render({"router": {"autoscaling": {"enabled": False}, "replicas": 3}})
    assert k8s.find(objects, "HorizontalPodAutoscaler") == []
    assert k8s.one(objects, "Deployment", "sg-specgate-router")["spec"]["replicas"] == 3


# ----------------------------------------------------------------------------- config change


def _router_annotations(values: dict) -> dict:
    dep = k8s.one(k8s.render(values), "Deployment", "sg-specgate-router")
    return dep["spec"]["template"]["metadata"].get("annotations") or {}


def test_config_change_reload_keeps_the_pod_template_stable() -> None:
    # reload: a config edit must not touch the pod template (no rollout); the watcher reloads.
    # Only what the router applies at start alone is checksummed: the state block and the
    # upstream client's settings.
    a = _router_annotations({})
    b = _router_annotations({"routing": {"long_prompt_tokens": 2048}})
    assert a == b and set(a) == {"checksum/state", "checksum/upstream"}
    cm_a = k8s.one(k8s.render(), "ConfigMap")["metadata"]["annotations"]["specgate.dev/config-sha256"]
    cm_b = k8s.one(k8s.render({"routing": {"long_prompt_tokens": 2048}}), "ConfigMap")
    assert cm_b["metadata"]["annotations"]["specgate.dev/config-sha256"] != cm_a


def test_start_only_upstream_settings_roll_the_router_under_reload() -> None:
    a = _router_annotations({})
    for change in ({"client": "aiohttp"}, {"max_connections": 64}, {"keepalive_timeout_s": 3.0}):
        b = _router_annotations({"upstream": change})
        assert (b["checksum/state"], b["checksum/upstream"] != a["checksum/upstream"]) == (a["checksum/state"], True)
    assert _router_annotations({"upstream": {"idle_timeout_s": 30.0}}) == a   # a reload applies it


def test_config_change_rollout_checksums_the_config() -> None:
    a = _router_annotations({"router": {"configChange": "rollout"}})
    b = _router_annotations({"router": {"configChange": "rollout"}, "routing": {"long_prompt_tokens": 2048}})
    assert set(a) == {"checksum/config", "checksum/state", "checksum/upstream"} and len(a["checksum/config"]) == 64
    assert a["checksum/config"] != b["checksum/config"]
    cm = k8s.one(k8s.render({"router": {"configChange": "rollout"}}), "ConfigMap")
    assert a["checksum/config"] == cm["metadata"]["annotations"]["specgate.dev/config-sha256"]


# ----------------------------------------------------------------------------- RBAC


def test_rbac_is_least_privilege_read_only_discovery() -> None:
    objects = k8s.render()
    role = k8s.one(objects, "Role")
    assert role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    ]  # fmt: skip
    binding = k8s.one(objects, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sg-specgate-discovery"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sg-specgate", "namespace": "llm"}]
    assert k8s.find(objects, "ClusterRole") == [] and k8s.find(objects, "ClusterRoleBinding") == []
    assert k8s.one(objects, "ServiceAccount")["automountServiceAccountToken"] is True


def test_rbac_extra_namespaces() -> None:
    objects = k8s.render({"rbac": {"create": True, "extraNamespaces": ["gpu-a", "llm"]}})
    assert sorted(r["metadata"]["namespace"] for r in k8s.find(objects, "Role")) == ["gpu-a", "llm"]
    for rb in k8s.find(objects, "RoleBinding"):
        assert rb["subjects"][0]["namespace"] == "llm"


def test_rbac_off_no_token() -> None:
    objects = k8s.render(VALUE_SETS["static-endpoints"])
    assert k8s.find(objects, "Role") == [] and k8s.find(objects, "RoleBinding") == []
    dep = k8s.one(objects, "Deployment", "sg-specgate-router")
    assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


# ----------------------------------------------------------------------------- discovery vs static


def test_static_endpoints_render_no_pool_workloads() -> None:
    objects = k8s.render(VALUE_SETS["static-endpoints"])
    cfg = k8s.router_config(objects)
    assert [(p["name"], p.get("endpoints"), "discovery" in p) for p in cfg["pools"]] == [
        ("spec", ["http://10.0.0.11:30000", "http://10.0.0.12:30000"], False),
        ("plain", ["http://10.0.0.21:30000"], False),
    ]
    # No pool workloads; the routers' shared-state Redis still runs here.
    assert [d["metadata"]["name"] for d in k8s.find(objects, "Deployment")] == ["sg-specgate-redis", "sg-specgate-router"]
    assert [s["metadata"]["name"] for s in k8s.find(objects, "Service")] == ["sg-specgate-redis", "sg-specgate-router"]


def test_explicit_discovery_block_is_passed_through() -> None:
    disc = {"namespace": "gpu-a", "label_selector": "app=sglang-spec", "port": 31000}
    values = {
        "pools": [
            {"name": "spec", "speculative": True, "discovery": disc, "k8s": {"enabled": False},
             "engine_keepalive_s": 75, "engine": {"model_path": "/m", "speculative_algorithm": "EAGLE3"}},
            {"name": "plain", "speculative": False, "engine": {"model_path": "/m"}},
        ],
        "rbac": {"create": True, "extraNamespaces": ["gpu-a"]},
    }  # fmt: skip
    objects = k8s.render(values)
    cfg = k8s.check_stack(objects)
    assert cfg["pools"][0]["discovery"] == disc
    assert "discovery" in cfg["pools"][1]


def test_static_endpoints_alongside_a_chart_managed_pool() -> None:
    values = {
        "pools": [
            {"name": "spec", "speculative": True, "endpoints": ["http://sg-specgate-pool-spec:30000"],
             "engine": {"model_path": "/m", "speculative_algorithm": "EAGLE3"}},
        ],
    }  # fmt: skip
    objects = k8s.render(values)
    k8s.check_stack(objects)
    assert k8s.router_config(objects)["pools"][0]["endpoints"] == ["http://sg-specgate-pool-spec:30000"]
    assert k8s.pool_workload(objects, "spec") is not None


# ----------------------------------------------------------------------------- shared state


ONE_ROUTER = {"router": {"replicas": 1, "autoscaling": {"enabled": False}}}
MEMORY = {"state": {"backend": "memory"}, "redis": {"enabled": False}}


def _router_env(objects: list[dict]) -> list[dict]:
    tpl = k8s.one(objects, "Deployment", "sg-specgate-router")["spec"]["template"]
    return k8s.container(tpl, "router")["env"]


def _kubelet_env(env: list[dict], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The container's variables as the kubelet sets them: secretKeyRef values looked up in
    ``secrets`` ({name: {key: value}}), ``$(VAR)`` expanded from variables declared earlier
    (a reference to a later or unknown one stays as it is); fieldRefs are left out."""
    import re

    out: dict[str, str] = {}
    for entry in env:
        if "value" in entry:
            out[entry["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: out.get(m[1], m[0]), entry["value"]
            )
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            ref = entry["valueFrom"]["secretKeyRef"]
            out[entry["name"]] = secrets[ref["name"]][ref["key"]]
    return out


def _shared_state(objects: list[dict], environ: dict[str, str] | None = None) -> tuple:
    """(router.config.tree.Config, the router's state backend) for the rendered config.yaml, built by
    router.shared.state.build_shared_state exactly as the router builds it at start (no connection)."""
    from prometheus_client import CollectorRegistry

    from router.ops.metrics import RouterMetrics
    from router.shared.state import build_shared_state

    cfg = k8s.router_validate(objects)
    metrics = RouterMetrics(CollectorRegistry())
    return cfg, build_shared_state(cfg.state, metrics=metrics, environ=environ or {})


def _redis_connection(shared) -> tuple:
    kwargs = shared._client.connection_pool.connection_kwargs
    return kwargs["host"], kwargs["port"], kwargs["db"], kwargs.get("password")


@pytest.mark.parametrize(
    ("release", "values", "url"),
    [
        ("sg", {}, "redis://sg-specgate-redis:6379/0"),
        ("edge", {"redis": {"port": 6380}}, "redis://edge-specgate-redis:6380/0"),
    ],
)
def test_default_state_is_shared_through_the_charts_redis(release: str, values: dict, url: str) -> None:
    objects = k8s.render(values, name=release)
    cfg, shared = _shared_state(objects)
    assert (cfg.state.backend, cfg.state.redis_url, cfg.state.key_prefix) == ("redis", url, f"{release}-specgate")
    assert (shared.backend, shared.target) == ("redis", url)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert _redis_connection(shared) == (f"{release}-specgate-redis", port, 0, None)
    svc = k8s.one(objects, "Service", f"{release}-specgate-redis")
    assert svc["spec"]["ports"] == [{"name": "redis", "port": port, "targetPort": "redis", "protocol": "TCP"}]
    c = k8s.container(k8s.one(objects, "Deployment", f"{release}-specgate-redis")["spec"]["template"], "redis")
    assert c["image"] == "redis:7.4-alpine"
    assert c["args"] == ["--port", str(port), "--save", "", "--appendonly", "no"]
    assert "env" not in c
    tpl = k8s.one(objects, "Deployment", f"{release}-specgate-router")["spec"]["template"]
    assert [e["name"] for e in k8s.container(tpl, "router")["env"]] == ["POD_NAMESPACE", "HF_HOME"]


def test_state_tuning_is_passed_through() -> None:
    values = {"state": {"key_prefix": "team-a", "op_timeout_s": 0.1, "lease_ttl_s": 30.0, "renew_interval_s": 10.0,
                        "circuit_breaker": {"failure_threshold": 5, "reset_after_s": 2.5}}}  # fmt: skip
    cfg = k8s.router_validate(k8s.render(values))
    assert cfg.state.model_dump() == {
        "backend": "redis",
        "topology": "standalone",
        "sentinel_master": "mymaster",
        "redis_url": "redis://sg-specgate-redis:6379/0",
        "redis_url_env": "SPECGATE_REDIS_URL",
        "key_prefix": "team-a",
        "op_timeout_s": 0.1,
        "lease_ttl_s": 30.0,
        "renew_interval_s": 10.0,
        "circuit_breaker": {"failure_threshold": 5, "reset_after_s": 2.5},
    }


def test_redis_password_from_an_existing_secret() -> None:
    objects = k8s.render({"redis": {"auth": {"existingSecret": "redis-pw", "passwordKey": "pw"}}})
    env = _router_env(objects)
    # The password variable comes first: Kubernetes expands $(VAR) only from earlier entries.
    assert env[2:] == [
        {"name": "SPECGATE_REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "redis-pw", "key": "pw"}}},
        {"name": "SPECGATE_REDIS_URL", "value": "redis://:$(SPECGATE_REDIS_PASSWORD)@sg-specgate-redis:6379/0"},
    ]  # fmt: skip
    redis = k8s.container(k8s.one(objects, "Deployment", "sg-specgate-redis")["spec"]["template"], "redis")
    assert redis["args"][-2:] == ["--requirepass", "$(REDISCLI_AUTH)"]
    assert redis["env"] == [{"name": "REDISCLI_AUTH", "valueFrom": {"secretKeyRef": {"name": "redis-pw", "key": "pw"}}}]
    secrets = {"redis-pw": {"pw": "0f3a9c77e2b14d08"}}
    assert _kubelet_env(redis["env"], secrets)["REDISCLI_AUTH"] == "0f3a9c77e2b14d08"
    # No password in the ConfigMap: the router reads the whole URL from its environment.
    cfg, shared = _shared_state(objects, _kubelet_env(env, secrets))
    assert (cfg.state.redis_url, cfg.state.redis_url_env) == (None, "SPECGATE_REDIS_URL")
    assert "0f3a9c77e2b14d08" not in k8s.router_config_text(objects)
    assert _redis_connection(shared) == ("sg-specgate-redis", 6379, 0, "0f3a9c77e2b14d08")
    assert shared.target == "redis://sg-specgate-redis:6379/0"


def test_external_redis_url() -> None:
    objects = k8s.render({"redis": {"enabled": False, "external": {"url": "rediss://cache.example.com:6380/2"}}})
    assert [o for o in objects if k8s.component(o) == "redis"] == []
    cfg, shared = _shared_state(objects)
    assert (cfg.state.backend, cfg.state.redis_url) == ("redis", "rediss://cache.example.com:6380/2")
    assert _redis_connection(shared) == ("cache.example.com", 6380, 2, None)
    assert [e["name"] for e in _router_env(objects)] == ["POD_NAMESPACE", "HF_HOME"]


def test_external_redis_url_with_credentials_from_an_existing_secret() -> None:
    objects = k8s.render({"redis": {"enabled": False, "external": {"existingSecret": "cache-url"}}})
    assert [o for o in objects if k8s.component(o) == "redis"] == []
    env = _router_env(objects)
    assert env[2:] == [
        {"name": "SPECGATE_REDIS_URL", "valueFrom": {"secretKeyRef": {"name": "cache-url", "key": "redis-url"}}},
    ]  # fmt: skip
    secrets = {"cache-url": {"redis-url": "rediss://ops:p%40ss@cache.example.com:6380/1"}}
    cfg, shared = _shared_state(objects, _kubelet_env(env, secrets))
    assert (cfg.state.redis_url, cfg.state.redis_url_env) == (None, "SPECGATE_REDIS_URL")
    assert _redis_connection(shared) == ("cache.example.com", 6380, 1, "p@ss")


@pytest.mark.parametrize(
    "router",
    [
        ONE_ROUTER["router"],
        {"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 1}},
    ],
)
def test_memory_state_with_one_router_pod(router: dict) -> None:
    objects = k8s.render({**MEMORY, "router": router})
    assert k8s.router_config(objects)["state"] == {"backend": "memory"}
    cfg, shared = _shared_state(objects)
    assert (cfg.state.backend, shared.backend) == ("memory", "memory")
    assert [o for o in objects if k8s.component(o) == "redis"] == []
    assert k8s.router_max_replicas(objects, k8s.one(objects, "Deployment", "sg-specgate-router")) == 1


def test_a_state_change_rolls_the_router() -> None:
    # The router applies `state` at start only, so even with configChange=reload a state
    # change must reach the pod template.
    a = _router_annotations({})
    b = _router_annotations({"state": {"key_prefix": "team-a"}})
    c = _router_annotations({"redis": {"port": 6380}})
    assert len({a["checksum/state"], b["checksum/state"], c["checksum/state"]}) == 3


# ----------------------------------------------------------------------------- API keys


def _mounted_auth(objects: list[dict], root, secrets: dict[str, dict[str, str]] | None = None):
    """router.access.auth.load_auth over the files the router pod would see: each auth.*_file of the
    rendered config.yaml is materialised under ``root`` from the Secret volume mounted there
    (a Secret this rendering creates, decoded, or one of ``secrets``: {name: {key: text}})."""
    import base64

    from router.access.auth import load_auth

    cfg = k8s.router_validate(objects)
    update = {}
    for field in ("api_keys_file", "admin_api_key_file"):
        path = getattr(cfg.auth, field)
        if path is None:
            continue
        name, key = k8s.secret_source(objects, path)
        rendered = k8s.find(objects, "Secret", name)
        if rendered:
            text = base64.b64decode(rendered[0]["data"][key]).decode()
        else:
            text = (secrets or {})[name][key]
        local = root / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
        update[field] = str(local)
    return load_auth(cfg.auth.model_copy(update=update), environ={})


def test_no_api_keys_by_default() -> None:
    objects = k8s.render()
    assert "auth" not in k8s.router_config(objects)
    assert k8s.find(objects, "Secret") == []


def test_dev_keys_become_a_chart_secret_the_router_reads(tmp_path) -> None:
    import base64

    from router.errors import AuthenticationError, PermissionDenied

    values = {"auth": {"apiKeys": {"devKeys": ["sk-client-1", "sk-client-2"]},
                       "adminApiKeys": {"devKeys": ["sk-admin"]}}}  # fmt: skip
    objects = k8s.render(values)
    secret = k8s.one(objects, "Secret", "sg-specgate-auth")
    assert secret["type"] == "Opaque"
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "api-keys": "sk-client-1\nsk-client-2\n",
        "admin-api-keys": "sk-admin\n",
    }
    assert k8s.router_config(objects)["auth"] == {
        "api_keys_file": "/etc/specgate-auth/api-keys/api-keys",
        "admin_api_key_file": "/etc/specgate-auth/admin-api-keys/admin-api-keys",
    }
    assert k8s.secret_source(objects, "/etc/specgate-auth/api-keys/api-keys") == ("sg-specgate-auth", "api-keys")
    assert k8s.secret_source(objects, "/etc/specgate-auth/admin-api-keys/admin-api-keys") == (
        "sg-specgate-auth", "admin-api-keys",
    )  # fmt: skip
    auth = _mounted_auth(objects, tmp_path)
    auth.check_client("Bearer sk-client-2")
    auth.check_admin("Bearer sk-admin")
    with pytest.raises(AuthenticationError):
        auth.check_client("Bearer sk-admin")
    with pytest.raises(PermissionDenied):
        auth.check_admin("Bearer sk-client-1")
    # The keys file is re-read only on config reloads: a change of the chart's Secret rolls.
    a = _router_annotations(values)["checksum/auth"]
    b = _router_annotations({"auth": {"apiKeys": {"devKeys": ["sk-client-3"]}}})["checksum/auth"]
    assert len(a) == 64 and a != b


def test_existing_secrets_are_mounted_where_the_config_says(tmp_path) -> None:
    from router.errors import PermissionDenied

    objects = k8s.render(VALUE_SETS["gpu-eagle3-redis"])
    assert k8s.find(objects, "Secret") == []
    assert k8s.router_config(objects)["auth"] == {
        "api_keys_file": "/etc/specgate-auth/api-keys/api-keys",
        "admin_api_key_file": "/etc/specgate-auth/admin-api-keys/admin-api-keys",
    }
    tpl = k8s.one(objects, "Deployment", "sg-specgate-router")["spec"]["template"]
    assert "checksum/auth" not in tpl["metadata"]["annotations"]
    assert tpl["spec"]["volumes"][-2:] == [
        {"name": "api-keys", "secret": {"secretName": "specgate-api-keys",
                                        "items": [{"key": "api-keys", "path": "api-keys"}], "defaultMode": 0o440}},
        {"name": "admin-api-keys", "secret": {"secretName": "specgate-api-keys",
                                              "items": [{"key": "admin-api-keys", "path": "admin-api-keys"}],
                                              "defaultMode": 0o440}},
    ]  # fmt: skip
    assert k8s.container(tpl, "router")["volumeMounts"][-2:] == [
        {"name": "api-keys", "mountPath": "/etc/specgate-auth/api-keys", "readOnly": True},
        {"name": "admin-api-keys", "mountPath": "/etc/specgate-auth/admin-api-keys", "readOnly": True},
    ]
    secrets = {"specgate-api-keys": {"api-keys": "# team a\nk-a\n\nk-b\n", "admin-api-keys": "k-ops\n"}}
    auth = _mounted_auth(objects, tmp_path, secrets)
    auth.check_client("Bearer k-b")
    auth.check_admin("Bearer k-ops")
    with pytest.raises(PermissionDenied):
        auth.check_admin("Bearer k-a")


def test_admin_keys_alone_leave_the_client_routes_open(tmp_path) -> None:
    objects = k8s.render({"auth": {"adminApiKeys": {"existingSecret": "ops", "key": "admin"}}})
    assert k8s.router_config(objects)["auth"] == {"admin_api_key_file": "/etc/specgate-auth/admin-api-keys/admin"}
    assert k8s.secret_source(objects, "/etc/specgate-auth/admin-api-keys/admin") == ("ops", "admin")
    auth = _mounted_auth(objects, tmp_path, {"ops": {"admin": "k-ops\n"}})
    assert auth.client is None
    auth.check_client(None)
    auth.check_admin("Bearer k-ops")


# ----------------------------------------------------------------------------- LeaderWorkerSet


def test_leaderworkerset_pool() -> None:
    objects = k8s.render(VALUE_SETS["lws"])
    lws = k8s.one(objects, "LeaderWorkerSet", "sg-specgate-pool-spec")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert k8s.find(objects, "Deployment", "sg-specgate-pool-spec") == []
    spec = lws["spec"]
    assert (spec["replicas"], spec["startupPolicy"]) == (1, "LeaderCreated")
    lwt = spec["leaderWorkerTemplate"]
    assert (lwt["size"], lwt["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    leader = k8s.container(lwt["leaderTemplate"], "sglang")
    worker = k8s.container(lwt["workerTemplate"], "sglang")
    f = k8s.flags(leader["args"])
    assert (f["--dist-init-addr"], f["--nnodes"], f["--node-rank"]) == (
        "$(LWS_LEADER_ADDRESS):20000",
        "$(LWS_GROUP_SIZE)",
        "$(LWS_WORKER_INDEX)",
    )
    assert f["--tp-size"] == "16" and f["--context-length"] == "16384"
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert [p["name"] for p in leader["ports"]] == ["http", "dist-init"]
    # Workers serve no HTTP: no ports, no HTTP probes.
    assert not {"ports", "startupProbe", "readinessProbe", "livenessProbe"} & set(worker)
    assert lwt["workerTemplate"]["metadata"]["labels"]["app.kubernetes.io/component"] == "pool-spec-worker"
    svc = k8s.one(objects, "Service", "sg-specgate-pool-spec")
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "pool-spec"
    # The plain pool stays one node per replica.
    plain = k8s.container(k8s.one(objects, "Deployment", "sg-specgate-pool-plain")["spec"]["template"], "sglang")
    assert "--nnodes" not in plain["args"]


# ----------------------------------------------------------------------------- storage


def test_hostpath_models_and_separate_drafter_volume() -> None:
    values = {
        "storage": {
            "models": {"mountPath": "/models", "type": "hostPath", "hostPath": "/mnt/m"},
            "drafters": {"enabled": True, "mountPath": "/drafters", "type": "pvc", "claimName": "drafts"},
        }
    }
    objects = k8s.render(values)
    pod = k8s.one(objects, "Deployment", "sg-specgate-pool-spec")["spec"]["template"]["spec"]
    assert pod["volumes"][:2] == [
        {"name": "models", "hostPath": {"path": "/mnt/m", "type": "Directory"}},
        {"name": "drafters", "persistentVolumeClaim": {"claimName": "drafts", "readOnly": True}},
    ]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "drafters", "mountPath": "/drafters", "readOnly": True} in mounts
    router = k8s.one(objects, "Deployment", "sg-specgate-router")["spec"]["template"]["spec"]
    assert {"name": "models", "hostPath": {"path": "/mnt/m", "type": "Directory"}} in router["volumes"]


def test_cpu_dev_pool_has_no_gpu() -> None:
    objects = k8s.render(VALUE_SETS["cpu-dev"])
    dep = k8s.one(objects, "Deployment", "sg-specgate-pool-spec")
    c = k8s.container(dep["spec"]["template"], "sglang")
    assert c["image"] == "specgate/cpu-pool:0.1.0"
    assert c["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    assert "tolerations" not in dep["spec"]["template"]["spec"]
    f = k8s.flags(c["args"])
    assert (f["--speculative-algorithm"], f["--speculative-num-draft-tokens"]) == ("NGRAM", "4")
    assert "--speculative-draft-model-path" not in f
    # engine.cpu: SGLang's CPU-engine flags (serving/launch.py) and its switch.
    assert c["args"][-8:] == ["--device", "cpu", "--attention-backend", "intel_amx",
                              "--sampling-backend", "pytorch", "--disable-overlap-schedule",
                                              "--sleep-on-idle"]
    assert c["env"] == [{"name": "SGLANG_USE_CPU_ENGINE", "value": "1"},
                        {"name": "SGLANG_TIMEOUT_KEEP_ALIVE", "value": "75"}]


# ----------------------------------------------------------------------------- monitoring


def _parse_promql(expr: str) -> None:
    import promql_parser

    promql_parser.parse(expr.replace("$__rate_interval", "5m"))


def test_service_monitors() -> None:
    objects = k8s.render(VALUE_SETS["gpu-eagle3-redis"])
    router_sm = k8s.one(objects, "ServiceMonitor", "sg-specgate-router")
    assert router_sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert router_sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert router_sm["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "specgate",
        "app.kubernetes.io/instance": "sg",
        "app.kubernetes.io/component": "router",
    }
    assert router_sm["spec"]["endpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s", "honorLabels": True}
    ]
    router_svc = k8s.one(objects, "Service", "sg-specgate-router")
    assert all(router_svc["metadata"]["labels"][k] == v for k, v in router_sm["spec"]["selector"]["matchLabels"].items())
    pools_sm = k8s.one(objects, "ServiceMonitor", "sg-specgate-pools")
    selected = [
        s["metadata"]["name"]
        for s in k8s.find(objects, "Service")
        if all(s["metadata"]["labels"].get(k) == v for k, v in pools_sm["spec"]["selector"]["matchLabels"].items())
        and "specgate.dev/pool" in s["metadata"]["labels"]
    ]
    assert sorted(selected) == ["sg-specgate-pool-plain", "sg-specgate-pool-spec"]


def test_prometheus_rule_alerts() -> None:
    objects = k8s.render(VALUE_SETS["gpu-eagle3-redis"])
    rule = k8s.one(objects, "PrometheusRule")
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert sorted(alerts) == [
        "SpecgateBypassStuckOn",
        "SpecgateConfigReloadFailing",
        "SpecgateConfigRestartPending",
        "SpecgateOverLengthRejectionsSpiking",
        "SpecgatePoolDown",
        "SpecgateRouterDown",
        "SpecgateScrapeFailures",
    ]
    sel = 'namespace="llm", job="sg-specgate-router"'
    assert alerts["SpecgatePoolDown"]["expr"] == (
        f"max by (namespace, pool) (specgate_pool_healthy_endpoints{{{sel}}}) == 0"
    )
    assert alerts["SpecgatePoolDown"]["for"] == "2m"
    assert alerts["SpecgateBypassStuckOn"]["expr"] == (
        f"min by (namespace, pool, kind) (min_over_time(specgate_bypass_active{{{sel}}}[30m])) >= 1"
    )
    assert alerts["SpecgateScrapeFailures"]["expr"] == (
        f"sum by (namespace, pool, endpoint) (rate(specgate_scrape_failures_total{{{sel}}}[5m])) > 0.5"
    )
    over = alerts["SpecgateOverLengthRejectionsSpiking"]["expr"]
    assert f'specgate_requests_total{{{sel}, reason="context_cap"}}[5m]' in over
    assert ") > 0.05" in over and "> 0.1" in over
    assert alerts["SpecgateConfigReloadFailing"]["expr"] == (
        f'sum by (namespace, pod) (increase(specgate_config_reloads_total{{{sel}, result="failure"}}[15m])) > 0'
    )
    assert alerts["SpecgateConfigRestartPending"]["expr"] == (
        f"max by (namespace, pod) (specgate_config_restart_pending{{{sel}}}) == 1")
    assert alerts["SpecgateConfigRestartPending"]["for"] == "15m"
    for alert in alerts.values():
        _parse_promql(alert["expr"])
        assert alert["labels"]["severity"] in {"critical", "warning"}
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
    assert "{{ $labels.pool }}" in alerts["SpecgatePoolDown"]["annotations"]["summary"]


def test_grafana_dashboard() -> None:
    objects = k8s.render(VALUE_SETS["gpu-eagle3-redis"])
    cm = k8s.one(objects, "ConfigMap", "sg-specgate-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["specgate.json"])
    assert dash["uid"] == "specgate-overview"
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    for expr in exprs:
        _parse_promql(expr)
    joined = "\n".join(exprs)
    for metric in (
        "specgate_requests_total",
        "specgate_bypass_active",
        "specgate_scrape_failures_total",
        "specgate_pool_healthy_endpoints",
        "specgate_pool_load",
        "specgate_config_reloads_total",
        "sglang:num_running_reqs",
        "sglang:spec_accept_length",
        "sglang:token_usage",
    ):
        assert metric in joined, metric
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_notes_name_the_router_service() -> None:
    text = k8s.notes()
    assert "svc/sg-specgate-router" in text and "1800 s" in text


# ----------------------------------------------------------------------------- rejections


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bogus": 1}, "additional properties 'bogus' not allowed"),
        ({"routing": {"long_prompt_tokens": "1k"}}, "/routing/long_prompt_tokens"),
        ({"routing": {"saturation": {"enter": 0}}}, "/routing/saturation/enter"),
        ({"limits": {"max_context_tokens": 0}}, "/limits/max_context_tokens"),
        ({"scrape": {"interval_s": 0}}, "/scrape/interval_s"),
        ({"router": {"configChange": "sometimes"}}, "/router/configChange"),
        ({"router": {"replicaz": 2}}, "additional properties 'replicaz'"),
        ({"storage": {"models": {"mountPath": "/models", "type": "nfs"}}}, "/storage/models/type"),
        ({"storage": {"models": {"mountPath": "/models", "type": "pvc", "claimName": ""}}}, "/storage/models"),
        ({"monitoring": {"prometheusRule": {"poolDownFor": "two minutes"}}}, "/monitoring/prometheusRule/poolDownFor"),
        ({"pools": []}, "/pools"),
        ({"pools": [{"name": "Spec_1", "speculative": False, "engine": {"model_path": "/m"}}]}, "/pools/0/name"),
        ({"pools": [{"name": "s", "speculative": True, "engine": {"model_path": "/m"}}]}, "speculative_algorithm"),
        ({"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m", "speculative_algorithm": "EAGLE3"}}]}, "/pools/0"),
        ({"pools": [{"name": "s", "speculative": True, "engine": {"model_path": "/m", "speculative_algorithm": "MAGIC"}}]}, "speculative_algorithm"),
        ({"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m", "quantization": "fp8"}}]}, "additional properties 'quantization'"),
        ({"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m", "mem_fraction_static": 1.5}}]}, "mem_fraction_static"),
        ({"pools": [{"name": "s", "speculative": False, "endpoints": ["10.0.0.1:30000"], "engine": {"model_path": "/m"}}]}, "/pools/0/endpoints/0"),
        ({"pools": [{"name": "s", "speculative": False, "endpoints": ["http://a:1"], "discovery": {"namespace": "n", "label_selector": "a=b", "port": 1}, "engine": {"model_path": "/m"}}]}, "/pools/0"),
        ({"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m"}, "k8s": {"gpus": -1}}]}, "/pools/0/k8s/gpus"),
        ({"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m"}, "k8s": {"multiNode": {"size": 1}}}]}, "multiNode/size"),
        ({"poolDefaults": {"probes": {"startup": {"httpGet": {"path": "/health"}, "periodSeconds": 0}}}}, "periodSeconds"),
        ({"state": {"backend": "etcd"}}, "at '/state/backend': value must be one of 'memory', 'redis'"),
        # The chart owns the URL (from redis.*): no way around the replica/Redis checks.
        ({"state": {"redis_url": "redis://x:6379/0"}}, "at '/state': additional properties 'redis_url' not allowed"),
        ({"state": {"op_timeout_s": 0}}, "at '/state/op_timeout_s'"),
        ({"state": {"circuit_breaker": {"failure_threshold": 0, "reset_after_s": 1.0}}}, "at '/state/circuit_breaker/failure_threshold'"),
        # Credentials would land in the ConfigMap: they belong in redis.external.existingSecret.
        ({"redis": {"external": {"url": "redis://:secret@cache:6379/0"}}}, "at '/redis/external/url'"),
        ({"redis": {"auth": {"existingSecret": "x", "password": "p"}}}, "at '/redis/auth': additional properties 'password' not allowed"),
        ({"auth": {"apiKeys": {"devKeys": ["two words"]}}}, "at '/auth/apiKeys/devKeys/0'"),
        ({"auth": {"apiKeys": {"devKeys": ["k", "k"]}}}, "at '/auth/apiKeys/devKeys': items at 0 and 1 are equal"),
        ({"auth": {"adminApiKeys": {"existingSecret": "Bad_Name"}}}, "at '/auth/adminApiKeys/existingSecret'"),
        ({"auth": {"apiKeys": {"keys": ["k"]}}}, "at '/auth/apiKeys': additional properties 'keys' not allowed"),
        ({"model": {"aliases": ["a", "a"]}}, "at '/model/aliases': items at 0 and 1 are equal"),
        ({"model": {"aliases": [""]}}, "at '/model/aliases/0'"),
        ({"routing": {"acceptance": {"weight": 1.5}}}, "at '/routing/acceptance/weight'"),
        ({"routing": {"min_flip_interval_s": -1}}, "at '/routing/min_flip_interval_s'"),
        ({"routing": {"prefix_cache": {"block_size": 64}}}, "at '/routing/prefix_cache': additional properties 'block_size' not allowed"),
        ({"upstream": {"keepalive_timeout_s": 0}}, "at '/upstream/keepalive_timeout_s'"),
        ({"canary": {"prompts": []}}, "at '/canary/prompts'"),
        ({"canary": {"on_mismatch": "page"}}, "at '/canary/on_mismatch'"),
        ({"model": {"multimodal": {"image_tokens": 0}}}, "at '/model/multimodal/image_tokens'"),
        ({"model": {"multimodal": {"pixels": 1}}}, "at '/model/multimodal': additional properties 'pixels' not allowed"),
        # keyed by the SHA-256 digest, never the key itself; `off` unquoted is YAML's false
        ({"auth": {"speculation_defaults": {"sk-live-key": "off"}}}, "invalid propertyName 'sk-live-key'"),
        ({"auth": {"speculation_defaults": {digest("k"): False}}}, "at '/auth/speculation_defaults/" + digest("k") + "'"),
        # the message names the key that a plain pool may not have
        ({"pools": [{**PLAIN_POOL, "capabilities": ["logprobs"]}]}, "at '/pools/0/capabilities': false schema"),
        ({"pools": [{**PLAIN_POOL, "engine": {"model_path": "/m", "speculative_algorithm": "NGRAM"}}]},
         "at '/pools/0/engine/speculative_algorithm': false schema"),
        ({"pools": [{**SPEC_POOL, "capabilities": ["beam_search"]}]}, "at '/pools/0/capabilities/0'"),
        ({"pools": [{**SPEC_POOL, "serves": ["generate", "embeddings"]}]}, "at '/pools/0"),
        ({"pools": [{**PLAIN_POOL, "serves": ["responses"]}]}, "at '/pools/0"),
        ({"pools": [{**PLAIN_POOL, "serves": []}]}, "at '/pools/0/serves'"),
        ({"pools": [{**SPEC_POOL, "speed": {"decode_s_per_token": 0.01, "batch_knee": 8}}]}, "at '/pools/0"),
        ({"pools": [{**PLAIN_POOL, "speed": {"decode_s_per_token": 0.01}}]}, "at '/pools/0/speed'"),
        ({"pools": [{**PLAIN_POOL, "speed": {"decode_s_per_token": 0.01, "batch_knee": 8, "t0": 1}}]}, "at '/pools/0/speed'"),
        ({"pools": [{**PLAIN_POOL, "engine_keepalive_s": 0}]}, "at '/pools/0/engine_keepalive_s'"),
        ({"pools": [{**PLAIN_POOL, "discovery": {"port": 30000}}]}, "at '/pools/0/discovery'"),
        ({"pools": [{**PLAIN_POOL, "discovery": {"resync_s": 0}}]}, "at '/pools/0/discovery/resync_s'"),
        ({"pools": [{"name": "p", "speculative": False, "engine": {"model_path": "/m", "tool_call_parser": ""}}]}, "at '/pools/0/engine/tool_call_parser'"),
    ],
)  # fmt: skip
def test_schema_rejects_bad_values(values: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmValuesError) as info:
        k8s.validate_schema(values)
    assert message in str(info.value)
    with pytest.raises(helm_python.HelmValuesError):  # `helm template` refuses them too
        k8s.render(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"pools": [{"name": "s", "speculative": False, "max_context_tokens": 2048,
                        "engine": {"model_path": "/m", "context_length": 4096}}]},
            'pool "s": engine.context_length 4096 differs from the pool\'s validated cap 2048',
        ),
        (
            {"pools": [{"name": "s", "speculative": False, "max_context_tokens": 8192, "engine": {"model_path": "/m"}}]},
            'pool "s": max_context_tokens 8192 exceeds limits.max_context_tokens 4096',
        ),
        (
            {"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m", "tp_size": 4}}]},
            'pool "s": k8s.gpus (1) x nodes (1) must equal engine.tp_size (4)',
        ),
        (
            {"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m", "tp_size": 16}},
                       ],
             "poolDefaults": {"gpus": 8, "multiNode": {"enabled": True, "size": 4}}},
            'pool "s": k8s.gpus (8) x nodes (4) must equal engine.tp_size (16)',
        ),
        (
            {"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m"}},
                       {"name": "s", "speculative": False, "engine": {"model_path": "/m"}}]},
            'pools: duplicate pool name "s"',
        ),
        (
            {"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m"}, "k8s": {"enabled": False}}]},
            'pool "s": k8s.enabled is false, so give endpoints or a discovery block',
        ),
        (
            {"pools": [{"name": "s", "speculative": False, "engine": {"model_path": "/m"}, "k8s": {"enabled": False},
                        "discovery": {"resync_s": 30}}]},
            'pool "s": k8s.enabled is false, so give endpoints or a discovery block with a label_selector',
        ),
        (
            {"pools": [{"name": "e", "speculative": False, "engine": {"model_path": "/m"}, "serves": ["embeddings"]}]},
            "pools: no pool serves `generate`",
        ),
        (
            {"pools": [{"name": "a", "speculative": False, "engine": {"model_path": "/m"}, "serves": ["generate", "responses"]},
                       {"name": "b", "speculative": False, "engine": {"model_path": "/m"}}]},
            "pools: list `responses` in serves of every pool that serves `generate`, or of none",
        ),
    ],
)  # fmt: skip
def test_render_refuses_inconsistent_pools(values: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmError) as info:
        k8s.render(values)
    assert message in str(info.value)


MEMORY_STATE_SPREAD = (
    "each router replica would count only its own in-flight requests, so the saturation bypass "
    "and admin overrides would differ between replicas. Set state.backend=redis (with "
    "redis.enabled=true or redis.external), or run one replica (router.replicas=1, "
    "router.autoscaling.enabled=false)"
)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # Per-process state on more than one router pod: the default router autoscales to 6.
        ({**MEMORY}, "state.backend is memory but router.autoscaling.maxReplicas is 6: " + MEMORY_STATE_SPREAD),
        ({**MEMORY, "router": {"replicas": 2, "autoscaling": {"enabled": False}}},
         "state.backend is memory but router.replicas is 2: " + MEMORY_STATE_SPREAD),
        ({**MEMORY, "router": {"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 2}}},
         "state.backend is memory but router.autoscaling.maxReplicas is 2: " + MEMORY_STATE_SPREAD),
        ({"state": {"backend": "memory"}, **ONE_ROUTER},
         "redis.enabled is true but state.backend is memory: the router would not use that Redis"),
        ({**MEMORY, **ONE_ROUTER, "redis": {"enabled": False, "external": {"url": "redis://cache:6379/0"}}},
         "redis.external is set but state.backend is memory"),
        ({"redis": {"enabled": False}}, "state.backend is redis but no Redis is configured"),
        ({"redis": {"external": {"url": "redis://cache:6379/0"}}},
         "redis.enabled (the chart's Redis) and redis.external are exclusive"),
        ({"redis": {"enabled": False, "external": {"url": "redis://cache:6379/0", "existingSecret": "cache"}}},
         "redis.external.url and redis.external.existingSecret are exclusive"),
        ({"state": {"lease_ttl_s": 15.0, "renew_interval_s": 8.0}}, "state.renew_interval_s must be <= state.lease_ttl_s / 2"),
        ({"state": {"op_timeout_s": 5.0, "renew_interval_s": 5.0}}, "state.op_timeout_s must be < state.renew_interval_s"),
        ({"auth": {"apiKeys": {"existingSecret": "keys", "devKeys": ["k"]}}},
         "auth.apiKeys: existingSecret and devKeys are exclusive"),
        ({"auth": {"apiKeys": {"existingSecret": "keys", "key": "all"}, "adminApiKeys": {"existingSecret": "keys", "key": "all"}}},
         'auth.apiKeys and auth.adminApiKeys both read key "all" of Secret "keys"'),
        ({"auth": {"apiKeys": {"devKeys": ["a", "b"]}, "adminApiKeys": {"devKeys": ["b"]}}},
         "auth: a key is in both auth.apiKeys.devKeys and auth.adminApiKeys.devKeys"),
    ],
)  # fmt: skip
def test_render_refuses_inconsistent_state_and_auth(values: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmError) as info:
        k8s.render(values)
    assert message in str(info.value)


def _documented_leaves(text: str, sections: tuple[str, ...]) -> dict[str, str]:
    """{dotted key: comment block directly above it} for every leaf under the sections."""
    lines = text.splitlines()
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for n, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        indent = len(line) - len(line.lstrip())
        key, _, rest = stripped.partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        if path.split(".")[0] not in sections or not rest.strip():
            continue
        block, i = [], n
        while i > 0 and lines[i - 1].strip().startswith("#"):
            i -= 1
            block.append(lines[i].strip())
        out[path] = " ".join(reversed(block))
    return out


def test_values_yaml_documents_every_routing_threshold_with_its_unit() -> None:
    text = (k8s.CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    sections = ("limits", "routing", "scrape", "health", "upstream", "server", "canary", "state")
    leaves = _documented_leaves(text, sections)
    units = ("tokens", "bytes", "requests", "seconds", "count", "ratio", "integer")
    expected = set()
    for section in sections:
        def walk(node: object, path: str) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    walk(value, f"{path}.{key}")
            else:
                expected.add(path)
        walk(values[section], section)
    assert set(leaves) == expected
    for path, comment in sorted(leaves.items()):
        value = values
        for part in path.split("."):
            value = value[part]
        assert comment, f"{path} has no comment"
        if not isinstance(value, (bool, str)):
            assert any(u in comment.lower() for u in units), f"{path}: no unit in {comment!r}"
    # The schema describes the routing thresholds too (helm show values / IDE hints).
    schema = json.loads((k8s.CHART / "values.schema.json").read_text())
    for block in ("limits", "scrape", "health", "upstream", "server", "canary", "state"):
        for key, prop in schema["properties"][block]["properties"].items():
            if key != "circuit_breaker":
                assert prop.get("description"), (block, key)
    for key, prop in schema["properties"]["state"]["properties"]["circuit_breaker"]["properties"].items():
        assert prop.get("description"), ("state.circuit_breaker", key)
    routing = schema["properties"]["routing"]["properties"]
    for key in ("long_prompt_tokens", "seed", "min_flip_interval_s"):
        assert routing[key].get("description"), key
    for sub in ("saturation", "acceptance", "prefix_cache"):
        for key, prop in routing[sub]["properties"].items():
            assert prop.get("description"), (sub, key)


# ----------------------------------------------------------------------------- router + SGLang


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_configmap_passes_specgate_config_check(name: str, tmp_path) -> None:
    import subprocess
    import sys

    path = tmp_path / "config.yaml"
    path.write_text(k8s.router_config_text(k8s.render(VALUE_SETS[name])))
    proc = subprocess.run(
        # this checkout's CLI (the venv's console script may belong to another checkout)
        [sys.executable, "-m", "router.cli", "config", "check", "--no-paths", str(path)],
        capture_output=True, text=True, check=False, cwd=k8s.REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    effective = json.loads(proc.stdout)
    pools = effective.get("pools") or [p for m in effective["models"] for p in m["pools"]]
    for pool in pools:
        # The router's own limit for the pool is the engine's --context-length, exactly.
        assert pool["effective_max_context_tokens"] == pool["engine"]["context_length"], pool["name"]
        # the router drops an idle connection before the engine does (sgl-project/sglang#20851)
        assert effective["upstream"]["keepalive_timeout_s"] < pool["engine_keepalive_s"], pool["name"]
    if name == "default":  # the chart's pairing: engines 75 s, router 30 s
        assert effective["upstream"]["keepalive_timeout_s"] == 30.0
        assert [p["engine_keepalive_s"] for p in effective["pools"]] == [75.0, 75.0]
    if name == "every-router-key":
        assert effective["canary"]["on_mismatch"] == "eject"
        assert [p["engine_keepalive_s"] for p in effective["pools"]] == [90.0, 60.0, 90.0, 120.5]
    if name == "two-models":  # each model with its own cap and pools
        assert [(m["name"], m["limits"]["max_context_tokens"], [p["name"] for p in m["pools"]])
                for m in effective["models"]] == [("tiny-llama", 4096, ["llama-spec", "llama-plain"]),
                                                  ("tiny-qwen", 8192, ["qwen-plain"])]  # fmt: skip


LWS_ENV = {"$(LWS_LEADER_ADDRESS)": "10.0.0.1", "$(LWS_GROUP_SIZE)": "2", "$(LWS_WORKER_INDEX)": "0"}


@pytest.mark.sglang
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_pool_args_parse_with_sglangs_own_parser(name: str) -> None:
    import importlib.util

    from serving.launch import check_with_sglang

    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang is not installed in this venv (make cpu-engine installs it)")
    objects = k8s.render(VALUE_SETS[name])
    for _, _, pool in k8s.config_pools(k8s.router_config(objects)):
        workload = k8s.pool_workload(objects, pool["name"])
        if workload is None:
            continue
        args = k8s.container(k8s.serving_template(workload), "sglang")["args"]
        for ref, value in LWS_ENV.items():
            args = [a.replace(ref, value) for a in args]
        assert check_with_sglang(args) is True, pool["name"]


def test_alerts_and_dashboard_use_only_series_the_router_exports() -> None:
    """Every specgate_* series (and label) the rules and the dashboard read exists in
    router.ops.metrics, so a renamed metric breaks this test, not a silent alert."""
    import re

    from prometheus_client import CollectorRegistry

    from router.ops.metrics import LoopCounter, LoopHistogram, RouterMetrics

    registry = CollectorRegistry()
    metrics = RouterMetrics(registry)
    exported: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
        names = {family.name, family.name + "_total"} if family.type == "counter" else {family.name}
        for name in names:
            exported.setdefault(name, set())
    # Label names come from the metric definitions (a fresh registry has no samples yet).
    for collector in list(registry._collector_to_names):
        labelnames = getattr(collector, "_labelnames", ())
        for name in registry._collector_to_names[collector]:
            exported.setdefault(name, set()).update(labelnames)
    # The router's lock-free per-request series (one collector for all) keep theirs in
    # `labelnames`.
    for series in vars(metrics).values():
        if isinstance(series, (LoopCounter, LoopHistogram)):
            for suffix in ("", "_total", "_created", "_bucket", "_sum", "_count"):
                if series.name + suffix in exported:
                    exported[series.name + suffix].update(series.labelnames)

    objects = k8s.render(VALUE_SETS["gpu-eagle3-redis"])
    exprs = [r["expr"] for r in k8s.one(objects, "PrometheusRule")["spec"]["groups"][0]["rules"]]
    dash = json.loads(k8s.one(objects, "ConfigMap", "sg-specgate-dashboard")["data"]["specgate.json"])
    exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = set()
    for expr in exprs:
        for metric, labels in re.findall(r"(specgate_(?!dev_pool)[a-z_]+)(?:\{([^}]*)\})?", expr):
            used.add(metric)
            assert metric in exported, f"{metric} is not exported by router.ops.metrics"
            for label in re.findall(r'([a-z_]+)\s*=~?\s*"', labels or ""):
                if label not in {"namespace", "job"}:  # added by Prometheus
                    assert label in exported[metric], f"{metric} has no label {label}"
        for grouping in re.findall(r"by \(([^)]*)\) \((?:[a-z_]+\()*(specgate_(?!dev_pool)[a-z_]+)", expr):
            for label in (g.strip() for g in grouping[0].split(",")):
                if label not in {"namespace", "job", "pod"}:
                    assert label in exported[grouping[1]], f"{grouping[1]} has no label {label}"
    assert {"specgate_requests_total", "specgate_bypass_active", "specgate_scrape_failures_total",
            "specgate_pool_healthy_endpoints"} <= used  # fmt: skip


# ----------------------------------------------------------------------------- rolling updates, secrets


def _router_pod(objects: list[dict]) -> dict:
    return k8s.one(objects, "Deployment", "sg-specgate-router")["spec"]["template"]["spec"]


@pytest.mark.parametrize(("values", "grace"), [
    ({}, 5 + 30 + 2 + 10),
    ({"server": {"drain_listen_s": 10.0, "drain_timeout_s": 120.0}, "upstream": {"abort_timeout_s": 3.5},
      "router": {"shutdownMarginSeconds": 5}}, 139),   # 10 + 120 + 3.5 + 5 = 138.5, rounded up
    ({"server": {"drain_listen_s": 0, "drain_timeout_s": 0}, "router": {"shutdownMarginSeconds": 0}}, 2),
])
def test_router_grace_period_covers_the_drain_and_prestop_starts_it(values: dict, grace: int) -> None:
    objects = k8s.render(values)
    pod = _router_pod(objects)
    cfg = k8s.router_validate(objects)
    assert pod["terminationGracePeriodSeconds"] == grace
    assert grace >= (cfg.server.drain_listen_s + cfg.server.drain_timeout_s + cfg.upstream.abort_timeout_s
                     + k8s.deep_merge(k8s.values_file("../values.yaml"), values)["router"]["shutdownMarginSeconds"])
    router = k8s.container(k8s.one(objects, "Deployment", "sg-specgate-router")["spec"]["template"], "router")
    assert router["lifecycle"] == {"preStop": {"exec": {"command": ["specgate", "drain", "--port", "8000"]}}}
    # the preStop command is this CLI's (it GETs http://127.0.0.1:8000/drain)
    from router.cli import build_parser

    args = build_parser().parse_args(router["lifecycle"]["preStop"]["exec"]["command"][1:])
    assert (args.command, args.port) == ("drain", 8000)


def test_engines_keep_connections_alive_longer_than_the_router() -> None:
    objects = k8s.render()
    for pool in ("spec", "plain"):
        env = k8s.container(k8s.serving_template(k8s.pool_workload(objects, pool)), "sglang")["env"]
        assert {"name": "SGLANG_TIMEOUT_KEEP_ALIVE", "value": "75"} in env
    cfg = k8s.router_validate(objects)
    assert cfg.upstream.keepalive_timeout_s == 30.0
    assert [p.engine_keepalive_s for p in cfg.pools] == [75.0, 75.0]
    objects = k8s.render({"poolDefaults": {"keepAliveTimeoutSeconds": 45}})
    env = k8s.container(k8s.serving_template(k8s.pool_workload(objects, "spec")), "sglang")["env"]
    assert env == [{"name": "SGLANG_TIMEOUT_KEEP_ALIVE", "value": "45"}]
    assert [p.engine_keepalive_s for p in k8s.router_validate(objects).pools] == [45.0, 45.0]


@pytest.mark.parametrize(("values", "message"), [
    ({"poolDefaults": {"keepAliveTimeoutSeconds": 30}},
     ('pool "spec": k8s.keepAliveTimeoutSeconds (30, the engines\' SGLANG_TIMEOUT_KEEP_ALIVE) must exceed '
     "upstream.keepalive_timeout_s (30)")),
    ({"upstream": {"keepalive_timeout_s": 75.0}},
     ('pool "spec": k8s.keepAliveTimeoutSeconds (75, the engines\' SGLANG_TIMEOUT_KEEP_ALIVE) must exceed '
     "upstream.keepalive_timeout_s (75)")),
    ({"pools": [{"name": "p", "speculative": False, "engine": {"model_path": "/m"}, "engine_keepalive_s": 60}]},
     ('pool "p": engine_keepalive_s (60) differs from k8s.keepAliveTimeoutSeconds (75), the '
     "SGLANG_TIMEOUT_KEEP_ALIVE the chart gives its pods")),
    ({"pools": [{"name": "p", "speculative": False, "endpoints": ["http://e:1"], "engine": {"model_path": "/m"},
                 "k8s": {"enabled": False}}]},
     ('pool "p" runs outside the chart: its engine_keepalive_s (5 s; the router\'s default 5 is SGLang\'s own) '
     "must exceed upstream.keepalive_timeout_s (30)")),
])  # fmt: skip
def test_render_refuses_a_router_keepalive_not_below_the_engines(values: dict, message: str) -> None:
    import helm_python

    with pytest.raises(helm_python.HelmError) as info:
        k8s.render(values)
    assert message in str(info.value)


def test_a_chart_run_pool_may_restate_its_keepalive() -> None:
    pool = {"name": "p", "speculative": False, "engine": {"model_path": "/m"}, "engine_keepalive_s": 75}
    assert k8s.router_validate(k8s.render({"pools": [pool]})).pools[0].engine_keepalive_s == 75.0


def test_a_disruption_budget_per_pool_selects_its_serving_pods() -> None:
    objects = k8s.render()
    for pool in ("spec", "plain"):
        pdb = k8s.one(objects, "PodDisruptionBudget", f"sg-specgate-pool-{pool}")
        svc = k8s.one(objects, "Service", f"sg-specgate-pool-{pool}")
        assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": svc["spec"]["selector"]}}
        labels = k8s.serving_template(k8s.pool_workload(objects, pool))["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    off = k8s.render({"pools": [{**k8s.values_file("../values.yaml")["pools"][0],
                                 "k8s": {"podDisruptionBudget": {"enabled": False}}},
                                k8s.values_file("../values.yaml")["pools"][1]]})
    assert [o["metadata"]["name"] for o in k8s.find(off, "PodDisruptionBudget")] == [
        "sg-specgate-pool-plain", "sg-specgate-router"]


def _labels_match(selector: dict, labels: dict) -> bool:
    return selector["matchLabels"].items() <= labels.items()


def test_network_policy_lets_only_the_router_reach_the_engines() -> None:
    objects = k8s.render()
    router_labels = k8s.one(objects, "Deployment", "sg-specgate-router")["spec"]["template"]["metadata"]["labels"]
    redis_labels = k8s.one(objects, "Deployment", "sg-specgate-redis")["spec"]["template"]["metadata"]["labels"]
    for pool, other in (("spec", "plain"), ("plain", "spec")):
        pol = k8s.one(objects, "NetworkPolicy", f"sg-specgate-pool-{pool}")["spec"]
        own = k8s.serving_template(k8s.pool_workload(objects, pool))["metadata"]["labels"]
        theirs = k8s.serving_template(k8s.pool_workload(objects, other))["metadata"]["labels"]
        assert _labels_match(pol["podSelector"], own) and not _labels_match(pol["podSelector"], theirs)
        assert pol["policyTypes"] == ["Ingress"]
        engine_port, same_pool = pol["ingress"]
        assert engine_port["ports"] == [{"port": 30000, "protocol": "TCP"}]
        assert [_labels_match(peer["podSelector"], router_labels) for peer in engine_port["from"]] == [True]
        assert not _labels_match(engine_port["from"][0]["podSelector"], redis_labels)
        assert "ports" not in same_pool and _labels_match(same_pool["from"][0]["podSelector"], own)
        assert not _labels_match(same_pool["from"][0]["podSelector"], router_labels)
    assert k8s.find(k8s.render({"networkPolicy": {"enabled": False, "allowFrom": []}}), "NetworkPolicy") == []
    prom = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    objects = k8s.render({"networkPolicy": {"enabled": True, "allowFrom": [prom]}})
    pol = k8s.one(objects, "NetworkPolicy", "sg-specgate-pool-spec")["spec"]
    assert pol["ingress"][0]["from"][1:] == [prom]


def test_network_policy_refuses_to_hide_the_pools_from_prometheus() -> None:
    import helm_python

    with pytest.raises(helm_python.HelmError, match="networkPolicy.allowFrom"):
        k8s.render({"monitoring": {"serviceMonitor": {"enabled": True}}})


def test_engine_api_key_from_a_secret_reaches_sglang_and_the_router() -> None:
    from router.access.auth import load_engine_key

    objects = k8s.render({"auth": {"engineApiKey": {"existingSecret": "engine-key", "key": "api-key"}}})
    secrets = {"engine-key": {"api-key": "E-from-secret"}}
    for pool in ("spec", "plain"):
        c = k8s.container(k8s.serving_template(k8s.pool_workload(objects, pool)), "sglang")
        env = _kubelet_env(c["env"], secrets)
        args = [a.replace("$(SGLANG_API_KEY)", env["SGLANG_API_KEY"]) for a in c["args"]]
        assert k8s.flags(args)["--api-key"] == "E-from-secret"
        assert "E-from-secret" not in yaml.safe_dump(objects)
    cfg = k8s.router_validate(objects)
    assert cfg.auth.engine_api_key_env == "SPECGATE_ENGINE_API_KEY"
    assert load_engine_key(cfg.auth, _kubelet_env(_router_env(objects), secrets)) == "E-from-secret"
    default = k8s.render()
    assert k8s.router_validate(default).auth.engine_api_key_env is None
    assert "--api-key" not in k8s.container(k8s.serving_template(k8s.pool_workload(default, "spec")), "sglang")["args"]


def test_ingress_example_is_off_by_default_and_streams_unbuffered() -> None:
    assert k8s.find(k8s.render(), "Ingress") == []
    objects = k8s.render({"router": {"ingress": {
        "enabled": True, "className": "nginx", "hosts": [{"host": "llm.example.com"}],
        "tls": [{"secretName": "llm-tls", "hosts": ["llm.example.com"]}]}}})
    ing = k8s.one(objects, "Ingress", "sg-specgate-router")
    assert ing["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert ing["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["spec"]["rules"] == [{"host": "llm.example.com", "http": {"paths": [{
        "path": "/", "pathType": "Prefix",
        "backend": {"service": {"name": "sg-specgate-router", "port": {"number": 8000}}}}]}}]
    assert k8s.validate_k8s(objects) == []


def test_operator_guide_render_step_feeds_config_check_the_yaml(tmp_path) -> None:
    """docs/operator-guide.md, "Roll a config change" step 1, exactly as written there."""
    import subprocess
    import sys

    values = k8s.CHART / "ci" / "gpu-eagle3-redis-values.yaml"
    render = [sys.executable, "deploy/helm_template.py", "specgate", "helm/specgate", "-n", "specgate",
              "-f", str(values)]
    out = subprocess.run([*render, "--router-config"], cwd=k8s.REPO, capture_output=True, text=True, check=True)
    expected = k8s.router_config_text(k8s.render(k8s.values_file("gpu-eagle3-redis-values.yaml"),
                                                 name="specgate", namespace="specgate"))
    assert out.stdout == expected
    shown = subprocess.run([*render, "--show-only", "templates/configmap.yaml"], cwd=k8s.REPO,
                           capture_output=True, text=True, check=True)
    assert yaml.safe_load(shown.stdout)["data"]["config.yaml"] == expected
    path = tmp_path / "config.yaml"
    path.write_text(out.stdout)
    check = subprocess.run([sys.executable, "-m", "router.cli", "config", "check", "--no-paths", str(path)],
                           cwd=k8s.REPO, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["model"]["name"] == "target"
    guide = (k8s.REPO / "docs" / "operator-guide.md").read_text()
    assert ".venv/bin/python deploy/helm_template.py specgate helm/specgate -n specgate -f my-values.yaml" in guide
    assert "--router-config > /tmp/config.yaml" in guide
    assert ".venv/bin/specgate config check --no-paths /tmp/config.yaml" in guide
    assert "yq '.data" not in guide


def test_lora_adapters_reach_the_router_config_and_the_engine() -> None:
    values = {"pools": [{**PLAIN_POOL, "engine": {"model_path": "/m", "lora_paths": ["sql=/adapters/sql"]},
                         "lora_adapters": ["chat"]}],
              "scrape": {"models_interval_s": 30.0}}
    objects = k8s.render(values)
    cfg = k8s.router_config(objects)
    pool = cfg["pools"][0]
    assert (pool["lora_adapters"], pool["engine"]["lora_paths"]) == (["chat"], ["sql=/adapters/sql"])
    assert cfg["scrape"]["models_interval_s"] == 30.0
    parsed = k8s.router_validate(objects)
    assert parsed.pools[0].declared_adapters == frozenset({"chat", "sql"})
    args = k8s.container(k8s.serving_template(k8s.pool_workload(objects, "p")), "sglang")["args"]
    at = args.index("--enable-lora")
    assert args[at:at + 3] == ["--enable-lora", "--lora-paths", "sql=/adapters/sql"]
