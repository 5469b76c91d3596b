"""Which model a request is for, with several models behind one router (:mod:`router.state.fleet`).

:func:`model_runtime` picks the model's runtime from the body's ``model``, and
:func:`router.state.models.resolve_request` on that runtime resolves the name inside that model
exactly as a one-model router does
(:func:`router.state.models.resolve`: alias rewriting, adapters, ``lora_path``), in this order (the first rule that matches wins):

1. absent or null -> the first model of ``models:`` (a one-model router's only model);
2. a configured name or alias of some model (unique across models, checked at load) -> that
   model; an exact name or alias always wins over splitting at a colon, as in a one-model router;
3. a bare LoRA adapter name that some model's engines list or its pools declare -> the first
   model (in file order) that has it;
4. ``<name or alias>:<adapter>`` -> the model of ``<name>`` (the longest configured name
   that prefixes it), the adapter looked up among that model's pools only;
5. anything else -> HTTP 404 ``model_not_found``, ``param: "model"``, before any token count
   or engine call.

:func:`fleet_cards` / :func:`fleet_card` answer ``GET /v1/models`` and ``GET /v1/models/{id}``
over every model (each model's name, aliases and adapters, adapters with ``parent`` their
model, then the pass-through pools' models once each). :func:`passthrough_target` picks the
pools of a pass-through request (:mod:`router.front.passthrough`).

No I/O (a pure layer of router/): it reads the runtimes' endpoint state and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from router.errors import InvalidRequest, RequestTooLarge
from router.state.models import (
    Catalog,
    Resolved,
    catalog,
    model_card,
    model_cards,
    resolve_request,
    split_adapter,
)

if TYPE_CHECKING:
    from router.state.fleet import Fleet
    from router.state.pool import Pool
    from router.state.runtime import Runtime

__all__ = ["check_model_body", "fleet_card", "fleet_cards", "model_runtime", "passthrough_target", "resolve_fleet"]


def model_runtime(fleet: Fleet, doc: Any) -> Runtime:
    """The runtime of the model ``doc`` (a parsed body) asks for, by rules 1-4 of the module
    docstring; the first model's for anything else (a name no model has, a ``model`` that is
    not a string, a body that is not an object), which :func:`router.state.models.resolve_request`
    on it then refuses.
    Raises nothing: the body is checked with that model's limits before its name is judged."""
    if fleet.single or not isinstance(doc, Mapping):
        return fleet.default
    model = doc.get("model")
    if not isinstance(model, str):
        return fleet.default
    owner = fleet.names.get(model)
    if owner is not None:
        return fleet.runtimes[owner]
    for runtime in fleet:  # a bare adapter name: the first model that has it
        if model in catalog(runtime).adapters:
            return runtime
    split = split_adapter(model, fleet.names)
    return fleet.default if split is None else fleet.runtimes[fleet.names[split[0]]]


def resolve_fleet(fleet: Fleet, doc: Mapping[str, Any]) -> tuple[Runtime, Resolved]:
    """:func:`model_runtime` and :func:`router.state.models.resolve_request` in one call: the runtime of the
    request's model and the request resolved in it.

    Raises:
        ModelNotFound: an unknown name or adapter (404).
        InvalidRequest: a ``model`` that is not a string, a ``lora_path`` of the wrong type (400).
    """
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("`model` must be a string", param="model")
    runtime = model_runtime(fleet, doc)
    return runtime, resolve_request(runtime, doc)


def check_model_body(fleet: Fleet, runtime: Runtime, body_bytes: int) -> None:
    """Hold a body read under the deployment's largest cap (:attr:`router.config.tree.Config.max_request_bytes`)
    to its model's own ``limits.max_request_bytes`` (bytes; nothing to do for a model whose cap
    is the largest, e.g. the only one: :attr:`router.state.fleet.Fleet.body_caps`).

    Raises:
        RequestTooLarge: the body is over the model's cap (413).
    """
    if not fleet.body_caps:
        return
    cap = fleet.body_caps.get(runtime.model_name)
    if cap is not None and body_bytes > cap:
        raise RequestTooLarge(f"request body exceeds the {cap}-byte limit of model `{runtime.model_name}`")


def fleet_cards(fleet: Fleet) -> list[dict[str, Any]]:
    """The ``data`` of ``GET /v1/models``: every model's cards (:func:`router.state.models.model_cards`,
    in file order), a pass-through model listed once."""
    cards: list[dict[str, Any]] = []
    seen: set[str] = set()
    for runtime in fleet:
        for card in model_cards(runtime):
            if card["id"] not in seen:
                seen.add(card["id"])
                cards.append(card)
    return cards


def fleet_card(fleet: Fleet, model: str) -> dict[str, Any]:
    """The card ``GET /v1/models/{model}`` answers (a listed id's, or ``<name>:<adapter>``'s).

    Raises:
        ModelNotFound: no model has it (SGLang's message).
    """
    for card in fleet_cards(fleet):
        if card["id"] == model:
            return card
    split = split_adapter(model, fleet.names)
    owner = fleet.runtimes[fleet.names[split[0]]] if split is not None else fleet.default
    return model_card(owner, model)


def passthrough_target(fleet: Fleet, model: Any, kind: str, pools: list[Pool]) -> tuple[list[Pool], Catalog]:
    """The pools a pass-through request of ``kind`` may go to, and the catalog to check its
    ``model`` against (:func:`router.state.models.resolve_passthrough`).

    ``pools`` are every model's pools serving ``kind``. A request naming a generation model
    (a configured name or alias) goes to that model's pools serving ``kind`` (none: the check
    answers 400 ``model_not_supported``); any other name to all of ``pools``, checked against
    the union of their engines' listed models.
    """
    owner = fleet.names.get(model) if isinstance(model, str) else None
    if owner is not None:
        runtime = fleet.runtimes[owner]
        return [p for p in pools if p.name in {q.name for q in runtime.pools}], catalog(runtime)
    cats = [catalog(rt) for rt in fleet]
    passthrough = frozenset().union(*(c.passthrough for c in cats))
    return pools, Catalog(dict(fleet.names), {}, True, 0, passthrough)
