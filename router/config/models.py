"""The served models: ``model:`` (one) or ``models:`` (a list), each with its limits, pools, routing.

A router serves one or more base models behind one OpenAI base URL; the client picks one with
the body's ``model`` (:mod:`router.state.models`). The YAML has two forms:

- **one model** (the original form, unchanged): ``model:`` (name, aliases, tokenizer,
  multimodal) with top-level ``limits:``, ``pools:`` and ``routing:``. It is read as a list of
  one model (:func:`normalize_models`), and errors keep naming the keys as the file spells
  them (``pools.0.endpoints``, ``model.name``: :func:`one_model_loc`).
- **several models**: ``models:``, a list whose entries (:class:`ModelEntry`) each hold
  ``name``, ``aliases``, ``tokenizer``, ``multimodal``, ``limits``, ``pools`` and ``routing``.
  Top-level ``model``, ``limits``, ``pools`` and ``routing`` are then an error (both forms at
  once: :class:`~router.config.base.ConfigError`).

Global sections (``server``, ``state``, ``auth``, ``upstream``, ``scrape``, ``health``,
``canary``, ``tracing``) stay top-level in both forms.

HTTP-level limit read before the model is known: ``limits.max_request_bytes`` caps the body
while it is read, before its ``model`` field can be parsed, so the router reads every body up
to the largest ``max_request_bytes`` of the models (:attr:`router.config.tree.Config.max_request_bytes`),
and then holds the resolved model's body to its own cap (413 either way).

Cross-model checks (:func:`check_models`, raised as ``ValueError`` inside validation):
names and aliases unique across models; pool names unique across the deployment (metrics and
Redis keys are by pool name); an endpoint URL in one pool only; at least one model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import StrictStr, field_validator, model_validator

from router.config.base import ConfigError, NonEmptyStr, PositiveInt, Strict
from router.config.pools import PoolConfig
from router.config.routing import RoutingConfig

__all__ = ["LimitsConfig", "ModelConfig", "ModelEntry", "MultimodalConfig", "check_models",
           "normalize_models", "one_model_loc"]

#: The top-level keys of the one-model form that belong to the model.
ONE_MODEL_KEYS = ("model", "limits", "pools", "routing")


class MultimodalConfig(Strict):
    """Non-text input the served model takes, with an upper bound of tokens per content part.

    Each bound is the most tokens one part can occupy in the prompt after the model's
    processor (placeholder and wrapper tokens included), e.g. for an image the processor's
    ``max_pixels / (patch_size * merge_size)^2`` plus its start/end tokens; for an audio
    encoder that pads or truncates clips to a fixed length (Whisper-style: 30 s), the tokens of
    one full clip. The router adds the bound for every part of the kind, so its prompt size is
    an upper bound and the context cap never under-counts. A modality left out (None) is
    refused with HTTP 400 like on a text-only model.

    Attributes:
        image_tokens: tokens per ``image_url`` part.
        audio_tokens: tokens per ``input_audio``/``audio_url`` part.
        video_tokens: tokens per ``video_url`` part.
    """

    image_tokens: PositiveInt | None = None
    audio_tokens: PositiveInt | None = None
    video_tokens: PositiveInt | None = None


class ModelConfig(Strict):
    """The served model: its public name(s) and where its tokenizer lives.

    ``tokenizer`` is a local directory holding ``tokenizer.json``/``tokenizer_config.json``
    with the chat template (the same files the engine loads), so the router counts prompt
    tokens exactly as SGLang does. A relative path is resolved against the config file.

    Attributes:
        name: the model name clients send in ``model`` (and ``/v1/models`` lists first).
        aliases: more names the router accepts for the same model (e.g. a name clients
            already use); listed by ``/v1/models`` after ``name``, and rewritten to ``name``
            before a request reaches an engine (:mod:`router.state.models`).
        multimodal: the non-text input the model takes (:class:`MultimodalConfig`); None
            (default): a text-only model, whose requests with image, audio or video parts
            get HTTP 400 before any engine.
    """

    name: NonEmptyStr
    tokenizer: StrictStr
    aliases: tuple[NonEmptyStr, ...] = ()
    multimodal: MultimodalConfig | None = None

    @property
    def media_tokens(self) -> dict[str, int] | None:
        """Tokens per non-text part by modality (``image``/``audio``/``video``, only those
        configured), or None for a text-only model."""
        if self.multimodal is None:
            return None
        m = self.multimodal
        bounds = {"image": m.image_tokens, "audio": m.audio_tokens, "video": m.video_tokens}
        return {k: v for k, v in bounds.items() if v is not None}

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        names = (self.name, *self.aliases)
        if len(set(names)) != len(names):
            raise ValueError("model.aliases repeats a name (or model.name)")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        """Every accepted model name: ``name`` first, then ``aliases`` (how a request's
        ``model`` resolves to one, or to a LoRA adapter of it: :mod:`router.state.models`)."""
        return (self.name, *self.aliases)


class LimitsConfig(Strict):
    """Admission limits applied before any engine sees a request.

    Attributes:
        max_context_tokens: the validated safe context S (tokens). A request whose prompt
            plus per-sequence output budget exceeds S gets HTTP 400 ``context_length_exceeded``.
        default_max_tokens: output budget D (tokens) applied when the client gives neither
            ``max_completion_tokens`` nor ``max_tokens``; forwarded explicitly as
            ``max_tokens = min(D, S - prompt)`` (and shown in the ``x-specgate-max-tokens``
            response header). ``null`` or ``engine``: the engine's default, nothing forwarded (SGLang
            generates until end of sequence or its context); the decision then counts the
            request at its worst case, ``S - prompt`` output tokens.
        max_request_bytes: request-body cap (bytes), on the bytes read and on the decoded
            bytes of a compressed body (router.front.intake); larger bodies get HTTP 413.
        max_n: the largest accepted ``n`` (choices per request).
    """

    max_context_tokens: PositiveInt
    default_max_tokens: PositiveInt | None = 256

    @field_validator("default_max_tokens", mode="before")
    @classmethod
    def _engine_default(cls, value: Any) -> Any:
        # "engine" spells null where null cannot be written (Helm drops null values)
        return None if value == "engine" else value
    max_request_bytes: PositiveInt = 32 * 1024 * 1024
    max_n: PositiveInt = 128


class ModelEntry(ModelConfig):
    """One served model with everything that is per model: its limits, pools and routing
    thresholds (a ``models:`` entry; the one-model form is one of these).

    Attributes:
        limits: its admission limits (context cap S, default budget D, ``max_n``, body cap).
        pools: its pools (at least one serving ``generate``); pool names are unique across
            the deployment, so every pool series and Redis key stays by pool name.
        routing: its routing thresholds (saturation, long prompt, acceptance, prefix cache,
            learning), the ones ``PUT /admin/config`` overrides.
    """

    limits: LimitsConfig
    pools: tuple[PoolConfig, ...]
    routing: RoutingConfig


def normalize_models(data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``(document with a models: list, True when it was the one-model form)``.

    The one-model form's ``model`` mapping with the top-level ``limits``/``pools``/``routing``
    becomes ``models: [{**model, limits, pools, routing}]`` (keys absent stay absent, so
    validation reports them missing). A document with ``models:`` is returned as it is.

    Raises:
        ConfigError: ``models:`` together with any of ``model``, ``limits``, ``pools``,
            ``routing`` at the top level.
    """
    if "models" in data:
        both = [k for k in ONE_MODEL_KEYS if k in data]
        if both:
            raise ConfigError(
                "config: use either `model:` with top-level `limits`/`pools`/`routing` (one model) "
                "or `models:` (a list, each entry with its own limits, pools and routing), not both; "
                f"found `models` and {', '.join(f'`{k}`' for k in both)} at the top level")
        return data, False
    out = {k: v for k, v in data.items() if k not in ONE_MODEL_KEYS}
    model = data.get("model")
    entry: dict[str, Any] = dict(model) if isinstance(model, dict) else {}
    for key in ("limits", "pools", "routing"):
        if key in data:
            entry[key] = data[key]
    out["models"] = [entry]
    return out, True


