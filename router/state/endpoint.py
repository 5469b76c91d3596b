"""One SGLang server's state: health, in-flight leases, scraped load, back-pressure.

An :class:`Endpoint` belongs to one :class:`router.state.pool.Pool` and is carried over by a reload
when its URL stays (:class:`router.state.runtime.Runtime`), so its health and in-flight count survive.

Health (sgl-project/sglang#9198, sgl-project/sglang#22511): an endpoint starts *unknown* (not routable);
its first successful scrape admits it. Afterwards ``health.failure_threshold`` consecutive
failures eject it and ``health.success_threshold`` consecutive successes re-admit it. A
*slow* failure (timeout) never ejects the last healthy endpoint of its pool: busy is not
dead. A connection failure seen by the proxy ejects at once (passive health).

In-flight accounting: :meth:`Endpoint.lease` returns a :class:`Lease` that increments the
count; :meth:`Lease.release` decrements it exactly once however often it is called. With a
shared state (``state.backend: redis``) the endpoint's *ledger* (:class:`router.shared.state.RedisState`)
is told of both, in memory only (no I/O on the request path); its writer task brings back
``shared_inflight``, the count over all replicas, and :meth:`Endpoint.inflight_view` adds this
replica's own changes since. The load a decision sees is ``max(scraped engine load, that)``.

Warm-up (``health.warmup``, :mod:`router.loops.warmup`): an endpoint with :attr:`Endpoint.warmup_required`
is routable only once it is also *warm*: a number of consecutive one-token generations
succeeded on it (:meth:`Endpoint.record_probe`). Leaving service (``unhealthy``) or a stream
that got no first byte in time (:meth:`Endpoint.record_stall`) makes it cold again.

Back-pressure (sgl-project/sglang#28175): an engine that refused a request for capacity (503,
429, a queue-full event; :mod:`router.upstream.proxy`) is held as saturated for a while
(:meth:`Endpoint.record_backpressure`), without any effect on its health.

Identity and adapters (:mod:`router.state.identity`): :meth:`Endpoint.record_models` stores what the
engine's ``/v1/models`` lists, :meth:`Endpoint.record_server_info` its ``/server_info``, and
every scrape the ``model_name`` label of its ``/metrics``; an endpoint serving another model
than its pool's is not routable (:attr:`Endpoint.identity_error`, reason
``identity_mismatch``), and :attr:`Endpoint.adapters` are the LoRA adapters it has (listed by
the engine or declared by its pool). :attr:`Endpoint.recheck` says why the next scrape must
read the identity again (a failed scrape, a broken connection). :attr:`Endpoint.engine_context`
is the engine's reported limit (:mod:`router.state.engine_limits`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, Self

from yarl import URL

from router.decision.acceptance import AcceptanceTracker
from router.state.engine_metrics import EngineLoad
from router.state.identity import EngineModels, ServerInfo
from router.state.prefill_meter import PrefillMeter
from router.state.snapshots import EndpointValues, endpoint_values

__all__ = ["Endpoint", "Lease", "LeaseLedger"]

log = logging.getLogger("specgate")


class LeaseLedger(Protocol):
    """Told of every lease taken and released (the shared state); in-memory calls only."""

    def acquired(self, endpoint: Endpoint) -> str:
        """Record a new lease on ``endpoint``; returns its id."""
        ...

    def released(self, endpoint: Endpoint, lease_id: str) -> None:
        """Record the release of lease ``lease_id`` (called once per lease)."""
        ...


class Lease:
    """One request's hold on an endpoint's in-flight count; release is idempotent."""

    __slots__ = ("adapter", "endpoint", "lease_id", "prompts_sent", "released", "scrape", "temperature")

    def __init__(self, endpoint: Endpoint, temperature: str = "sampled", adapter: bool = False) -> None:
        self.endpoint = endpoint
        self.released = False
        self.temperature = temperature
        self.adapter = adapter  # a LoRA request: its decode steps are not the base model's acceptance
        self.scrape = endpoint.scrapes  # the scrapes recorded before it started (Endpoint.load)
        #: the endpoint's prompt total after this request's (:class:`router.state.prefill_meter.PrefillMeter`),
        #: set when its prompt was metered; its release settles the prompts up to it
        self.prompts_sent = 0.0
        endpoint.inflight += 1
        endpoint.acceptance.started(temperature, adapter)
        ledger = endpoint.ledger
        self.lease_id = ledger.acquired(endpoint) if ledger is not None else None

    def release(self) -> None:
        """Decrement the endpoint's in-flight count (and tell the ledger), once."""
        if not self.released:
            self.released = True
            endpoint = self.endpoint
            endpoint.inflight -= 1
            if self.scrape < endpoint.scrapes:  # the last scrape counted it as running
                endpoint.finished_since_scrape += 1
            endpoint.acceptance.finished(self.temperature, self.adapter)
            if self.prompts_sent:
                endpoint.prefill.settled(self.prompts_sent)
            ledger = endpoint.ledger
            if ledger is not None and self.lease_id is not None:
                ledger.released(endpoint, self.lease_id)
            if endpoint.draining and endpoint.inflight == 0 and endpoint.on_drained is not None:
                endpoint.on_drained(endpoint)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(eq=False)
