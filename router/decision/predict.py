"""Predicted completion time of one request on one endpoint: the pool-choice model.

With separate speculative and plain pools, bypassing speculation means sending work to other
engines, so the router compares pools by when the request would finish on each, from the
load it sees now (``docs/operator-guide.md``, "Choosing the pool by predicted completion").
The model is Leviathan et al.'s speedup (arXiv:2211.17192, section 3) with a batch term:
decode is memory-bound at small batch and turns compute-bound past a knee, where verifying
``gamma + 1`` positions per sequence stops being nearly free.

Per output token, for a batch of ``b`` sequences at context ``L`` (seconds):

    T_plain(b, L)  = t0 * (1 + b / b_knee) + a * L + k * b * L
    T_verify(b, L) = t0 * (1 + b * (gamma + 1) / b_knee) + a * L + k * b * L
    T_spec(b, L)   = (T_verify(b, L) + c * gamma * T_plain(b, L)) / tau

and for the whole request, with ``P`` prompt tokens of which ``C`` are cached on the endpoint
and ``M`` output tokens:

    prefill = p * (P - C) + s * B
    decode  = M * T(b, L)   L: the batch's mean context (the engine's used KV and this request's
                            P + M / 2 over its running requests and this one), else P + M / 2
    queue   = (b - R) / R * (prefill + decode) when b > R (R: the engine's running-request cap)
    kv wait = (need - free) / used * (prefill + decode) when need > free

where ``need`` is the request's KV reservation (``P + n * M``, plus the draft tokens ``K`` on a
speculative engine) times ``1 + queued`` (the requests already waiting are taken to reserve
as much), ``free`` the engine's free KV tokens (``sglang:max_total_num_tokens`` less the
used ones) and ``used`` its used KV tokens: SGLang admits a request only when its
reservation fits (``max_total_num_tokens``), and the running requests free their KV at
about one engine's worth per request lifetime. A heuristic, not a queueing model: it makes
an engine whose KV is full predicted slow, which neither the batch nor the running cap
shows.

``B`` is the other requests' prefill ahead of it on the engine: SGLang runs a step either as
a prefill (extend) batch or as a decode batch, a prefill whenever one can be formed
(``--enable-mixed-chunk`` off by default; ``scheduler.py``, ``get_next_batch_to_run``), so a
request waits for the prompts sent before it that the engine has not prefilled yet (the
router's fluid estimate, drained at ``1 / s`` tokens per second:
:class:`router.state.prefill_meter.PrefillMeter`), and each of them costs it ``s``. The prompts
that arrive while it decodes stop it too; the fit counts them (``Observation.stall_tokens``)
but the prediction does not forecast them: with an arrival-rate term the learned router did
worse on the simulated days (``docs/performance.md``, "Prefill ahead of a request"). On a CPU
engine prefill takes seconds and the term is most of a loaded request's wait; on a GPU engine
it is small. A ``speed`` block's ``s`` defaults to its ``p``; a learning pool uses one only
while it predicts clearly better than the model without it (:class:`router.decision.learn.SpeedFit`).

The last term is attention's KV reads: a decode step reads every running sequence's KV, so
its time grows with the batch *times* its context (``b * L`` tokens of KV to load per step:
Pope et al., "Efficiently Scaling Transformer Inference", arXiv:2211.05102, section 2), where
``a * L`` alone would let a batch of twelve long prompts decode as fast per step as one.
``k = 0`` is the form without it.

Parameters (:class:`SpeedModel`, per pool, from ``specgate calibrate``): ``t0`` =
``decode_s_per_token`` (s), ``b_knee`` = ``batch_knee`` (sequences), ``a`` =
``attention_s_per_token`` (s per context token per output token), ``k`` =
``kv_read_s_per_token`` (s per decode step per context token of the batch), ``p`` =
``prefill_s_per_token`` (s per uncached prompt token), ``s`` = ``prefill_stall_s_per_token``
(s a request waits per prompt token other requests prefill on its engine), ``R`` = ``max_running_requests``
(sequences, optional); for a speculative pool ``gamma`` (draft tokens per cycle), ``c`` (drafter
cost ratio, ``T_draft / (gamma * T_target)``) and ``tau`` (mean accepted length per verify step,
bonus included: SGLang's ``spec_accept_length``), tracked live per temperature class.
Pure functions: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SpeedModel", "completion_s", "externality_s", "token_s"]


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """A pool's speed model (see the module docstring for the formulas).

    Attributes:
        decode_s_per_token: t0, seconds per output token of a batch of one at short context.
        batch_knee: b_knee, the batch (sequences) at which the step's compute equals t0.
        attention_s_per_token: a, seconds per output token per context token.
        kv_read_s_per_token: k, seconds per decode step per context token of the whole batch
            (``b * L`` tokens); 0: a step's time does not grow with batch times context.
        prefill_s_per_token: p, seconds per uncached prompt token.
        prefill_stall_s_per_token: s, seconds a request waits per prompt token that other
            requests prefill on its engine while it waits or decodes (0: prefill never delays
            another request's tokens).
        max_running_requests: R, sequences the engine runs at once (None: no queueing).
        gamma: draft tokens per cycle (speculative pools; 0 for plain).
        c: the drafter's relative cost (speculative pools).
    """

    decode_s_per_token: float
    batch_knee: float
    attention_s_per_token: float = 0.0
    prefill_s_per_token: float = 0.0
    max_running_requests: int | None = None
    gamma: int = 0
    c: float = 0.0
    kv_read_s_per_token: float = 0.0
    prefill_stall_s_per_token: float = 0.0


def token_s(model: SpeedModel, *, batch: float, context: float, accept_length: float | None,
            kv_tokens: float | None = None) -> float:
    """Seconds per output token at ``batch`` sequences and ``context`` tokens.

    ``accept_length`` (tau) None or a plain model (``gamma == 0``) gives ``T_plain``; else
    ``T_spec`` with ``tau`` clamped to ``[1, gamma + 1]``. ``kv_tokens``: the KV a step reads
    (the running sequences' contexts summed, tokens; None: ``batch * context``, which counts
    requests waiting in the engine's queue as if they decoded).
    """
    t0, knee = model.decode_s_per_token, model.batch_knee
    attn = model.attention_s_per_token * context + model.kv_read_s_per_token * (
        batch * context if kv_tokens is None else kv_tokens)
    plain = t0 * (1.0 + batch / knee) + attn
    if accept_length is None or model.gamma <= 0:
        return plain
    gamma = model.gamma
    tau = min(max(accept_length, 1.0), gamma + 1.0)
    verify = t0 * (1.0 + batch * (gamma + 1) / knee) + attn
    return (verify + model.c * gamma * plain) / tau


def completion_s(model: SpeedModel, *, batch: int, prompt_tokens: int, cached_tokens: int,
                 output_tokens: int, accept_length: float | None, kv_need_tokens: int = 0,
                 kv_free_tokens: int | None = None, kv_used_tokens: int = 0,
                 context_tokens: float | None = None, kv_read_tokens: float | None = None,
                 prefill_backlog_tokens: float = 0.0) -> float:
    """Predicted seconds from dispatch to the last token (see the module docstring).

    Args:
        batch: sequences on the endpoint once this request joins (its load + this request's n).
        prompt_tokens: P; cached_tokens: C (tokens of P the endpoint has cached).
        output_tokens: M, the output budget per sequence (tokens).
        accept_length: tau for this request's temperature class (None on a plain pool).
        kv_need_tokens: the KV tokens the request and those queued before it reserve.
        kv_free_tokens: the engine's free KV tokens (None: unknown, no KV wait).
        kv_used_tokens: the engine's used KV tokens.
        context_tokens: the mean context of the batch the request decodes in (tokens; every
            sequence of a batch waits for the step, whose attention reads every sequence's
            KV); None: the request's own ``P + M / 2``.
        kv_read_tokens: the KV each of its decode steps reads (the engine's used KV and this
            request's ``P + M / 2``, tokens; None: the running batch times ``context_tokens``).
        prefill_backlog_tokens: B, prompt tokens sent to the endpoint before it and not yet
            prefilled (tokens).
    """
    prefill = (model.prefill_s_per_token * max(0, prompt_tokens - cached_tokens)
               + model.prefill_stall_s_per_token * prefill_backlog_tokens)
    running = batch
    cap = model.max_running_requests
    if cap is not None:
        running = min(batch, cap)
    context = prompt_tokens + output_tokens / 2 if context_tokens is None else context_tokens
    decode = output_tokens * token_s(model, batch=running, context=context, accept_length=accept_length,
                                     kv_tokens=kv_read_tokens)
    total = prefill + decode
    service = total
    if cap is not None and batch > cap:
        total += (batch - cap) / cap * service
    if kv_free_tokens is not None and kv_need_tokens > kv_free_tokens:
        total += (kv_need_tokens - kv_free_tokens) / max(kv_used_tokens, 1) * service
    return total


def externality_s(model: SpeedModel, *, batch: int, sequences: int, output_tokens: int,
                  accept_length: float | None, context_tokens: float) -> float:
    """Seconds the request adds to the requests decoding beside it on the endpoint: while its
    ``sequences`` share the batch, each of the ``batch - sequences`` others decodes a token
    ``token_s(batch) - token_s(batch - sequences)`` slower, for as many tokens as the request
    decodes (``output_tokens``): at a steady load the batch stays about as large through the
    request's life (Little's law: those that finish are replaced by new arrivals, which it slows
    in their turn), so counting only the tokens the present ones have left (about half of
    theirs) would halve the cost and leave the faster pool over-filled. The marginal cost of joining a queue
    (the social cost the selfish completion time leaves out: a shared server's delay externality,
    Naor 1969, "The regulation of queue size by levying tolls", Econometrica 37(1)); 0 once the
    running cap ``R`` is reached (the request waits instead of slowing the others).

    Args:
        batch: sequences on the endpoint once the request joins (its load + ``sequences``).
        sequences: the request's sequences (``n``).
        output_tokens: the request's output budget per sequence (tokens).
        accept_length: tau of the request's class on a speculative pool (None: plain).
        context_tokens: the batch's mean context (tokens).
    """
    others = batch - sequences
    cap = model.max_running_requests
    if others <= 0 or (cap is not None and batch > cap):
        return 0.0
    slower = (token_s(model, batch=batch, context=context_tokens, accept_length=accept_length)
              - token_s(model, batch=others, context=context_tokens, accept_length=accept_length))
    return others * output_tokens * max(0.0, slower)

