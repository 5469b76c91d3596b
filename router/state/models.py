"""Model resolution, once per request: which configured model and which LoRA adapters.

A request's ``model`` (and SGLang's ``lora_path``) is resolved before anything else reads the
body (no token count, no decision, no engine call for a name the router does not serve), in
this order (the first rule that matches wins):

1. absent or null -> the configured model (``model.name``), forwarded as that name;
2. an exact ``model.name`` or one of ``model.aliases`` -> that model; an alias is rewritten to
   ``model.name`` before forwarding (an alias such as ``llama3.1:8b`` reaching SGLang would be
   split at its colon and read as adapter ``8b``: sgl-project/sglang#12745;
   defilantech/LLMKube#1835);
3. the name of a known LoRA adapter (as ``/v1/models`` lists it) -> that adapter of the model,
   forwarded as ``<model.name>:<adapter>``;
4. ``<name>:<adapter>`` where ``<name>`` is the model's name or an alias (SGLang's syntax,
   sgl-project/sglang#11570; the longest configured name wins, so names holding a colon work)
   -> that adapter, forwarded as ``<model.name>:<adapter>``; an empty adapter is unknown;
5. anything else -> HTTP 404 ``model_not_found``, ``param: "model"``.

Without an adapter in ``model``, ``lora_path`` names the adapter (a string, or a list of
strings and nulls for a batch of prompts; SGLang 0.5.23 ``serving_base._resolve_lora_path``:
the adapter of ``model`` wins over ``lora_path``); another type is 400 ``param: "lora_path"``.

An adapter is *known* when an endpoint's engine lists it in ``/v1/models`` or a pool declares
it (:mod:`router.state.identity`). An unknown adapter is HTTP 404 ``model_not_found`` (``param``
``model`` or ``lora_path``; :class:`UnknownAdapter`) once every generation endpoint's list has
been read, and read once more for this request (an adapter loaded at run time:
:class:`router.loops.engine_reads.ModelRefresh`); before that it goes to the decision, where no pool
has it (503 ``no_healthy_upstream``). Where a known adapter may go is the decision's
(:func:`router.decision.checks.lora_adapter`).

The routes ``GET /v1/models`` and ``GET /v1/models/{model}`` (the OpenAI SDKs'
``models.list``/``models.retrieve``, installed by :mod:`router.front.model_routes`) answer with SGLang 0.5.23's ``ModelCard`` shape
(``srt/entrypoints/http_server.py``): the model, each alias (``root``: the model), each known
adapter (``root``: its path, ``parent``: the model), and the models the pass-through pools'
engines serve; an unknown id is SGLang's 404 ``{"message": "The model '<id>' does not exist",
"type": "invalid_request_error", "param": "model", "code": "model_not_found"}``. Retrieving
``<name>:<adapter>`` answers that adapter's card under the requested id.

This module does no I/O (a pure layer of router/); the routes are in :mod:`router.front.model_routes`.

With several models behind one router (:mod:`router.state.fleet`), :func:`model_runtime` first
picks the model's runtime from the body's ``model``, and :func:`resolve_request` on that runtime
resolves the name inside that model exactly as a one-model router does (:func:`resolve`: alias rewriting, adapters, ``lora_path``), in this order (the first rule that matches wins):

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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from router.errors import InvalidRequest, ModelNotFound, RequestTooLarge
from router.state.identity import lacking_adapters, pool_adapters

if TYPE_CHECKING:
    from router.state.fleet import Fleet
    from router.state.pool import Pool
    from router.state.runtime import Runtime

__all__ = ["Catalog", "Resolved", "UnknownAdapter", "catalog", "check_model_body", "fleet_card", "fleet_cards", "lacking_adapters", "model_cards", "model_runtime", "passthrough_target", "pool_adapters", "resolve", "resolve_fleet", "resolve_passthrough", "resolve_request", "split_adapter"]


#: ``Resolved.adapters`` of a base-model request.
NO_ADAPTERS: frozenset[str] = frozenset()


class UnknownAdapter(ModelNotFound):
    """A LoRA adapter no engine of model :attr:`model` lists (404 ``model_not_found``); the
    request path reads the engines' lists once more before answering it."""

    def __init__(self, message: str, *, model: str, param: str) -> None:
        super().__init__(message, param=param)
        self.model = model


