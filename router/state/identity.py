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
names another model is not routed to (:attr:`router.state.endpoint.Endpoint.identity_error`, shown
in ``/ready``) until a later read finds the right one (while it is held out, every scrape
round reads it again): a Service or discovery label pointing at
the wrong Deployment sends nothing to it. An engine whose list cannot be read (an older
engine, a timeout) keeps its last known identity; one never read has none, and is routed on
its scrapes alone (no adapter is known on it then).

**Adapters.** An endpoint's adapters are the ones its engine lists plus the ones its pool
declares (``pools[].lora_adapters`` and the names in ``engine.lora_paths``): a declared adapter
routes even before the first read. An adapter request goes only to endpoints that have it
(:func:`pool_adapters`, :func:`lacking_adapters`, :mod:`router.state.models`, :func:`router.decision.checks.lora_adapter`).

**Continuously** (field reports: an engine restarted behind the same address with a smaller
``--context-length``, odysseus-dev/odysseus#678; a pod IP reused by another model's server,
vllm-project/production-stack#656). Every scrape of ``/metrics`` already carries what the engine
is: ``sglang:context_len``, ``sglang:max_total_num_tokens`` and their ``model_name`` label
(:mod:`router.state.engine_metrics`). :func:`recheck_reason` compares two consecutive scrapes and
names what changed; the scraper then reads ``/v1/models`` and ``/server_info`` again in the
same round (:mod:`router.loops.engine_reads`), so a change is noticed within one
``scrape.interval_s``. The other triggers: a failed scrape or a connection the proxy saw break
(the next good scrape re-reads: a restart in between is not missed), a counter that went back
(``num_requests_total``, ``generation_tokens_total``: the process restarted), and a
``/server_info`` ``startup_time`` other than the last one read.

**Speculation.** ``/server_info`` also says whether the engine runs speculative decoding
(``speculative_algorithm``, null when it does not). An endpoint of a *plain* pool whose engine
runs it (a pod restarted with other flags, a Service pointing at the speculative Deployment)
is not routed to, like another model's: a plain pool takes the prompts longer than a draft
model's positions (docs/operator-guide.md, ``pools[].max_context_tokens``: an EAGLE head
trained at 2,048 positions crashed engines beyond it) and the requests the router keeps off
speculative engines (constrained decoding, sampling controls; ``pools[].capabilities``). An endpoint of a speculative
pool whose engine runs none is still routed to (it serves every request right, only at plain
speed; the learned speed model follows it) and logged once. ``/server_info`` is read at the
triggers below (a restart that ``/metrics`` shows, a failed scrape) and every
``scrape.models_interval_s`` (10 s by default), so a restart with other flags alone is noticed
within that interval at the latest.

**Limits.** What the engine reports bounds what the router sends it
(:mod:`router.state.engine_limits`): its context (``max_model_len`` of ``/v1/models``,
``context_len`` of ``/metrics``, ``context_length`` of ``/server_info``) and its KV pool
(``max_total_num_tokens``: SGLang's scheduler refuses an input that does not fit
``min(context_length, max_total_num_tokens)``, ``Scheduler.init_req_max_new_tokens``).

SGLang 0.5.23's ``/server_info`` (``srt/entrypoints/http_server.py``, ``server_info``; the
deprecated ``/get_server_info`` answers the same) is the resolved server arguments
(``served_model_name``, ``context_length``, ...) plus the scheduler's ``max_total_num_tokens``
and ``max_req_input_len``, and ``startup_time`` (the start's phase durations, a different
value at every start). :func:`parse_server_info` reads those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    from router.config.tree import Config, PoolConfig
    from router.state.engine_metrics import EngineLoad

__all__ = ["AdapterHolder", "EngineModels", "ServerInfo", "expected_name", "lacking_adapters", "parse_model_list",
           "parse_server_info", "pool_adapters", "recheck_reason"]


