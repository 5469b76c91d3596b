"""Every router series, under one prefix (``specgate_``), in a registry passed in.

Labels are bounded: ``pool`` (config pool names, or ``none`` for refused requests),
``reason`` (:class:`router.decision.policy.Reason` values plus the rejection kinds below), ``status``
(HTTP status codes the router answers), ``endpoint`` (config endpoint URLs), ``result``.
The engine's own metric names (``sglang:*``) are never reused.

Pass-through requests (:mod:`router.front.passthrough`) use their kind as ``reason``: ``embeddings``,
``rerank``, ``score``, ``classify``.

Rejection reasons used with ``pool="none"``: ``context_cap``, ``invalid_request``,
``request_too_large``, ``no_healthy_upstream``, ``unauthorized``, ``rate_limited``.

Shared state (:mod:`router.shared.state`): ``op`` is ``sync`` (the batched lease/flag/override script),
``overrides`` (an admin write) or ``rate_limit`` (a per-key limit script, router/access/limits.py);
``result`` is ``ok``, ``timeout``, ``connection_error``,
``auth_error`` (NOAUTH, WRONGPASS, NOPERM), ``readonly``, ``moved``, ``cluster_down``, ``error``
(:func:`router.shared.redis_client.failure_kind`) or ``short_circuit`` (refused by the open circuit
breaker). ``key`` of the routing
threshold series is ``long_prompt_tokens``, ``saturation_enter`` or ``saturation_exit``.

Discovery (:mod:`router.loops.discovery`): ``state`` of ``specgate_discovered_endpoints`` is
``ready``, ``terminating`` (routed as the last resort) or ``draining``; ``state`` of
``specgate_endpoints`` (every pool) is ``healthy``, ``unknown``, ``unhealthy`` or ``draining``;
``reason`` of a watch restart is ``expired`` (410, re-list), ``error`` (backoff) or ``resync``.
``specgate_suspect_truncations_total{pool}``: responses to a ``tools`` request that ended
``stop`` with only reasoning (no content, no tool call); with
``specgate_completion_tokens_total``, ``specgate_reasoning_tokens_total`` (clamped to the
completion tokens) and ``specgate_usage_inconsistent_total`` (:mod:`router.upstream.observe`). Discovered endpoint URLs
(pod IPs) appear only in ``specgate_scrape_failures_total``. Engines changing behind their
address (router/state/identity.py, router/state/engine_limits.py): ``trigger`` of
``specgate_engine_rechecks_total`` is ``served_model``, ``context_length``, ``kv_tokens``,
``restart`` or ``reconnect``; ``direction`` of ``specgate_pool_context_limit_changes_total`` is
``down`` or ``up``.
API keys never appear in any series.
"""

from __future__ import annotations

import platform
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

__all__ = ["LoopCounter", "LoopHistogram", "RouterMetrics", "set_or_clear"]


class LoopCounter:
    """A labelled counter written only from the event-loop thread, so without locks.

    prometheus_client's ``Counter`` takes a mutex in ``labels()`` and in ``inc()``; on the
    proxy's hot path (every request) that is avoidable work (docs/performance.md). The values live in a
    plain dict keyed by the label tuple and are exported by :class:`_LoopCollector` when
    ``/metrics`` is read (on the same loop, so no torn reads). Not for use from other
    threads.

    Args:
        name: series name without ``_total`` (exported as ``<name>_total``).
        documentation: help text.
        labelnames: label names; :meth:`inc` takes the values in this order.
    """

    __slots__ = ("documentation", "labelnames", "name", "values")

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        """Add ``amount`` (>= 0) to the series with label values ``labels``."""
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in self.values.items():
            family.add_metric(labels, value)
        return family