def one_model_loc(loc: Sequence[int | str]) -> tuple[int | str, ...]:
    """A validation error's key path as the one-model file spells it: ``models.0.pools.1`` ->
    ``pools.1``, ``models.0.name`` -> ``model.name``, ``models.0`` -> ``model``."""
    if len(loc) < 2 or loc[0] != "models" or loc[1] != 0:
        return tuple(loc)
    rest = tuple(loc[2:])
    if rest and rest[0] in ("limits", "pools", "routing"):
        return rest
    return ("model", *rest)


def check_models(models: Sequence[ModelEntry]) -> None:
    """The cross-model checks (see the module docstring).

    Raises:
        ValueError: naming the offending model, pool or URL.
    """
    if not models:
        raise ValueError("models: at least one model is required")
    owner: dict[str, str] = {}
    for m in models:
        for n in m.names:
            if n in owner:
                raise ValueError(f"model name or alias {n!r} is used by models {owner[n]!r} and {m.name!r}")
            owner[n] = m.name
    pool_owner: dict[str, str] = {}
    url_owner: dict[str, str] = {}
    for m in models:
        for p in m.pools:
            if p.name in pool_owner:
                where = ("" if pool_owner[p.name] == m.name
                         else f" (models {pool_owner[p.name]!r} and {m.name!r}; pool names are unique "
                              "across the deployment)")
                raise ValueError(f"duplicate pool name {p.name!r}{where}")
            pool_owner[p.name] = m.name
            for u in p.endpoints:
                u = u.rstrip("/")
                if u in url_owner:
                    raise ValueError(f"an endpoint URL appears in more than one pool: {u} "
                                     f"(pools {url_owner[u]!r} and {p.name!r})")
                url_owner[u] = p.name
