"""A pool's speed model learned from its own finished requests (online, bounded memory).

:mod:`router.decision.predict` needs, per pool, ``t0`` (s per output token of a batch of one),
``b_knee`` (sequences), ``a`` (s per output token per context token), ``k`` (s per decode
step per context token of the batch), ``p`` (s per uncached prompt token) and ``s`` (s per
prompt token other requests prefill on the endpoint while it runs). Every finished
request gives the router its dispatch-to-end time ``y`` (s), its output tokens ``M`` (``usage.completion_tokens``), its prompt and cached tokens
``P``, ``C`` and the endpoint's batch ``b`` while it ran (the mean of its load at dispatch and
at the end, requests) and ``S`` (``Observation.stall_tokens``). With
``theta = (p, t0, t0 / b_knee, a, k, s)`` the model of
:mod:`router.decision.predict` is linear in ``theta``:

    plain:        y = p * U + s * S + t0 * M + (t0 / b_knee) * M * b + a * M * L + k * M * b * L
    speculative:  y = p * U + s * S + t0 * M (1 + c gamma) / tau + (t0 / b_knee) * M * b (gamma + 1 + c gamma) / tau
                      + (a * M * L + k * M * b * L) (1 + c gamma) / tau

(``U = P - C`` uncached prompt tokens, ``L`` the mean context of the batch it decoded in, else
``P + M / 2``; ``gamma`` and ``c``
from the pool's config, ``tau`` the request's accept length or its temperature class's live
estimate). :class:`SpeedFit` solves it by recursive weighted least squares with exponential
forgetting (each observation's weight decays by ``forgetting`` per later observation, so
about ``1 / (1 - forgetting)`` recent requests count: drift in load mix, drafter or engine is
followed) and a ridge pull toward the prior ``theta_0`` that does not decay (a direction the
traffic does not excite, such as the batch slope of an idle pool, stays at the prior instead
of drifting; a parameter whose prior is 0, such as ``k`` in a ``speed`` block without it,
stays 0); its precision per parameter is scaled by the larger of the prior's value and
the fit's (:func:`prior_precision`), so a prior too small (too fast) is held no tighter than a
right one.

``s`` is a candidate, not a given: an engine's prefill holds up its other requests on a CPU
(a prompt is a large fraction of a second) and hardly at all on an accelerator, and a sixth
parameter held near a wrong prior moves the other five. So the fit solves two models from the
same normal equations, without ``s`` (the first five parameters, ``s = 0``) and with it, keeps
each one's exponentially averaged relative error on the requests as they finish (each predicted
before it learns from them), and publishes the one without ``s`` until the one with it has
been at most :data:`STALL_SWITCH` of its error (after :data:`MIN_STALL_OBSERVATIONS`), back
once it is worse: a choice between nested models by their one-step-ahead prediction error
(prequential model selection, A. P. Dawid 1984, "Statistical theory: the prequential
approach", J. R. Stat. Soc. A 147(2)).

Residuals are relative (each row is divided by ``y``), so a 50 s request and a 0.5 s one weigh
the same. The prior is the pool's ``speed`` block when the YAML has one (``specgate
calibrate``), else :data:`DEFAULT_PRIOR`, the same for every pool: before any traffic the
pools differ only by their live accept length and load, and the fit then tells them apart.
Requests that waited in the engine's queue (``num_queue_reqs`` > 0 at dispatch) are left out:
their time is the queue's (modelled apart, from the KV and running caps).

Pure: no I/O, no clock; the caller passes each observation's time. Memory: one 6 x 6 matrix
and two 6-vectors per fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from router.decision.drift import Cusum, DecayedMean
from router.decision.predict import SpeedModel

__all__ = [
    "CONTEXT_BUCKETS",
    "DEFAULT_PRIOR",
    "MIN_OWN_OBSERVATIONS",
    "Observation",
    "ObservationBudget",
    "SpeedFit",
    "bucket_label",
    "context_bucket",
    "observed_prompt_tokens",
    "prior_precision",
    "share_priors",
]

#: The prior of a pool without a ``speed`` block: a mid-size model on one accelerator
#: (50 tokens/s for one sequence, decode compute equal to the weight reads at 32 sequences,
#: 5,000 prompt tokens/s of prefill, one more t0 per 100k tokens of context). Only ratios
#: between pools steer the decision, and the fit replaces these within a few dozen requests.
#: No KV-read term (``kv_read_s_per_token`` 0, held there): tried with 5e-8 and 1e-8, on the
#: SGLang-scheduler engine model (loadtests/sglang_sched.py, whose steps do read the batch's
#: KV) the fit's checked error rose from 0.06-0.09 to 0.17-0.28 (each shift of the day pulls
#: the fit back toward a prior term the engine's data did not need); a pool gets it from its
#: ``speed`` block (set by the operator: ``specgate calibrate`` writes 0, docs/loadtests.md).
#: The prefill stall ``s`` starts at 2e-5 and is a candidate (:class:`SpeedFit`): the fit uses
#: it only while the model with it predicts clearly better than the one without.
DEFAULT_PRIOR = SpeedModel(decode_s_per_token=0.02, batch_knee=32.0, attention_s_per_token=2e-7,
                           prefill_s_per_token=2e-4, prefill_stall_s_per_token=2e-5)

_N = 6  # theta = (p, t0, t0 / b_knee, a, k, s)
_S = 5  # s's index in theta

#: The prefill stall is used once the model with it has predicted the recent requests this much
#: better (its exponentially averaged relative error at most this share of the other's), after
#: :data:`MIN_STALL_OBSERVATIONS`; it is dropped once it predicts worse.
STALL_SWITCH = 0.85
MIN_STALL_OBSERVATIONS = 20

#: Upper edges (prompt tokens) of the context buckets of the acceptance table; the last
#: bucket is everything above. Acceptance falls with context (vllm-project/vllm#47602,
#: sgl-project/sglang#30763), so tau is kept per temperature class and bucket.
CONTEXT_BUCKETS: tuple[int, ...] = (1024, 4096, 16384, 65536)

#: After its first ``4 * REFIT_EVERY`` observations a fit solves for its model (and publishes
#: its acceptance table) every this many: the 6 x 6 solve costs tens of microseconds in Python,
#: and a new model on every finished request would defeat the snapshot cache.
REFIT_EVERY = 8

#: Observations below which a fit takes its prior from a sibling pool's fit (:meth:`SpeedFit.rebase`).
MIN_OWN_OBSERVATIONS = 10

#: Observations of a (class, bucket) cell before its tau is used for a prediction.
MIN_BUCKET_OBSERVATIONS = 3

#: The time constant (s) of the acceptance estimates' memory (:class:`router.decision.drift.DecayedMean`):
#: a cell, however rarely fed, reflects its last minute or so of requests.
DEFAULT_MEMORY_S = 30.0

#: The share of the regression's information kept when its residual's change detector alarms.
CHANGE_KEEP = 0.05


def observed_prompt_tokens(counted: int, exact: bool, num_prompts: int, usage_prompt_tokens: object) -> int:
    """The prompt tokens ``P`` an observation is learned with (tokens).

    The router decides on ``counted``, which is exact or, when no decision threshold lies
    between the byte-length bounds, the upper bound (``router.request.features.PromptCounter.bounds``:
    about one token per byte, several times the true count). The fit must not learn the bound:
    for a single prompt the engine's own count (``usage.prompt_tokens``, a positive int; one
    prompt counted once whatever ``n``) replaces an inexact ``counted``; an exact count, a
    batch of prompts (whose usage sums them) or a missing usage keeps ``counted``.
    """
    if exact or num_prompts != 1 or type(usage_prompt_tokens) is not int or usage_prompt_tokens < 1:
        return counted
    return usage_prompt_tokens


def bucket_label(bucket: int) -> str:
    """A bucket's name: ``le_<edge>`` (prompt tokens at most the edge), ``gt_<last edge>``."""
    return f"le_{CONTEXT_BUCKETS[bucket]}" if bucket < len(CONTEXT_BUCKETS) else f"gt_{CONTEXT_BUCKETS[-1]}"


