"""The router YAML the tests start from: two pools (``spec`` speculative, ``plain``) in front of
fakes, fast scrapes (50 ms) and reload polling (100 ms)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

__all__ = ["router_config", "write_router_yaml"]

_BASE: dict[str, Any] = {
    "model": {"name": "tiny-llama"},
    "limits": {"max_context_tokens": 4096, "default_max_tokens": 256, "max_request_bytes": 1_000_000},
    # no flip bound: the tests step the hysteresis faster than a deployment would
    # the thresholds' own behaviour (learning on, the prediction decides: tests/unit/test_learn.py)
    "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}, "min_flip_interval_s": 0,
                "learning": {"enabled": False}},
    "scrape": {"interval_s": 0.05, "timeout_s": 0.5, "stale_after_s": 1.0},
    # warm-up probes off: most tests count the fakes' requests (tests/integration/test_warmup.py
    # turns them on)
    "health": {"failure_threshold": 3, "success_threshold": 2, "retry_after_s": 3, "warmup": {"enabled": False}},
    "upstream": {"first_byte_timeout_s": 5.0, "idle_timeout_s": 5.0, "nonstream_timeout_s": 10.0},
    "server": {"reload_interval_s": 0.1, "log_requests": False},
}


def router_config(tokenizer: str | Path, spec_url: str | None = None, plain_url: str | None = None, *,
                  spec_discovery: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """The tests' router config as a YAML document (a fresh dict).

    Args:
        tokenizer: the tokenizer directory (``model.tokenizer``).
        spec_url, plain_url: the endpoints of the ``spec`` pool (EAGLE-3, 2048-token context, 4
            reserved draft tokens) and the ``plain`` pool; a pool without one is left out.
        spec_discovery: a ``discovery`` block for the ``spec`` pool instead of endpoints.
        overrides: dotted paths to replace (a number indexes a list: ``pools.0.capabilities``), e.g. ``**{"routing.saturation": {"enter": 3, "exit": 1},
            "state": {...}}``; a whole section or pool list may be replaced the same way.
    """
    doc = copy.deepcopy(_BASE)
    doc["model"]["tokenizer"] = str(tokenizer)
    pools: list[dict[str, Any]] = []
    if spec_url is not None or spec_discovery is not None:
        spec: dict[str, Any] = {"name": "spec", "speculative": True, "max_context_tokens": 2048,
                                "draft_reserved_tokens": 4}
        if spec_url is not None:
            spec["endpoints"] = [spec_url]
        if spec_discovery is not None:
            spec["discovery"] = spec_discovery
        pools.append(spec)
    if plain_url is not None:
        pools.append({"name": "plain", "speculative": False, "endpoints": [plain_url]})
    doc["pools"] = pools
    for key, value in overrides.items():
        node = doc
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        if isinstance(node, list):
            node[int(parts[-1])] = value
        else:
            node[parts[-1]] = value
    return doc


def write_router_yaml(path: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` atomically (a temporary file renamed over it, as an editor or a
    ConfigMap update does, so the router's reloader never reads half a file); returns ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(doc))
    tmp.replace(path)
    return path
