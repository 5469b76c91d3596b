"""Rendering: SGLang 0.5.23's SSE framing and JSON bodies of the generation endpoints.

Every event is ``data: <compact JSON>\\n\\n`` and a stream ends with ``data: [DONE]`` (unless the
``omit_done`` fault); the chunk order (role chunk, one content chunk per token, one finish chunk
per choice, the usage chunk) is the module docstring of :mod:`serving.fake_sglang`
("Streaming"). ``final_body`` is the non-streamed answer once every choice finished.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from serving.fake_sglang.engine import steps
from serving.fake_sglang.errors import dumps
from serving.fake_sglang.state import FakeState, Job, Sample

__all__ = [
    "DONE",
    "SSE_CT",
    "chat_events",
    "completion_events",
    "final_body",
    "generate_events",
]

SSE_CT = b"text/event-stream; charset=utf-8"
DONE = b"data: [DONE]\n\n"


def _stream_error(message: str) -> bytes:
    """SGLang's in-stream error event (``create_streaming_error_response``): ``json.dumps``
    spacing, ``type`` = the ``HTTPStatus`` name."""
    err = {
        "object": "error",
        "message": message,
        "type": "BAD_REQUEST",
        "param": None,
        "code": 400,
    }
    return b"data: " + json.dumps({"error": err}).encode() + b"\n\n"


def _usage(state: FakeState, job: Job) -> dict[str, Any]:
    """The ``usage`` object (prompt tokens counted once per prompt, not per choice)."""
    if job.prompt_error is not None:
        # the scheduler swapped the prompt for one token and ran one forward step
        p = len(job.samples) // max(job.n, 1)
        c = len(job.samples)
        return {
            "prompt_tokens": p,
            "total_tokens": p + c,
            "completion_tokens": c,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
            "completion_tokens_details": None,
        }
    step = job.n if job.n > 0 else 1
    p = (
        0
        if job.n < 0
        else sum(job.samples[i].prompt_tokens for i in range(0, len(job.samples), step))
    )
    c = sum(s.generated for s in job.samples)
    details = None
    # the prefix cache, or the step model's cached tokens (SGLang's --enable-cache-report)
    if job.step_hint is not None or (state.prefix_cache is not None and job.cache_units is not None):
        details = {"cached_tokens": sum(job.cached), "image_tokens": None,
                   "audio_tokens": None, "video_tokens": None}
    return {
        "prompt_tokens": p,
        "total_tokens": p + c,
        "completion_tokens": c,
        "prompt_tokens_details": details,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def _chat_chunk(
    rid: str,
    created: int,
    model: str,
    index: int,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    matched: Any = None,
) -> bytes:
    """One ``chat.completion.chunk`` event with one choice."""
    return (
        b"data: "
        + dumps(
            {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": index,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                        "matched_stop": matched,
                    }
                ],
            }
        )
        + b"\n\n"
    )


def _choiceless_chunk(rid: str, created: int, model: str, key: str, value: Any) -> bytes:
    """A chat stream event with ``"choices": []`` and one more member (``usage`` or ``sglext``)."""
    return b"data: " + dumps({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                              "choices": [], key: value}) + b"\n\n"


async def chat_events(state: FakeState, job: Job) -> AsyncIterator[bytes]:
    """The SSE events of a streamed chat job (module docstring, "Streaming")."""
    created = int(time.time())
    seen: set[int] = set()
    finished: list[Sample] = []
    last_id = job.samples[0].rid
    async for s, delta in steps(state, job):
        last_id = s.rid
        if job.prompt_error is not None:
            break
        if s.index not in seen:
            seen.add(s.index)
            yield _chat_chunk(
                s.rid,
                created,
                job.model,
                s.index,
                {"reasoning_content": None, "role": "assistant", "content": ""},
            )
        if delta:
            yield _chat_chunk(
                s.rid,
                created,
                job.model,
                s.index,
                {"reasoning_content": None, "content": delta},
            )
        if s.finish is not None:
            finished.append(s)
    if job.prompt_error is not None:
        yield _stream_error(job.prompt_error)
    for s in finished:
        assert s.finish is not None
        yield _chat_chunk(
            last_id,
            created,
            job.model,
            s.index,
            {"reasoning_content": None},
            s.finish["type"],
            s.finish.get("matched"),
        )
    if job.spec_details:
        yield _choiceless_chunk(last_id, created, job.model, "sglext",
                                {"spec_tokens_details": spec_tokens_details(state, job)})
    if job.include_usage:
        yield _choiceless_chunk(last_id, created, job.model, "usage", _usage(state, job))
    if not (job.behaviour and job.behaviour.fault == "omit_done"):
        yield DONE


async def completion_events(state: FakeState, job: Job) -> AsyncIterator[bytes]:
    """The SSE events of a streamed completions job."""
    created = int(time.time())
    last_id = job.samples[0].rid
    async for s, delta in steps(state, job):
        last_id = s.rid
        if job.prompt_error is not None:
            yield _stream_error(job.prompt_error)
            break
        fin = s.finish
        yield (
            b"data: "
            + dumps(
                {
                    "id": s.rid,
                    "object": "text_completion",
                    "created": created,
                    "model": job.model,
                    "choices": [
                        {
                            "index": s.index,
                            "text": delta,
                            "logprobs": None,
                            "finish_reason": fin["type"] if fin else None,
                            "matched_stop": fin.get("matched") if fin else None,
                        }
                    ],
                    "usage": None,
                }
            )
            + b"\n\n"
        )
    if job.include_usage:
        u = _usage(state, job)
        yield (
            b"data: "
            + dumps(
                {
                    "id": last_id,
                    "object": "text_completion",
                    "created": created,
                    "model": job.model,
                    "choices": [],
                    "usage": {k: v for k, v in u.items() if v is not None},
                }
            )
            + b"\n\n"
        )
    if not (job.behaviour and job.behaviour.fault == "omit_done"):
        yield DONE


def _meta(state: FakeState, s: Sample) -> dict[str, Any]:
    """SGLang's ``meta_info`` of a ``/generate`` output."""
    cfg = state.launch_config
    return {
        "id": s.rid,
        "finish_reason": s.finish,
        "prompt_tokens": s.prompt_tokens,
        "weight_version": cfg.weight_version,
        "num_retractions": 0,
        "completion_tokens": s.generated,
        "cached_tokens": 0,
        "weight_versions": [{"version": cfg.weight_version, "start": 0, "end": s.generated}],
    }


