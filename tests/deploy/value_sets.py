"""The chart's value sets (:data:`VALUE_SETS`) that ``test_chart.py`` renders exactly and
``render_pin.py`` pins, and the pool shapes they are made of."""

from __future__ import annotations

import hashlib

from . import k8s

__all__ = ["EVERY_ROUTER_KEY", "PLAIN_POOL", "SPEC_ENGINE", "SPEC_POOL", "VALUE_SETS", "digest"]


def digest(key: str) -> str:
    """A client key's SHA-256 digest in lowercase hex (how the router's config names a key)."""
    return hashlib.sha256(key.encode()).hexdigest()


SPEC_ENGINE = {"model_path": "/models/tiny-llama", "speculative_algorithm": "EAGLE3",
               "speculative_draft_model_path": "/models/tiny-llama-eagle3", "speculative_num_steps": 3,
               "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}  # fmt: skip

#: Every router key the chart passes through besides the original ones, each set to a value
#: other than its default (and the four pool shapes: speculative, plain, chart-run embedding,
#: external), so the exact-render test below sees each land where the router reads it.
EVERY_ROUTER_KEY = {
    "model": {"multimodal": {"image_tokens": 1290, "audio_tokens": 750, "video_tokens": 4096}},
    "routing": {
        "acceptance": {"max_age_s": 20.0, "weight": 0.25},
        "min_flip_interval_s": 2.5,
        "prefix_cache": {"enabled": False, "block_chars": 128, "max_blocks": 256, "anchor_blocks": 2,
                         "max_blocks_per_endpoint": 65536, "cache_threshold": 0.5,
                         "balance_abs_threshold": 32, "balance_rel_threshold": 2.0, "hash_load_factor": 1.25,
                         "sticky_load_factor": 1.5, "pool_affinity_ratio": 1.5,
                         "new_affinity_ratio": 1.2},
        "learning": {"enabled": False, "forgetting": 0.99, "prior_weight": 0.5, "explore_every": 20,
                     "explore_ratio": 2.0, "marginal_cost": False,
                     "check": {"enabled": False, "window": 32, "min_checks": 8, "max_age_s": 120.0,
                               "fallback_enter": 0.8, "fallback_exit": 0.4}},
    },
    "upstream": {"keepalive_timeout_s": 40.0, "backpressure_hold_s": 3.0, "backpressure_max_hold_s": 45.0},
    "canary": {"enabled": True, "interval_s": 120.0, "check_s": 2.0, "max_tokens": 64, "timeout_s": 30.0,
               "prompts": ["Say hi."], "on_mismatch": "eject"},
    "auth": {"speculation_defaults": {digest("client-a"): "off", digest("client-b"): "on"},
             "priority": {"default": 0, "keys": {digest("client-a"): {"min": 0, "max": 100, "default": 10}}},
             "rate_limits": {"default": {"requests_per_minute": 600, "tokens_per_minute": 200000},
                             "keys": {digest("client-a"): {"requests_per_second": 50, "request_burst": 100,
                                                            "concurrent_requests": 32}},
                             "local_fraction": 0.5}},
    "poolDefaults": {"keepAliveTimeoutSeconds": 90},
    "pools": [
        {"name": "spec", "speculative": True, "max_context_tokens": 2048,
         "engine": {**SPEC_ENGINE, "tool_call_parser": "qwen25", "reasoning_parser": "qwen3"},
         "speed": {"decode_s_per_token": 0.012, "batch_knee": 24.0, "attention_s_per_token": 1.5e-07,
                   "prefill_s_per_token": 4.0e-05, "max_running_requests": 64,
                   "accept_length_greedy": 2.6, "accept_length_sampled": 1.9},
         "capabilities": ["tool_calls", "reasoning"],
         "serves": ["generate", "responses"],
         "discovery": {"resync_s": 30.0, "serve_terminating_when_empty": True}},
        {"name": "plain", "speculative": False,
         "engine": {"model_path": "/models/tiny-llama", "tool_call_parser": "qwen25", "reasoning_parser": "qwen3"},
         "speed": {"decode_s_per_token": 0.01, "batch_knee": 32.0},
         "serves": ["generate", "responses", "score"],
         "k8s": {"keepAliveTimeoutSeconds": 60}},
        {"name": "embed", "speculative": False, "engine": {"model_path": "/models/bge"},
         "serves": ["embeddings", "rerank"]},
        {"name": "ext", "speculative": False, "endpoints": ["http://10.0.0.31:30000"],
         "engine": {"model_path": "/models/cls"}, "serves": ["classify"],
         "engine_keepalive_s": 120.5, "k8s": {"enabled": False}},
    ],
}  # fmt: skip

PLAIN_POOL = {"name": "p", "speculative": False, "engine": {"model_path": "/m"}}
SPEC_POOL = {"name": "s", "speculative": True, "engine": {"model_path": "/m", "speculative_algorithm": "EAGLE3"}}

VALUE_SETS = {
    "default": {},
    "every-router-key": EVERY_ROUTER_KEY,
    "cpu-dev": k8s.values_file("cpu-dev-values.yaml"),
    "gpu-eagle3-redis": k8s.values_file("gpu-eagle3-redis-values.yaml"),
    "lws": k8s.values_file("lws-values.yaml"),
    "static-endpoints": k8s.values_file("static-endpoints-values.yaml"),
    "two-models": k8s.values_file("two-models-values.yaml"),
    # the pool planner's Deployment (tests/deploy/test_chart_planner.py has the details)
    "planner": {"planner": {"enabled": True}, "router": {"replicas": 1, "autoscaling": {"enabled": False}},
                "auth": {"adminApiKeys": {"devKeys": ["adm-1"]}}},
}
