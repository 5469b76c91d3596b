"""The generation engine: admission, prefill, decode steps, stops, aborts (the speed model).

``steps(state, job)`` waits for a running slot (FIFO when ``max_running_requests`` is set),
sleeps the prefill (``prefill_delay_s + prefill_s_per_token * uncached prompt tokens`` plus a
behaviour's ``delay_s``), then emits one token per running choice per decode step
(``decode_step_s`` apart, or ``chunk_delay_s`` for a non-streamed scripted request). Choice
``j``'s token ``i`` is ``tok{i}``; a choice ends on a stop string, on ``eos_after_tokens``, at
its limit, or on an abort (``/abort_request``, a client disconnect, an engine abort). The
prefix cache is matched before prefill and filled after it and at the end (module docstring
of :mod:`serving.fake_sglang`, and :mod:`serving.fake_sglang.prefix_cache`). With a step engine
(``state.stepper``) the step model decides instead when each choice is admitted and how many
tokens it emits per step (:mod:`serving.fake_sglang.stepping`); stop strings and the token limit
still end a choice here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.state import FakeState, Job, Sample
from serving.fake_sglang.stepping import StepHint, StepRequest

__all__ = ["steps"]


def _perturbed(config: FakeConfig, job: Job) -> bool:
    """Whether ``perturb_output`` applies to ``job`` (``perturb_only_field`` in its body)."""
    body = job.entry.get("body")
    field = config.perturb_only_field
    return field is None or (isinstance(body, dict) and field in body)


async def _sleep_or_wake(job: Job, delay: float) -> None:
    """Sleep ``delay`` seconds or until ``job.wake`` is set (an abort); 0: yield once."""
    if delay <= 0:
        await asyncio.sleep(0)
        return
    job.wake.clear()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(job.wake.wait(), delay)


def _stop_string(job: Job, s: Sample, delta: str) -> tuple[str, str, str | None]:
    """``s``'s text with ``delta`` appended, and the job's first stop string in it: then the
    text is cut before it (``s.text`` set) and ``delta`` is what is left of the new text.
    Returns ``(new text, delta, matched stop or None)``."""
    new_text = s.text + delta
    matched = next((st for st in job.stop if st and st in new_text), None)
    if matched is not None:
        cut = new_text.index(matched)
        delta = new_text[len(s.text):cut] if cut >= len(s.text) else ""
        s.text = new_text[:cut]
    return new_text, delta, matched


def _finish(state: FakeState, s: Sample, finish: dict[str, Any]) -> None:
    """End sample ``s`` with ``finish`` and take it off the running set."""
    s.finish = finish
    if finish["type"] == "abort":
        state.num_aborted_requests_total += 1
    state.release_sample(s)


async def steps(state: FakeState, job: Job) -> AsyncIterator[tuple[Sample, str]]:
    """Run prefill then decode; yield (sample, text delta) for each output SGLang would emit.

    A sample's last yield has ``sample.finish`` set. Aborts (``/abort_request`` or a client
    disconnect) end a sample with ``{"type": "abort", ...}``.
    """
    if state.stepper is not None:
        async for out in _stepped(state, job):
            yield out
        return
    cfg = state.launch_config
    b = job.behaviour
    step_delay = cfg.decode_step_s
    if b is not None and b.chunk_delay_s is not None:
        step_delay = 0.0 if job.stream else b.chunk_delay_s
    await state.admit(job)
    cache = state.prefix_cache
    if cache is not None and job.cache_units is not None and job.prompt_error is None:
        job.cached = [cache.match(u) for u in job.cache_units]
    uncached = max(s.prompt_tokens for s in job.samples) - max(job.cached, default=0)
    prefill = cfg.prefill_delay_s + cfg.prefill_s_per_token * uncached
    if b is not None:
        prefill += b.delay_s
    if prefill > 0:
        deadline = time.monotonic() + prefill
        while (left := deadline - time.monotonic()) > 0 and not any(
            s.abort_requested for s in job.samples
        ):
            await _sleep_or_wake(job, left)
    if job.prompt_error is not None:
        for s in job.samples:
            _finish(
                state,
                s,
                {
                    "type": "abort",
                    "message": job.prompt_error,
                    "status_code": 400,
                    "err_type": "BadRequestError",
                },
            )
            yield s, ""
        return
    stream_key = "true" if job.stream else "false"
    state.prompt_tokens_total[stream_key] += sum(
        job.samples[i].prompt_tokens for i in range(0, len(job.samples), max(job.n, 1))
    )
    if cache is not None and job.cache_units is not None:
        for units in job.cache_units:
            cache.insert(units)
    active = list(job.samples)
    first = True
    while active:
        if not first:
            await _sleep_or_wake(job, step_delay)
        first = False
        still = []
        for s in active:
            if s.abort_requested:
                _finish(
                    state,
                    s,
                    {
                        "type": "abort",
                        "message": "Aborted",
                        "status_code": None,
                        "err_type": None,
                    },
                )
                yield s, ""
                continue
            if s.generated >= s.limit:  # only for a limit of 0
                _finish(state, s, {"type": "length", "length": s.limit})
                yield s, ""
                continue
            i = s.generated
            delta = f"tok{i}" if i == 0 else f" tok{i}"
            if state.config.perturb_output and i >= 2 and _perturbed(state.config, job):
                delta = f" tok{i + 1}"  # a lossy speculative engine
            s.generated += 1
            state.generation_tokens_total[stream_key] += 1
            decoding = state.metrics_override.get("decoding_gauges")
            if decoding:  # what the engine measures while it decodes (stale while idle)
                gauges = state.metrics_override.get("gauges") or {}
                state.metrics_override["gauges"] = {**gauges, **decoding}
            if state.avg_spec_accept_length is None and cfg.speculative_algorithm:
                state.avg_spec_accept_length = cfg.spec_accept_length
            new_text, delta, matched = _stop_string(job, s, delta)
            if matched is not None:
                _finish(state, s, {"type": "stop", "matched": matched})
            elif (
                cfg.eos_after_tokens is not None
                and not job.ignore_eos
                and s.generated >= cfg.eos_after_tokens
                and s.limit > cfg.eos_after_tokens
            ):
                s.text = new_text
                _finish(state, s, {"type": "stop", "matched": cfg.eos_token_id})
            elif s.generated >= s.limit:
                s.text = new_text
                _finish(state, s, {"type": "length", "length": s.limit})
            else:
                s.text = new_text
                still.append(s)
            yield s, delta
        active = still
    if cache is not None and job.cache_units is not None:
        # cache_finished_req: prompt + output of each prompt's first choice
        first = job.samples[0]
        if first.finish is not None and first.finish.get("type") != "abort":
            cache.insert(job.cache_units[0] + state.counter.text_units(first.text))


def _temperature(job: Job) -> float:
    """The request's temperature (chat/completions ``temperature``, ``/generate``'s
    ``sampling_params.temperature``; absent: 1.0, SGLang's default)."""
    body = job.entry.get("body")
    t = body.get("temperature") if isinstance(body, dict) else None
    if t is None and isinstance(body, dict) and isinstance(body.get("sampling_params"), dict):
        t = body["sampling_params"].get("temperature")
    return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else 1.0