async def generate_events(state: FakeState, job: Job) -> AsyncIterator[bytes]:
    """The SSE events of a streamed ``/generate`` job (one per output)."""
    async for s, _delta in steps(state, job):
        out = {
            "text": s.text,
            "output_ids": list(range(s.generated)),
            "meta_info": _meta(state, s),
        }
        if len(job.samples) > 1:
            out["index"] = s.index
        yield b"data: " + dumps(out) + b"\n\n"
    yield DONE


def final_body(state: FakeState, job: Job, kind: str) -> tuple[int, Any]:
    """Non-streamed answer (status, JSON) once every sample finished."""
    cfg = state.launch_config
    created = int(time.time())
    s0 = job.samples[0]
    if kind == "generate":
        outs = [
            {"text": s.text, "output_ids": list(range(s.generated)), "meta_info": _meta(state, s)}
            for s in job.samples
        ]
        for s in job.samples:
            f = s.finish or {}
            if f.get("type") == "abort" and f.get("status_code") == 400:
                return 400, {"error": {"message": f["message"]}}
        return 200, (outs[0] if job.single else outs)
    for s in job.samples:
        f = s.finish or {}
        if f.get("type") == "abort" and f.get("status_code") == 400:
            return 400, {
                "object": "error",
                "message": f["message"],
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
    choices = []
    for s in job.samples:
        f = s.finish or {}
        common = {
            "logprobs": None,
            "finish_reason": f.get("type"),
            "matched_stop": f.get("matched"),
        }
        if kind == "chat":
            choices.append(
                {
                    "index": s.index,
                    "message": {
                        "role": "assistant",
                        "content": s.text,
                        "reasoning_content": None,
                    },
                    **common,
                }
            )
        else:
            choices.append({"index": s.index, "text": s.text, **common})
    body = {
        "id": s0.rid,
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": created,
        "model": job.model,
        "choices": choices,
        "usage": _usage(state, job),
        "metadata": {
            "weight_version": cfg.weight_version,
            "weight_versions": [
                {"version": cfg.weight_version, "start": 0, "end": s0.generated}
            ],
        },
    }
    if job.spec_details:
        body["sglext"] = {"spec_tokens_details": spec_tokens_details(state, job)}
    return 200, body


def spec_tokens_details(state: FakeState, job: Job) -> Any:
    """SGLang's ``SpecTokensDetails`` per sample (``sglext.spec_tokens_details``, a list when
    ``n > 1``): ``spec_accept_length`` is the request's ``fake_accept_length`` body field when
    set (a pacing wrapper's context-dependent tau), else the engine's configured accept length,
    the verify steps those that length takes to emit each sample's tokens; with a step engine,
    each sample's own tokens per verify step and verify steps."""
    tau = job.accept_length or state.launch_config.spec_accept_length
    out = []
    for s in job.samples:
        if state.stepper is not None:  # the sequence's own numbers (its verify steps)
            steps, acc = s.verify_ct, (s.spec_tokens / s.verify_ct if s.verify_ct else 0.0)
        else:
            steps, acc = max(1, math.ceil(s.generated / tau)), tau
        out.append({"spec_accept_rate": 0.0, "spec_accept_length": acc, "spec_cap_length": 0.0,
                    "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 0,
                    "spec_num_proposed_drafts": 0, "spec_verify_ct": steps,
                    "spec_correct_drafts_histogram": [], "spec_cap_lens_histogram": []})
    return out if job.n > 1 else out[0]
