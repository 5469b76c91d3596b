"""Config documents for the config tree's unit tests: :data:`BASE` (one model, two pools),
:func:`with_` (it with one value changed or removed) and :func:`two_models` (the ``models:`` form)."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["BASE", "two_models", "with_"]

#: A valid one-model config: a speculative pool with its own limit, a plain pool.
BASE: dict[str, Any] = {
    "model": {"name": "tiny-llama", "tokenizer": "/tmp/tok"},
    "limits": {"max_context_tokens": 4096, "default_max_tokens": 256, "max_request_bytes": 33554432},
    "pools": [
        {"name": "spec", "speculative": True, "endpoints": ["http://127.0.0.1:30001"],
         "max_context_tokens": 2048, "draft_reserved_tokens": 4},
        {"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:30002"]},
    ],
    "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}},
    "scrape": {"interval_s": 0.25, "timeout_s": 1.0, "stale_after_s": 2.0},
}


def with_(path: str, value: Any) -> dict[str, Any]:
    """A deep copy of :data:`BASE` with the value at dotted ``path`` (list indexes as digits)
    set to ``value``, or deleted when ``value`` is ``KeyError``."""
    doc = copy.deepcopy(BASE)
    node = doc
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return doc


def two_models() -> dict[str, Any]:
    """Model ``a`` (the BASE pools) and model ``b`` (one plain pool, its own limits and routing)."""
    doc = {k: copy.deepcopy(v) for k, v in BASE.items() if k not in ("model", "limits", "pools", "routing")}
    a = {**copy.deepcopy(BASE["model"]), "name": "a", "aliases": ["a-latest"],
         "limits": copy.deepcopy(BASE["limits"]), "pools": copy.deepcopy(BASE["pools"]),
         "routing": copy.deepcopy(BASE["routing"])}
    b = {"name": "b", "tokenizer": "/tmp/tok-b", "aliases": ["b:8b"],
         "limits": {"max_context_tokens": 8192, "default_max_tokens": 64, "max_request_bytes": 2_000_000},
         "pools": [{"name": "b-plain", "speculative": False, "endpoints": ["http://127.0.0.1:30003"]}],
         "routing": {"long_prompt_tokens": 512, "saturation": {"enter": 4, "exit": 2}}}
    doc["models"] = [a, b]
    return doc
