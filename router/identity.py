"""What each engine serves: its model name and loaded LoRA adapters, read from its ``/v1/models``.

SGLang 0.5.23 (``srt/entrypoints/http_server.py``, ``available_models``) lists its served model
(``--served-model-name``, else the model path) as a card ``{"id", "root", "parent": null,
"max_model_len"}``, and, with ``--enable-lora``, every loaded adapter as a card whose ``id`` is
the adapter's name, ``root`` its path and ``parent`` the served model. The router reads that
list:

- **at admission**: before an endpoint's first successful scrape turns it healthy, and again
  after it was unhealthy (a restarted engine may come back with another model or without an
  adapter loaded at run time);
- **every** ``scrape.models_interval_s`` while it is healthy (adapters loaded or unloaded at run
  time through SGLang's ``/load_lora_adapter`` and ``/unload_lora_adapter``).

**Identity.** An endpoint of a pool that serves ``generate`` must serve the pool's model
(:func:`expected_name`: ``engine.served_model_name``, else ``model.name``). One whose list
names another model is not routed to (:attr:`router.endpoint.Endpoint.identity_error`, shown
in ``/ready``) until a later read finds the right one: a Service or discovery label pointing at
the wrong Deployment sends nothing to it. An engine whose list cannot be read (an older
engine, a timeout) keeps its last known identity; one never read has none, and is routed on
its scrapes alone (no adapter is known on it then).

**Adapters.** An endpoint's adapters are the ones its engine lists plus the ones its pool
declares (``pools[].lora_adapters`` and the names in ``engine.lora_paths``): a declared adapter
routes even before the first read. An adapter request goes only to endpoints that have it
(:mod:`router.models`, :func:`router.checks.lora_adapter`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from router.config import Config, PoolConfig

__all__ = ["EngineModels", "expected_name", "parse_model_list"]


@dataclass(frozen=True, slots=True)
class EngineModels:
    """One engine's ``/v1/models``, parsed.

    Attributes:
        served: the ids of the cards without a ``parent`` (the served model names).
        adapters: ``{adapter name: its root (path) or the name}`` of the cards with a ``parent``.
    """

    served: frozenset[str]
    adapters: Mapping[str, str]


def parse_model_list(body: bytes) -> EngineModels | None:
    """The :class:`EngineModels` of a ``/v1/models`` answer, or None when it is not one
    (not JSON, no ``data`` list, a card without a string ``id``)."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None
    served: set[str] = set()
    adapters: dict[str, str] = {}
    for card in data:
        if not isinstance(card, dict) or not isinstance(card.get("id"), str):
            return None
        if isinstance(card.get("parent"), str):
            root = card.get("root")
            adapters[card["id"]] = root if isinstance(root, str) else card["id"]
        else:
            served.add(card["id"])
    return EngineModels(frozenset(served), adapters)


def expected_name(config: Config, pool: PoolConfig) -> str | None:
    """The model name an endpoint of ``pool`` must serve: its engine's ``served_model_name``,
    else ``model.name`` for a pool that serves ``generate``; None (not checked) for a
    pass-through pool without a ``served_model_name`` (it serves another model)."""
    if pool.engine is not None and pool.engine.served_model_name:
        return pool.engine.served_model_name
    return config.model.name if "generate" in pool.serves else None
