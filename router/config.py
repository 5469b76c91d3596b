"""The operator YAML as one frozen, strict, typed tree.

Every section is a pydantic model with ``extra="forbid"`` (an unknown key is an error, so a
typo never silently falls back to a default) and ``frozen=True`` (a loaded config is a value:
a reload builds a new tree and swaps one reference, see :mod:`router.reload`). Integers are
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
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = [
    "AuthConfig",
    "CanaryConfig",
    "CircuitBreakerConfig",
    "Config",
    "ConfigError",
    "EngineConfig",
    "HealthConfig",
    "LimitsConfig",
    "ModelConfig",
    "MultimodalConfig",
    "Overrides",
    "PoolConfig",
    "PrefixCacheConfig",
    "RoutingConfig",
    "SaturationConfig",
    "ScrapeConfig",
    "ServerConfig",
    "SpeedConfig",
    "StateConfig",
    "UpstreamConfig",
    "load_config",
    "parse_config",
    "parse_overrides",
]

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Url = Annotated[str, Field(strict=True, pattern=r"^https?://[^\s/]+(:\d+)?/?$")]
EnvName = Annotated[str, Field(strict=True, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
NonEmptyStr = Annotated[str, Field(strict=True, min_length=1)]

#: SGLang speculative algorithms whose drafts occupy output token slots (EAGLE family).
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})


class ConfigError(ValueError):
    """The operator YAML is missing, unreadable, or fails validation.

    ``str(exc)`` is a readable multi-line report naming each offending key path.
    """


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class MultimodalConfig(_Strict):
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


class ModelConfig(_Strict):
    """The served model: its public name(s) and where its tokenizer lives.

    ``tokenizer`` is a local directory holding ``tokenizer.json``/``tokenizer_config.json``
    with the chat template (the same files the engine loads), so the router counts prompt
    tokens exactly as SGLang does. A relative path is resolved against the config file.

    Attributes:
        name: the model name clients send in ``model`` (and ``/v1/models`` lists first).
        aliases: more names the router accepts for the same model (e.g. a name clients
            already use); listed by ``/v1/models`` after ``name``.
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
        """Every accepted model name: ``name`` first, then ``aliases``."""
        return (self.name, *self.aliases)

    def serves(self, model: str) -> bool:
        """Whether a request's ``model`` names this model.

        True for ``name``, any of ``aliases``, and either followed by ``:<adapter>``: SGLang's
        LoRA syntax (``"<base>:<adapter>"``, with ``--enable-lora``) picks an adapter of the
        served model, and the engine itself answers for an adapter it does not have.
        """
        if model == self.name or model in self.aliases:
            return True
        return any(model.startswith(f"{n}:") and len(model) > len(n) + 1 for n in self.names)


class LimitsConfig(_Strict):
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
        max_request_bytes: request-body cap (bytes); larger bodies get HTTP 413.
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


class EngineConfig(_Strict):
    """How a pool's SGLang server is launched (``specgate serve``); names are SGLang's
    server arguments (``python -m sglang.launch_server --help``, 0.5.23).

    ``draft_max_positions`` is the drafter's ``max_position_embeddings`` (tokens); when left
    out it is read from ``speculative_draft_model_path/config.json`` if that file exists.

    ``tool_call_parser`` / ``reasoning_parser`` become ``--tool-call-parser`` /
    ``--reasoning-parser`` (e.g. ``llama3``, ``qwen25``; ``qwen3``, ``deepseek-r1``): the names
    SGLang's parsers register (``sglang.srt.function_call``, ``sglang.srt.parser``); None
    leaves the flag out (no tool-call or reasoning parsing, the text stays in ``content``).
    """

    model_path: StrictStr
    served_model_name: StrictStr | None = None
    context_length: PositiveInt | None = None
    mem_fraction_static: Annotated[float, Field(gt=0, le=1)] | None = None
    max_total_tokens: PositiveInt | None = None
    tp_size: PositiveInt = 1
    dtype: StrictStr | None = None
    speculative_algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"] | None = None
    speculative_draft_model_path: StrictStr | None = None
    speculative_num_steps: PositiveInt | None = None
    speculative_eagle_topk: PositiveInt | None = None
    speculative_num_draft_tokens: PositiveInt | None = None
    draft_max_positions: PositiveInt | None = None
    tool_call_parser: NonEmptyStr | None = None
    reasoning_parser: NonEmptyStr | None = None
    cpu: StrictBool = False
    extra_args: tuple[StrictStr, ...] = ()

    def reserved_draft_tokens(self) -> int:
        """Tokens SGLang adds to every input when checking ``--context-length``.

        Returns ``max(eagle_topk * num_steps, num_draft_tokens)`` for EAGLE-family
        algorithms (SGLang 0.5.23 ``managers/utils.py: compute_num_reserved_tokens``), else 0.
        """
        if self.speculative_algorithm not in EAGLE_FAMILY:
            return 0
        topk = self.speculative_eagle_topk or 1
        steps = self.speculative_num_steps or 1
        draft = self.speculative_num_draft_tokens or (topk * steps + 1)
        return max(topk * steps, draft)


