"""A planner-driven deployment in the day simulator: ``specgate plan``'s loop moving engines between the pools.

:func:`planned` builds a :class:`loadtests.daysim.Deployment` of N engines whose split changes
during the day, as ``specgate plan --apply`` changes it on Kubernetes: the day simulator
(:func:`loadtests.daysim.simulate_day`, either engine model) runs N speculative and N plain
engine *slots*; :class:`PlannedRouter` shows the router in front (any
:class:`loadtests.dayapi.Router`, normally :class:`loadtests.dayrouter.PolicyRouter` learning
live, as ``specgate ks+(N-k)p``) only the N slots in service, and runs the planner:

1. **Rounds.** Every ``interval_s`` of simulated time (first at ``first_round_s``) the
   router's window (:meth:`PlannedRouter.window_doc`: the finished requests of the last
   ``window_s`` seconds, at most ``window_requests`` of them, and per pool the router's learned
   speed model, fit and prediction-check status and live accept lengths, the shape of
   ``GET /admin/plan/window``, :func:`router.front.planwindow.window_view`) goes through
   :func:`loadtests.plan.advise`, and :meth:`loadtests.planloop.PlanLoop.decide` turns the
   advice into at most one engine moved. The advice takes no simulated time.
2. **A change** costs what it costs on a GPU: the engine leaves the router's view at once
   (drained: it finishes what it runs and holds, no new request), and once empty it is out of
   service for ``convert_s`` more (restarted in the other mode and warmed), then joins the other
   pool as a fresh slot. One engine converts at a time (a round during a conversion holds,
   outcome ``converting``), so the router has N - 1 engines through each change.
3. **Observe only** (``act=False``): the rounds advise and record, nothing moves (what
   ``specgate plan --once`` prints at a given instant).

A slot that comes back into service keeps its engine's counters (the accept-length gauge of its
last service until its first update): a restarted SGLang engine starts without one, so the
router may read one stale gauge per conversion.

Errors: ``ValueError`` for settings out of range.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from loadtests.dayapi import Choice, PoolView, RequestView, Router
from loadtests.daysim import Deployment, RequestRecord
from loadtests.plan import HEDGE, PlanError, advise
from loadtests.planloop import Hysteresis, PlanLoop

__all__ = ["PLAIN", "SPEC", "PlanDaySettings", "PlannedRouter", "out_of_service_s", "planned"]

#: The pools' names (the simulator's ``fronted`` deployments use the same).
SPEC, PLAIN = "spec", "plain"


@dataclass(frozen=True)
class PlanDaySettings:
    """The planner's settings in the simulator (seconds, requests).

    Attributes:
        interval_s: time between rounds; first_round_s: the first round (default: ``interval_s``).
        window_s, window_requests: the router's window (``planner.window_s`` /
            ``planner.window_requests``).
        convert_s: an engine's time out of service after its drain (restart in the other mode
            and warm-up).
        hysteresis: the loop's settings (:class:`loadtests.planloop.Hysteresis`).
        reach: a round predicts the splits within this many engines of the current one only
            (None: every split); the loop moves one engine a round, so a farther target only
            weighs the gain.
        metric, max_error, max_replay_error, hedge, seed: :func:`loadtests.plan.advise`'s.
        act: False: advise and record only.
    """

    interval_s: float = 300.0
    first_round_s: float | None = None
    window_s: float = 900.0
    window_requests: int = 4096
    convert_s: float = 180.0
    hysteresis: Hysteresis = field(default_factory=Hysteresis)
    reach: int | None = None
    metric: str = "mean_s"
    max_error: float = 0.3
    max_replay_error: float = 0.5
    hedge: float | None = HEDGE
    seed: int = 0
    act: bool = True

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.window_s <= 0 or self.window_requests < 1 or self.convert_s < 0:
            raise ValueError("interval_s and window_s must be > 0, window_requests >= 1, convert_s >= 0")


class PlannedRouter:
    """The router in front of the slots in service, and the planner's loop (module docstring).

    Args:
        inner: the router the requests go through (sees the pools in service only).
        engines: N; start_k: speculative engines in service at the start.
        settings: the planner's settings.
        kv_tokens: ``{"spec": tokens, "plain": tokens}``, an engine's KV capacity per pool
            (``sglang:max_total_num_tokens`` in the window document).
        advise_fn: the advice (default :func:`loadtests.plan.advise`).

    Attributes:
        rounds: one dict per round: ``t``, ``outcome``, ``current``, ``target``, ``moved_to``,
            ``gain``, ``advised``, ``trusted``, ``predicted`` (``{k: mean_s}``), ``window``,
            ``measured`` (the window's own value of the metric, :func:`loadtests.plan.measured`),
            ``if_sampled`` (``{k: value}`` under the hedge's stress), ``safe`` (the hedge's safe
            splits after the median; None: no hedge).
        changes: one dict per change: ``t`` (decided), ``url`` (the engine drained), ``to``
            (its new pool), ``drained_s``, ``ready_s`` (back in service), ``new_url``.
    """

    def __init__(self, inner: Router, engines: int, start_k: int, settings: PlanDaySettings,
                 kv_tokens: Mapping[str, int], advise_fn: Callable[..., dict[str, Any]] = advise) -> None:
        if not 0 <= start_k <= engines or engines < 1:
            raise ValueError(f"need 0 <= start_k <= engines and engines >= 1, got {start_k}, {engines}")
        self.inner, self.engines, self.settings = inner, engines, settings
        self.kv_tokens = dict(kv_tokens)
        self._advise = advise_fn
        self.loop = PlanLoop(engines, settings.hysteresis)
        self.active: dict[str, list[str]] = {SPEC: [f"http://{SPEC}-{i}" for i in range(start_k)],
                                             PLAIN: [f"http://{PLAIN}-{i}" for i in range(engines - start_k)]}
        self._idle: dict[str, deque[str]] = {
            SPEC: deque(f"http://{SPEC}-{i}" for i in range(start_k, engines)),
            PLAIN: deque(f"http://{PLAIN}-{i}" for i in range(engines - start_k, engines))}
        self.draining: dict[str, str] = {}       # url -> the pool it converts to
        self.converting: list[tuple[float, str, str]] = []  # (ready at, pool, old url)
        self.next_round = settings.interval_s if settings.first_round_s is None else settings.first_round_s
        self.window: deque[RequestRecord] = deque(maxlen=settings.window_requests)
        self.rounds: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []
        self._served: set[str] = set(self.active[SPEC]) | set(self.active[PLAIN])

    # ------------------------------------------------------------------ the router's interface
    def _filter(self, pools: tuple[PoolView, ...]) -> tuple[PoolView, ...]:
        out = []
        for p in pools:
            live = set(self.active.get(p.name, ()))
            eps = tuple(e for e in p.endpoints if e.url in live)
            if eps:
                out.append(PoolView(p.name, p.speculative, eps))
        return tuple(out)

    def __call__(self, now: float, request: RequestView, pools: tuple[PoolView, ...]) -> Choice:
        """The inner router's choice among the engines in service."""
        return self.inner(now, request, self._filter(pools))

    def on_done(self, now: float, request: RequestView, url: str, record: RequestRecord | None = None,
                pools: tuple[PoolView, ...] = ()) -> None:
        """A request ended: the inner router learns; an ok one joins the window."""
        done = getattr(self.inner, "on_done", None)
        if done is not None:
            done(now, request, url, record, self._filter(pools))
        if record is not None and record.status == "ok":
            self.window.append(record)

    def on_scrape(self, now: float, pools: tuple[PoolView, ...]) -> None:
        """A scrape round: drains and conversions advance, the inner router scrapes, and a
        planner round runs when due."""
        for p in pools:
            for e in p.endpoints:
                to = self.draining.get(e.url)
                if to is not None and e.running == 0 and e.queued == 0 and e.inflight == 0:
                    del self.draining[e.url]
                    self.converting.append((now + self.settings.convert_s, to, e.url))
                    self._change_of(e.url)["drained_s"] = now
        for ready, to, old in [c for c in self.converting if c[0] <= now]:
            self.converting.remove((ready, to, old))
            url = self._idle[to].popleft()
            self.active[to].append(url)
            self._served.add(url)
            self._change_of(old)["ready_s"] = now
            self._change_of(old)["new_url"] = url
        scrape = getattr(self.inner, "on_scrape", None)
        if scrape is not None:
            scrape(now, self._filter(pools))
        if now >= self.next_round:
            self.next_round = now + self.settings.interval_s
            self.round(now, pools)

    # ------------------------------------------------------------------ the planner
    def _change_of(self, url: str) -> dict[str, Any]:
        return next(c for c in reversed(self.changes) if c["url"] == url)

    @property
    def split(self) -> int:
        """Speculative engines once the changes under way are done (what the Deployments'
        replicas say)."""
        to_spec = sum(1 for v in self.draining.values() if v == SPEC) + sum(1 for _, v, _ in self.converting
                                                                           if v == SPEC)
        return len(self.active[SPEC]) + to_spec

    def window_doc(self, now: float, pools: tuple[PoolView, ...]) -> dict[str, Any]:
        """The router's ``GET /admin/plan/window`` document now (module docstring, step 1)."""
        rows = [r for r in self.window if r.arrival_s >= now - self.settings.window_s]
        base = rows[0].arrival_s if rows else now
        reqs = [{"arrival_s": r.arrival_s - base, "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens,
                 "output_tokens": r.output_tokens, "max_tokens": r.max_new_tokens,
                 "temperature_class": "sampled" if r.temperature > 0 else "greedy", "n": 1, "pool": r.pool,
                 "duration_s": r.e2e_s} for r in sorted(rows, key=lambda r: r.arrival_s)]
        views = {p.name: p for p in self._filter(pools)}
        return {"model": "sim", "window": {"requests": len(reqs), "seconds": now - base if rows else 0.0},
                "requests": reqs, "pools": [self._pool_doc(name, name == SPEC, views.get(name), now)
                                            for name in (SPEC, PLAIN)]}

    def _pool_doc(self, name: str, spec: bool, view: PoolView | None, now: float) -> dict[str, Any]:
        fits = getattr(self.inner, "fits", {})
        fit = fits.get(spec)
        check = getattr(self.inner, "checks", {}).get(name)
        taus: dict[str, float | None] = {}
        if spec:
            live = self.inner.live_accept_lengths(view, now) if view is not None and hasattr(
                self.inner, "live_accept_lengths") else {}
            for cls in ("greedy", "sampled"):
                v = live.get(cls)
                taus[cls] = v if v is not None else (fit.accept_length(cls) if fit is not None else None)
        return {"name": name, "speculative": spec, "endpoints": len(self.active[name]),
                "healthy": len(self.active[name]), "kv_tokens": self.kv_tokens.get(name),
                "limit_tokens": getattr(self.inner, "limits", {}).get(spec),
                "speed": None if fit is None else asdict(fit.model), "speed_source": "learned" if fit else None,
                "fit": None if fit is None else fit.status(now), "check": None if check is None else check.status(now),
                "accept_length": taus}

    def round(self, now: float, pools: tuple[PoolView, ...]) -> dict[str, Any]:
        """One planner round (module docstring, steps 1-2); returns its record."""
        s = self.settings
        rec: dict[str, Any] = {"t": now, "current": self.split}
        if s.act and (self.draining or self.converting):  # nothing can move: no advice needed
            rec.update(outcome="converting", moved_to=rec["current"])
            self.rounds.append(rec)
            return rec
        doc = self.window_doc(now, pools)
        cur = rec["current"]
        ks = None if s.reach is None else range(max(0, cur - s.reach), min(self.engines, cur + s.reach) + 1)
        try:
            adv = self._advise(doc, self.engines, metric=s.metric, max_error=s.max_error, seed=s.seed, ks=ks,
                               max_replay_error=s.max_replay_error, hedge=s.hedge)
        except PlanError as exc:
            rec.update(outcome="no_advice", error=str(exc))
            self.rounds.append(rec)
            return rec
        rec.update(advised=adv["advised"]["speculative"], trusted=adv["trusted"], window=adv["window"]["requests"],
                   measured=(adv.get("measured") or {}).get(s.metric),
                   predicted={p["speculative"]: p["predicted_" + s.metric] for p in adv["splits"]})
        smooth = self.loop.observe(adv)
        rec["smoothed"] = {p["speculative"]: p["predicted_" + s.metric] for p in smooth["splits"]}
        rec["if_sampled"] = {p["speculative"]: p.get("predicted_" + s.metric + "_if_sampled") for p in adv["splits"]}
        rec["safe"] = (smooth.get("hedge") or {}).get("safe")
        step = self.loop.decide(smooth, cur, now)
        rec.update(step.as_dict())
        if step.changed and s.act:
            self._start_change(step.moved_to - step.current, now, pools)
            self.loop.commit(step, now)
        elif step.changed:
            rec["moved_to"] = step.current
        else:
            self.loop.commit(step, now)
        self.rounds.append(rec)
        return rec

    def _start_change(self, direction: int, now: float, pools: tuple[PoolView, ...]) -> None:
        """Drain one engine of the pool that shrinks (its least-loaded one, the last on a tie)."""
        src, to = (PLAIN, SPEC) if direction > 0 else (SPEC, PLAIN)
        load = {e.url: e.load for p in pools for e in p.endpoints}
        url = min(reversed(self.active[src]), key=lambda u: load.get(u, 0))
        self.active[src].remove(url)
        self._idle[src].append(url)
        self.draining[url] = to
        self.changes.append({"t": now, "url": url, "to": to, "drained_s": None, "ready_s": None, "new_url": None})


def planned(engines: int, start_k: int, make_inner: Callable[[], Router], settings: PlanDaySettings,
            kv_tokens: Mapping[str, int], label: str = "planned") -> tuple[Deployment, Callable[[], PlannedRouter]]:
    """The planner-driven deployment of ``engines`` engines starting at ``start_k`` speculative
    (N speculative and N plain slots, module docstring); returns it and a function giving the
    run's :class:`PlannedRouter` (the last one the deployment built) to read its rounds and
    changes after :func:`loadtests.daysim.simulate_day`."""
    made: list[PlannedRouter] = []

    def make() -> PlannedRouter:
        made.append(PlannedRouter(make_inner(), engines, start_k, settings, kv_tokens))
        return made[-1]

    dep = Deployment(f"{label} from {start_k}s+{engines - start_k}p", ((SPEC, True, engines), (PLAIN, False, engines)),
                     make)
    return dep, lambda: made[-1]


def out_of_service_s(changes: list[dict[str, Any]], end_s: float) -> float:
    """Engine-seconds out of service over the changes (decision to back in service; a change
    not finished by ``end_s`` counts to it)."""
    return sum((c["ready_s"] if c["ready_s"] is not None else end_s) - c["t"] for c in changes) if changes else 0.0