@dataclass(slots=True)
class Resolved:
    """A request's model, resolved (one per request; read-only by convention, not ``frozen``: a
    frozen dataclass sets each field through ``object.__setattr__``, about 5k instructions more
    to build this one).

    Attributes:
        name: the configured model's name (``model.name``).
        adapters: the LoRA adapters it asks for (empty: the base model).
        forward: the ``model`` value to send the engines when it differs from the body's
            (an alias, an absent model, a bare adapter name), else None (sent unchanged).
    """

    name: str
    adapters: frozenset[str] = NO_ADAPTERS
    forward: str | None = None


@dataclass(frozen=True, slots=True)
class Catalog:
    """The names a router serves now.

    Attributes:
        names: every accepted model name (``model.name`` and aliases) -> ``model.name``.
        adapters: known adapter name -> its root (path), over the generation pools.
        complete: every generation endpoint's ``/v1/models`` has been read (an adapter that is
            still unknown then does not exist).
        max_model_len: ``limits.max_context_tokens`` (tokens), shown on the model's cards.
        passthrough: model names the pass-through pools' engines list.
    """

    names: Mapping[str, str]
    adapters: Mapping[str, str]
    complete: bool
    max_model_len: int
    passthrough: frozenset[str] = frozenset()


def split_adapter(model: str, names: Iterable[str]) -> tuple[str, str] | None:
    """``(name, adapter)`` when ``model`` is ``<name>:<adapter>`` for one of ``names`` (the
    longest such name; the adapter stripped, possibly empty), else None."""
    best = None
    for name in names:
        if model.startswith(name) and model[len(name):len(name) + 1] == ":" and (
                best is None or len(name) > len(best)):
            best = name
    return None if best is None else (best, model[len(best) + 1:].strip())


def _lora_path(value: Any) -> frozenset[str]:
    """The adapters a ``lora_path`` names (empty strings and nulls: the base model)."""
    if value is None or isinstance(value, str):
        return frozenset((value,)) if value else NO_ADAPTERS
    if isinstance(value, list) and all(v is None or isinstance(v, str) for v in value):
        return frozenset(v for v in value if v)
    raise InvalidRequest("`lora_path` must be a string, or an array of strings and nulls", param="lora_path")


def resolve(doc: Mapping[str, Any], cat: Catalog, default: str) -> Resolved:
    """Resolve a generation request's ``model`` and ``lora_path`` (see the module docstring).

    Args:
        doc: the request body (``model`` already checked to be a string or null).
        cat: the router's :class:`Catalog`.
        default: the model served when ``model`` is absent or null.

    Raises:
        ModelNotFound: an unknown name or adapter (404, ``param`` ``model`` or ``lora_path``).
        InvalidRequest: a ``lora_path`` of the wrong type (400).
    """
    model = doc.get("model")
    adapter: str | None
    forward: str | None
    if model is None:
        name, adapter, forward = default, None, default
    elif (known := cat.names.get(model)) is not None:
        name, adapter, forward = known, None, (None if known == model else known)
    elif model in cat.adapters:
        name, adapter = default, model
        forward = f"{name}:{adapter}"
    else:
        split = split_adapter(model, cat.names)
        if split is None or not split[1]:
            raise ModelNotFound(f"The model `{model}` does not exist.", param="model")
        name, adapter = cat.names[split[0]], split[1]
        forward = None if split[0] == name and model == f"{name}:{adapter}" else f"{name}:{adapter}"
        if adapter not in cat.adapters and cat.complete:
            raise UnknownAdapter(f"The model `{model}` does not exist: no engine of `{name}` has the "
                                 f"LoRA adapter `{adapter}`.", model=name, param="model")
    if adapter is not None:
        return Resolved(name, frozenset((adapter,)), forward)
    if "lora_path" not in doc:
        return Resolved(name, NO_ADAPTERS, forward)
    adapters = _lora_path(doc["lora_path"])
    unknown = sorted(a for a in adapters if a not in cat.adapters)
    if unknown and cat.complete:
        raise UnknownAdapter(f"The LoRA adapter `{unknown[0]}` is not loaded on any engine of `{name}`.",
                             model=name, param="lora_path")
    return Resolved(name, adapters, forward)