class Endpoint:
    """One SGLang server.

    Attributes:
        url: base URL; pool: owning pool's name.
        inflight: requests this router has dispatched and not finished.
        shared_inflight: in-flight requests of all replicas at the last shared-state sync
            (None: unknown, e.g. memory backend or degraded); shared_base: this replica's
            ``inflight`` when that sync's batch was taken; shared_at: its monotonic time (s).
        ledger: the shared state told of leases (None: memory backend).
        healthy: routable (state ``healthy`` and not draining); state:
            ``unknown``/``healthy``/``unhealthy``.
        engine: last scraped :class:`EngineLoad`; scraped_at: its monotonic time (s).
        scrapes: successful scrapes recorded; finished_since_scrape: this router's requests
            that started before the last one and have finished since (:meth:`load`).
        draining: left its discovered pool; in-flight requests finish, no new ones come.
        on_drained: called once the last lease of a draining endpoint is released.
        acceptance: per-class accept-length estimates (:mod:`router.decision.acceptance`).
        observed_at: the ``scraped_at`` of the last scrape fed to ``acceptance``.
        backpressure_until: monotonic time (s) until which the engine's last capacity refusal
            (503, 429, queue-full event; sgl-project/sglang#28175) holds, or None.
        backpressure_count: capacity refusals recorded.
        warmup_required: routable only once :attr:`warm` (``health.warmup.enabled`` for a pool
            that serves ``generate``; set by the runtime).
        warm: enough consecutive warm-up probes succeeded since the endpoint last went cold.
        warm_successes: consecutive successful probes so far.
        warm_detail: why a cold endpoint waits (for ``/ready``), e.g. ``"probe: HTTP 503"``.
        served_models: the model names the engine's ``/v1/models`` lists (None: never read).
        learned_adapters: ``{name: root}`` of the LoRA adapters the engine lists.
        declared_adapters: the adapters its pool declares (set by the runtime).
        adapters: the adapters it has: learned and declared.
        models_at: monotonic time (s) of the last successful ``/v1/models`` read (None: due).
        identity_error: why the endpoint is not routed to (it serves another model), or None.
        labelled_models: the ``model_name`` labels of the last scrape (empty: not exported).
        context_length: the engine's context length (tokens) as last reported (``/metrics``
            ``context_len``, ``/v1/models`` ``max_model_len``, ``/server_info``), None: never.
        kv_tokens: its KV pool (``max_total_num_tokens``, tokens), None: never reported.
        startup: the last ``/server_info`` ``startup_time`` read (a restart changes it).
        recheck: why the next successful scrape must read the identity again, or None.
        speculative: the pool's mode (``pools[].speculative``; set by the runtime), None: not
            checked.
        speculation: the engine's ``speculative_algorithm`` as ``/server_info`` last said
            (``""``: none), None: never said (:mod:`router.state.identity`, "Speculation").
        prefill: the prompt tokens this router sent it (:class:`router.state.prefill_meter.PrefillMeter`).
    """

    url: str
    pool: str
    failure_threshold: int = 3
    success_threshold: int = 2
    inflight: int = 0
    state: str = "unknown"
    consecutive_failures: int = 0
    consecutive_successes: int = 0
    engine: EngineLoad | None = None
    scraped_at: float | None = None
    scrapes: int = 0
    finished_since_scrape: int = 0
    scrape_failures: int = 0
    shared_inflight: int | None = None
    shared_base: int = 0
    shared_at: float | None = None
    ledger: LeaseLedger | None = field(default=None, repr=False)
    draining: bool = False
    on_drained: Callable[[Endpoint], None] | None = field(default=None, repr=False)
    acceptance: AcceptanceTracker = field(default_factory=AcceptanceTracker, repr=False)
    observed_at: float | None = None
    backpressure_until: float | None = None
    backpressure_count: int = 0
    warmup_required: bool = False
    warm: bool = False
    warm_successes: int = 0
    warm_detail: str = "no probe yet"
    served_models: frozenset[str] | None = None
    learned_adapters: Mapping[str, str] = field(default_factory=dict)
    declared_adapters: frozenset[str] = frozenset()
    adapters: frozenset[str] = frozenset()
    models_at: float | None = None
    identity_error: str | None = None
    labelled_models: frozenset[str] = frozenset()
    context_length: int | None = None
    kv_tokens: int | None = None
    startup: object = None
    recheck: str | None = None
    speculative: bool | None = None
    speculation: str | None = None
    prefill: PrefillMeter = field(default_factory=PrefillMeter, repr=False)
    _siblings: list[Endpoint] = field(default_factory=list, repr=False)
    _targets: dict[str, URL] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.adapters = frozenset(self.learned_adapters) | self.declared_adapters

    def target(self, path: str) -> URL:
        """``url + path`` as a parsed ``yarl.URL``, built once per path (aiohttp would
        otherwise parse the string on every request)."""
        url = self._targets.get(path)
        if url is None:
            url = self._targets[path] = URL(self.url + path)
        return url

    @property
    def healthy(self) -> bool:
        """Routable: state ``healthy``, not draining, and warm when warm-up is required."""
        return (self.state == "healthy" and not self.draining and (self.warm or not self.warmup_required)
                and self.identity_error is None)

    @property
    def warming(self) -> bool:
        """Healthy by its scrapes but not yet proven by a warm-up probe (not routable)."""
        return self.warmup_required and not self.warm and self.state == "healthy" and not self.draining

    def record_probe(self, ok: bool, detail: str, needed: int) -> None:
        """One warm-up probe's result (``detail``: what it saw, e.g. ``"HTTP 503"``); ``needed``
        consecutive successes make the endpoint warm, a failure restarts the count."""
        if self.warm:
            return
        if not ok:
            self.warm_successes = 0
            self.warm_detail = f"probe failed: {detail}"
            return
        self.warm_successes += 1
        self.warm_detail = f"{self.warm_successes} of {needed} probes succeeded"
        if self.warm_successes >= needed:
            self.warm = True
            log.info("endpoint %s of pool %s is warm (%d probe(s) succeeded)", self.url, self.pool,
                     self.warm_successes)

    def declare_adapters(self, names: frozenset[str]) -> None:
        """Set the adapters the endpoint's pool declares (``pools[].lora_adapters``)."""
        self.declared_adapters = names
        self.adapters = frozenset(self.learned_adapters) | names

    @property
    def engine_context(self) -> int | None:
        """The engine's limit (tokens): the smaller of its context length and its KV pool as
        last reported (SGLang's scheduler refuses an input that does not fit either), None
        when it reported neither (:mod:`router.state.engine_limits`)."""
        c, kv = self.context_length, self.kv_tokens
        if c is None:
            return kv
        return c if kv is None or c <= kv else kv

    def record_models(self, models: EngineModels, expected: str | None, now: float) -> None:
        """Store one read of the engine's ``/v1/models``; ``expected`` is the model the
        endpoint must serve (None: not checked). A mismatch makes it unroutable, logged once."""
        self.served_models = models.served
        self.learned_adapters = dict(models.adapters)
        self.adapters = frozenset(models.adapters) | self.declared_adapters
        self.models_at = now
        if models.max_model_len is not None:
            self.context_length = models.max_model_len
        self._judge(expected)

    def record_server_info(self, info: ServerInfo, expected: str | None) -> bool:
        """Store one read of the engine's ``/server_info``; True when its ``startup_time``
        differs from the last one read (the engine restarted since)."""
        restarted = self.startup is not None and info.startup_time is not None and info.startup_time != self.startup
        if info.startup_time is not None:
            self.startup = info.startup_time
        if info.context_length is not None:
            self.context_length = info.context_length
        if info.max_total_num_tokens is not None:
            self.kv_tokens = info.max_total_num_tokens
        judge = False
        if info.speculative_algorithm is not None and info.speculative_algorithm != self.speculation:
            self.speculation = info.speculative_algorithm
            judge = True
            if self.speculative and not self.speculation:
                log.warning("endpoint %s of pool %s runs no speculative decoding (its /server_info); it is "
                            "routed to as a speculative engine at plain speed", self.url, self.pool)
        if info.served_model_name is not None and self.served_models is None:
            self.served_models = frozenset((info.served_model_name,))  # no /v1/models read yet
            judge = True
        if judge:
            self._judge(expected)
        return restarted

    def record_labels(self, engine: EngineLoad, expected: str | None) -> None:
        """Take what one scrape says the engine is: its context length and KV pool (when
        exported) and its ``model_name`` labels, judged against ``expected``."""
        if engine.context_len is not None:
            self.context_length = engine.context_len
        if engine.max_total_num_tokens is not None:
            self.kv_tokens = engine.max_total_num_tokens
        if engine.model_names != self.labelled_models:
            self.labelled_models = engine.model_names
            self._judge(expected)

    def _judge(self, expected: str | None) -> None:
        """Set :attr:`identity_error` from the last ``/v1/models`` list and ``/metrics`` labels
        (either one lacking ``expected`` is a mismatch); log a change once."""
        error = None
        if expected is not None:
            for source, names in (("serves", self.served_models), ("is labelled", self.labelled_models or None)):
                if names is not None and expected not in names:
                    error = f"{source} {', '.join(sorted(names)) or 'no model'}, not {expected}"
                    break
        until = f"it serves {expected} again"
        if error is None and self.speculative is False and self.speculation:
            error = f"runs speculative decoding ({self.speculation}), but its pool is plain"
            until = "it runs without speculative decoding"
        if error != self.identity_error:
            if error is not None:
                log.warning("endpoint %s of pool %s is unhealthy (identity_mismatch): it %s; it gets no "
                            "request until %s", self.url, self.pool, error, until)
            else:
                log.info("endpoint %s of pool %s serves %s", self.url, self.pool, expected)
        self.identity_error = error

    def record_stall(self, why: str) -> None:
        """A request got no first byte in time: with warm-up required, the endpoint must be
        proven again by probes before it gets more traffic (a stuck engine stays out), unless
        it is the last routable endpoint of its pool (busy is not dead, as for slow scrapes)."""
        if self.warmup_required and self.warm and any(s.healthy for s in self._siblings if s is not self):
            self._cool(why)

    def _cool(self, why: str) -> None:
        was = self.warm
        self.warm = False
        self.warm_successes = 0
        self.warm_detail = f"waiting for a probe ({why})"
        if was and self.warmup_required:
            log.warning("endpoint %s of pool %s must be proven again by warm-up probes (%s)",
                        self.url, self.pool, why)

    def lease(self, temperature: str = "sampled", adapter: bool = False) -> Lease:
        """Take a lease (in-flight + 1) for a request of ``temperature`` class (``adapter``:
        with a LoRA adapter); release it when the response ends."""
        return Lease(self, temperature, adapter)

    def inflight_view(self, now: float, stale_after_s: float) -> int:
        """In-flight requests over all replicas (requests).

        ``max(local, shared + local - shared_base)`` while the last shared sync is fresh
        (within ``stale_after_s``), else the local count alone.
        """
        if self.shared_inflight is None or self.shared_at is None or now - self.shared_at > stale_after_s:
            return self.inflight
        return max(self.inflight, self.shared_inflight + self.inflight - self.shared_base)

    def load(self, now: float, stale_after_s: float) -> int:
        """``max(scraped running + queued - finished since, in-flight)``; in-flight alone when
        stale (requests).

        In-flight is :meth:`inflight_view` (all replicas when shared). A scrape is a picture
        of the past: the requests of this router that it counted and that finished since are
        taken off it, so a pool whose last request just ended does not read busy until the
        next scrape round (other replicas' finishes still show only at the next scrape).
        """
        inflight = self.inflight_view(now, stale_after_s)
        if self.engine is not None and self.scraped_at is not None and now - self.scraped_at <= stale_after_s:
            return max(self.engine.load - self.finished_since_scrape, inflight)
        return inflight

    def record_backpressure(self, now: float, hold_s: float) -> None:
        """The engine refused a request for capacity: hold that signal for ``hold_s`` seconds
        from ``now`` (monotonic s). Not a health signal: the endpoint stays routable."""
        self.backpressure_count += 1
        until = now + hold_s
        if self.backpressure_until is None or until > self.backpressure_until:
            self.backpressure_until = until

    def backpressured(self, now: float) -> bool:
        """True while a recorded capacity refusal holds (``now``: monotonic s)."""
        return self.backpressure_until is not None and now < self.backpressure_until

    def backpressure_load(self, now: float, stale_after_s: float, floor: int) -> int:
        """:meth:`load`, raised to at least ``floor`` (requests; the pool's saturation
        ``enter`` threshold) while :meth:`backpressured`, so a refusing pool counts as
        saturated and sheds new requests until the hold expires (sgl-project/sglang#28175)."""
        load = self.load(now, stale_after_s)
        return max(load, floor) if self.backpressured(now) else load

    def snapshot_values(self, now: float, stale_after_s: float, floor: int, cached: int,
                        backlog: bool = True) -> EndpointValues:
        """Its :class:`router.state.snapshots.EndpointValues` now (:func:`router.state.snapshots.endpoint_values`
        of its :attr:`healthy`, its :meth:`backpressure_load` with ``floor`` and ``stale_after_s``,
        ``cached`` tokens, its last scrape while fresh and its :meth:`inflight_view`, and with
        ``backlog`` its prefill meter's backlog, else 0); it runs for every endpoint of every
        decision."""
        engine = self.engine
        scraped_at = self.scraped_at
        inflight = self.inflight_view(now, stale_after_s)
        # :meth:`backpressure_load` with the in-flight count read once
        if engine is not None and scraped_at is not None and now - scraped_at <= stale_after_s:
            load = max(engine.load - self.finished_since_scrape, inflight)
        else:
            engine, load = None, inflight
        if self.backpressure_until is not None and now < self.backpressure_until:
            load = max(load, floor)
        meter = self.prefill
        if not backlog or meter.total <= 0.0:  # not read, or no prompt metered: 0
            return endpoint_values(self.url, self.healthy, load, cached, engine, inflight)
        return endpoint_values(self.url, self.healthy, load, cached, engine, inflight, meter.value(now))

    def accept_length(self, now: float, stale_after_s: float) -> float | None:
        """The scraped ``spec_accept_length`` if fresh and positive, else None (unknown)."""
        if self.engine is None or self.scraped_at is None or now - self.scraped_at > stale_after_s:
            return None
        return self.engine.spec_accept_length

    def record_success(self, engine: EngineLoad, *, now: float) -> None:
        """A successful scrape: store the load; count towards (re-)admission."""
        self.engine = engine
        self.scraped_at = now
        self.scrapes += 1
        self.finished_since_scrape = 0
        self.consecutive_failures = 0
        self.consecutive_successes += 1
        if self.state == "unknown" or (
            self.state == "unhealthy" and self.consecutive_successes >= self.success_threshold
        ):
            self._set_state("healthy", f"{self.consecutive_successes} successful scrape(s)")

    def record_failure(self, *, slow: bool, now: float, reason: str = "") -> None:
        """A failed scrape; ``slow`` for a timeout (busy), else dead (refused, reset, 5xx);
        ``reason`` (e.g. the error) goes into the log line of a health change."""
        self.scrape_failures += 1
        self.recheck = "reconnect"  # whatever answers next may be another engine
        self.consecutive_successes = 0
        self.consecutive_failures += 1
        if self.consecutive_failures < self.failure_threshold:
            return
        if slow and self.state == "healthy" and not any(s.healthy for s in self._siblings if s is not self):
            return  # busy, and the last healthy endpoint of its pool: keep it
        self._set_state("unhealthy", f"{self.consecutive_failures} failed scrapes"
                        + (f", last: {reason}" if reason else ""))

    def mark_down(self) -> None:
        """Passive health: the proxy could not connect or the connection broke; eject now."""
        self._set_state("unhealthy", "a proxied request could not connect or its connection broke")
        self.recheck = "reconnect"
        self.consecutive_successes = 0
        self.consecutive_failures = max(self.consecutive_failures, self.failure_threshold)

    def _set_state(self, state: str, why: str) -> None:
        """Change :attr:`state`, logging the change once (WARNING when an endpoint leaves
        service, INFO when it enters it), so operators see pools come and go."""
        if state == self.state:
            return
        self.state = state
        if state == "unhealthy":  # a restarted engine warms up again, and is asked what it serves
            self._cool("it was unhealthy")
            self.models_at = None
        if state == "healthy":
            log.info("endpoint %s of pool %s is healthy (%s)", self.url, self.pool, why)
        else:
            log.warning("endpoint %s of pool %s is %s (%s)", self.url, self.pool, state, why)