def context_bucket(prompt_tokens: int) -> int:
    """The index of ``prompt_tokens``'s bucket in :data:`CONTEXT_BUCKETS` (0 .. len)."""
    for i, edge in enumerate(CONTEXT_BUCKETS):
        if prompt_tokens <= edge:
            return i
    return len(CONTEXT_BUCKETS)


@dataclass(frozen=True, slots=True)
class Observation:
    """One finished request on one endpoint.

    Attributes:
        prompt_tokens: P (tokens); cached_tokens: C (tokens of P served from cache).
        output_tokens: M (tokens generated, ``usage.completion_tokens``), > 0.
        batch: mean sequences on the endpoint while it ran, this request included.
        duration_s: dispatch to last token (s), > 0.
        accept_length: tau of the request (speculative pools; None on plain pools).
        context: the mean context of its batch (:func:`router.decision.policy.batch_context` at
            dispatch, tokens); None: its own ``P + M / 2``.
        stall_tokens: prompt tokens other requests prefilled on the endpoint while it was in
            flight: those not yet prefilled when it was dispatched (the fluid backlog,
            :class:`router.state.prefill_meter.PrefillMeter`) and those sent there before it
            ended (tokens; the regressor of ``s``, :mod:`router.decision.predict`).
    """

    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    batch: float
    duration_s: float
    accept_length: float | None = None
    context: float | None = None
    stall_tokens: float = 0.0