class LoopHistogram:
    """A labelled histogram written only from the event-loop thread (see :class:`LoopCounter`).

    Args:
        name: series name (exported as ``<name>_bucket``, ``_sum`` and ``_count``).
        documentation: help text.
        labelnames: label names.
        buckets: increasing finite upper bounds; ``+Inf`` is added. A value ``v`` counts in
            every bucket with ``le >= v`` (Prometheus semantics).
    """

    __slots__ = ("bounds", "documentation", "labelnames", "name", "series")

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        """Record ``value`` in the series with label values ``labels``."""
        entry = self.series.get(labels)
        if entry is None:
            entry = self.series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        entry[0][bisect_left(self.bounds, value)] += 1
        entry[1][0] += value

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, (counts, total) in self.series.items():
            cumulative, running = [], 0
            for bound, count in zip((*self.bounds, float("inf")), counts):
                running += count
                cumulative.append((floatToGoString(bound), running))
            family.add_metric(labels, cumulative, total[0])
        return family


class _LoopCollector:
    """Exports :class:`LoopCounter`/:class:`LoopHistogram` series from a registry."""

    def __init__(self, metrics: Sequence[LoopCounter | LoopHistogram]) -> None:
        self._metrics = tuple(metrics)

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            yield metric.collect()

    def describe(self) -> Iterator[Metric]:
        for metric in self._metrics:
            family = (CounterMetricFamily if isinstance(metric, LoopCounter) else HistogramMetricFamily)(
                metric.name, metric.documentation, labels=metric.labelnames)
            yield family

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class LearningSeries:
    """The live speed models' series (:mod:`router.decision.learn`; ``routing.learning``), set at each
    ``/metrics`` read: ``specgate_speed_model{pool,param}`` (``decode_s_per_token``,
    ``batch_knee``, ``attention_s_per_token``, ``kv_read_s_per_token``, ``prefill_s_per_token``,
    ``prefill_stall_s_per_token``: seconds, sequences),
    ``specgate_speed_model_observations{pool}`` (requests taken), ``..._error{pool}`` (relative
    prediction error, exponentially averaged; -1 before any), ``..._age_seconds{pool}`` (since
    the last observation; -1: never), ``specgate_accept_length_learned{pool,class,bucket}``
    (measured tau per temperature class and context bucket, ``le_<tokens>`` or ``gt_<tokens>``).
    The checked predictions (:mod:`router.decision.prediction_check`), per pool, ``kind`` (``completion``,
    ``ttft``), class and bucket over the recent checks: ``specgate_prediction_error`` (median
    relative error), ``specgate_prediction_bias`` (median signed relative error: > 0 predicted
    too slow), ``specgate_prediction_checks`` (checks counted); ``specgate_prediction_fallback{pool}``
    (1 while the pool's decisions join the shorter queue) and
    ``specgate_prediction_fallbacks_total{pool}`` (times the fallback turned on);
    ``specgate_accept_length_check_error{pool,class}``: the learned accept length against the
    engines' live gauge, ``(learned - gauge) / gauge`` (absent while either is unknown).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.param = Gauge("specgate_speed_model", "The pool's live speed model, by parameter.",
                           ["pool", "param"], registry=registry)
        self.observations = Gauge("specgate_speed_model_observations",
                                  "Finished requests the pool's speed model has taken.", ["pool"], registry=registry)
        self.error = Gauge("specgate_speed_model_error",
                           "Relative error of the speed model's predictions (EWMA; -1 before any).",
                           ["pool"], registry=registry)
        self.age = Gauge("specgate_speed_model_age_seconds",
                         "Seconds since the speed model's last observation (-1: never).", ["pool"], registry=registry)
        self.accept_length = Gauge(
            "specgate_accept_length_learned",
            "Measured accept length per temperature class and context bucket (tokens per verify step).",
            ["pool", "class", "bucket"], registry=registry)
        cell = ["pool", "kind", "class", "bucket"]
        self.prediction_error = Gauge("specgate_prediction_error",
                                      "Median relative error of the pool's checked predictions (recent checks).",
                                      cell, registry=registry)
        self.prediction_bias = Gauge("specgate_prediction_bias",
                                     "Median signed relative error of the checked predictions (> 0: too slow).",
                                     cell, registry=registry)
        self.prediction_checks = Gauge("specgate_prediction_checks",
                                       "Recent checked predictions the error is over.", cell, registry=registry)
        self.fallback = Gauge("specgate_prediction_fallback",
                              "1 while the pool's predictions are off and decisions join the shorter queue.",
                              ["pool"], registry=registry)
        self.accept_length_error = Gauge(
            "specgate_accept_length_check_error",
            "(learned - live gauge) / live gauge of a speculative pool's accept length per class (absent: unknown).",
            ["pool", "class"], registry=registry)
        self.fallbacks = Counter("specgate_prediction_fallbacks",
                                 "Times the pool's prediction fallback turned on.", ["pool"], registry=registry)


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specgate")
    except PackageNotFoundError:
        return "unknown"


class _WithoutCreated:
    """A registry's metrics minus prometheus_client's ``*_created`` samples (each counter's and
    histogram's creation time: a second series per series that no rule or dashboard reads)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():  # fresh Metric objects on every collect
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric


def set_or_clear(gauge: Gauge, labels: Sequence[str], value: float | None) -> None:
    """Set ``gauge{labels}`` to ``value``, or remove that series when ``value`` is None (an
    unknown value is absent, not 0: a rule such as ``< 1.9`` must not fire on "not measured")."""
    if value is None:
        try:
            gauge.remove(*labels)
        except KeyError:
            pass
    else:
        gauge.labels(*labels).set(value)


class RouterMetrics:
    """The router's Prometheus series.

    Args:
        registry: where to register (one per app, so two apps can live in one process).
        version: the ``version`` label of ``specgate_build_info`` (default: the installed
            specgate's, ``unknown`` when it is not installed).
    """

    def __init__(self, registry: CollectorRegistry, version: str | None = None) -> None:
        self.registry = registry
        self.learning = LearningSeries(registry)
        self.build_info = Gauge(
            "specgate_build_info", "Always 1: the running router's version and Python.", ["version", "python"],
            registry=registry)
        self.build_info.labels(version or _installed_version(), platform.python_version()).set(1)
        # Per-request series: lock-free, written on the event loop only (LoopCounter).
        self._request_series()
        self._response_series()
        self._rate_limit_series(registry)
        self._engine_field_series(registry)
        registry.register(_LoopCollector([self.requests, self.request_duration, self.time_to_first_byte,
                                          self.prompt_tokens, self.upstream_failures, self.upstream_aborts,
                                          self.upstream_stale_retries, self.engine_rejections,
                                          self.predicted_completion, self.completion_tokens,
                                          self.reasoning_tokens, self.usage_inconsistent,
                                          self.suspect_truncations, self.header_limit_rejections,
                                          self.framing_rejections, self.priority_requests]))
        self._prefix_series(registry)
        self._pool_series(registry)
        self._shared_state_series(registry)
        self._control_series(registry)
        self._engine_series(registry)

    def _request_series(self) -> None:
        """Per-request series: decision, latency, prompt size, upstream failures (loop-only)."""
        self.requests = LoopCounter(
            "specgate_requests", "Requests answered, by model (a configured name; none: refused before "
            "its model was resolved), pool, decision reason and HTTP status.",
            ["model", "pool", "reason", "status"])
        self.request_duration = LoopHistogram(
            "specgate_request_duration_seconds", "Time from request receipt to the last byte sent.",
            ["pool"], _LATENCY_BUCKETS)
        self.time_to_first_byte = LoopHistogram(
            "specgate_time_to_first_byte_seconds",
            "Time from request receipt to the first body byte relayed from the engine.",
            ["pool"], _LATENCY_BUCKETS)
        self.prompt_tokens = LoopHistogram(
            "specgate_prompt_tokens",
            "Prompt length used for the decision (tokens): kind=exact (counted with the model's "
            "tokenizer) or kind=upper_bound (byte-length bound, where no threshold lay within "
            "the bounds).", ["kind"],
            (64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144))
        self.upstream_failures = LoopCounter(
            "specgate_upstream_failures", "Upstream failures seen by the proxy, by kind.", ["pool", "kind"])
        self.upstream_aborts = LoopCounter(
            "specgate_upstream_aborts", "abort_request calls sent after a client went away or a timeout.",
            ["pool"])
        self.predicted_completion = LoopHistogram(
            "specgate_predicted_completion_seconds",
            "Predicted completion time of the chosen pool, for requests routed by prediction.",
            ["pool"], _LATENCY_BUCKETS)
        self.upstream_stale_retries = LoopCounter(
            "specgate_upstream_stale_connection_retries",
            "Requests resent once on a fresh connection after a reused keep-alive connection "
            "broke before any response byte.", ["pool"])
        self.engine_rejections = LoopCounter(
            "specgate_engine_rejections",
            "Engine refusals before the first byte, by pool and reason (http_503, http_429, "
            "stream_error: a 429/503 error event in a 200 stream, stream_abort: an abort "
            "before any content, body_abort: the same in a non-streamed 200).", ["pool", "reason"])

    def _response_series(self) -> None:
        """Response usage and endings (router.upstream.observe), header limits, priority sources (loop-only)."""
        self.completion_tokens = LoopCounter(
            "specgate_completion_tokens", "usage.completion_tokens of chat responses.", ["pool"])
        self.reasoning_tokens = LoopCounter(
            "specgate_reasoning_tokens",
            "usage reasoning tokens of chat responses, clamped to [0, completion_tokens].", ["pool"])
        self.usage_inconsistent = LoopCounter(
            "specgate_usage_inconsistent",
            "Usage blocks whose reasoning tokens exceed completion_tokens (or are negative).", ["pool"])
        self.suspect_truncations = LoopCounter(
            "specgate_suspect_truncations",
            "Responses to a tools request that ended 'stop' with only reasoning (no content, no "
            "tool call).", ["pool"])
        self.header_limit_rejections = LoopCounter(
            "specgate_header_limit_rejections",
            "Requests refused with 431 because their head passed a server.headers limit "
            "(limit: bytes, fields, field_bytes), or with 408 because it arrived slower than "
            "server.headers.head_timeout_s (limit: head_timeout); the connection was closed.", ["limit"])
        self.framing_rejections = LoopCounter(
            "specgate_request_framing_rejections",
            "Requests cut for their body's framing (router/front/http_limits.py): reason body_timeout "
            "(the body did not arrive within server.body_timeout_s after the head: 408) or "
            "malformed (bad chunked framing, a body shorter than its Content-Length, bytes that "
            "are no HTTP request, a Transfer-Encoding whose final coding is not chunked: 400) or "
            "transfer_coding (a coding before a final chunked, such as gzip: 501) or expectation "
            "(an Expect other than 100-continue: 417); "
            "the connection was closed.", ["reason"])
        self.priority_requests = LoopCounter(
            "specgate_priority_requests",
            "Generation requests by where the engine's priority came from (router/access/admission.py): "
            "client (a trusted key's own value), clamped (moved into its key's range), default "
            "(a configured default), ignored (an untrusted client's value dropped), none.",
            ["source"])

    def _engine_field_series(self, registry: CollectorRegistry) -> None:
        """Engine-internal request fields met (router/access/engine_fields.py; loop-only)."""
        self.engine_fields = LoopCounter(
            "specgate_engine_fields",
            "Engine-internal fields in client requests (router/access/engine_fields.py), by field "
            "(router.config.server.ENGINE_FIELDS) and action: stripped (a placement directive "
            "dropped), refused (the request answered 400 unsupported_parameter), forwarded (a "
            "caller allowed by auth.engine_fields).", ["field", "action"])
        registry.register(_LoopCollector([self.engine_fields]))

    def _rate_limit_series(self, registry: CollectorRegistry) -> None:
        """Per-key limits (router/access/limits.py): refusals by limit, checks by mode and result (loop-only)."""
        self.rate_limited = LoopCounter(
            "specgate_rate_limited",
            "Requests refused with 429 by a per-key limit (router/access/limits.py), by limit: requests, "
            "tokens, concurrent.", ["limit"])
        self.rate_limit_checks = LoopCounter(
            "specgate_rate_limit_checks",
            "Per-key limit checks by mode (shared: in Redis; local: state.backend memory; fallback: "
            "Redis unreachable, decided by this replica with auth.rate_limits.local_fraction) and "
            "result (admitted, limited).", ["mode", "result"])
        registry.register(_LoopCollector([self.rate_limited, self.rate_limit_checks]))

    def _prefix_series(self, registry: CollectorRegistry) -> None:
        """Prefix routing: the match ratio per routed request, the index size per pool."""
        self.prefix_match_ratio = LoopHistogram(
            "specgate_prefix_match_ratio",
            "Per routed request with prefix routing on: the estimated fraction of its prompt tokens "
            "cached at the chosen endpoint (router/decision/prefix.py), by pool and endpoint_reason "
            "(prefix_match, rendezvous, least_load, load_guard).", ["pool", "endpoint_reason"],
            (0.0, 0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99))
        registry.register(_LoopCollector([self.prefix_match_ratio]))
        self.prefix_index_blocks = Gauge(
            "specgate_prefix_index_blocks", "Block keys held by a pool's prefix index (memory bound: "
            "routing.prefix_cache.max_blocks_per_endpoint per endpoint).", ["pool"], registry=registry)

    def _pool_series(self, registry: CollectorRegistry) -> None:
        """Pool state copied at each scrape round (``AppState.refresh_gauges``), scrapes, reloads."""
        self.inflight = Gauge(
            "specgate_inflight_requests", "Requests dispatched by this router and not finished.",
            ["pool"], registry=registry)
        self.pool_load = Gauge(
            "specgate_pool_load", "Load a new request would meet (running + queued, or in-flight).",
            ["pool"], registry=registry)
        self.healthy_endpoints = Gauge(
            "specgate_pool_healthy_endpoints", "Healthy endpoints per pool.", ["pool"], registry=registry)
        self.bypass = Gauge(
            "specgate_bypass_active", "1 while speculation is bypassed for a pool, by kind.",
            ["pool", "kind"], registry=registry)
        self.accept_length = Gauge(
            "specgate_pool_accept_length", "Pool's scraped mean accept length (0 when unknown).",
            ["pool"], registry=registry)
        self.accept_length_estimate = Gauge(
            "specgate_accept_length_estimate",
            "Live accept-length estimate per temperature class (tokens per verify step; absent when "
            "unknown or older than routing.acceptance.max_age_s).", ["pool", "class"], registry=registry)
        self.signal_age = Gauge(
            "specgate_signal_age_seconds",
            "Age of a routing signal: signal=scrape (newest successful /metrics scrape of the pool), "
            "acceptance_greedy / acceptance_sampled (last acceptance measurement); -1 when never seen.",
            ["pool", "signal"], registry=registry)
        self.scrape_failures = Counter(
            "specgate_scrape_failures", "Failed /metrics scrapes.", ["pool", "endpoint"], registry=registry)
        self.config_reloads = Counter(
            "specgate_config_reloads", "Config reload attempts, by result.", ["result"], registry=registry)

    def _shared_state_series(self, registry: CollectorRegistry) -> None:
        """The shared state (router/shared/state.py): replicas' in-flight, degraded mode, Redis calls."""
        self.shared_inflight = Gauge(
            "specgate_shared_inflight_requests",
            "In-flight requests of all replicas (shared state; this router's own when not shared).",
            ["pool"], registry=registry)
        self.shared_state_degraded = Gauge(
            "specgate_shared_state_degraded",
            "1 while the shared state (Redis) is unreachable and routing uses local counts.",
            registry=registry)
        self.shared_state_degraded_entries = Counter(
            "specgate_shared_state_degraded_entries", "Times the router entered degraded mode.",
            registry=registry)
        self.shared_state_ops = Counter(
            "specgate_shared_state_ops", "Shared-state (Redis) calls, by operation and result.",
            ["op", "result"], registry=registry)
        self.shared_state_op_duration = Histogram(
            "specgate_shared_state_op_duration_seconds", "Duration of successful shared-state calls.",
            ["op"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
            registry=registry)

    def _control_series(self, registry: CollectorRegistry) -> None:
        """Routing thresholds and overrides, discovery, endpoint states, warm-up, canary, config."""
        self.routing_threshold = Gauge(
            "specgate_routing_threshold",
            "Effective routing threshold (tokens or requests): the YAML's or a runtime override.",
            ["key"], registry=registry)
        self.routing_override_active = Gauge(
            "specgate_routing_override_active", "1 while a runtime override replaces the YAML value.",
            ["key"], registry=registry)
        self.discovered_endpoints = Gauge(
            "specgate_discovered_endpoints",
            "Endpoints of a discovered pool: ready (routable once healthy), terminating (routed "
            "as the last resort while no endpoint is ready) or draining.",
            ["pool", "state"], registry=registry)
        self.endpoints = Gauge(
            "specgate_endpoints",
            "Endpoints per pool by state: healthy, unknown (not yet probed), unhealthy, draining, "
            "warming (green scrapes, waiting for warm-up probes), identity_mismatch (answers, "
            "but serves another model: no request).",
            ["pool", "state"], registry=registry)
        self.discovery_lists = Counter(
            "specgate_discovery_lists",
            "EndpointSlice list calls (start, every watch reconnect, each resync).",
            ["pool"], registry=registry)
        self.discovery_watch_restarts = Counter(
            "specgate_discovery_watch_restarts",
            "EndpointSlice watches restarted, by reason (expired: 410; error: backoff; resync: periodic).",
            ["pool", "reason"], registry=registry)
        self.warmup_probes = Counter(
            "specgate_warmup_probes", "Warm-up probes (one-token generations before an endpoint is "
            "routed, router/loops/warmup.py), by result: ok, timeout, http_error, connect_error, invalid.",
            ["pool", "result"], registry=registry)
        self.canary_rounds = Counter(
            "specgate_canary_rounds", "Lossless canary rounds per speculative pool, by result "
            "(match, mismatch, error).", ["pool", "result"], registry=registry)
        self.canary_mismatch = Gauge(
            "specgate_canary_mismatch", "1 while the last canary round found the pool's greedy output "
            "differs from the plain pool's.", ["pool"], registry=registry)
        self.config_info = Gauge(
            "specgate_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful config load.", registry=registry)
        self.config_restart_pending = Gauge(
            "specgate_config_restart_pending",
            "1 while the loaded config changes a setting the router applies only at start "
            "(server.host/port, state, upstream.client/max_connections/keepalive_timeout_s, the "
            "engines' key source): restart the router to apply it.", registry=registry)

    def _engine_series(self, registry: CollectorRegistry) -> None:
        """What the engines are (router/state/identity.py, router/state/engine_limits.py): limits, re-checks."""
        self.context_limit = Gauge(
            "specgate_pool_context_limit_tokens",
            "The pool's context limit now (tokens): its configured limit, or lower while its "
            "engines report a smaller context length or KV pool (router/state/engine_limits.py).",
            ["pool"], registry=registry)
        self.context_limit_changes = Counter(
            "specgate_pool_context_limit_changes",
            "Times the pool's context limit followed its engines, by direction (down, up).",
            ["pool", "direction"], registry=registry)
        self.engine_rechecks = Counter(
            "specgate_engine_rechecks",
            "Identity re-reads (/v1/models, /server_info) of an engine seen changing, by trigger: "
            "served_model, context_length, kv_tokens (its /metrics changed), restart (a counter "
            "went back, or a new startup_time), reconnect (a failed scrape or a broken connection).",
            ["pool", "trigger"], registry=registry)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format, without the ``*_created`` samples."""
        return generate_latest(_WithoutCreated(self.registry))