class DiscoveryConfig(_Strict):
    """Kubernetes discovery of a pool's endpoints (EndpointSlices with this label selector).

    Attributes:
        resync_s: seconds between two full re-lists while a watch is open (bounds how long a
            missed watch event can go unnoticed).
        serve_terminating_when_empty: when no endpoint of the pool is ``ready``, route to the
            endpoints that are ``serving`` and ``terminating`` (pods draining in a rolling
            update) as a last resort; off by default, so an empty pool falls back to another
            pool or answers 503 (docs/operator-guide.md, "Kubernetes discovery").
    """

    namespace: StrictStr = "default"
    label_selector: StrictStr
    port: Annotated[int, Field(strict=True, ge=1, le=65535)]
    scheme: Literal["http", "https"] = "http"
    resync_s: PositiveFloat = 60.0
    serve_terminating_when_empty: StrictBool = False


#: Endpoint kinds a pool can serve (``PoolConfig.serves``).
EndpointKind = Literal["generate", "responses", "embeddings", "rerank", "score", "classify"]


class SpeedConfig(_Strict):
    """A pool's speed model for the predicted-completion choice (:mod:`router.predict`).

    Written by ``specgate calibrate`` from measured load tests (``docs/loadtests.md``).

    Attributes:
        decode_s_per_token: t0, seconds per output token of a batch of one at short context.
        batch_knee: b_knee, the batch (sequences) at which the step's compute equals t0.
        attention_s_per_token: seconds per output token per context token.
        prefill_s_per_token: seconds per uncached prompt token.
        max_running_requests: sequences the engine runs at once (SGLang's
            ``--max-running-requests``); None: no queueing term.
        accept_length_greedy: prior tau (tokens per verify step) of greedy requests on a
            speculative pool, used while no fresh measurement exists.
        accept_length_sampled: the same for sampled requests.
    """

    decode_s_per_token: PositiveFloat
    batch_knee: PositiveFloat
    attention_s_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    prefill_s_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    max_running_requests: PositiveInt | None = None
    accept_length_greedy: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None
    accept_length_sampled: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None