def _theta(model: SpeedModel) -> list[float]:
    return [model.prefill_s_per_token, model.decode_s_per_token,
            model.decode_s_per_token / model.batch_knee, model.attention_s_per_token, model.kv_read_s_per_token,
            model.prefill_stall_s_per_token]


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """``a x = b`` by Gaussian elimination with partial pivoting (None when singular)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for k in range(col, n + 1):
                    m[r][k] -= f * m[col][k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))) / m[r][r]
    return x


class SpeedFit:
    """The online fit of one pool's speed model (module docstring).

    Args:
        prior: theta_0 and the model's fixed parts (``max_running_requests``, ``gamma``, ``c``).
        prior_weight: the prior's strength, in observations' worth per parameter.
        forgetting: the decay of an observation's weight per later observation, in (0, 1].
    """

    def __init__(self, prior: SpeedModel, *, prior_weight: float = 0.05, forgetting: float = 0.995,
                 memory_s: float = DEFAULT_MEMORY_S, detect_changes: bool = True) -> None:
        if not 0 < forgetting <= 1:
            raise ValueError("forgetting must be in (0, 1]")
        if memory_s <= 0:
            raise ValueError("memory_s must be > 0")
        self.prior = prior
        self.forgetting = forgetting
        self.memory_s = memory_s
        self._theta0 = _theta(prior)
        # the prior's precision per parameter: prior_weight / scale_i ** 2 (:func:`prior_precision`)
        self._prior_weight = prior_weight
        self._a = [[0.0] * _N for _ in range(_N)]
        self._g = [0.0] * _N
        # two candidates from the same normal equations: without s (s = 0) and, when the
        # prior has one, with it; the published model is the one that predicts better
        self._candidate = self._theta0[_S] > 0
        self.stall_on = False
        self._base_theta = [*self._theta0[:_S], 0.0]
        self._stall_theta = list(self._theta0)
        self._base_error: float | None = None
        self._stall_error: float | None = None
        self._model = replace(prior, prefill_stall_s_per_token=0.0)
        self._model_theta = self._base_theta  # _theta(self._model), kept with it
        self.count = 0
        self.version = 0  # bumped whenever the model or the acceptance table changes
        self._max_weight = 1.0 / (1.0 - forgetting) if forgetting < 1 else float("inf")
        self._tau: dict[str, DecayedMean] = {}  # temperature class -> tau of its observations
        # (class, context bucket) -> tau of its requests: per-request tau only (the engine's
        # spec_tokens_details), never the batch-wide gauge
        self._cells: dict[tuple[str, int], DecayedMean] = {}
        self._table: dict[tuple[str, int], float] = {}
        self._cusum = Cusum() if detect_changes else None
        self.changes = 0  # shifts the residual's change detector found (the history discounted)
        self.rebased_from: tuple[int, int] | None = None  # (id, version) of the fit last rebased on
        self.updated_at: float | None = None
        self.error: float | None = None  # relative error of the prediction, exponentially averaged

    @property
    def model(self) -> SpeedModel:
        """The current speed model (the prior until the first observation)."""
        return self._model

    @property
    def stall_s_per_token(self) -> float:
        """``s`` of the candidate with the prefill stall (s per token; 0: no such candidate),
        used or not: what an endpoint's prompts are metered at, so its observations carry the
        stall whichever model is published."""
        return self._stall_theta[_S] if self._candidate else 0.0

    def rebase(self, model: SpeedModel) -> None:
        """Take ``model``'s ``theta`` (another pool's fit: the same target model on the same
        hardware) as this fit's prior, keeping its own ``gamma``, ``c`` and running cap, and
        refit. A pool the prediction has not sent work to yet starts from what its sibling
        measured instead of the default prior, which would make it look slower or faster than
        a pool that has learned its real speed (:data:`MIN_OWN_OBSERVATIONS`)."""
        own_stall = self._theta0[_S]
        self._theta0 = [*_theta(model)[:_S], model.prefill_stall_s_per_token or own_stall]
        if self.count:
            self._model = self._refit()
        else:
            self._base_theta = [*self._theta0[:_S], 0.0]
            self._stall_theta = list(self._theta0)
            self._model = replace(
                self.prior, prefill_s_per_token=model.prefill_s_per_token, decode_s_per_token=model.decode_s_per_token,
                batch_knee=model.batch_knee, attention_s_per_token=model.attention_s_per_token,
                kv_read_s_per_token=model.kv_read_s_per_token, prefill_stall_s_per_token=0.0)
        self._model_theta = _theta(self._model)
        self.version += 1

    def accept_length(self, temperature: str) -> float | None:
        """tau of the class's observed requests (exponentially averaged), None before any:
        what the prediction uses when the live gauge has no fresh estimate (an idle pool)."""
        mean = self._tau.get(temperature)
        return None if mean is None else mean.value

    def accept_table(self) -> dict[tuple[str, int], float]:
        """``{(temperature class, context bucket): tau}`` of the cells with at least
        :data:`MIN_BUCKET_OBSERVATIONS` per-request measurements, as of the last refit (do not
        mutate)."""
        return self._table

    def status(self, now: float) -> dict[str, object]:
        """What ``/ready`` shows of the fit: the model's parameters, observations, relative
        error, age (s), and the measured tau per ``class/bucket``."""
        m = self._model
        return {"decode_s_per_token": m.decode_s_per_token, "batch_knee": round(m.batch_knee, 3),
                "attention_s_per_token": m.attention_s_per_token, "kv_read_s_per_token": m.kv_read_s_per_token,
                "prefill_s_per_token": m.prefill_s_per_token, "prefill_stall_s_per_token": m.prefill_stall_s_per_token,
                "prefill_stall": {"used": self.stall_on, "candidate_s_per_token": self.stall_s_per_token,
                                  "error_with": _round(self._stall_error), "error_without": _round(self._base_error)},
                "observations": self.count, "error": None if self.error is None else round(self.error, 4),
                "changes": self.changes,
                "age_s": None if self.updated_at is None else round(now - self.updated_at, 3),
                "accept_length": {f"{c}/{bucket_label(b)}": round(t, 3)
                                  for (c, b), t in sorted(self.accept_table().items())}}

    def row(self, obs: Observation) -> list[float]:
        """The observation's regressors (the module docstring's features, before scaling)."""
        m, p = obs.output_tokens, obs.prompt_tokens
        u = max(0, p - obs.cached_tokens)
        ctx = p + m / 2 if obs.context is None else obs.context
        gamma, c = self.prior.gamma, self.prior.c
        if gamma > 0 and obs.accept_length is not None:
            tau = min(max(obs.accept_length, 1.0), gamma + 1.0)
            k = (1 + c * gamma) / tau
            return [u, m * k, m * obs.batch * (gamma + 1 + c * gamma) / tau, m * ctx * k, m * obs.batch * ctx * k,
                    obs.stall_tokens]
        return [u, m, m * obs.batch, m * ctx, m * obs.batch * ctx, obs.stall_tokens]

    def predict_s(self, obs: Observation, row: list[float] | None = None) -> float:
        """The current model's time for ``obs`` (s; no queueing); ``row``: its :meth:`row`
        when already computed."""
        return sum(x * t for x, t in zip(self.row(obs) if row is None else row, self._model_theta, strict=True))

    def observe(self, obs: Observation, now: float, temperature: str | None = None, *,
                measured: bool = False) -> None:
        """Take one finished request (``now``: its end, monotonic s; ``temperature``: its
        class, for :meth:`accept_length`; ``measured``: ``obs.accept_length`` is the request's
        own, for :meth:`accept_table`); a non-positive duration or output is ignored."""
        if obs.duration_s <= 0 or obs.output_tokens <= 0:
            return
        if measured and temperature is not None and obs.accept_length is not None:
            key = (temperature, context_bucket(obs.prompt_tokens))
            cell = self._cells.get(key)
            if cell is None:
                cell = self._cells[key] = DecayedMean(self.memory_s, self._max_weight)
            cell.add(obs.accept_length, now)
        if temperature is not None and obs.accept_length is not None:
            mean = self._tau.get(temperature)
            if mean is None:
                mean = self._tau[temperature] = DecayedMean(self.memory_s, min(self._max_weight, 20.0))
            mean.add(obs.accept_length, now)
        row = self.row(obs)
        y = obs.duration_s
        predicted = self.predict_s(obs, row)
        rel = abs(predicted - y) / y
        self.error = rel if self.error is None else 0.9 * self.error + 0.1 * rel
        if self._candidate:
            self._base_error = _ewma(self._base_error, abs(_dot(row, self._base_theta) - y) / y)
            self._stall_error = _ewma(self._stall_error, abs(_dot(row, self._stall_theta) - y) / y)
        if self._cusum is not None and self._cusum.add((y - predicted) / y):
            self._discount()
        x = [v / y for v in row]  # relative residuals: y / y = 1
        f = self.forgetting
        a, g = self._a, self._g
        for i, xi in enumerate(x):  # (the same operations as two index loops, fewer of Python's steps)
            g[i] = f * g[i] + xi
            a[i] = [f * aij + xi * xj for aij, xj in zip(a[i], x)]
        self.count += 1
        self.updated_at = now
        if self.count <= REFIT_EVERY * 4 or self.count % REFIT_EVERY == 0:
            self._publish()

    def _discount(self) -> None:
        """The residual shifted (:class:`router.decision.drift.Cusum`): keep :data:`CHANGE_KEEP` of
        the history's information, so the observations after the change make the model (the
        prior's pull is untouched) and solve at once."""
        for i in range(_N):
            self._g[i] *= CHANGE_KEEP
            row = self._a[i]
            for j in range(_N):
                row[j] *= CHANGE_KEEP
        self.changes += 1
        self._publish()

    def _publish(self) -> None:
        """Solve for the model and freeze the acceptance table: what snapshots read (the
        version tells a snapshot cache that they changed)."""
        self._model = self._refit()
        self._model_theta = _theta(self._model)
        self._table = {k: c.value for k, c in self._cells.items()
                       if c.count >= MIN_BUCKET_OBSERVATIONS and c.value is not None}
        self.version += 1

    def _refit(self) -> SpeedModel:
        """Solve both candidates and publish the one that predicts better (``stall_on``:
        with ``s`` once its error is at most :data:`STALL_SWITCH` of the other's, after
        :data:`MIN_STALL_OBSERVATIONS`; back without once it is worse)."""
        base = self._solve_theta(_S, self._base_theta)
        if base is not None:
            self._base_theta = [*base, 0.0]
        if self._candidate:
            stall = self._solve_theta(_N, self._stall_theta)
            if stall is not None:
                self._stall_theta = stall
            eb, es = self._base_error, self._stall_error
            if eb is not None and es is not None:
                if not self.stall_on and self.count >= MIN_STALL_OBSERVATIONS and es <= STALL_SWITCH * eb:
                    self.stall_on = True
                elif self.stall_on and es > eb:
                    self.stall_on = False
        p, decode, slope, attn, kv_read, stall_s = self._stall_theta if self.stall_on else self._base_theta
        return replace(self.prior, prefill_s_per_token=p, decode_s_per_token=decode,
                       batch_knee=decode / slope, attention_s_per_token=attn, kv_read_s_per_token=kv_read,
                       prefill_stall_s_per_token=stall_s)

    def _solve_theta(self, n: int, current: list[float]) -> list[float] | None:
        """The ridge solution of the first ``n`` parameters (the rest held at 0), ``current``
        their last solution (the prior's scale, :func:`prior_precision`); None when singular."""
        theta0 = self._theta0[:n]
        lam = prior_precision(theta0, current[:n], self._prior_weight)
        a = [row[:n] for row in self._a[:n]]
        for i, li in enumerate(lam):
            a[i][i] += li
        b = [g + li * t0 for g, li, t0 in zip(self._g[:n], lam, theta0, strict=True)]
        theta = _solve(a, b)
        if theta is None or not all(math.isfinite(t) for t in theta):
            return None
        # positive, at most 100x below the prior; a term whose prior is 0 is off and stays so
        return [max(t, t0 / 100) if t0 > 0 else 0.0 for t, t0 in zip(theta, theta0, strict=True)]