@dataclass(frozen=True, slots=True)
class EngineModels:
    """One engine's ``/v1/models``, parsed.

    Attributes:
        served: the ids of the cards without a ``parent`` (the served model names).
        adapters: ``{adapter name: its root (path) or the name}`` of the cards with a ``parent``.
        max_model_len: the smallest positive integer ``max_model_len`` of the served cards
            (the engine's context length, tokens), None when none gives one.
    """

    served: frozenset[str]
    adapters: Mapping[str, str]
    max_model_len: int | None = None


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
    lengths: list[int] = []
    for card in data:
        if not isinstance(card, dict) or not isinstance(card.get("id"), str):
            return None
        if isinstance(card.get("parent"), str):
            root = card.get("root")
            adapters[card["id"]] = root if isinstance(root, str) else card["id"]
        else:
            served.add(card["id"])
            length = _positive_int(card.get("max_model_len"))
            if length is not None:
                lengths.append(length)
    return EngineModels(frozenset(served), adapters, min(lengths) if lengths else None)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The fields of an engine's ``/server_info`` the router reads (None: absent or not a
    positive integer / a string).

    Attributes:
        served_model_name: ``--served-model-name`` (else the model path, as SGLang resolves it).
        context_length: the context length (tokens; None when the server resolved none).
        max_total_num_tokens: the KV pool's size (tokens).
        max_req_input_len: the longest input the scheduler takes (tokens).
        startup_time: the start's fingerprint (SGLang: the phase durations of that start),
            compared by value only.
        speculative_algorithm: ``--speculative-algorithm`` (``EAGLE3``, ``NGRAM``, ...), ``""``
            when the engine says it runs none (the key present, null), None when it does not
            say (the key absent: not checked).
    """

    served_model_name: str | None
    context_length: int | None
    max_total_num_tokens: int | None
    max_req_input_len: int | None
    startup_time: Any = None
    speculative_algorithm: str | None = None


def parse_server_info(body: bytes) -> ServerInfo | None:
    """The :class:`ServerInfo` of a ``/server_info`` answer, or None when it is not a JSON object."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    name = doc.get("served_model_name")
    startup = doc.get("startup_time")
    algorithm = doc.get("speculative_algorithm", ...)
    speculation = (None if algorithm is ... else algorithm if isinstance(algorithm, str) and algorithm.upper() != "NONE"
                   else "")
    return ServerInfo(name if isinstance(name, str) and name else None, _positive_int(doc.get("context_length")),
                      _positive_int(doc.get("max_total_num_tokens")), _positive_int(doc.get("max_req_input_len")),
                      orjson.dumps(startup, option=orjson.OPT_SORT_KEYS) if startup is not None else None,
                      speculation)


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def recheck_reason(before: EngineLoad | None, after: EngineLoad) -> str | None:
    """What changed between two consecutive ``/metrics`` scrapes of one address that says the
    engine may be another one now (its identity must be read again), or None.

    ``served_model``: the ``model_name`` labels differ; ``context_length``: ``context_len``
    differs; ``kv_tokens``: ``max_total_num_tokens`` differs; ``restart``: a counter
    (``num_requests_total``, ``generation_tokens_total``) went back or disappeared (a counter
    only grows while a process lives: the Prometheus counter-reset rule). A figure absent from
    either scrape is not compared.
    """
    if before is None:
        return None
    if before.model_names and after.model_names and before.model_names != after.model_names:
        return "served_model"
    if _changed(before.context_len, after.context_len):
        return "context_length"
    if _changed(before.max_total_num_tokens, after.max_total_num_tokens):
        return "kv_tokens"
    for old, new in ((before.num_requests_total, after.num_requests_total),
                     (before.generation_tokens_total, after.generation_tokens_total)):
        if old is not None and old > 0 and (new is None or new < old):
            return "restart"
    return None


def _changed(old: int | None, new: int | None) -> bool:
    return old is not None and new is not None and old != new


def expected_name(config: Config, pool: PoolConfig) -> str | None:
    """The model name an endpoint of ``pool`` must serve: its engine's ``served_model_name``,
    else ``model.name`` for a pool that serves ``generate``; None (not checked) for a
    pass-through pool without a ``served_model_name`` (it serves another model)."""
    if pool.engine is not None and pool.engine.served_model_name:
        return pool.engine.served_model_name
    return config.model.name if "generate" in pool.serves else None


class AdapterHolder(Protocol):
    """What the adapter sets read of an endpoint (:class:`router.state.endpoint.Endpoint`)."""

    @property
    def url(self) -> str: ...

    @property
    def adapters(self) -> frozenset[str]: ...


def pool_adapters(endpoints: Iterable[AdapterHolder]) -> frozenset[str]:
    """The LoRA adapters some of ``endpoints`` has (:attr:`router.state.endpoint.Endpoint.adapters`)."""
    eps = [e for e in endpoints if e.adapters]
    return frozenset().union(*(e.adapters for e in eps)) if eps else frozenset()


def lacking_adapters(endpoints: Iterable[AdapterHolder], adapters: frozenset[str]) -> frozenset[str]:
    """The URLs of the ``endpoints`` that lack one of ``adapters`` (not routed such a request)."""
    return frozenset(e.url for e in endpoints if not adapters <= e.adapters)