async def _stepped(state: FakeState, job: Job) -> AsyncIterator[tuple[Sample, str]]:
    """``steps`` driven by the step engine: one text delta per sample per step it emitted in."""
    stepper = state.stepper
    assert stepper is not None
    cfg = state.launch_config
    hint = job.step_hint or StepHint()
    job.admitted = True  # the engine owns admission; nothing to release in FakeState
    if job.prompt_error is None:
        cached = min(hint.cached_tokens, max(s.prompt_tokens for s in job.samples))
        job.cached = [cached] * max(1, len(job.samples) // max(job.n, 1))
        reqs = {}
        for s in job.samples:
            out = s.limit if hint.output_tokens is None or job.ignore_eos else min(hint.output_tokens, s.limit)
            reqs[s.rid] = StepRequest(s, s.prompt_tokens, min(cached, s.prompt_tokens), max(1, out),
                                      max(1, s.limit), _temperature(job), hint.alpha_scale)
        if not all(stepper.engine.fits(r) for r in reqs.values()):
            job.prompt_error = (f"Input length ({job.samples[0].prompt_tokens} tokens) exceeds the maximum "
                                f"allowed length ({cfg.max_req_input_len} tokens). Use a shorter input or "
                                f"enable --allow-auto-truncate.")
    if job.prompt_error is not None:
        for s in job.samples:
            _finish(state, s, {"type": "abort", "message": job.prompt_error, "status_code": 400,
                               "err_type": "BadRequestError"})
            yield s, ""
        return
    stream_key = "true" if job.stream else "false"
    state.prompt_tokens_total[stream_key] += sum(
        job.samples[i].prompt_tokens for i in range(0, len(job.samples), max(job.n, 1))
    )
    flows = {}
    active = []
    for s in job.samples:
        if s.limit <= 0:
            _finish(state, s, {"type": "length", "length": s.limit})
            yield s, ""
            continue
        flows[s.rid] = stepper.submit(reqs[s.rid])
        active.append(s)
    try:
        while active:
            still = []
            for s in active:
                emit = None
                if not s.abort_requested:
                    if job.wake.is_set() and not any(x.abort_requested for x in job.samples):
                        job.wake.clear()
                    emit = await stepper.next_emit(flows[s.rid], job.wake)
                    if emit is None and not s.abort_requested:  # another choice's abort
                        emit = await stepper.next_emit(flows[s.rid])
                if emit is None:  # aborted (abort_request, client disconnect)
                    stepper.abort(s)
                    _finish(state, s, {"type": "abort", "message": "Aborted", "status_code": None,
                                       "err_type": None})
                    yield s, ""
                    continue
                i0 = s.generated
                delta = "".join(f"tok{i}" if i == 0 else f" tok{i}" for i in range(i0, i0 + emit.tokens))
                s.generated += emit.tokens
                s.spec_tokens, s.verify_ct = emit.spec_tokens, emit.verify_ct
                state.generation_tokens_total[stream_key] += emit.tokens
                acc = stepper.engine.gauges().accept_length
                if acc is not None and stepper.engine.speculative:
                    state.avg_spec_accept_length = acc
                new_text, delta, matched = _stop_string(job, s, delta)
                if matched is not None:
                    if not emit.finished:
                        stepper.abort(s)
                    _finish(state, s, {"type": "stop", "matched": matched})
                elif emit.finished:
                    s.text = new_text
                    if s.generated < s.limit and not job.ignore_eos:
                        _finish(state, s, {"type": "stop", "matched": cfg.eos_token_id})
                    else:
                        _finish(state, s, {"type": "length", "length": s.limit})
                else:
                    s.text = new_text
                    still.append(s)
                yield s, delta
            active = still
    finally:
        for s in active:  # the handler went away mid-generation: free the engine
            stepper.abort(s)
