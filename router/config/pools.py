"""The pool sections of the config tree (:mod:`router.config.tree`): one :class:`PoolConfig` per
SGLang pool, with its engine launch (:class:`EngineConfig`), Kubernetes discovery
(:class:`DiscoveryConfig`), speed model (:class:`SpeedConfig`) and capabilities, and the
lossless canary that compares the speculative pools with the plain one (:class:`CanaryConfig`).

Checks that span pools or other sections (context limits against ``limits`` and the engine,
reserved draft tokens, keep-alive against ``upstream``) are made by :class:`router.config.tree.Config`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictStr, model_validator

from router.config.base import NonEmptyStr, NonNegativeInt, PositiveFloat, PositiveInt, Strict, Url
from router.reasons import capability_kind

__all__ = [
    "EAGLE_FAMILY",
    "CanaryConfig",
    "DiscoveryConfig",
    "EndpointKind",
    "EngineConfig",
    "PoolConfig",
    "SpeedConfig",
]

#: SGLang speculative algorithms whose drafts occupy output token slots (EAGLE family).
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})


class EngineConfig(Strict):
    """How a pool's SGLang server is launched (``specgate serve``); names are SGLang's
    server arguments (``python -m sglang.launch_server --help``, 0.5.23).

    ``draft_max_positions`` is the drafter's ``max_position_embeddings`` (tokens); when left
    out it is read from ``speculative_draft_model_path/config.json`` if that file exists.

    ``tool_call_parser`` / ``reasoning_parser`` become ``--tool-call-parser`` /
    ``--reasoning-parser`` (e.g. ``llama3``, ``qwen25``; ``qwen3``, ``deepseek-r1``): the names
    SGLang's parsers register (``sglang.srt.function_call``, ``sglang.srt.parser``); None
    leaves the flag out (no tool-call or reasoning parsing, the text stays in ``content``).

    ``lora_paths`` become ``--enable-lora --lora-paths ...``: each entry SGLang's
    ``<name>=<path>`` or a bare ``<path>`` (whose name is the path itself; SGLang 0.5.23
    ``arg_groups/lora_hook.py``). Their names are adapters the pool declares
    (:attr:`PoolConfig.declared_adapters`).
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
    #: SGLang's own OpenTelemetry traces: ``--enable-trace --otlp-traces-endpoint <host:port>``
    #: (OTLP/gRPC, SGLang 0.5.23 ``arg_groups/fields/observability.py``), or an ``http(s)://``
    #: URL for OTLP/HTTP (serving/launch.py sets the exporter protocol), and
    #: ``--otlp-service-name``; None leaves tracing off on the engine.
    otlp_traces_endpoint: NonEmptyStr | None = None
    otlp_service_name: NonEmptyStr | None = None
    cpu: StrictBool = False
    lora_paths: tuple[NonEmptyStr, ...] = ()
    extra_args: tuple[StrictStr, ...] = ()

    @property
    def lora_names(self) -> tuple[str, ...]:
        """The adapter names of ``lora_paths`` (``<name>=<path>``: the name; a bare path: itself)."""
        return tuple(p.split("=", 1)[0] if "=" in p else p for p in self.lora_paths)

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


class DiscoveryConfig(Strict):
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


