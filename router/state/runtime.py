"""Pool and runtime state: endpoint sets, bypass hysteresis, prefix indexes, overrides.

State lives on instances built by the app's lifespan (never module globals). The policy
never reaches in here: it reads :class:`~router.decision.snapshot.PoolSnapshot` values built by
:meth:`Runtime.snapshots`. One endpoint's health, in-flight leases and load are
:mod:`router.state.endpoint`'s (:class:`~router.state.endpoint.Endpoint`, ``Lease``, re-exported).

Discovered endpoints (pools with a ``discovery`` block): :meth:`Runtime.set_discovered`, whose
membership rules (new, draining, dropped once idle) are :mod:`router.state.membership`'s.

Prefix-cache routing (``routing.prefix_cache``, :mod:`router.decision.prefix`): the runtime holds one
:class:`~router.decision.prefix.PrefixIndex` per pool (carried over by a reload unless the block size
changes); :meth:`Runtime.prefix_matches` reads it for a request, :meth:`Runtime.record_prefix`
writes the decision into it, and :meth:`Runtime.prune_prefix` (each scrape round) forgets the
endpoints that are not healthy members of their pool, so one that comes back starts empty.

Routing overrides (``PUT /admin/config``) live on the :class:`Runtime`: ``Runtime.routing`` is
the YAML's ``routing`` with :class:`~router.config.tree.Overrides` merged in; a reload carries them
over to the new runtime.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from router.access.auth import Auth
from router.config.tree import Config, ConfigError, Overrides, RoutingConfig
from router.decision.acceptance import CLASSES
from router.decision.bypass import FLAGS
from router.decision.hysteresis import advance_prediction_check
from router.decision.learn import (
    MIN_OWN_OBSERVATIONS,
    Observation,
    ObservationBudget,
    SpeedFit,
    context_bucket,
    share_priors,
)
from router.decision.policy import (
    Decision,
    PoolSnapshot,
    Rules,
    batch_context,
    decide,
    flip_points,
    predict_request,
)
from router.decision.prediction_check import PredictionCheck
from router.decision.prefix import PrefixChain, PrefixIndex, PrefixRequest
from router.request.features import PromptCounter, RequestFeatures, TokensPerByte
from router.state.endpoint import Endpoint, Lease, LeaseLedger
from router.state.engine_limits import LimitChange, SmallEndpoint, follow, too_small
from router.state.identity import lacking_adapters, pool_adapters
from router.state.membership import drop_drained, set_discovered
from router.state.pool import Pool
from router.state.snapshot_cache import SnapshotCache
from router.state.snapshots import accept_lengths, endpoint_snapshot

_new_tuple = tuple.__new__

__all__ = ["Endpoint", "Lease", "LeaseLedger", "Pool", "Runtime"]

log = logging.getLogger("specgate")

_NONE: frozenset[str] = frozenset()

#: Distinct ``(max_tokens, n)`` pairs whose flip points a runtime keeps (:meth:`Runtime.flip_points`).
_FLIP_CACHE = 256


class _Derived(NamedTuple):
    """What every decision reads of one ``routing`` value, computed once per value
    (:meth:`Runtime._derived`; an override replaces ``routing`` whole)."""

    #: the ``routing`` it was computed from (None: none yet)
    routing: RoutingConfig | None
    #: the cross-pool affinity ceiling (requests): ``ceil(routing.prefix_cache.
    #: sticky_load_factor * routing.saturation.enter)``; 0 with prefix routing off
    sticky_max_load: int
    #: the load a back-pressured endpoint counts at least (requests): the larger of
    #: ``routing.saturation.enter`` and ``sticky_max_load``
    floor: int
    #: the fields of a :class:`router.decision.prefix.PrefixRequest` after the chain's three: the
    #: config's ``routing.prefix_cache`` thresholds, then ``sticky_max_load``,
    #: ``pool_affinity_ratio`` and ``new_affinity_ratio``
    prefix_tail: tuple[float, int, float, float, int, float, float]


class Runtime:
    """Everything built from one config: pools, endpoints, thresholds, tokenizer, API keys.

    A reload builds a new Runtime (carrying over the :class:`Endpoint` objects of unchanged
    URLs, so in-flight counts and health survive, the ledger and the routing overrides) and
    swaps one reference.

    Building with ``previous`` *adopts* its endpoints: it writes their health thresholds,
    ledger, draining flag and drain callback, and the pools' hysteresis flags, objects the live
    runtime routes with. Call it on the event loop that runs ``previous`` (never in a worker
    thread) and swap right after, with no ``await`` in between; do the I/O (YAML, tokenizer,
    key files) beforehand, off the loop (:func:`router.app.runtime_inputs.load_runtime_inputs`). It does no
    I/O itself. Every endpoint carried over, static or discovered, takes the new config's
    ``health`` thresholds.

    Args:
        config: the validated YAML.
        counter: the prompt token counter.
        previous: the runtime being replaced (reload), or None.
        ledger: the shared state told of leases (default: ``previous``'s; None: memory).
        auth: the resolved API keys (:class:`router.access.auth.Auth`), or None (no auth).
        warmup_gate: endpoints wait for warm-up probes (``health.warmup``) before they are
            routed; True where a :class:`router.loops.warmup.Warmer` runs (the app), else off so a
            runtime built without one still routes (default: ``previous``'s, else False).
    """

    def __init__(self, config: Config, counter: PromptCounter, previous: Runtime | None = None, *,
                 ledger: LeaseLedger | None = None, auth: Auth | None = None,
                 warmup_gate: bool | None = None) -> None:
        self.warmup_gate: bool = warmup_gate if warmup_gate is not None else (
            previous is not None and bool(previous.warmup_gate))
        self.config = config
        self.model_name: str = config.model.name  # the one model it serves (read per request)
        self.counter = counter
        #: tokens per rendered byte of this model's prompts (the estimate of a bounded P); a
        #: reload with the same tokenizer keeps it
        self.prompt_ratio: TokensPerByte = (previous.prompt_ratio if previous is not None
                                            and previous.counter is counter else TokensPerByte())
        self.auth = auth
        self.ledger: LeaseLedger | None = ledger if ledger is not None else (previous.ledger if previous is not None else None)
        self.overrides = Overrides()
        self.routing: RoutingConfig = config.routing
        self.rules = self._rules()
        self.override_error: str | None = None
        self._tie = itertools.count()
        self._derived_now = _Derived(None, 0, 0, (0.0, 0, 0.0, 0.0, 0, 1.0, 1.0))
        self._snapshot_cache = SnapshotCache()
        #: endpoints below their pool's context limit (router/state/engine_limits.py)
        self._small: tuple[SmallEndpoint, ...] = ()
        self._flips_rules: Rules | None = None
        self._flips: dict[tuple[int | None, int], tuple[int, ...]] = {}
        old: dict[tuple[str, str], Endpoint] = {}
        if previous is not None:
            for pool in previous.pools:
                for ep in pool.endpoints.values():
                    old[(pool.name, ep.url)] = ep
        pools = []
        for pc in config.pools:
            eps = []
            if pc.discovery is not None and previous is not None:
                # discovered endpoints stay until the watcher says otherwise (it re-applies its
                # current set to this runtime right after the swap, see router.loops.discovery)
                prev = next((p for p in previous.pools if p.name == pc.name), None)
                if prev is not None and prev.config.discovery == pc.discovery:
                    for ep in prev.endpoints.values():
                        self._adopt(ep)
                        ep.on_drained = self.drop_drained   # drops from this runtime's pool
                        eps.append(ep)
            for url in pc.endpoints:
                url = url.rstrip("/")
                ep = old.get((pc.name, url)) or Endpoint(url=url, pool=pc.name)
                ep.draining, ep.on_drained = False, None  # a static endpoint never drains
                self._adopt(ep)
                eps.append(ep)
            pools.append(Pool(pc, config.pool_limit(pc), eps))
        self.pools: tuple[Pool, ...] = tuple(pools)
        self._pool_by_name = {p.name: p for p in self.pools}
        if previous is not None:
            for pool in self.pools:
                prev = next((p for p in previous.pools if p.name == pool.name), None)
                if prev is not None:
                    pool.bypass = prev.bypass
                    pool.canary_mismatch, pool.canary_revoked = prev.canary_mismatch, prev.canary_revoked
            self.set_overrides(previous.overrides)
        self._start_learning(previous)
        self._by_url = {ep.url: ep for pool in self.pools for ep in pool.endpoints.values()}
        prefix_cfg = config.routing.prefix_cache
        self.prefix: dict[str, PrefixIndex] = {}
        if prefix_cfg.enabled:
            old_pc = previous.config.routing.prefix_cache if previous is not None else None
            for pool in self.pools:
                idx = previous.prefix.get(pool.name) if previous is not None else None
                if idx is None or old_pc is None or old_pc.block_chars != prefix_cfg.block_chars:
                    idx = PrefixIndex(max_blocks_per_endpoint=prefix_cfg.max_blocks_per_endpoint)
                idx.max_blocks_per_endpoint = prefix_cfg.max_blocks_per_endpoint  # trimmed at the next record
                self.prefix[pool.name] = idx
        self._prefix_params = (prefix_cfg.cache_threshold, prefix_cfg.balance_abs_threshold,
                               prefix_cfg.balance_rel_threshold, prefix_cfg.hash_load_factor)
        #: the pools a request can be routed to (``serves`` has ``generate``), each with the
        #: kinds its config serves (``PoolConfig.served_capabilities``; None: every kind)
        self._generating = tuple((p, p.config.served_capabilities) for p in self.pools if "generate" in p.config.serves)
        #: two or more generation pools have a speed model: a decision can compare predictions
        #: (:func:`router.decision.policy.decide`), the only reader of a snapshot's prefill backlog
        self._predicting = sum(1 for p, _ in self._generating if p.fit is not None or p.speed is not None) >= 2

    def _start_learning(self, previous: Runtime | None) -> None:
        """Give every generation pool its :class:`router.decision.learn.SpeedFit` (``routing.learning``);
        a reload keeps a pool's fit while its prior (speed block, gamma, c) is unchanged, and its
        checks while their window is (a new fit clears their cells:
        :meth:`~router.decision.prediction_check.PredictionCheck.new_model`)."""
        learning = self.config.routing.learning
        self._sharing = learning.enabled  # some fit may still take its prior from a sibling (learn)
        if not learning.enabled:
            return
        for pool in self.pools:
            prev = next((p for p in previous.pools if p.name == pool.name), None) if previous is not None else None
            fit = prev.fit if prev is not None else None
            if (fit is None or fit.prior != pool.prior or fit.forgetting != learning.forgetting):
                fit = SpeedFit(pool.prior, prior_weight=learning.prior_weight, forgetting=learning.forgetting,
                               memory_s=learning.acceptance_memory_s, detect_changes=learning.change_detection)
            pool.fit = fit
            budget = prev.budget if prev is not None else None
            rate = learning.max_observations_per_s
            pool.budget = budget if budget is not None and budget.rate == rate else ObservationBudget(rate)
            check, cc = (prev.check if prev is not None else None), learning.check
            pool.check = check if check is not None and (check.window, check.max_age_s) == (cc.window, cc.max_age_s) \
                else PredictionCheck(cc.window, cc.max_age_s)
            if pool.check is check and check is not None and prev is not None and fit is not prev.fit:
                check.new_model()  # a new prior: the cells' biases were the old model's

    def advance_checks(self, now: float) -> list[tuple[str, bool]]:
        """Advance every pool's prediction-fallback hysteresis (:func:`router.decision.hysteresis.
        next_prediction_fallback` on its median relative error, ``routing.learning.check``; once
        per scrape round), and refresh each check's measured cells (what exploration reads) and
        corrections (what the snapshots carry). Returns ``(pool, new state)`` of the pools whose
        state changed (each logged)."""
        cc = self.routing.learning.check
        changed = []
        for pool in self.pools:
            check = pool.check
            if check is None:
                continue
            moved, error, checks = advance_prediction_check(check, cc, now)
            if moved:
                new = check.fallback
                changed.append((pool.name, new))
                log.warning("pool %s: predictions %s (median relative error %s over %d checks); decisions %s",
                            pool.name, "off" if new else "back within bounds",
                            "n/a" if error is None else f"{error:.3f}", checks,
                            "join the shorter queue" if new else "by prediction again")
        return changed

    def check_prediction(self, decision: Decision, features: RequestFeatures, *, output_tokens: int,
                         duration_s: float, ttfb_s: float | None, now: float) -> float | None:
        """Check ``decision``'s prediction for the request it routed, answered in full with
        ``output_tokens`` per sequence, ``duration_s`` from dispatch to the last byte and (a
        stream) ``ttfb_s`` to the first (:mod:`router.decision.prediction_check`). Returns the
        completion's relative error, or None when nothing was checked (no prediction behind
        the decision, a pool not learning)."""
        pool = self.pool(decision.pool)
        basis, url = decision.basis, decision.endpoint
        if pool is None or pool.check is None or basis is None or url is None or basis.name != pool.name:
            return None
        cls, bucket = features.temperature_class, context_bucket(features.predicted_prompt_tokens)
        try:
            err = pool.check.add("completion", cls, bucket,
                                 predict_request(features, basis, url, output_tokens, raw=True), duration_s, now)
            if ttfb_s is not None and features.stream:
                pool.check.add("ttft", cls, bucket, predict_request(features, basis, url, 1, raw=True), ttfb_s, now)
        except ValueError:  # the basis lacks a speed model or the endpoint (cannot happen for a predicted decision)
            return None
        return err

    def measures(self, pool_name: str | None, now: float) -> bool:
        """Whether a request dispatched now to ``pool_name`` is measured for its pool's fit
        (learning on, within ``routing.learning.max_observations_per_s``; spends the budget)."""
        pool = self.pool(pool_name) if pool_name is not None else None
        return pool is not None and pool.budget is not None and pool.budget.take(now)

    def dispatch_state(self, url: str, now: float, features: RequestFeatures | None = None
                       ) -> tuple[int, bool, float | None]:
        """``(load, waits, context)`` of an endpoint now, for a request of ``features``: its load
        (requests), whether the request will wait in the engine (requests queued there, or its
        KV reservation above the free KV; fresh scrape only) and the mean context of the batch
        it joins (:func:`router.decision.policy.batch_context`; None when unknown). What a finished
        request's :class:`router.decision.learn.Observation` is built from."""
        ep = self._by_url.get(url)
        if ep is None:
            return 0, False, None
        # its snapshot's values: the queue and KV from a fresh scrape only (no backlog: unread here)
        values = ep.snapshot_values(now, self.config.scrape.stale_after_s, 0, 0, backlog=False)
        waits = values.queued > 0
        if features is None or values.kv_free_tokens is None:  # the KV unknown: no context (batch_context's None)
            return values.load, waits, None
        need = features.num_prompts * features.predicted_weight
        return (values.load, waits or need > values.kv_free_tokens,
                batch_context(endpoint_snapshot(values), features.predicted_prompt_tokens, features.max_new_tokens))

    def note_prompt(self, decision: Decision, features: RequestFeatures, cached_tokens: int,
                    now: float) -> tuple[float, float]:
        """Meter the uncached prompt tokens of a request dispatched now (``decision``: routed) at
        its endpoint (:class:`router.state.prefill_meter.PrefillMeter`); returns ``(backlog,
        sent)``: the tokens before it still to prefill and the endpoint's total after it. Drained
        at a learning pool's candidate ``s`` (:attr:`router.decision.learn.SpeedFit.
        stall_s_per_token`, used by the model or not), else its ``speed`` block's; neither: ``(0, 0)``."""
        pool = self.pool(decision.pool)
        ep = self._by_url.get(decision.endpoint) if decision.endpoint is not None else None
        if pool is None or ep is None:
            return 0.0, 0.0
        fit = pool.fit
        s = fit.stall_s_per_token if fit is not None else (
            0.0 if pool.speed is None else pool.speed.prefill_stall_s_per_token)
        if s <= 0.0:
            return 0.0, 0.0
        tokens = features.num_prompts * max(0, features.predicted_prompt_tokens - cached_tokens)
        meter = ep.prefill
        backlog = meter.add(tokens, now, s)
        return backlog, meter.total

    def prompts_sent(self, url: str) -> float:
        """The prompt tokens metered at ``url`` so far (:meth:`note_prompt`; 0: unknown)."""
        ep = self._by_url.get(url)
        return 0.0 if ep is None else ep.prefill.total

    def learn(self, pool_name: str, url: str, *, prompt_tokens: int, cached_tokens: int, output_tokens: int,
              dispatch_load: int, duration_s: float, temperature: str, now: float,
              accept_length: float | None = None, context: float | None = None, sequences: int = 1,
              stall_tokens: float = 0.0) -> bool:
        """Feed one finished request (answered in full; ``output_tokens`` per sequence of its
        ``sequences``) to its pool's fit. The batch is the mean of the endpoint's load at
        dispatch and now, its sequences counted; ``context`` the batch's mean context (or None); tau
        (speculative pools) the request's own ``accept_length`` (SGLang's
        ``spec_tokens_details``, :mod:`router.upstream.specstats`), else the class's live estimate;
        ``stall_tokens`` the other requests' prompt tokens it waited for
        (:attr:`router.decision.learn.Observation.stall_tokens`). Returns whether it was taken."""
        pool = self.pool(pool_name)
        if pool is None or pool.fit is None:
            return False
        ep = self._by_url.get(url)
        end_load = 0 if ep is None else ep.backpressure_load(now, self.config.scrape.stale_after_s, 0)
        tau = None
        if pool.speculative:
            tau = (accept_length or self._accept_lengths(pool, now).get(temperature)
                   or pool.prior_accept_lengths.get(temperature))
        pool.fit.observe(Observation(prompt_tokens=prompt_tokens, cached_tokens=cached_tokens,
                                     output_tokens=output_tokens, batch=max(1.0, (dispatch_load + end_load) / 2 + 0.5 * sequences),
                                     duration_s=duration_s, accept_length=tau, context=context,
                                     stall_tokens=stall_tokens), now, temperature,
                         measured=pool.speculative and accept_length is not None)
        if self._sharing:
            fits = [p.fit for p in self.pools if p.fit is not None]
            share_priors(fits)
            # a fit's count only grows: once every fit has its own observations there is
            # nothing left to share (share_priors rebases only fits below that)
            self._sharing = any(f.count < MIN_OWN_OBSERVATIONS for f in fits)
        return True

    def flip_points(self, requested: int | None, n: int) -> tuple[int, ...]:
        """:func:`router.decision.policy.flip_points` for this runtime's pools and rules, computed once
        per ``(requested, n)`` while the rules stand (an override replaces them; at most
        :data:`_FLIP_CACHE` entries)."""
        if self._flips_rules is not self.rules:
            self._flips_rules, self._flips = self.rules, {}
        key = (requested, n)
        points = self._flips.get(key)
        if points is None:
            if len(self._flips) >= _FLIP_CACHE:
                self._flips.clear()
            points = self._flips[key] = tuple(flip_points(requested, n, self.pools, self.rules))
        return points

    def pool(self, name: str | None) -> Pool | None:
        """The pool named ``name`` (None: no such pool)."""
        return self._pool_by_name.get(name) if name is not None else None

    def prefix_matches(self, chain: PrefixChain, prompt_tokens: int) -> dict[str, dict[str, int]]:
        """``{pool: {url: estimated cached tokens}}`` for ``chain`` (read-only)."""
        out = {}  # a loop, not a comprehension: no function object per request (CPython 3.11)
        for name, idx in self.prefix.items():
            out[name] = idx.match(chain, prompt_tokens)
        return out

    def record_prefix(self, decision: Decision, chain: PrefixChain | None) -> None:
        """Note that ``decision`` sent ``chain`` to its endpoint (after the decision)."""
        if chain is None or decision.pool is None or decision.endpoint is None:
            return
        idx = self.prefix.get(decision.pool)
        if idx is not None:
            idx.record(decision.endpoint, chain)

    def prune_prefix(self) -> None:
        """Forget, in every pool's index, the endpoints that left the pool or are unhealthy."""
        for pool in self.pools:
            idx = self.prefix.get(pool.name)
            if idx is not None:
                idx.retain({url for url, ep in pool.endpoints.items() if ep.healthy})

    def _adopt(self, ep: Endpoint) -> None:
        """Give an endpoint this runtime's ledger and ``health`` thresholds (on the loop)."""
        ep.ledger = self.ledger
        ep.failure_threshold = self.config.health.failure_threshold
        ep.success_threshold = self.config.health.success_threshold
        ep.warmup_required = self.warmup_required(ep.pool)
        pc = next((p for p in self.config.pools if p.name == ep.pool), None)
        ep.declare_adapters(pc.declared_adapters if pc is not None else frozenset())
        ep.speculative = pc.speculative if pc is not None and "generate" in pc.serves else None
        ep.models_at = None  # read what the engine serves again against this config

    def warmup_required(self, pool_name: str) -> bool:
        """``health.warmup.enabled`` for a pool that serves ``generate`` (router/loops/warmup.py)."""
        pc = next((p for p in self.config.pools if p.name == pool_name), None)
        return (self.warmup_gate and self.config.health.warmup.enabled and pc is not None
                and "generate" in pc.serves)

    def set_discovered(self, pool_name: str, urls: Iterable[str]) -> tuple[list[str], list[str]]:
        """:func:`router.state.membership.set_discovered` on this runtime: ``urls`` become the
        routable set of discovered pool ``pool_name``; returns ``(added, draining)`` URLs.

        Raises:
            KeyError: when there is no pool ``pool_name``.
        """
        return set_discovered(self, pool_name, urls)

    def drop_drained(self, endpoint: Endpoint) -> None:
        """An endpoint's ``on_drained`` callback: :func:`router.state.membership.drop_drained`."""
        drop_drained(self, endpoint)

    def endpoint_at(self, url: str) -> Endpoint | None:
        """The endpoint of any pool at base URL ``url``, or None."""
        return self._by_url.get(url)

    def reindex(self) -> None:
        """Rebuild the URL -> endpoint index after a pool's endpoint map was replaced."""
        self._by_url = {ep.url: ep for pool in self.pools for ep in pool.endpoints.values()}

    def set_overrides(self, overrides: Overrides) -> None:
        """Apply routing overrides on top of the YAML (an empty one restores the YAML values).

        Overrides that do not validate against this YAML (possible after a reload) are kept
        but not applied: ``routing`` stays the YAML's and ``override_error`` says why.
        """
        self.overrides = overrides
        try:
            self.routing = overrides.apply(self.config.routing)
            self.override_error = None
        except ConfigError as exc:
            self.routing = self.config.routing
            self.override_error = str(exc)
            log.error("routing overrides not applied: %s", exc)
        self.rules = self._rules()

    def _rules(self) -> Rules:
        limits = self.config.limits
        learning = self.routing.learning
        return Rules(max_context_tokens=limits.max_context_tokens, default_max_tokens=limits.default_max_tokens,
                     long_prompt_tokens=self.routing.long_prompt_tokens, seed=self.routing.seed,
                     explore_every=learning.explore_every if learning.enabled else 0,
                     explore_ratio=learning.explore_ratio, marginal_cost=learning.marginal_cost)

    def all_endpoints(self) -> list[Endpoint]:
        """Every endpoint of every pool."""
        return list(self._by_url.values())

    def endpoint(self, url: str) -> Endpoint:
        """The endpoint with this URL; raises ``KeyError``."""
        return self._by_url[url]

    def _accept_lengths(self, pool: Pool, now: float) -> dict[str, float | None]:
        max_age = self.routing.acceptance.max_age_s
        return {c: pool.estimated_accept_length(c, now, max_age) for c in CLASSES}

    def _proposed(self, pool: Pool, now: float, previous: Mapping[str, bool | None] | None = None,
                  live: Mapping[str, float | None] | None = None) -> dict[str, bool]:
        """The flags the pool's next hysteresis step gives now; ``live``: the pool's
        :meth:`_accept_lengths` at ``now`` when the caller has them already."""
        return pool.bypass.proposed(
            load=pool.load(now, self.config.scrape.stale_after_s, self.routing.saturation.enter),
            accept_length=self._accept_lengths(pool, now) if live is None else live,
            now=now, routing=self.routing, gamma=pool.config.gamma, c=pool.config.drafter_cost_ratio,
            previous=previous)

    def observe_acceptance(self) -> None:
        """Feed each speculative endpoint's newest scrape to its acceptance tracker (once per
        scrape; see :mod:`router.decision.acceptance`)."""
        acc = self.routing.acceptance
        for pool in self.pools:
            if not pool.config.speculative:
                continue
            refresh = 40 * (pool.config.gamma + 1)  # decode_log_interval verify steps
            for ep in pool.endpoints.values():
                if ep.engine is None or ep.scraped_at is None or ep.scraped_at == ep.observed_at:
                    continue
                ep.observed_at = ep.scraped_at
                ep.acceptance.scraped(ep.engine.spec_accept_length, ep.engine.generation_tokens_total,
                                      ep.scraped_at, weight=acc.weight, refresh_tokens=refresh,
                                      running_reqs=ep.engine.num_running_reqs)

    def advance_bypass(self, now: float) -> None:
        """Take in the new acceptance measurements, then advance every speculative pool's
        saturation and acceptance hysteresis: the one step that changes bypass state (once per
        scrape round; decisions and metric reads only read it)."""
        self.observe_acceptance()
        for pool in self.pools:
            if pool.config.speculative:
                pool.bypass.commit(self._proposed(pool, now), now)

    def sync_bypass(self, shared: Mapping[str, bool], now: float) -> list[tuple[str, bool | None, bool]]:
        """Continue each speculative pool's hysteresis from the *shared* flags.

        Args:
            shared: flags read from the shared state, keyed ``"<pool>:<flag>"`` with the flags
                of :data:`router.decision.bypass.FLAGS`; a missing key starts from the local flag.
            now: monotonic time (s).

        Returns:
            ``(key, shared value or None, new value)`` for each flag whose new value differs
            from the shared one (to be written back with compare-and-set).
        """
        writes: list[tuple[str, bool | None, bool]] = []
        for pool in self.pools:
            if not pool.config.speculative:
                continue
            previous = {flag: shared.get(f"{pool.name}:{flag}") for flag in FLAGS}
            new = self._proposed(pool, now, previous)
            pool.bypass.commit(new, now)
            for flag in FLAGS:
                if new[flag] != previous[flag]:
                    writes.append((f"{pool.name}:{flag}", previous[flag], new[flag]))
        return writes

    def snapshots(self, now: float, matches: Mapping[str, Mapping[str, int]] | None = None,
                  adapters: bool = False) -> tuple[PoolSnapshot, ...]:
        """Immutable views of every generation pool for :func:`router.decision.policy.decide` (a pool
        whose ``serves`` lacks ``generate``, e.g. an embedding pool, is never a target);
        ``matches`` (:meth:`prefix_matches`) fills each endpoint's ``cached_tokens``; the pools'
        LoRA adapters only with ``adapters`` (a base-model request does not read them)."""
        stale = self.config.scrape.stale_after_s
        # a back-pressured endpoint counts as saturated, and as at the affinity ceiling: a
        # refusing engine keeps no conversation (router.decision.policy._sticky)
        floor = self._derived().floor
        out = []
        for p, served in self._generating:
            m = matches.get(p.name) if matches is not None else None
            # The flags as the next hysteresis step would set them from the load now (read
            # only: the stored state moves in advance_bypass), so a burst between two scrape
            # rounds meets the saturation guard at once.
            if p.config.speculative:
                live = self._accept_lengths(p, now)  # read once: the flags' input and the taus'
                flags = self._proposed(p, now, live=live)
                sat, low = flags["saturated"], p.bypass.low_classes(flags)
                greedy, sampled = accept_lengths(live, p.fit, p.prior_accept_lengths)
            else:
                sat, low, greedy, sampled = False, _NONE, None, None
            # the backlog only where the pool's model reads it and a decision can predict (a
            # value that moves with every instant would defeat the snapshot cache for nothing)
            model = p.fit.model if p.fit is not None else p.speed
            backlog = self._predicting and model is not None and model.prefill_stall_s_per_token > 0.0
            endpoints = tuple([e.snapshot_values(now, stale, floor, m.get(e.url, 0) if m else 0, backlog)
                               for e in p.endpoints.values()])
            revoked, check = p.canary_revoked, p.check  # Pool.capabilities, with the config's part computed once
            out.append(self._snapshot_cache.get(
                p, endpoints, sat, low, greedy, sampled, served - revoked if served is not None and revoked else served,
                p.canary_mismatch, pool_adapters(p.endpoints.values()) if adapters else _NONE,
                check is not None and check.fallback, None if check is None else check.measured,
                () if check is None else check.correction,
                check.measured_factor if check is not None and check.fallback else ()))
        return tuple(out)

    def decide(self, features: RequestFeatures, now: float, exclude: frozenset[str] = frozenset(),
               chain: PrefixChain | None = None, matches: Mapping[str, Mapping[str, int]] | None = None
               ) -> Decision:
        """Snapshot the pools and run the pure policy (reads state, changes none but the
        tie-break counter). With ``chain`` (and its :meth:`prefix_matches`) and prefix routing
        on, the endpoint inside a pool is chosen by :func:`router.decision.prefix.pick_endpoint`."""
        prefix = None
        if chain is not None and self.prefix:
            prefix = _new_tuple(PrefixRequest, (  # PrefixRequest._make without its Python call
                chain.anchor, chain.tokens(chain.anchor_blocks, features.predicted_prompt_tokens), chain.continued,
                *self._derived().prefix_tail))
        if features.adapters:  # only endpoints that have the adapters (router.state.models)
            exclude = exclude | lacking_adapters(self._by_url.values(), features.adapters)
        if self._small:  # only endpoints whose engine holds the request (router.state.engine_limits)
            exclude = exclude | too_small(self._small, features)
        return decide(features, self.snapshots(now, matches, bool(features.adapters)), self.rules, exclude=exclude,
                      tie_break=next(self._tie), prefix=prefix)

    def follow_engine_limits(self) -> list[LimitChange]:
        """Set the pools' limits from what their engines report (:func:`router.state.engine_limits.
        follow`; after each scrape round, on the event loop); a move drops the cached
        snapshots and flip points, which hold the old limits. Returns the moves."""
        changes, self._small = follow(p for p, _ in self._generating)
        if changes:
            self._snapshot_cache, self._flips_rules = SnapshotCache(), None
        return changes

    def _derived(self) -> _Derived:
        """:class:`_Derived` of the current ``routing``, recomputed only when it is another
        object than the last one's (overrides replace it whole; a reload builds a new runtime)."""
        derived = self._derived_now
        routing = self.routing
        if derived.routing is not routing:
            pc = routing.prefix_cache
            sticky = math.ceil(pc.sticky_load_factor * routing.saturation.enter) if pc.enabled else 0
            derived = self._derived_now = _Derived(routing, sticky, max(routing.saturation.enter, sticky),
                                                   (*self._prefix_params, sticky, pc.pool_affinity_ratio,
                                                    pc.new_affinity_ratio))
        return derived

    def ready(self) -> bool:
        """True while at least one pool has a healthy endpoint."""
        return any(e.healthy for e in self._by_url.values())