def _dot(x: list[float], theta: list[float]) -> float:
    return sum(a * b for a, b in zip(x, theta, strict=True))


def _ewma(mean: float | None, x: float) -> float:
    return x if mean is None else 0.9 * mean + 0.1 * x


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def prior_precision(theta0: list[float], theta: list[float], weight: float) -> list[float]:
    """The ridge's precision per parameter, ``weight / scale_i ** 2`` with ``scale_i`` the larger
    of the prior's value ``theta0_i`` and the fit's current one ``theta_i`` (both in the
    parameter's unit, s per token or per token squared; the result in 1 / unit ** 2).

    The prior is worth ``weight`` relative observations whose row for parameter ``i`` alone is
    ``1 / scale_i``: a relative error of 100% of the scale costs ``weight``. Scaled by the prior
    alone (``scale_i = theta0_i``), a prior ``k`` times too small would be held ``k ** 2`` times
    tighter, in units of the true value, than a right one (and one ``k`` times too large ``k ** 2``
    times looser): with every time halved, the batch slope of a plain pool seeing batches of
    1-12 was still 37% of the way back to the prior after 64 observations (knee 1.26x the
    truth, completion times off by up to 5.7%), with every time doubled 2% (tests/unit/test_learn_priors.py).
    With the larger of the two, a prior that is too small is no stiffer than a right one, and a
    direction the traffic does not excite (the fit stays at ``theta0_i``) keeps its prior as
    before. Evaluated at each refit with the last published ``theta``: an iteration whose
    scale grows monotonically toward the data's estimate.
    """
    return [weight / max(t0, t, 1e-12) ** 2 for t0, t in zip(theta0, theta, strict=True)]