class SpeedConfig(Strict):
    """A pool's speed model for the predicted-completion choice (:mod:`router.decision.predict`).

    Written by ``specgate calibrate`` from measured load tests (``docs/loadtests.md``).

    Attributes:
        decode_s_per_token: t0, seconds per output token of a batch of one at short context.
        batch_knee: b_knee, the batch (sequences) at which the step's compute equals t0.
        attention_s_per_token: seconds per output token per context token.
        kv_read_s_per_token: seconds per decode step per context token of the whole batch (a
            step reads every running sequence's KV); 0: the step's time does not grow with the
            batch times its context, and a learning router keeps it at 0 for this pool.
        prefill_s_per_token: seconds per uncached prompt token.
        prefill_stall_s_per_token: seconds a request waits per prompt token that other
            requests prefill on its engine while it is in flight (SGLang runs a prefill batch
            in place of a decode step); None: ``prefill_s_per_token``, the engine's own prefill
            speed; 0: prefill never delays another request (a learning router keeps it at 0).
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
    kv_read_s_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    prefill_stall_s_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    max_running_requests: PositiveInt | None = None
    accept_length_greedy: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None
    accept_length_sampled: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = None


class PoolConfig(Strict):
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
            :mod:`router.front.responses`) and the pass-through kinds ``embeddings``, ``rerank``,
            ``score``, ``classify`` (:mod:`router.front.passthrough`). A pool without ``generate``
            is never a generation target; a speculative pool serves only ``generate`` and
            ``responses``.
        capabilities: what a speculative pool may serve beyond plain sampling, a list of
            the capability kinds of :data:`router.reasons.CAPABILITY_KINDS` (the one table;
            :mod:`router.request.capabilities` says what needs each); unknown names fail. Default:
            none of them (requests needing one go to a plain pool, with the kind as the
            decision reason). List a kind only after validating it on the pool's engine
            version (docs/operator-guide.md, "Which requests the speculative pool serves").
            A plain pool serves every kind; the key is refused on it.
        priority_order: which ``priority`` values the pool's engines schedule first:
            ``larger_first`` (SGLang's default) or ``smaller_first`` (SGLang with
            ``--schedule-low-priority-values-first``, vLLM's convention; ai-dynamo/dynamo#6348).
            The router resolves a request's priority in the larger-first convention
            (router/access/admission.py) and sends its negation to a ``smaller_first`` pool.
        follow_engine_context: the pool's limits follow the context length and KV pool its
            engines report (``router/state/engine_limits.py``: an engine restarted smaller is noticed
            at the next scrape); false: the configured limit alone, for engines whose reported
            lengths are not in the router's tokens (the load-test fakes count words).
        lora_adapters: names of LoRA adapters the pool's engines have (``<model>:<name>`` or
            ``lora_path: <name>`` picks one), declared for engines the router does not launch;
            the router also learns them from each engine's ``/v1/models`` (router/state/identity.py).
            An adapter request goes only to endpoints that have the adapter.
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
    capabilities: tuple[StrictStr, ...] | None = None
    priority_order: Literal["larger_first", "smaller_first"] = "larger_first"
    follow_engine_context: StrictBool = True
    lora_adapters: tuple[NonEmptyStr, ...] = ()

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
        for name in self.capabilities or ():
            capability_kind(name)  # the reason table's capability kinds (router.reasons)
        if not self.endpoints and self.discovery is None:
            raise ValueError("a pool needs `endpoints` or a `discovery` block")
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ValueError("duplicate endpoint URL in pool")
        if self.engine is not None and self.engine.speculative_algorithm is not None and not self.speculative:
            raise ValueError("engine.speculative_algorithm is set on a pool with speculative: false")
        if self.engine is not None and self.speculative and self.engine.speculative_algorithm is None:
            raise ValueError("speculative pool's engine has no speculative_algorithm")
        if len(set(self.declared_adapters)) != len(self.lora_adapters) + len(
                self.engine.lora_paths if self.engine is not None else ()):
            raise ValueError("an adapter is named twice in `lora_adapters` and `engine.lora_paths`")
        if self.declared_adapters and "generate" not in self.serves:
            raise ValueError("LoRA adapters are for a pool that serves `generate`")
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
    def declared_adapters(self) -> frozenset[str]:
        """The adapters the pool declares: ``lora_adapters`` and the names of ``engine.lora_paths``."""
        names = self.engine.lora_names if self.engine is not None else ()
        return frozenset((*self.lora_adapters, *names))

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


class CanaryConfig(Strict):
    """The live lossless canary (:mod:`router.loops.canary`): greedy prompts sent to each speculative
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
