"""The end of a response (the pipeline's last step, :mod:`router.front.pipeline`): request counters,
duration and first-byte time, failures, the decision's prediction checked against what
happened and the speed model's sample (:func:`_learn`), the planner's window, the key's
ticket, the span, one access-log line. Runs once per response, on the model's live runtime
(a reload may have swapped it since the request came).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import orjson

from router.decision.learn import observed_prompt_tokens
from router.ops.spans import end_span

if TYPE_CHECKING:
    from router.front.appstate import FrontState as AppState
    from router.state.runtime import Runtime
    from router.upstream.proxy import ProxyJob

__all__ = ["record"]

access_log = logging.getLogger("specgate.access")


def record(state: AppState, live: Runtime, job: ProxyJob) -> None:
    """The end of a response: request counters, duration, TTFB, failures, the speed model's
    sample (:func:`_learn`), the key's ticket, the span, one access-log line."""
    m = state.metrics
    pool, model = job.decision.pool or "none", live.model_name
    m.requests.inc((model, pool, job.decision.reason._value_, str(job.status)))  # _value_: no enum property call
    duration = time.perf_counter() - job.received_at
    m.request_duration.observe((pool,), duration)
    if job.ttfb_s is not None:
        m.time_to_first_byte.observe((pool,), job.ttfb_s)
    if job.outcome != "ok":
        m.upstream_failures.inc((pool, job.outcome))
    if "aborted" in job.extra:
        m.upstream_aborts.inc((pool,))
    for stale_pool in job.stale_retries:
        m.upstream_stale_retries.inc((stale_pool,))
    for refused in job.rejections:
        m.engine_rejections.inc(refused)
    error = _learn(state, live, job, duration)
    state.plan_window.record(job, model, live.config.planner)  # router.front.planwindow: the planner's window
    state.limiter.finish(job.ticket, job.observer.usage if job.observer is not None else None)
    if job.span is not None:
        end_span(job.span, job.status, None if job.outcome == "ok" else job.outcome,
                 final_pool=job.decision.pool, attempts=job.attempts, outcome=job.outcome)
    if live.config.server.log_requests:
        access_log.info(orjson.dumps({
            "request_id": job.request_id, "model": model, "pool": pool, "endpoint": job.lease.endpoint.url,
            "reason": job.decision.reason.value, "endpoint_reason": job.decision.endpoint_reason,
            "status": job.status, "outcome": job.outcome,
            "prompt_tokens": job.features.prompt_tokens, "prompt_tokens_exact": job.features.prompt_exact,
            "max_tokens": job.features.max_new_tokens,
            "n": job.features.n, "stream": job.features.stream, "attempts": job.attempts,
            "temperature_class": job.features.temperature_class,
            "predicted_s": {p: round(t, 4) for p, t in job.decision.predicted} or None,
            "prediction_error": None if error is None else round(error, 4),
            "ttfb_s": None if job.ttfb_s is None else round(job.ttfb_s, 6),
            "duration_s": round(duration, 6)}).decode())


def _learn(state: AppState, runtime: Runtime, job: ProxyJob, duration_s: float) -> float | None:
    """Check the decision's prediction for a chat or completions request answered in full on
    the endpoint it was dispatched to (:meth:`Runtime.check_prediction`; returns the relative
    error, None when unchecked) and, when it did not wait in the engine, feed it to its pool's
    fit (:meth:`Runtime.learn`); its ``n * prompts`` sequences as one of the longest prompt with
    the mean output, in a batch that holds them all. ``duration_s`` is from receipt to the last
    byte; both take the part from dispatch (and the first byte's time from dispatch)."""
    usage = job.observer.usage if job.observer is not None else None
    dispatch = job.extra.get("dispatch")
    if (job.status != 200 or job.outcome != "ok" or not isinstance(usage, dict) or dispatch is None
            or job.features.adapters  # an adapter's speed and acceptance are not the base model's
            or job.decision.pool is None):
        return None
    url, load, waits, context, sent_at, backlog, sent = dispatch
    output = usage.get("completion_tokens")
    sequences = job.features.n * job.features.num_prompts
    if url != job.lease.endpoint.url or type(output) is not int or output < sequences:
        return None
    # the model's time is the engine's, from dispatch: the router's own time before it (reading
    # and counting the prompt, admission, a wait for a tokenizer thread) is not the pool's
    before = max(0.0, sent_at - job.received_at)
    duration_s -= before
    error = runtime.check_prediction(job.decision, job.features, output_tokens=round(output / sequences),
                                     duration_s=duration_s, ttfb_s=None if job.ttfb_s is None else job.ttfb_s - before,
                                     now=state.clock())
    if waits:
        return error
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    features = job.features
    prompt = observed_prompt_tokens(features.prompt_tokens, features.prompt_exact, features.num_prompts,
                                    usage.get("prompt_tokens"))
    if not features.prompt_exact and prompt != features.prompt_tokens:  # the engine's count of a bounded P
        runtime.prompt_ratio.observe(prompt, features.prompt_bytes)
    runtime.learn(job.decision.pool, url, prompt_tokens=prompt,
                  cached_tokens=cached // job.features.num_prompts if type(cached) is int else 0,
                  output_tokens=round(output / sequences), dispatch_load=load, duration_s=duration_s,
                  temperature=job.features.temperature_class, now=state.clock(),
                  accept_length=job.extra.get("spec_accept_length"), context=context, sequences=sequences,
                  stall_tokens=backlog + max(0.0, runtime.prompts_sent(url) - sent))
    return error