def resolve_request(runtime: Runtime, doc: Mapping[str, Any]) -> Resolved:
    """:func:`resolve` against ``runtime``'s :func:`catalog`, which is built only when the
    request is not plainly the model (its exact name or none, without ``lora_path``)."""
    name = runtime.model_name
    if "lora_path" not in doc:
        model = doc.get("model")
        if model == name:
            return Resolved(name)
        if model is None:
            return Resolved(name, NO_ADAPTERS, name)
    return resolve(doc, catalog(runtime), name)


def resolve_passthrough(model: Any, cat: Catalog, *, generating: bool, listed: bool) -> str | None:
    """Check a pass-through request's ``model``; returns the value to forward when it must be
    rewritten (an alias of the generation model on a pool that generates), else None.

    Args:
        model: the body's ``model`` (a string or null).
        cat: the router's :class:`Catalog`.
        generating: a pool serving the route also serves ``generate`` (the generation model).
        listed: every endpoint serving the route has had its ``/v1/models`` read (an unlisted
            name does not exist there).

    Raises:
        InvalidRequest: the generation model on a route only other models serve (400
            ``model_not_supported``).
        ModelNotFound: a name no pool serving the route lists (404), once all are listed.
    """
    if model is None:
        return None
    known = cat.names.get(model)
    if known is not None:
        if not generating:
            raise InvalidRequest(f"The model `{model}` is a generation model; this route is served by "
                                 f"another model", param="model", code="model_not_supported")
        return None if known == model else known
    if model in cat.passthrough or not listed:
        return None
    raise ModelNotFound(f"The model `{model}` does not exist.", param="model")


def catalog(runtime: Runtime) -> Catalog:
    """The :class:`Catalog` of ``runtime`` now (reads endpoint state; changes none)."""
    cfg = runtime.config
    names = {n: cfg.model.name for n in cfg.model.names}
    adapters: dict[str, str] = {}
    complete = True
    for pool in runtime.pools:
        if "generate" not in pool.config.serves:
            continue
        engine = pool.config.engine
        for entry in engine.lora_paths if engine is not None else ():
            name, _, path = entry.partition("=")
            adapters.setdefault(name, path or name)
        for name in pool.config.lora_adapters:
            adapters.setdefault(name, name)
        for ep in pool.endpoints.values():
            if ep.served_models is None:
                complete = False
            for name, root in ep.learned_adapters.items():
                adapters.setdefault(name, root)
    passthrough = frozenset(n for p in runtime.pools if "generate" not in p.config.serves
                            for e in p.endpoints.values() for n in e.served_models or ())
    return Catalog(names, adapters, complete, cfg.limits.max_context_tokens, passthrough)


def _card(id_: str, root: str, parent: str | None, max_model_len: int | None) -> dict[str, Any]:
    """SGLang 0.5.23's ``ModelCard`` (``created`` 0: the router does not know the load time)."""
    return {"id": id_, "object": "model", "created": 0, "owned_by": "specgate", "root": root,
            "parent": parent, "max_model_len": max_model_len}


def model_cards(runtime: Runtime) -> list[dict[str, Any]]:
    """The ``data`` of ``GET /v1/models``: the model, its aliases, its known adapters, then
    the pass-through pools' models (see the module docstring)."""
    cat = catalog(runtime)
    name = runtime.config.model.name
    cards = [_card(n, canonical, None, cat.max_model_len) for n, canonical in cat.names.items()]
    cards += [_card(a, root, name, None) for a, root in sorted(cat.adapters.items()) if a not in cat.names]
    cards += [_card(n, n, None, None) for n in sorted(cat.passthrough) if n not in cat.names]
    return cards


def model_card(runtime: Runtime, model: str) -> dict[str, Any]:
    """The card ``GET /v1/models/{model}`` answers: a listed id's, or, for
    ``<name>:<adapter>``, the adapter's under that id.

    Raises:
        ModelNotFound: no such model (SGLang's message).
    """
    for card in model_cards(runtime):
        if card["id"] == model:
            return card
    cat = catalog(runtime)
    split = split_adapter(model, cat.names)
    if split is not None and split[1] in cat.adapters:
        return _card(model, cat.adapters[split[1]], cat.names[split[0]], None)
    raise ModelNotFound(f"The model '{model}' does not exist", param="model")


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