class ObservationBudget:
    """How many finished requests a fit takes: at most ``rate`` per second on average, bursts
    of up to ``max(rate, 1)`` (a token bucket; the caller passes the time, monotonic s).

    Args:
        rate: observations per second (> 0).
    """

    __slots__ = ("_at", "_tokens", "capacity", "rate")

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.rate = rate
        self.capacity = max(rate, 1.0)
        self._tokens = self.capacity
        self._at: float | None = None

    def take(self, now: float) -> bool:
        """Whether a request dispatched at ``now`` is measured (and the budget spent on it)."""
        if self._at is not None and now > self._at:
            self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now if self._at is None else max(self._at, now)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


def share_priors(fits: list[SpeedFit]) -> None:
    """Rebase every fit with fewer than :data:`MIN_OWN_OBSERVATIONS` observations on the fit
    with the most (when that one has at least as many): the pools of one deployment run the
    same target model, so what one measured is a better prior for another than the default."""
    best = max(fits, key=lambda f: f.count, default=None)
    if best is None or best.count < MIN_OWN_OBSERVATIONS:
        return
    source = (id(best), best.version)
    for fit in fits:
        if fit is not best and fit.count < MIN_OWN_OBSERVATIONS and fit.rebased_from != source:
            fit.rebase(best.model)
            fit.rebased_from = source  # again only once the sibling publishes a new model
