"""The sections of the config tree (:mod:`router.config.tree`) about the router process itself:
where it listens and how it drains (:class:`ServerConfig`), what its replicas share
(:class:`StateConfig`, :class:`CircuitBreakerConfig`), who may call it (:class:`AuthConfig`) and
the window of recent requests it keeps for the pool planner (:class:`PlannerConfig`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, StrictBool, StrictStr, model_validator

from router.config.base import EnvName, PositiveFloat, PositiveInt, Strict
from router.config.limits import RateLimitConfig

__all__ = [
    "ENGINE_FIELDS",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "AuthConfig",
    "CircuitBreakerConfig",
    "EngineFieldsConfig",
    "HeaderLimitsConfig",
    "PlannerConfig",
    "PriorityConfig",
    "PriorityGrant",
    "ServerConfig",
    "StateConfig",
    "TracingConfig",
]

#: The priority values the router forwards (a signed 32-bit integer). SGLang 0.5.23 declares
#: ``priority`` as a plain Python ``int`` on its chat, completions and responses requests, so
#: it would take any integer; the router bounds it so no unbounded value reaches an engine.
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1

PriorityValue = Annotated[int, Field(strict=True, ge=PRIORITY_MIN, le=PRIORITY_MAX)]


class PriorityGrant(Strict):
    """What one API key may do with the engine's ``priority`` (SGLang's convention: a larger
    value is more important unless the engine runs ``--schedule-low-priority-values-first``).

    Attributes:
        min: the smallest value the key's requests may carry; lower ones are raised to it.
        max: the largest value; higher ones are lowered to it.
        default: the value sent when the request names none (None: no ``priority`` sent).
    """

    min: PriorityValue = PRIORITY_MIN
    max: PriorityValue = PRIORITY_MAX
    default: PriorityValue | None = None

    @model_validator(mode="after")
    def _check(self) -> PriorityGrant:
        if self.min > self.max:
            raise ValueError("min must not exceed max")
        if self.default is not None and not self.min <= self.default <= self.max:
            raise ValueError("default must lie within [min, max]")
        return self


class PriorityConfig(Strict):
    """Who may set the engine's ``priority`` (body field ``priority``, or the header
    ``x-specgate-priority``); router/access/admission.py applies it.

    Attributes:
        default: the value sent for requests whose key has no grant (and for every request
            when client authentication is off); None: none is sent, so the engine uses its own
            default.
        keys: per client key (its SHA-256 digest in lowercase hex, as in
            ``speculation_defaults``), the range it may use and its default.
    """

    default: PriorityValue | None = None
    keys: dict[Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{64}$")],
               PriorityGrant] = {}  # noqa: RUF012 (a pydantic field)


#: Request fields of SGLang 0.5.23's chat, completions and responses requests that steer the
#: engine itself rather than the generation a client asked for (``protocol.py``:
#: ``PDRoutingFields``, ``data_parallel_rank``, ``custom_logit_processor``/``custom_params``,
#: ``return_hidden_states``, ``return_routed_experts``), by what the router does with a client's
#: value (router/access/engine_fields.py): ``strip`` (placement directives the router owns: dropped,
#: the answer is the same wherever it runs; SGLang's own gateway overwrites the bootstrap room
#: too, sgl-project/sglang#40125), ``refuse`` (400 ``unsupported_parameter``: dropping them
#: would change the answer silently) or ``own`` (the engine request's id: a client's passes
#: through unless it is in the router's own namespace, ``specgate-``, where it would collide
#: with another client's request: then 400 ``invalid_value``). One table: the config's names,
#: the metric's ``field`` label and the operator guide's list come from it.
ENGINE_FIELDS: dict[str, Literal["strip", "refuse", "own"]] = {
    "bootstrap_host": "strip",
    "bootstrap_port": "strip",
    "bootstrap_room": "strip",
    "routed_dp_rank": "strip",
    "data_parallel_rank": "strip",
    "disagg_prefill_dp_rank": "strip",
    "custom_logit_processor": "refuse",
    "custom_params": "refuse",
    "return_hidden_states": "refuse",
    "return_routed_experts": "refuse",
    "session_id": "refuse",
    "session_params": "refuse",
    "rid": "own",
    "request_id": "own",
}

EngineField = Literal[
    "bootstrap_host", "bootstrap_port", "bootstrap_room", "routed_dp_rank", "data_parallel_rank",
    "disagg_prefill_dp_rank", "custom_logit_processor", "custom_params", "return_hidden_states",
    "return_routed_experts", "session_id", "session_params", "rid", "request_id"]


class EngineFieldsConfig(Strict):
    """Which callers may send the engine-internal fields of :data:`ENGINE_FIELDS` through to the
    engine (router/access/engine_fields.py); nobody by default.

    Attributes:
        allow: fields every caller may send (for a router that only trusted callers reach).
        keys: per client key (its SHA-256 digest in lowercase hex, as in
            ``auth.priority.keys``), the fields its requests may send, on top of ``allow``.
    """

    allow: tuple[EngineField, ...] = ()
    keys: dict[Annotated[str, Field(strict=True, pattern=r"^[0-9a-f]{64}$")],
               tuple[EngineField, ...]] = {}  # noqa: RUF012 (a pydantic field)


class HeaderLimitsConfig(Strict):
    """Limits on a request's head (request line and header fields), enforced as bytes arrive
    (:mod:`router.front.http_limits`); over one: 431, the connection closed, a metric counted.

    Attributes:
        max_bytes: the whole head, request line and header fields with their line ends (bytes;
            Envoy's default is 60 KiB).
        max_fields: header fields per request (Envoy's default 100).
        max_field_bytes: one field's name and value, or the request target (bytes).
        head_timeout_s: seconds a request's head may take to arrive, counted from the
            connection's start or the end of its previous response (a client dripping header
            bytes, idle first or not): then 408 and the connection closed.
    """

    max_bytes: Annotated[int, Field(strict=True, ge=1024, le=16 * 1024 * 1024)] = 64 * 1024
    max_fields: Annotated[int, Field(strict=True, ge=8, le=10_000)] = 100
    max_field_bytes: Annotated[int, Field(strict=True, ge=256, le=16 * 1024 * 1024)] = 8 * 1024
    head_timeout_s: PositiveFloat = 30.0


class ServerConfig(Strict):
    """Where the router listens, and what a request's head may be (``headers``)."""

    host: StrictStr = "127.0.0.1"
    port: Annotated[int, Field(strict=True, ge=0, le=65535)] = 8000
    reload_interval_s: PositiveFloat = 1.0
    log_requests: StrictBool = True
    #: Graceful drain (SIGTERM or ``GET /drain``, see router/front/drain.py): seconds the listener
    #: stays open after the drain starts (``/ready`` answers 503 at once, so endpoints
    #: propagate while requests that still arrive are served).
    drain_listen_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 5.0
    #: Seconds requests still in flight get after the listener closed; then each is cut with
    #: a ``router_shutdown`` error (a stream: one terminal SSE event) and aborted upstream.
    drain_timeout_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 30.0
    headers: HeaderLimitsConfig = HeaderLimitsConfig()
    #: Seconds a request's body may take to arrive once its head did, one second more per
    #: ``body_min_rate_bytes_s`` bytes of it received (router/front/http_limits.py; Apache's
    #: ``RequestReadTimeout body=20,MinRate=500``): a body dripped a byte at a time or stalled
    #: mid-way is then answered 408 and the connection closed, while a large body that keeps
    #: arriving at that rate or faster is never cut. Time the server itself stops reading (a
    #: pipelined request waiting its turn) does not count.
    body_timeout_s: PositiveFloat = 20.0
    #: Body bytes that extend ``body_timeout_s`` by one second each: the slowest steady upload
    #: that is never cut (bytes/s).
    body_min_rate_bytes_s: PositiveInt = 500
    #: Seconds a client connection may stay idle with no request on it: before its first
    #: byte, and from the end of a response to the next request's first byte; then it is
    #: closed (router/front/http_limits.py). Behind a load balancer that reuses connections, set it
    #: above the balancer's own idle timeout (AWS ALB: 60 s), so the router is not the side
    #: that closes a connection the balancer is about to reuse.
    keepalive_timeout_s: PositiveFloat = 30.0
    #: Seconds the router keeps reading (and discarding) what a client still sends after it
    #: answered early and closes the connection (431, 408, 413, 417, a 400 for bad framing):
    #: the answer is followed by a FIN, and the connection closes when the client closes or
    #: this has passed; closing at once would reset the connection under a client still
    #: uploading and lose the answer (nginx's ``lingering_time``).
    linger_s: PositiveFloat = 5.0
    #: Threads that render large chat prompts and count tokens exactly, off the event loop
    #: (the Rust tokenizer releases the GIL, so they run in parallel). None: the CPUs this
    #: process may use (its affinity, capped by a cgroup CPU quota) minus one for the event
    #: loop, at least 2 and at most 8 (:func:`router.app.asgi.tokenizer_threads`). Read at start.
    tokenizer_threads: Annotated[int, Field(strict=True, ge=1, le=64)] | None = None


class PlannerConfig(Strict):
    """The live window that ``specgate plan`` sizes the pools from (:mod:`router.front.planwindow`,
    served on ``GET /admin/plan/window``).

    The router keeps, per process, a ring of its most recent finished generation requests
    (arrival, prompt / cached / output tokens, budget, temperature class, ``n``, pool): at
    most ``window_requests`` of them, none older than ``window_s`` seconds. Memory: about
    500 bytes per request, its features kept until the window is read (2 MB at the default). A change applies on reload (the ring is
    resized at the next finished request, keeping the newest entries).

    Attributes:
        window_requests: requests kept at most (the oldest dropped first).
        window_s: age (s, from arrival) past which a request leaves the window.
    """

    window_requests: PositiveInt = 4096
    window_s: PositiveFloat = 900.0


class TracingConfig(Strict):
    """OpenTelemetry traces of the router (:mod:`router.ops.tracing`); off by default.

    Attributes:
        enabled: export spans (a server span per request, a client span per upstream attempt).
        endpoint: the OTLP/HTTP traces endpoint (protobuf), e.g. a collector's
            ``http://otel-collector:4318/v1/traces``.
        sampler_ratio: the share of new traces sampled (``TraceIdRatioBased``); a client's
            sampled flag is followed (``ParentBased``).
        service_name: the ``service.name`` resource attribute.
        resource_attributes: more resource attributes (``deployment.environment``...).
        forward_baggage: forward the client's W3C ``baggage`` header to the engine (off: it can
            carry user data); applies with tracing on or off.
        export_timeout_s: seconds one export may take.
    A reload that changes it builds a new tracer; requests in flight finish their spans in the
    old one, which is shut down once they are done (router/app/tracing_reload.py).
    """

    enabled: StrictBool = False
    endpoint: StrictStr = "http://127.0.0.1:4318/v1/traces"
    sampler_ratio: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 1.0
    service_name: StrictStr = "specgate-router"
    resource_attributes: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    forward_baggage: StrictBool = False
    export_timeout_s: PositiveFloat = 10.0


class CircuitBreakerConfig(Strict):
    """The circuit breaker in front of every shared-state (Redis) call.

    Attributes:
        failure_threshold: consecutive failed calls (timeout, refused, error) that open it.
        reset_after_s: seconds it stays open (no call is made) before one probe call is let
            through (half-open); the probe's success closes it, its failure reopens it.
    """

    failure_threshold: PositiveInt = 3
    reset_after_s: PositiveFloat = 1.0


class StateConfig(Strict):
    """Where replicas share in-flight leases, bypass flags and routing overrides.

    ``memory`` (default) keeps everything in the process: right for one replica. ``redis``
    shares it through one Redis (see :mod:`router.shared.state` for the algorithm and key layout); a
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
        topology: ``standalone`` (one primary), ``cluster`` (Redis Cluster: the URL names any
            node; redirections are followed) or ``sentinel`` (the URL lists the sentinels,
            ``redis://[:password@]host:port[,host:port...]/db``; the primary of
            ``sentinel_master`` is asked of them and asked again after a failover),
            router/shared/redis_client.py. A standalone client that meets a cluster node (``MOVED``)
            switches to the cluster client by itself.
        sentinel_master: the primary's name in the sentinels' config (``topology: sentinel``).
    """

    backend: Literal["memory", "redis"] = "memory"
    topology: Literal["standalone", "cluster", "sentinel"] = "standalone"
    sentinel_master: Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_.-]{1,64}$")] = "mymaster"
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


class AuthConfig(Strict):
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
            :data:`router.request.capabilities.SPECULATION_MODES`) its requests get when they send
            none; keyed by the key's SHA-256 digest in lowercase hex
            (``printf %s "$KEY" | sha256sum``), so no key is written here.
        priority: which keys may set the engine's ``priority`` and within which range
            (:class:`PriorityConfig`); a key without a grant never sets it.
        rate_limits: per-key request, token and concurrency limits
            (:class:`router.config.limits.RateLimitConfig`, applied by router/access/limits.py).
        engine_fields: which callers may send engine-internal fields
            (:class:`EngineFieldsConfig`, :data:`ENGINE_FIELDS`).
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
                               Literal["off", "auto", "on"]] = {}  # noqa: RUF012 (a pydantic field)
    #: Who may set the engine's ``priority`` (:class:`PriorityConfig`).
    priority: PriorityConfig = PriorityConfig()
    rate_limits: RateLimitConfig = RateLimitConfig()
    #: Who may send engine-internal fields (:class:`EngineFieldsConfig`; nobody by default).
    engine_fields: EngineFieldsConfig = EngineFieldsConfig()

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