class PoolConfig(_Strict):
    """One SGLang pool: a set of interchangeable endpoints serving the same model.

    Attributes:
        name: pool name, used in headers, metrics and logs (``x-specgate-pool``).
        speculative: whether the pool runs a drafter (speculative decoding).
        endpoints: base URLs of the pool's SGLang servers.
        max_context_tokens: the pool's own limit (tokens) for prompt + output budget
            (+ reserved draft tokens on a speculative pool). Defaults to the engine's
            ``context_length``, else ``limits.max_context_tokens``.
        draft_reserved_tokens: tokens a speculative engine reserves per request
            (K in the cases); derived from ``engine`` when left out.
        drafter_cost_ratio: c = T_draft / (gamma * T_target), used by the speedup model.
        speed: the pool's speed model (:class:`SpeedConfig`); when every pool that may take
            a request has one, the router sends it where it is predicted to finish first.
        engine_keepalive_s: the engines' idle keep-alive (seconds; SGLang's
            ``SGLANG_TIMEOUT_KEEP_ALIVE``, uvicorn's 5 s by default); ``upstream.keepalive_timeout_s``
            must be below it (sgl-project/sglang#20851).
        serves: the endpoint kinds the pool's engines answer: ``generate`` (chat and
            completions), ``responses`` (``/v1/responses``, with ``generate``; opt-in because
            SGLang serves it only with the ``openai_harmony`` package installed,
            :mod:`router.responses`) and the pass-through kinds ``embeddings``, ``rerank``,
            ``score``, ``classify`` (:mod:`router.passthrough`). A pool without ``generate``
            is never a generation target; a speculative pool serves only ``generate`` and
            ``responses``.
        capabilities: what a speculative pool may serve beyond plain sampling, a list of
            ``constrained_decoding``, ``tool_calls``, ``reasoning``, ``logprobs``,
            ``sampling_controls`` (:mod:`router.capabilities`); unknown names fail. Default:
            none of them (requests needing one go to a plain pool, with the kind as the
            decision reason). List a kind only after validating it on the pool's engine
            version (docs/operator-guide.md, "Which requests the speculative pool serves").
            A plain pool serves every kind; the key is refused on it.
    """

    name: Annotated[str, Field(strict=True, pattern=r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$")]
    speculative: StrictBool
    endpoints: tuple[Url, ...] = ()
    discovery: DiscoveryConfig | None = None
    max_context_tokens: PositiveInt | None = None
    draft_reserved_tokens: NonNegativeInt | None = None
    drafter_cost_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.05
    engine: EngineConfig | None = None
    speed: SpeedConfig | None = None
    engine_keepalive_s: PositiveFloat = 5.0
    serves: tuple[EndpointKind, ...] = ("generate",)
    capabilities: tuple[Literal["constrained_decoding", "tool_calls", "reasoning", "logprobs",
                                "sampling_controls"], ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> PoolConfig:
        if not self.serves or len(set(self.serves)) != len(self.serves):
            raise ValueError("`serves` must list each endpoint kind once, at least one")
        if "responses" in self.serves and "generate" not in self.serves:
            raise ValueError("`serves: [responses]` needs `generate` too (responses are generation)")
        if self.speculative and not set(self.serves) <= {"generate", "responses"}:
            raise ValueError("a speculative pool serves only `generate` (and `responses`)")
        if self.capabilities is not None and not self.speculative:
            raise ValueError("`capabilities` is for speculative pools (a plain pool serves every kind)")
        if self.capabilities is not None and len(set(self.capabilities)) != len(self.capabilities):
            raise ValueError("`capabilities` repeats a name")
        if not self.endpoints and self.discovery is None:
            raise ValueError("a pool needs `endpoints` or a `discovery` block")
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ValueError("duplicate endpoint URL in pool")
        if self.engine is not None and self.engine.speculative_algorithm is not None and not self.speculative:
            raise ValueError("engine.speculative_algorithm is set on a pool with speculative: false")
        if self.engine is not None and self.speculative and self.engine.speculative_algorithm is None:
            raise ValueError("speculative pool's engine has no speculative_algorithm")
        if self.speed is not None and self.speculative and (
                self.speed.accept_length_greedy is None or self.speed.accept_length_sampled is None):
            raise ValueError("a speculative pool's speed needs accept_length_greedy and accept_length_sampled")
        return self

    @property
    def gamma(self) -> int:
        """Draft tokens per cycle: ``engine.speculative_num_steps``, else ``K - 1``, at least 1."""
        engine = self.engine
        if engine is not None and engine.speculative_num_steps:
            return engine.speculative_num_steps
        return max(1, self.reserved_tokens - 1)

    @property
    def served_capabilities(self) -> frozenset[str] | None:
        """The kinds the pool serves: None (every kind) for a plain pool, else the listed ones."""
        return None if not self.speculative else frozenset(self.capabilities or ())

    @property
    def reserved_tokens(self) -> int:
        """Reserved draft tokens K (tokens): explicit, else derived from ``engine``, else 0."""
        if self.draft_reserved_tokens is not None:
            return self.draft_reserved_tokens
        if self.engine is not None:
            return self.engine.reserved_draft_tokens()
        return 0


class SaturationConfig(_Strict):
    """Hysteresis thresholds on a speculative pool's load (running + queued requests).

    Speculation is bypassed once load >= ``enter`` and resumes once load < ``exit``.
    Production reports on GPUs advise bypassing at batch 16-32.
    """

    enter: PositiveInt
    exit: NonNegativeInt

    @model_validator(mode="after")
    def _check(self) -> SaturationConfig:
        if self.exit >= self.enter:
            raise ValueError(f"saturation.exit ({self.exit}) must be < saturation.enter ({self.enter})")
        return self


class AcceptanceConfig(_Strict):
    """Acceptance tracking (:mod:`router.acceptance`) and the acceptance bypass.

    The expected speedup is S = E[tau] / (c*gamma + 1) computed from the pool's live accept
    length per temperature class (Leviathan et al. 2023, arXiv:2211.17192); without speed
    models, a class below ``min_expected_speedup`` skips speculation until it reaches
    ``exit_speedup`` (hysteresis). ``enabled: false`` turns the bypass off.

    Attributes:
        max_age_s: seconds an accept-length measurement stays valid; older, it is unknown
            and the pool is used (and so measured) again: the bound on how long a pool stays
            bypassed on a measurement it can no longer refresh.
        weight: the step of the per-class estimate in (0, 1] (1: the last observation only).
    """

    enabled: StrictBool = True
    min_expected_speedup: PositiveFloat = 1.0
    exit_speedup: PositiveFloat = 1.05
    max_age_s: PositiveFloat = 10.0
    weight: Annotated[float, Field(gt=0, le=1)] = 0.5

    @model_validator(mode="after")
    def _check(self) -> AcceptanceConfig:
        if self.exit_speedup < self.min_expected_speedup:
            raise ValueError("acceptance.exit_speedup must be >= min_expected_speedup")
        return self


class PrefixCacheConfig(_Strict):
    """Prefix-cache-aware endpoint choice inside a pool (:mod:`router.prefix`, which states the
    algorithm and its sources: SGLang's ``cache_aware`` policy, the Gateway API Inference
    Extension prefix scorer, rendezvous hashing). Hot-reloadable; the index survives a reload
    unless ``block_chars`` changes.

    Attributes:
        enabled: off: least load inside a pool, ties round robin (the router's older choice).
        block_chars: block size of the rendered prompt's hash chain (characters; 64 is about
            16 tokens of English at ~4 characters per token).
        max_blocks: blocks hashed per request (blocks); the prompt beyond
            ``block_chars * max_blocks`` characters is ignored (bounds the per-request cost).
        anchor_blocks: a completions prompt's anchor (its conversation identity) is its first
            this many blocks (blocks); a chat's is its prompt up to the first user message.
        max_blocks_per_endpoint: index capacity per endpoint (blocks, LRU; the memory bound:
            about 100 bytes each).
        cache_threshold: a match counts when it exceeds this fraction of the prompt's tokens
            (0-1; SGLang's ``cache_threshold``, 0.3).
        balance_abs_threshold: load imbalance needs ``max - min`` load above this (requests;
            SGLang's ``balance_abs_threshold``, 64).
        balance_rel_threshold: and ``max > this * min`` (ratio; SGLang's 1.5).
        hash_load_factor: a new conversation's rendezvous choice is skipped when its load
            would exceed this factor of the mean (ratio; SGLang's ``prefix_hash`` uses 1.25).
            Measured in ``benchmarks/multiturn.py`` (docs/performance.md): 1.25 lost up to 12%
            of the hits with 2 router replicas (a conversation moved off its hash on one
            replica misses on the others), 2.0 lost none but left the hash's luck to balance
            (up to 17:7 conversations), 1.5 lost at most 4% with requests within 1.63x.
    """

    enabled: StrictBool = True
    block_chars: PositiveInt = 64
    max_blocks: PositiveInt = 512
    anchor_blocks: PositiveInt = 4
    max_blocks_per_endpoint: PositiveInt = 32768
    cache_threshold: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.3
    balance_abs_threshold: NonNegativeInt = 64
    balance_rel_threshold: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.5
    hash_load_factor: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.5


class RoutingConfig(_Strict):
    """Routing thresholds.

    Attributes:
        long_prompt_tokens: prompts longer than this (tokens) go to the plain pool
            (reason ``long_context``): speculation loses at long context (docs/loadtests.md).
        saturation: load thresholds for the saturation bypass.
        acceptance: acceptance tracking and bypass.
        min_flip_interval_s: a bypass flag (saturation, acceptance) changes at most once per
            this many seconds per pool, so a load or acceptance signal hovering at a
            threshold cannot toggle a pool faster (vllm-project/vllm#49548 measured a flapping
            threshold cutting throughput from 232 to 24-157 tok/s).
        seed: seed of the endpoint tie-break.
        prefix_cache: prefix-cache-aware endpoint choice inside a pool.
    """

    long_prompt_tokens: PositiveInt
    saturation: SaturationConfig
    acceptance: AcceptanceConfig = AcceptanceConfig()
    min_flip_interval_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0
    seed: NonNegativeInt = 0
    prefix_cache: PrefixCacheConfig = PrefixCacheConfig()


class HealthConfig(_Strict):
    """Endpoint health: consecutive-failure ejection and consecutive-success re-admission."""

    failure_threshold: PositiveInt = 3
    success_threshold: PositiveInt = 2
    retry_after_s: PositiveInt = 5


class ScrapeConfig(_Strict):
    """The background scrape of every endpoint's ``/metrics`` (seconds)."""

    interval_s: PositiveFloat = 0.25
    timeout_s: PositiveFloat = 1.0
    stale_after_s: PositiveFloat = 2.0

    @model_validator(mode="after")
    def _check(self) -> ScrapeConfig:
        if self.stale_after_s < self.interval_s:
            raise ValueError("scrape.stale_after_s must be >= scrape.interval_s")
        return self


class UpstreamConfig(_Strict):
    """The shared upstream HTTP client (seconds and connection counts).

    The first-byte timeout scales with the prompt (prefill time grows with it):
    ``first_byte_timeout_s + first_byte_s_per_1k_tokens * prompt_tokens / 1000``.
    ``idle_timeout_s`` bounds the gap between two streamed chunks; ``nonstream_timeout_s``
    bounds a whole non-streaming generation. ``max_attempts`` counts tries of one request
    across endpoints (failover happens only before anything reached an engine or after an
    engine answered 5xx).

    ``keepalive_timeout_s`` is how long an idle pooled connection is kept (aiohttp's
    ``TCPConnector(keepalive_timeout=...)``, 15 s when left to aiohttp); it must be below every
    pool's ``engine_keepalive_s``, else the router reuses sockets the engine is closing
    (sgl-project/sglang#20851, aio-libs/aiohttp#7363). ``backpressure_hold_s`` is how long an
    endpoint that refused for capacity (503, 429, a queue-full event) counts as saturated when
    it sent no ``Retry-After``; an engine's ``Retry-After`` is used up to
    ``backpressure_max_hold_s``.
    """

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


class ServerConfig(_Strict):
    """Where the router listens."""

    host: StrictStr = "127.0.0.1"
    port: Annotated[int, Field(strict=True, ge=0, le=65535)] = 8000
    reload_interval_s: PositiveFloat = 1.0
    log_requests: StrictBool = True
    #: Graceful drain (SIGTERM or ``GET /drain``, see router/drain.py): seconds the listener
    #: stays open after the drain starts (``/ready`` answers 503 at once, so endpoints
    #: propagate while requests that still arrive are served).
    drain_listen_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 5.0
    #: Seconds requests still in flight get after the listener closed; then each is cut with
    #: a ``router_shutdown`` error (a stream: one terminal SSE event) and aborted upstream.
    drain_timeout_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 30.0


class CircuitBreakerConfig(_Strict):
    """The circuit breaker in front of every shared-state (Redis) call.

    Attributes:
        failure_threshold: consecutive failed calls (timeout, refused, error) that open it.
        reset_after_s: seconds it stays open (no call is made) before one probe call is let
            through (half-open); the probe's success closes it, its failure reopens it.
    """

    failure_threshold: PositiveInt = 3
    reset_after_s: PositiveFloat = 1.0


class StateConfig(_Strict):
    """Where replicas share in-flight leases, bypass flags and routing overrides.

    ``memory`` (default) keeps everything in the process: right for one replica. ``redis``
    shares it through one Redis (see :mod:`router.state` for the algorithm and key layout); a
    Redis that is down, refusing or blackholed makes the router *degraded* (local counts), never
    unavailable. ``state`` changes need a restart (a reload only logs them).

    Attributes:
        backend: ``memory`` or ``redis``.
        redis_url: ``redis://[user:password@]host:port/db``, ``rediss://...`` or
            ``unix:///path``; when left out, the environment variable named by
            ``redis_url_env`` is read at start (the Helm chart sets ``SPECGATE_REDIS_URL``).
        redis_url_env: that variable's name.
        key_prefix: prefix of every key, used as a Redis Cluster hash tag (``{prefix}:...``);
            deployments sharing one Redis need distinct prefixes.
        op_timeout_s: bound on every Redis call, connecting included (seconds).
        lease_ttl_s: a request's lease expires this long after its last renewal unless
            released (seconds): how long a crashed replica's requests keep counting.
        renew_interval_s: how often open leases are renewed (seconds).
        circuit_breaker: see :class:`CircuitBreakerConfig`.
    """

    backend: Literal["memory", "redis"] = "memory"
    redis_url: Annotated[str, Field(strict=True, pattern=r"^(redis|rediss|unix)://\S+$")] | None = None
    redis_url_env: EnvName = "SPECGATE_REDIS_URL"
    key_prefix: Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_.:-]{1,64}$")] = "specgate"
    op_timeout_s: PositiveFloat = 0.05
    lease_ttl_s: PositiveFloat = 15.0
    renew_interval_s: PositiveFloat = 5.0
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()

    @model_validator(mode="after")
    def _check(self) -> StateConfig:
        if self.renew_interval_s * 2 > self.lease_ttl_s:
            raise ValueError("state.renew_interval_s must be <= lease_ttl_s / 2")
        if self.op_timeout_s >= self.renew_interval_s:
            raise ValueError("state.op_timeout_s must be < renew_interval_s")
        return self


class AuthConfig(_Strict):
    """API keys: clients on ``/v1/*``, the operator on ``/admin/*`` (``Authorization: Bearer``).

    Each key set can come from the YAML, a file (a Kubernetes Secret mounted as a volume: one
    key per line; blank lines and lines starting with ``#`` are ignored) and an environment
    variable (a Secret exposed with ``secretKeyRef``: keys separated by commas or newlines);
    the sources add up. Client authentication is on as soon as one client source is named;
    a named file or variable that is missing or holds no key fails the start (and a reload
    keeps the last good keys). Without an admin key ``/admin/*`` answers 403. Files and
    variables are read at start and on every config reload. Relative paths are resolved
    against the config file.

    Attributes:
        api_keys: client keys given inline.
        api_keys_file: path of a file of client keys.
        api_keys_env: name of an environment variable holding client keys.
        admin_api_key: the admin key given inline.
        admin_api_key_file: path of a file holding admin keys.
        admin_api_key_env: name of an environment variable holding admin keys.
        speculation_defaults: per client key, the speculation hint (``off``/``auto``/``on``,
            :data:`router.capabilities.SPECULATION_MODES`) its requests get when they send
            none; keyed by the key's SHA-256 digest in lowercase hex
            (``printf %s "$KEY" | sha256sum``), so no key is written here.
    """

    api_keys: tuple[SecretStr, ...] = ()
    api_keys_file: StrictStr | None = None
    api_keys_env: EnvName | None = None
    admin_api_key: SecretStr | None = None
    admin_api_key_file: StrictStr | None = None
    admin_api_key_env: EnvName | None = None
    #: The engines' key (SGLang ``--api-key``), sent upstream as ``Authorization: Bearer``;
    #: inline, from a file (first non-comment line) or from an environment variable. None of
    #: the three: no Authorization header goes upstream. Read at start (a change needs a restart).
    engine_api_key: SecretStr | None = None
    engine_api_key_file: StrictStr | None = None
    engine_api_key_env: EnvName | None = None
    speculation_defaults: dict[Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{64}$")],
                               Literal["off", "auto", "on"]] = {}

    @model_validator(mode="after")
    def _check(self) -> AuthConfig:
        inline = [k.get_secret_value() for k in self.api_keys]
        if self.admin_api_key is not None:
            inline.append(self.admin_api_key.get_secret_value())
        for key in inline:
            if not key or any(ch.isspace() for ch in key):
                raise ValueError("an API key must be non-empty and hold no whitespace")
        admin = self.admin_api_key.get_secret_value() if self.admin_api_key is not None else None
        if admin is not None and admin in {k.get_secret_value() for k in self.api_keys}:
            raise ValueError("auth.admin_api_key must not also be a client key")
        return self

    @property
    def client_auth(self) -> bool:
        """True when at least one client key source is configured."""
        return bool(self.api_keys) or self.api_keys_file is not None or self.api_keys_env is not None


class CanaryConfig(_Strict):
    """The live lossless canary (:mod:`router.canary`): greedy prompts sent to each speculative
    pool and to the plain pool, whose outputs must be identical.

    Attributes:
        enabled: run the canary (off by default: it costs engine time).
        interval_s: seconds between two scheduled rounds (a reload or an endpoint change
            starts one at once).
        check_s: how often the loop looks for a reload or an endpoint change (seconds).
        max_tokens: output tokens per probe (tokens; the longer, the more a divergence shows).
        timeout_s: bound on one probe call (seconds).
        prompts: the plain chat probes (user messages).
        on_mismatch: ``alert`` (metric and log line) or ``eject`` (also take the pool out of
            rotation, reason ``canary_mismatch``, until a round matches).
    """

    enabled: StrictBool = False
    interval_s: PositiveFloat = 300.0
    check_s: PositiveFloat = 1.0
    max_tokens: PositiveInt = 32
    timeout_s: PositiveFloat = 60.0
    prompts: tuple[NonEmptyStr, ...] = (
        "Count from one to twenty in words, separated by commas.",
        "Write a Python function that returns the n-th Fibonacci number.",
    )
    on_mismatch: Literal["alert", "eject"] = "alert"

    @model_validator(mode="after")
    def _check(self) -> CanaryConfig:
        if not self.prompts:
            raise ValueError("canary.prompts must hold at least one prompt")
        return self


class Config(_Strict):
    """The whole operator YAML. See the module docstring for the cross-field rules."""

    model: ModelConfig
    limits: LimitsConfig
    pools: tuple[PoolConfig, ...]
    routing: RoutingConfig
    scrape: ScrapeConfig = ScrapeConfig()
    health: HealthConfig = HealthConfig()
    upstream: UpstreamConfig = UpstreamConfig()
    server: ServerConfig = ServerConfig()
    state: StateConfig = StateConfig()
    auth: AuthConfig = AuthConfig()
    canary: CanaryConfig = CanaryConfig()

    @model_validator(mode="after")
    def _check(self) -> Config:
        if not self.pools:
            raise ValueError("at least one pool is required")
        if not any("generate" in p.serves for p in self.pools):
            raise ValueError("no pool serves `generate`")
        generating = [p for p in self.pools if "generate" in p.serves]
        if len({"responses" in p.serves for p in generating}) > 1:
            raise ValueError("list `responses` in `serves` of every pool that serves `generate`, or of none")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate pool name in {names}")
        urls = [u for p in self.pools for u in p.endpoints]
        if len(set(urls)) != len(urls):
            raise ValueError("an endpoint URL appears in more than one pool")
        cap = self.limits.max_context_tokens
        for pool in self.pools:
            limit = self.pool_limit(pool)
            if limit > cap:
                raise ValueError(
                    f"pools[{pool.name}].max_context_tokens ({limit}) exceeds "
                    f"limits.max_context_tokens ({cap})"
                )
            engine = pool.engine
            if engine is not None and engine.context_length is not None and limit > engine.context_length:
                raise ValueError(
                    f"pools[{pool.name}].max_context_tokens ({limit}) exceeds "
                    f"engine.context_length ({engine.context_length})"
                )
            if pool.speculative and pool.draft_reserved_tokens is not None and engine is not None:
                derived = engine.reserved_draft_tokens()
                if engine.speculative_algorithm in EAGLE_FAMILY and derived != pool.draft_reserved_tokens:
                    raise ValueError(
                        f"pools[{pool.name}].draft_reserved_tokens ({pool.draft_reserved_tokens}) "
                        f"differs from the engine's reserved tokens ({derived})"
                    )
            if (engine is not None and engine.draft_max_positions is not None
                    and engine.draft_max_positions < limit):
                raise ValueError(
                    f"pools[{pool.name}]: the drafter's max positions "
                    f"({engine.draft_max_positions}) are below the pool's context limit ({limit})"
                )
            if pool.speculative and pool.reserved_tokens >= limit:
                raise ValueError(f"pools[{pool.name}]: reserved draft tokens leave no room")
            if self.upstream.keepalive_timeout_s >= pool.engine_keepalive_s:
                raise ValueError(
                    f"upstream.keepalive_timeout_s ({self.upstream.keepalive_timeout_s}) must be "
                    f"below pools[{pool.name}].engine_keepalive_s ({pool.engine_keepalive_s})")
        return self

    def pool_limit(self, pool: PoolConfig) -> int:
        """The pool's context limit (tokens): its own, else the engine's, else the global cap."""
        if pool.max_context_tokens is not None:
            return pool.max_context_tokens
        if pool.engine is not None and pool.engine.context_length is not None:
            return min(pool.engine.context_length, self.limits.max_context_tokens)
        return self.limits.max_context_tokens

    def pool(self, name: str) -> PoolConfig:
        """The pool called ``name``; raises ``KeyError`` when there is none."""
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)


class SaturationOverride(_Strict):
    """Overrides of ``routing.saturation`` (requests); a missing key keeps the YAML value."""

    enter: PositiveInt | None = None
    exit: NonNegativeInt | None = None


class RoutingOverride(_Strict):
    """Overrides of ``routing`` (``long_prompt_tokens`` in tokens)."""

    long_prompt_tokens: PositiveInt | None = None
    saturation: SaturationOverride | None = None


class Overrides(_Strict):
    """Runtime overrides of routing thresholds (``PUT /admin/config``), shared by all replicas.

    The document is ``{"routing": {"long_prompt_tokens": N, "saturation": {"enter": E,
    "exit": X}}}`` with every key optional; the YAML stays the base and ``Overrides()`` (empty)
    means "YAML values". Validation is the YAML's: strict integers, unknown keys refused, and
    :meth:`apply` re-checks the merged ``routing`` (``exit < enter``).
    """

    routing: RoutingOverride = RoutingOverride()

    def flat(self) -> dict[str, int]:
        """The set values by dotted key, e.g. ``{"routing.saturation.enter": 16}``."""
        out: dict[str, int] = {}
        r = self.routing
        if r.long_prompt_tokens is not None:
            out["routing.long_prompt_tokens"] = r.long_prompt_tokens
        if r.saturation is not None:
            if r.saturation.enter is not None:
                out["routing.saturation.enter"] = r.saturation.enter
            if r.saturation.exit is not None:
                out["routing.saturation.exit"] = r.saturation.exit
        return out

    def apply(self, routing: RoutingConfig) -> RoutingConfig:
        """``routing`` with these overrides merged in, validated like the YAML.

        Raises:
            ConfigError: when the merged thresholds are invalid (e.g. ``exit >= enter``).
        """
        if not self.flat():
            return routing
        data = routing.model_dump()
        r = self.routing
        if r.long_prompt_tokens is not None:
            data["long_prompt_tokens"] = r.long_prompt_tokens
        if r.saturation is not None:
            for key in ("enter", "exit"):
                value = getattr(r.saturation, key)
                if value is not None:
                    data["saturation"][key] = value
        try:
            return RoutingConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError("invalid overrides:\n" + _format_errors(exc, prefix="routing")) from None


def parse_overrides(data: Any) -> Overrides:
    """Validate a JSON document into :class:`Overrides`.

    Raises:
        ConfigError: on unknown keys or non-integer / out-of-range values, naming each path.
    """
    if not isinstance(data, dict):
        raise ConfigError("overrides: the document must be a JSON object")
    try:
        return Overrides.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("invalid overrides:\n" + _format_errors(exc)) from None


def _format_errors(exc: ValidationError, prefix: str = "") -> str:
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        parts = ([prefix] if prefix else []) + [str(p) for p in err["loc"]]
        loc = ".".join(parts) or "<root>"
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines)


def _fill_draft_positions(data: dict[str, Any], base: Path) -> None:
    """Read ``draft_max_positions`` from the drafter's config.json when the YAML omits it."""
    import json

    for pool in data.get("pools") or []:
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
    data = _resolve_paths(data, base)
    _fill_draft_positions(data, base)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("invalid config:\n" + _format_errors(exc)) from None


def _resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    import copy

    data = copy.deepcopy(data)

    def resolve(value: Any) -> Any:
        if isinstance(value, str) and value and not value.startswith("/") and "://" not in value:
            candidate = (base / value).resolve()
            return str(candidate)
        return value

    model = data.get("model")
    if isinstance(model, dict) and "tokenizer" in model:
        model["tokenizer"] = resolve(model["tokenizer"])
    auth = data.get("auth")
    if isinstance(auth, dict):
        for key in ("api_keys_file", "admin_api_key_file", "engine_api_key_file"):
            if isinstance(auth.get(key), str):
                auth[key] = resolve(auth[key])
    for pool in data.get("pools") or []:
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
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from None
    return parse_config(data, base_dir=path.resolve().parent)
