"""The operator YAML as one frozen, strict, typed tree.

Every section is a pydantic model with ``extra="forbid"`` (an unknown key is an error, so a
typo never silently falls back to a default) and ``frozen=True`` (a loaded config is a value:
a reload builds a new tree and swaps one reference, see :mod:`router.app.reload`). Integers are
strict: ``"8"``, ``8.0`` and ``true`` are rejected where a token count is expected.

Units: every ``*_tokens`` field counts tokens of the served model's tokenizer; every ``*_s``
field is seconds; ``*_bytes`` is bytes.

Cross-field checks made at load time (:func:`load_config` raises :class:`ConfigError`):

- ``routing.saturation.exit < routing.saturation.enter`` (hysteresis, no flapping);
- each pool's ``max_context_tokens <= limits.max_context_tokens`` and, when the pool has an
  ``engine`` section, ``<= engine.context_length``;
- a speculative pool's ``draft_reserved_tokens`` equals
  ``max(speculative_eagle_topk * speculative_num_steps, speculative_num_draft_tokens)`` for
  EAGLE-family engines (SGLang ``compute_num_reserved_tokens``, 0.5.23) when both are given;
- a drafter's maximum positions (``engine.draft_max_positions``) must cover the pool's
  context limit (sglang#3574: an EAGLE draft trained at 2048 positions crashed engines on
  longer inputs);
- pool names and endpoint URLs are unique; at least one pool;
- ``upstream.keepalive_timeout_s < engine_keepalive_s`` of every pool (the router drops an idle
  connection before the engine closes it, sgl-project/sglang#20851);
- pool names and endpoint URLs are unique; at least one pool, and one that ``serves``
  ``generate``; a speculative pool serves only ``generate``/``responses``; ``responses`` is
  listed on every generation pool or on none;
- ``state.renew_interval_s * 2 <= state.lease_ttl_s`` (a lease is renewed at least twice per
  TTL) and ``state.op_timeout_s < state.renew_interval_s``;
- ``auth``: inline keys are non-empty without whitespace, and the admin key is not also a
  client key.

Secrets (``auth.*``) are :class:`pydantic.SecretStr`: they print as ``**********`` in reprs,
logs and ``specgate config check``.

Runtime overrides (:class:`Overrides`, set through ``PUT /admin/config``) are validated by the
same models: :meth:`Overrides.apply` merges them into ``routing`` and re-validates the result.

The served models are ``models:`` (a list) or, in the one-model form, ``model:`` with top-level
``limits``/``pools``/``routing`` (read as a list of one): :mod:`router.config.models` states both
forms and the cross-model checks; the per-model checks above run for each model, naming it
(``models[<name>].pools[...]``) when there are several.

The tree is one module's API spread over seven files; every name is importable from here:
:mod:`router.config.base` (the strict base model, the constrained scalars, :class:`ConfigError`),
:mod:`router.config.models` (``model``/``models[]``, ``limits``),
:mod:`router.config.pools` (``pools[]`` and ``canary``), :mod:`router.config.routing`
(``routing``), :mod:`router.config.overrides` (the runtime overrides),
:mod:`router.config.server` (``server``, ``state``, ``auth``, ``tracing``, ``planner``), and this module (``health``,
``scrape``, ``upstream``, the whole :class:`Config` with its cross-field
checks, and the loader).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)

from router.config.base import (
    ConfigError,
    PositiveFloat,
    PositiveInt,
    Strict,
    format_errors,
)
from router.config.models import (
    LimitsConfig,
    ModelConfig,
    ModelEntry,
    MultimodalConfig,
    check_models,
    normalize_models,
    one_model_loc,
)
from router.config.overrides import Overrides, RoutingOverride, SaturationOverride, parse_overrides
from router.config.pools import (
    EAGLE_FAMILY,
    CanaryConfig,
    DiscoveryConfig,
    EndpointKind,
    EngineConfig,
    PoolConfig,
    SpeedConfig,
)
from router.config.routing import (
    AcceptanceConfig,
    PrefixCacheConfig,
    RoutingConfig,
    SaturationConfig,
)
from router.config.server import (
    AuthConfig,
    CircuitBreakerConfig,
    PlannerConfig,
    ServerConfig,
    StateConfig,
    TracingConfig,
)

__all__ = [
    "EAGLE_FAMILY",
    "AcceptanceConfig",
    "AuthConfig",
    "CanaryConfig",
    "CircuitBreakerConfig",
    "Config",
    "ConfigError",
    "DiscoveryConfig",
    "EndpointKind",
    "EngineConfig",
    "HealthConfig",
    "LimitsConfig",
    "ModelConfig",
    "ModelEntry",
    "MultimodalConfig",
    "Overrides",
    "PlannerConfig",
    "PoolConfig",
    "PrefixCacheConfig",
    "RoutingConfig",
    "RoutingOverride",
    "SaturationConfig",
    "SaturationOverride",
    "ScrapeConfig",
    "ServerConfig",
    "SpeedConfig",
    "StateConfig",
    "TracingConfig",
    "UpstreamConfig",
    "WarmupConfig",
    "load_config",
    "parse_config",
    "parse_overrides",
    "resolve_paths",
]


class WarmupConfig(Strict):
    """Servable before routable (router/loops/warmup.py): an endpoint of a pool that serves
    ``generate`` gets client traffic only after ``successes`` consecutive one-token generations
    (``POST <path>`` with ``max_tokens: 1``) succeeded on it, each within ``timeout_s``; after
    a failed probe the next one waits ``interval_s``. A green ``/health`` or ``/metrics`` is not
    enough: SGLang answered them before its warm-up finished (sgl-project/sglang#33719,
    #37994). An endpoint that is ejected, or whose stream got no first byte in time (unless it is its
    pool's last routable endpoint), is proven again before it is routed.

    Attributes:
        enabled: gate endpoints on a probe (off: the first successful scrape admits them).
        successes: consecutive successful probes needed (>= 1).
        timeout_s: deadline of one probe (s).
        interval_s: wait after a failed probe, and between rounds (s).
        path: ``/v1/chat/completions`` (the path most client traffic takes) or ``/v1/completions``.
    """

    enabled: StrictBool = True
    successes: PositiveInt = 3
    timeout_s: PositiveFloat = 30.0
    interval_s: PositiveFloat = 1.0
    path: Literal["/v1/chat/completions", "/v1/completions"] = "/v1/chat/completions"


class HealthConfig(Strict):
    """Endpoint health: consecutive-failure ejection and consecutive-success re-admission,
    and the warm-up probe before an endpoint's first client request (:class:`WarmupConfig`)."""

    failure_threshold: PositiveInt = 3
    success_threshold: PositiveInt = 2
    retry_after_s: PositiveInt = 5
    warmup: WarmupConfig = WarmupConfig()


class ScrapeConfig(Strict):
    """The background scrape of every endpoint's ``/metrics`` (seconds); its ``/v1/models``
    (served model and LoRA adapters, :mod:`router.state.identity`) at admission and every
    ``models_interval_s``."""

    interval_s: PositiveFloat = 0.25
    timeout_s: PositiveFloat = 1.0
    stale_after_s: PositiveFloat = 2.0
    models_interval_s: PositiveFloat = 10.0

    @model_validator(mode="after")
    def _check(self) -> ScrapeConfig:
        if self.stale_after_s < self.interval_s:
            raise ValueError("scrape.stale_after_s must be >= scrape.interval_s")
        return self


class UpstreamConfig(Strict):
    """The shared upstream HTTP client (seconds and connection counts).

    The first-byte timeout scales with the prompt (prefill time grows with it):
    ``first_byte_timeout_s + first_byte_s_per_1k_tokens * prompt_tokens / 1000``.
    ``idle_timeout_s`` bounds the gap between two streamed chunks; ``nonstream_timeout_s``
    bounds a whole non-streaming generation. ``max_attempts`` counts tries of one request
    across endpoints (failover happens only before anything reached an engine or after an
    engine answered 5xx).

    ``client`` is what sends generation requests: ``httptools`` (an HTTP/1.1 client on httptools'
    parser, :mod:`router.upstream.transport_h1`; ``https://`` engines still go through aiohttp) or
    ``aiohttp`` (aiohttp's ``ClientSession`` for all of them). Scrapes, aborts and the other
    engine calls (:meth:`router.upstream.transport.Transport.fetch`) always use aiohttp, through the
    same transport seam.

    ``keepalive_timeout_s`` is how long an idle pooled connection is kept (aiohttp's
    ``TCPConnector(keepalive_timeout=...)``, 15 s when left to aiohttp); it must be below every
    pool's ``engine_keepalive_s``, else the router reuses sockets the engine is closing
    (sgl-project/sglang#20851, aio-libs/aiohttp#7363). ``backpressure_hold_s`` is how long an
    endpoint that refused for capacity (503, 429, a queue-full event) counts as saturated when
    it sent no ``Retry-After``; an engine's ``Retry-After`` is used up to
    ``backpressure_max_hold_s``.
    """

    client: Literal["httptools", "aiohttp"] = "httptools"
    connect_timeout_s: PositiveFloat = 2.0
    first_byte_timeout_s: PositiveFloat = 60.0
    first_byte_s_per_1k_tokens: Annotated[float, Field(ge=0)] = 1.0
    idle_timeout_s: PositiveFloat = 120.0
    max_connections: PositiveInt = 4096
    nonstream_timeout_s: PositiveFloat = 600.0
    max_attempts: PositiveInt = 3
    abort_timeout_s: PositiveFloat = 2.0
    keepalive_timeout_s: PositiveFloat = 4.0
    backpressure_hold_s: PositiveFloat = 2.0
    backpressure_max_hold_s: PositiveFloat = 30.0
    #: Seconds of engine silence in a relayed stream, after the status line, before the router
    #: writes an SSE comment (``: keep-alive``) to the client, and again every as many seconds
    #: while the silence lasts (below the 60 s idle timeout of nginx and cloud load balancers);
    #: 0: never. ``idle_timeout_s`` still ends a stream the engine leaves silent that long. Also
    #: how long a stream whose role chunk came holds its status for the first content (hidden
    #: reasoning, a buffered tool call) before committing it (0: ``idle_timeout_s``).
    stream_keepalive_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 15.0


class Config(Strict):
    """The whole operator YAML. See the module docstring for the cross-field rules.

    ``models`` is the list of served models (:mod:`router.config.models`; a one-model file is
    a list of one). Code serving one model reads ``model``, ``limits`` and ``routing``, which
    exist only while the config holds one model: a one-model file, or the per-model view
    :meth:`for_model` (what each :class:`router.state.runtime.Runtime` is built from), computed once
    (``cached_property``: they are read on every request). ``pools`` is every pool of every
    model.
    """

    models: tuple[ModelEntry, ...]
    scrape: ScrapeConfig = ScrapeConfig()
    health: HealthConfig = HealthConfig()
    upstream: UpstreamConfig = UpstreamConfig()
    server: ServerConfig = ServerConfig()
    state: StateConfig = StateConfig()
    auth: AuthConfig = AuthConfig()
    canary: CanaryConfig = CanaryConfig()
    tracing: TracingConfig = TracingConfig()
    planner: PlannerConfig = PlannerConfig()

    @model_validator(mode="before")
    @classmethod
    def _one_model(cls, data: Any) -> Any:
        # Config.model_validate of a one-model document (parse_config normalizes first)
        if isinstance(data, dict) and "models" not in data and "model" in data:
            return normalize_models(data)[0]
        return data

    @model_validator(mode="after")
    def _check(self) -> Config:
        check_models(self.models)
        for entry in self.models:
            self._check_model(entry, "" if len(self.models) == 1 else f"models[{entry.name}].")
        return self

    def _check_model(self, entry: ModelEntry, at: str) -> None:
        """One model's cross-field checks; ``at`` prefixes the messages (``models[<name>].``
        when the config holds several)."""
        said = f"{at[:-1]}: " if at else ""
        if not entry.pools:
            raise ValueError(f"{said}at least one pool is required")
        if not any("generate" in p.serves for p in entry.pools):
            raise ValueError(f"{said}no pool serves `generate`")
        generating = [p for p in entry.pools if "generate" in p.serves]
        if len({"responses" in p.serves for p in generating}) > 1:
            raise ValueError(f"{said}list `responses` in `serves` of every pool that serves `generate`, or of none")
        cap = entry.limits.max_context_tokens
        for pool in entry.pools:
            limit = _pool_limit(pool, entry.limits)
            if limit > cap:
                raise ValueError(
                    f"{at}pools[{pool.name}].max_context_tokens ({limit}) exceeds "
                    f"{at}limits.max_context_tokens ({cap})"
                )
            engine = pool.engine
            if engine is not None and engine.context_length is not None and limit > engine.context_length:
                raise ValueError(
                    f"{at}pools[{pool.name}].max_context_tokens ({limit}) exceeds "
                    f"engine.context_length ({engine.context_length})"
                )
            if pool.speculative and pool.draft_reserved_tokens is not None and engine is not None:
                derived = engine.reserved_draft_tokens()
                if engine.speculative_algorithm in EAGLE_FAMILY and derived != pool.draft_reserved_tokens:
                    raise ValueError(
                        f"{at}pools[{pool.name}].draft_reserved_tokens ({pool.draft_reserved_tokens}) "
                        f"differs from the engine's reserved tokens ({derived})"
                    )
            if (engine is not None and engine.draft_max_positions is not None
                    and engine.draft_max_positions < limit):
                raise ValueError(
                    f"{at}pools[{pool.name}]: the drafter's max positions "
                    f"({engine.draft_max_positions}) are below the pool's context limit ({limit})"
                )
            if pool.speculative and pool.reserved_tokens >= limit:
                raise ValueError(f"{at}pools[{pool.name}]: reserved draft tokens leave no room")
            if self.upstream.keepalive_timeout_s >= pool.engine_keepalive_s:
                raise ValueError(
                    f"upstream.keepalive_timeout_s ({self.upstream.keepalive_timeout_s}) must be "
                    f"below {at}pools[{pool.name}].engine_keepalive_s ({pool.engine_keepalive_s})")

    @cached_property
    def model(self) -> ModelEntry:
        """The one model this config serves (a one-model file, or a :meth:`for_model` view).

        Raises:
            ConfigError: the config holds several models (take :meth:`for_model`).
        """
        if len(self.models) != 1:
            raise ConfigError(f"this config serves {len(self.models)} models "
                              f"({', '.join(m.name for m in self.models)}): take Config.for_model(name)")
        return self.models[0]

    @cached_property
    def limits(self) -> LimitsConfig:
        """The one model's ``limits`` (see :attr:`model`)."""
        return self.model.limits

    @cached_property
    def routing(self) -> RoutingConfig:
        """The one model's ``routing`` (see :attr:`model`)."""
        return self.model.routing

    @cached_property
    def pools(self) -> tuple[PoolConfig, ...]:
        """Every pool of every model, in file order."""
        return tuple(p for m in self.models for p in m.pools)

    @cached_property
    def max_request_bytes(self) -> int:
        """The body cap applied while a request is read, before its model is known: the
        largest ``limits.max_request_bytes`` of the models (bytes)."""
        return max(m.limits.max_request_bytes for m in self.models)

    def for_model(self, name: str) -> Config:
        """The one-model view of model ``name`` (its entry, every global section): what its
        :class:`router.state.runtime.Runtime` is built from. Raises ``KeyError`` for an unknown name."""
        entry = next((m for m in self.models if m.name == name), None)
        if entry is None:
            raise KeyError(name)
        if len(self.models) == 1:
            return self
        view = self.model_copy(update={"models": (entry,)})
        for key in _DERIVED:  # model_copy copies the values cached from the whole list
            view.__dict__.pop(key, None)
        return view

    def model_of(self, pool_name: str) -> ModelEntry:
        """The model whose pools hold ``pool_name``; raises ``KeyError`` when none does."""
        for m in self.models:
            if any(p.name == pool_name for p in m.pools):
                return m
        raise KeyError(pool_name)

    def pool_limit(self, pool: PoolConfig) -> int:
        """The pool's context limit (tokens): its own, else the engine's, else its model's cap."""
        return _pool_limit(pool, self.model_of(pool.name).limits)

    def pool(self, name: str) -> PoolConfig:
        """The pool called ``name`` (any model's); raises ``KeyError`` when there is none."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)


#: The :class:`Config` values computed from ``models`` (``cached_property``), dropped from a copy.
_DERIVED = ("model", "limits", "routing", "pools", "max_request_bytes")


def _pool_limit(pool: PoolConfig, limits: LimitsConfig) -> int:
    if pool.max_context_tokens is not None:
        return pool.max_context_tokens
    if pool.engine is not None and pool.engine.context_length is not None:
        return min(pool.engine.context_length, limits.max_context_tokens)
    return limits.max_context_tokens


def _fill_draft_positions(data: dict[str, Any], base: Path) -> None:
    """Read ``draft_max_positions`` from the drafter's config.json when the YAML omits it."""
    import json

    top = data.get("pools")
    for pool in _raw_pools(data) + (list(top) if isinstance(top, list) else []):
        engine = pool.get("engine") if isinstance(pool, dict) else None
        if not isinstance(engine, dict) or "draft_max_positions" in engine:
            continue
        draft = engine.get("speculative_draft_model_path")
        if not isinstance(draft, str):
            continue
        cfg = (base / draft) / "config.json"
        try:
            positions = json.loads(cfg.read_text()).get("max_position_embeddings")
        except (OSError, ValueError):
            continue
        if isinstance(positions, int) and not isinstance(positions, bool):
            engine["draft_max_positions"] = positions


def parse_config(data: Any, *, base_dir: Path | None = None) -> Config:
    """Validate an already-parsed YAML document into a :class:`Config`.

    Relative ``model.tokenizer`` and engine paths are resolved against ``base_dir``.

    Raises:
        ConfigError: on any validation failure, with every offending key path listed.
    """
    if not isinstance(data, dict):
        raise ConfigError("config: the document must be a mapping")
    base = base_dir or Path.cwd()
    data, one_model = normalize_models(data)
    data = resolve_paths(data, base)
    _fill_draft_positions(data, base)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        report = format_errors(exc, model=Config, loc_map=one_model_loc if one_model else None)
        raise ConfigError("invalid config:\n" + report) from None


def _raw_models(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``models`` entries of a normalized document that are mappings."""
    models = data.get("models")
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def _raw_pools(data: dict[str, Any]) -> list[Any]:
    """Every pool entry of every model of a normalized document."""
    return [p for m in _raw_models(data) for p in (m.get("pools") or []) if isinstance(m.get("pools"), list)]


def resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """A copy of the raw config mapping ``data`` with its relative file paths (``model.tokenizer``,
    the key files, ...) made absolute against ``base`` (the config file's directory), as
    :func:`load_config` reads them."""
    import copy

    data = copy.deepcopy(data)

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value and not value.startswith("/") and "://" not in value:
            candidate = (base / value).resolve()
            return str(candidate)
        return value

    one = data.get("model")  # either form: the one-model file before normalize_models, or models:
    for model in _raw_models(data) + ([one] if isinstance(one, dict) else []):
        if "tokenizer" in model:
            model["tokenizer"] = resolve(model["tokenizer"])
    auth = data.get("auth")
    if isinstance(auth, dict):
        for key in ("api_keys_file", "admin_api_key_file", "engine_api_key_file"):
            if isinstance(auth.get(key), str):
                auth[key] = resolve(auth[key])
    top = data.get("pools")
    for pool in _raw_pools(data) + (list(top) if isinstance(top, list) else []):
        engine = pool.get("engine") if isinstance(pool, dict) else None
        if isinstance(engine, dict):
            for key in ("model_path", "speculative_draft_model_path"):
                if key in engine and isinstance(engine[key], str) and (base / engine[key]).exists():
                    engine[key] = resolve(engine[key])
    return data


def load_config(path: str | Path) -> Config:
    """Read, parse and validate the operator YAML at ``path``.

    Raises:
        ConfigError: when the file cannot be read, is not valid YAML, or fails validation.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        for mark in (getattr(exc, "context_mark", None), getattr(exc, "problem_mark", None)):
            if mark is not None:
                mark.name = str(path)  # PyYAML names a parsed string "<unicode string>"
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from None
    return parse_config(data, base_dir=path.resolve().parent)
