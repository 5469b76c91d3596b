"""``create_fake_app``: the fake SGLang server's Starlette app (its routes and handlers).

The behaviour it mimics is the module docstring of :mod:`serving.fake_sglang`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from serving.fake_sglang import admin, embeddings, endpoints
from serving.fake_sglang.behaviour import SOFT_FAULTS, Behaviour
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.endpoints import logged
from serving.fake_sglang.errors import (
    ClientError,
    default_error_type,
    dumps,
    json_response,
    sglang_error,
)
from serving.fake_sglang.metrics import metrics
from serving.fake_sglang.protocol import (
    ROLES,
    as_int,
    check_lengths,
    effective_limit,
    include_usage,
    make_rids,
    read_json,
    stop_list,
)
from serving.fake_sglang.state import FakeState, Job, Sample

__all__ = ["create_fake_app"]

_CYCLE_KEY = "fake_sglang.cycle"
_SSE_CT = b"text/event-stream; charset=utf-8"
_DONE = b"data: [DONE]\n\n"
_CONN_KEY = "fake_sglang.connection_requests"
_QUEUE_FULL = "The request queue is full."


def _bind(
    state: FakeState, handler: Callable[[FakeState, Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """``handler(state, request)`` as a Starlette endpoint (not logged)."""

    async def endpoint(request: Request) -> Response:
        return await handler(state, request)

    return endpoint


class _FakeStarlette(Starlette):
    """Starlette that remembers uvicorn's request cycle (for TCP resets) in the scope."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            cycle = getattr(send, "__self__", None)
            if cycle is not None and hasattr(cycle, "transport"):
                scope[_CYCLE_KEY] = cycle
                conns = self.state.fake.connections
                scope[_CONN_KEY] = conns.get(cycle.transport, 0)
                conns[cycle.transport] = scope[_CONN_KEY] + 1
        await super().__call__(scope, receive, send)


class _Asgi:
    """Wrap a raw ASGI handler so a Starlette endpoint can return it as its response."""

    def __init__(self, handler: Callable[[Any, Any, Any], Awaitable[None]]) -> None:
        self.handler = handler

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.handler(scope, receive, send)


def _perturbed(config: FakeConfig, job: Job) -> bool:
    body = job.entry.get("body")
    return config.perturb_only_field is None or (isinstance(body, dict) and config.perturb_only_field in body)


def create_fake_app(config: FakeConfig) -> Starlette:
    """Build the fake server's Starlette app; its state is ``app.state.fake`` (``FakeState``).

    Errors: ``OSError``/``ValueError`` from ``transformers`` when ``config.tokenizer_path`` is
    not a loadable tokenizer.
    """
    state = FakeState(config)
    cfg = config

    # ---------------------------------------------------------------- generation endpoints

    async def chat(request: Request) -> Any:
        return await _generation(request, "chat")

    async def completions(request: Request) -> Any:
        return await _generation(request, "completions")

    async def generate(request: Request) -> Any:
        return await _generation(request, "generate")

    async def _generation(request: Request, kind: str) -> Any:
        entry = state.log_request(request, None)
        behaviour: Behaviour | None = None
        try:
            if kind != "generate":
                ct = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
                if ct != "application/json":
                    await read_json(request, entry)
                    raise ClientError(
                        "1 validation error: header content-type: "
                        "Unsupported Media Type: Only 'application/json' is allowed",
                        "Bad Request",
                    )
            body = await read_json(request, entry)
            if not isinstance(body, dict):
                raise ClientError(
                    "1 validation error: body: Input should be a valid dictionary", "Bad Request"
                )
            entry["stream"] = bool(body.get("stream", False))
            entry["reused_connection"] = reused = request.scope.get(_CONN_KEY, 0) > 0
            behaviour = state.take_behaviour(request.url.path, reused)
            if behaviour is not None and behaviour.fault == "queue_full":
                stream = entry["stream"]
                return _Asgi(lambda s, r, se: _queue_full(se, entry, stream))
            if behaviour is not None and behaviour.status is not None:
                return _Asgi(lambda s, r, se: _scripted_status(s, r, se, entry, behaviour))
            if behaviour is not None and behaviour.sse_events is not None:
                return _Asgi(lambda s, r, se: _scripted_sse(s, r, se, entry, behaviour))
            if kind == "chat":
                job, prompts = await _parse_chat(body, entry, behaviour)
            elif kind == "completions":
                job, prompts = await _parse_completions(body, entry, behaviour)
            else:
                job, prompts = await _parse_generate(body, entry, behaviour)
        except ClientError as e:
            entry["status"] = e.status
            entry["outcome"] = "error"
            if kind == "generate":
                return json_response({"error": {"message": e.message}}, e.status)
            return sglang_error(e.message, e.kind, e.status)
        return _Asgi(lambda s, r, se: _serve_job(s, r, se, job, kind, prompts))

    async def _parse_chat(
        body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
    ) -> tuple[Job, list[int]]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ClientError(
                "1 validation error: messages: Field required or not a list of message objects",
                "Bad Request",
            )
        for m in messages:
            role = m.get("role")
            if role == "root":
                raise ClientError("unsupported chat role: root", "BadRequest")
            if role not in ROLES:
                raise ClientError(
                    "1 validation error: messages.role: 'role' must be one of "
                    + ", ".join(f"'{r}'" for r in sorted(ROLES)),
                    "Bad Request",
                )
        if not messages:
            raise ClientError("Messages cannot be empty.")
        n = as_int(body.get("n", 1), "n")
        if n is None:
            raise ClientError(
                "1 validation error: n: Input should be a valid integer", "Bad Request"
            )
        if n == 0 and not body.get("stream"):
            # SGLang 0.5.23 runs one choice, then fails on range(0, 1, n) in its usage sum
            raise ClientError("range() arg 3 must not be zero", "BadRequest")
        mct = as_int(body.get("max_completion_tokens"), "max_completion_tokens")
        mt = as_int(body.get("max_tokens"), "max_tokens")
        limit = mct or mt  # SGLang: `max_completion_tokens or max_tokens`
        if cfg.context_length_flag and limit and limit > cfg.context_length:
            raise ClientError(
                f"max_completion_tokens is too large: {limit}."
                f"This model supports at most {cfg.context_length} completion tokens."
            )
        tools = body.get("tools")
        if state.counter.tokenizer is not None:
            p = await asyncio.to_thread(state.counter.chat, messages, tools)
        else:
            p = state.counter.chat(messages, tools)
        check_lengths(cfg, p, limit)
        rids = make_rids(body.get("rid"), 1, max(n, 1), True)
        job = _new_job(
            entry, "/v1/chat/completions", body, rids, [p] * len(rids), n, limit, behaviour
        )
        if state.prefix_cache is not None:
            job.cache_units = [state.counter.chat_units(messages, tools)]
        return job, [p]

    async def _parse_completions(
        body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
    ) -> tuple[Job, list[int]]:
        prompt = body.get("prompt")
        if prompt is None:
            raise ClientError("1 validation error: prompt: Field required", "Bad Request")
        if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
            raise ClientError("Prompt cannot be empty")
        n = as_int(body.get("n", 1), "n")
        if n is None:
            raise ClientError(
                "1 validation error: n: Input should be a valid integer", "Bad Request"
            )
        if n == 0 and not body.get("stream"):
            raise ClientError("range() arg 3 must not be zero", "BadRequest")
        mt = as_int(body.get("max_tokens", 16), "max_tokens")
        if mt is not None and mt <= 0:
            raise ClientError(
                "1 validation error: max_tokens: Value error, max_tokens must be positive",
                "Bad Request",
            )
        prompts, single = await _prompt_counts(prompt)
        for p in prompts:
            check_lengths(cfg, p, mt)
        en = max(n, 1)
        rids = make_rids(body.get("rid"), len(prompts), en, single and en == 1)
        counts = [prompts[i // en] for i in range(len(prompts) * en)]
        job = _new_job(entry, "/v1/completions", body, rids, counts, n, mt, behaviour)
        if state.prefix_cache is not None and isinstance(prompt, str):
            job.cache_units = [state.counter.text_units(prompt)]
        return job, prompts

    async def _parse_generate(
        body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
    ) -> tuple[Job, list[int]]:
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise ClientError("sampling_params must be an object")
        text, ids = body.get("text"), body.get("input_ids")
        if text is None and ids is None:
            raise ClientError("Either text, input_ids or input_embeds should be provided.")
        prompts, single = await _prompt_counts(text if text is not None else ids)
        n = as_int(sp.get("n", 1), "n") or 1
        limit = as_int(sp.get("max_new_tokens", 128), "max_new_tokens")
        for p in prompts:
            check_lengths(cfg, p, limit)
        rids = make_rids(body.get("rid"), len(prompts), n, single and n == 1)
        counts = [prompts[i // n] for i in range(len(prompts) * n)]
        body2 = dict(body)
        body2["stop"] = sp.get("stop")
        body2["ignore_eos"] = sp.get("ignore_eos", False)
        job = _new_job(entry, "/generate", body2, rids, counts, n, limit, behaviour)
        return job, prompts

    async def _prompt_counts(prompt: Any) -> tuple[list[int], bool]:
        """Token counts of a completions-style prompt and whether it is a single prompt."""

        def count(p: Any) -> int:
            if isinstance(p, str):
                return state.counter.text(p)
            if isinstance(p, list) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in p
            ):
                return len(p)
            raise ClientError(
                "1 validation error: prompt: Input should be a string, a list of "
                "strings, or token ids",
                "Bad Request",
            )

        if isinstance(prompt, str) or (
            isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)
        ):
            items, single = [prompt], True
        elif isinstance(prompt, list):
            items, single = list(prompt), False
        else:
            items, single = [prompt], True
        if state.counter.tokenizer is not None:
            return list(await asyncio.to_thread(lambda: [count(p) for p in items])), single
        return [count(p) for p in items], single

    def _new_job(
        entry: dict[str, Any],
        path: str,
        body: dict[str, Any],
        rids: list[str],
        prompt_counts: list[int],
        n: int,
        limit: int | None,
        behaviour: Behaviour | None,
    ) -> Job:
        stop = stop_list(body.get("stop"))
        rank = state.next_dp_rank()
        samples = []
        error = None
        for i, (rid, p) in enumerate(zip(rids, prompt_counts, strict=True)):
            samples.append(
                Sample(
                    rid=rid,
                    index=i,
                    prompt_tokens=p,
                    limit=effective_limit(cfg, p, limit, behaviour),
                    dp_rank=rank,
                )
            )
            if p >= cfg.max_req_input_len and error is None:
                error = (
                    f"Input length ({p} tokens) exceeds the maximum allowed length "
                    f"({cfg.max_req_input_len} tokens). Use a shorter input or enable "
                    f"--allow-auto-truncate."
                )
        entry["rids"] = list(rids)
        job = Job(
            seq=entry["seq"],
            path=path,
            stream=bool(body.get("stream", False)),
            samples=samples,
            n=n,
            model=str(body.get("model", "default")),
            stop=stop,
            include_usage=include_usage(body),
            entry=entry,
            behaviour=behaviour,
            ignore_disconnect=(
                cfg.on_disconnect == "ignore" or bool(behaviour and behaviour.ignore_disconnect)
            ),
            prompt_error=error,
        )
        job.ignore_eos = bool(body.get("ignore_eos", False))
        state.num_requests_total["true" if job.stream else "false"] += 1
        return job

    # ---------------------------------------------------------------- scripted answers

    async def _scripted_status(
        scope: Any, receive: Any, send: Any, entry: dict[str, Any], b: Behaviour
    ) -> None:
        if b.delay_s:
            await asyncio.sleep(b.delay_s)
        status = b.status or 500
        headers = [(k.lower().encode(), v.encode()) for k, v in b.headers.items()]
        if b.body is not None:
            payload = dumps(b.body)
            ct = (b.content_type or "application/json").encode()
        elif b.body_text is not None:
            payload = b.body_text.encode()
            ct = (b.content_type or "text/plain; charset=utf-8").encode()
        else:
            payload = dumps(
                {
                    "object": "error",
                    "message": b.message,
                    "type": default_error_type(status),
                    "param": None,
                    "code": status,
                }
            )
            ct = (b.content_type or "application/json").encode()
        headers += [(b"content-type", ct), (b"content-length", str(len(payload)).encode())]
        entry["status"] = status
        entry["outcome"] = "scripted_status"
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})

    async def _queue_full(send: Any, entry: dict[str, Any], stream: bool) -> None:
        entry["status"] = 200 if stream else 503
        entry["outcome"] = entry["fault"] = "queue_full"
        if stream:
            err = {"object": "error", "message": _QUEUE_FULL, "type": "SERVICE_UNAVAILABLE",
                   "param": None, "code": 503}
            payload = b"data: " + json.dumps({"error": err}).encode() + b"\n\n" + _DONE
            headers = [(b"content-type", _SSE_CT)]
        else:
            payload = dumps({"object": "error", "message": _QUEUE_FULL, "type": "503",
                              "param": None, "code": 503})
            headers = [(b"content-type", b"application/json"),
                       (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": entry["status"], "headers": headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})

    async def _scripted_sse(
        scope: Any, receive: Any, send: Any, entry: dict[str, Any], b: Behaviour
    ) -> None:
        if b.delay_s:
            await asyncio.sleep(b.delay_s)
        entry["status"] = 200
        entry["outcome"] = "scripted_sse"
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", _SSE_CT)]}
        )
        delay = b.chunk_delay_s or 0.0
        for i, ev in enumerate(b.sse_events or []):
            if i and delay:
                await asyncio.sleep(delay)
            await send({"type": "http.response.body", "body": ev.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    # ---------------------------------------------------------------- the generation engine

    async def _sleep_or_wake(job: Job, delay: float) -> None:
        if delay <= 0:
            await asyncio.sleep(0)
            return
        job.wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(job.wake.wait(), delay)

    def _finish(job: Job, s: Sample, finish: dict[str, Any]) -> None:
        s.finish = finish
        if finish["type"] == "abort":
            state.num_aborted_requests_total += 1
        state.release_sample(s)

    async def _steps(job: Job) -> AsyncIterator[tuple[Sample, str]]:
        """Run prefill then decode; yield (sample, text delta) for each output SGLang would emit.

        A sample's last yield has ``sample.finish`` set. Aborts (``/abort_request`` or a client
        disconnect) end a sample with ``{"type": "abort", ...}``.
        """
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
                    job,
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
                        job,
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
                    _finish(job, s, {"type": "length", "length": s.limit})
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
                    state.metrics_override["gauges"] = {**(state.metrics_override.get("gauges") or {}), **decoding}
                if state.avg_spec_accept_length is None and cfg.speculative_algorithm:
                    state.avg_spec_accept_length = cfg.spec_accept_length
                new_text = s.text + delta
                matched = next((st for st in job.stop if st and st in new_text), None)
                if matched is not None:
                    cut = new_text.index(matched)
                    delta = new_text[len(s.text) : cut] if cut >= len(s.text) else ""
                    s.text = new_text[:cut]
                    _finish(job, s, {"type": "stop", "matched": matched})
                elif (
                    cfg.eos_after_tokens is not None
                    and not job.ignore_eos
                    and s.generated >= cfg.eos_after_tokens
                    and s.limit > cfg.eos_after_tokens
                ):
                    s.text = new_text
                    _finish(job, s, {"type": "stop", "matched": cfg.eos_token_id})
                elif s.generated >= s.limit:
                    s.text = new_text
                    _finish(job, s, {"type": "length", "length": s.limit})
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

    # ---------------------------------------------------------------- rendering

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

    def _usage(job: Job) -> dict[str, Any]:
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
        if state.prefix_cache is not None and job.cache_units is not None:
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

    async def _chat_events(job: Job) -> AsyncIterator[bytes]:
        created = int(time.time())
        seen: set[int] = set()
        finished: list[Sample] = []
        last_id = job.samples[0].rid
        async for s, delta in _steps(job):
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
        if job.include_usage:
            yield (
                b"data: "
                + dumps(
                    {
                        "id": last_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": job.model,
                        "choices": [],
                        "usage": _usage(job),
                    }
                )
                + b"\n\n"
            )
        if not (job.behaviour and job.behaviour.fault == "omit_done"):
            yield _DONE

    async def _completion_events(job: Job) -> AsyncIterator[bytes]:
        created = int(time.time())
        last_id = job.samples[0].rid
        async for s, delta in _steps(job):
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
            u = _usage(job)
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
            yield _DONE

    def _meta(job: Job, s: Sample) -> dict[str, Any]:
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

    async def _generate_events(job: Job) -> AsyncIterator[bytes]:
        async for s, _delta in _steps(job):
            out = {
                "text": s.text,
                "output_ids": list(range(s.generated)),
                "meta_info": _meta(job, s),
            }
            if len(job.samples) > 1:
                out["index"] = s.index
            yield b"data: " + dumps(out) + b"\n\n"
        yield _DONE

    def _final_body(job: Job, kind: str) -> tuple[int, Any]:
        """Non-streamed answer (status, JSON) once every sample finished."""
        created = int(time.time())
        s0 = job.samples[0]
        if kind == "generate":
            outs = [
                {"text": s.text, "output_ids": list(range(s.generated)), "meta_info": _meta(job, s)}
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
        return 200, {
            "id": s0.rid,
            "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": created,
            "model": job.model,
            "choices": choices,
            "usage": _usage(job),
            "metadata": {
                "weight_version": cfg.weight_version,
                "weight_versions": [
                    {"version": cfg.weight_version, "start": 0, "end": s0.generated}
                ],
            },
        }

    # ---------------------------------------------------------------- serving one job

    async def _serve_job(
        scope: Any, receive: Any, send: Any, job: Job, kind: str, prompts: list[int]
    ) -> None:
        entry = job.entry
        job.single = len(prompts) == 1 and job.n == 1
        state.jobs[job.seq] = job
        b = job.behaviour
        cycle = scope.get(_CYCLE_KEY)
        headers_sent = False
        completed = False

        async def start(
            status: int, ct: bytes, extra: list[tuple[bytes, bytes]] | None = None
        ) -> None:
            nonlocal headers_sent
            headers_sent = True
            entry["status"] = status
            if b is not None and b.fault == "close_after_response":
                extra = [*(extra or []), (b"connection", b"keep-alive")]
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", ct), *(extra or [])],
                }
            )

        async def body(data: bytes, more: bool) -> None:
            nonlocal completed
            if not more:
                completed = True
            if not job.client_gone:
                await send({"type": "http.response.body", "body": data, "more_body": more})

        def on_disconnect() -> None:
            if completed or job.client_gone:
                return
            if job.fault_fired:
                job.client_gone = True
                return
            job.client_gone = True
            entry["client_disconnected"] = True
            state.disconnects.append(
                {
                    "time": time.time(),
                    "seq": job.seq,
                    "rids": entry["rids"],
                    "phase": "streaming" if headers_sent else "before_headers",
                }
            )
            if not job.ignore_disconnect:

                def do_abort() -> None:
                    for s in job.samples:
                        if s.finish is None:
                            s.abort_requested = True
                    state.wake(job)

                if cfg.disconnect_abort_delay_s > 0:
                    asyncio.get_running_loop().call_later(cfg.disconnect_abort_delay_s, do_abort)
                else:
                    do_abort()

        async def watch() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    on_disconnect()
                    return

        def engine_abort() -> None:
            entry["fault"] = "abort"
            for s in job.samples:
                if s.finish is None:
                    s.abort_requested = True
            state.wake(job)

        watcher = asyncio.create_task(watch())
        try:
            fault = b.fault if b is not None else None
            after = b.after_chunks if b is not None else None
            if fault == "abort" and (after is None or not job.stream):
                engine_abort()
            if fault in ("reset", "close", "hang") and (after is None or not job.stream):
                if fault == "hang":
                    await state.admit(job)
                    if b is not None and b.delay_s:
                        await asyncio.sleep(b.delay_s)
                else:
                    if b is not None and b.delay_s:
                        await asyncio.sleep(b.delay_s)
                entry["fault"] = fault
                await _apply_fault(fault, cycle, job, b)
                return
            if not job.stream:
                async for _s, _d in _steps(job):
                    pass
                status, payload = _final_body(job, kind)
                data = dumps(payload)
                if fault == "raw_text" and b is not None:
                    entry["fault"] = fault
                    await start(200, b"text/plain; charset=utf-8")
                    await body(b.raw.encode(), False)
                    entry["outcome"] = f"fault:{fault}"
                    return
                if fault == "truncate":
                    entry["fault"] = fault
                    await start(200, b"application/json")
                    await body(data[: len(data) // 2], False)
                    entry["outcome"] = f"fault:{fault}"
                    return
                await start(
                    status, b"application/json", [(b"content-length", str(len(data)).encode())]
                )
                await body(data, False)
                entry["outcome"] = _outcome(job)
                if fault == "close_after_response":
                    await _close_after(cycle, job)
                return
            events = {
                "chat": _chat_events,
                "completions": _completion_events,
                "generate": _generate_events,
            }[kind](job)
            sent = 0
            try:
                async for ev in events:
                    if (
                        job.client_gone
                        and not job.ignore_disconnect
                        and cfg.disconnect_abort_delay_s <= 0
                    ):
                        break
                    if (
                        fault is not None
                        and fault not in SOFT_FAULTS
                        and after is not None
                        and sent >= after
                    ):
                        if not headers_sent:
                            await start(200, _SSE_CT)
                        entry["fault"] = fault
                        await _apply_fault(fault, cycle, job, b, send=send)
                        return
                    if not headers_sent:
                        await start(200, _SSE_CT)
                    if sent and b is not None and b.chunk_delay_s:
                        await asyncio.sleep(b.chunk_delay_s)
                    await body(ev, True)
                    sent += 1
                    if fault == "abort" and after is not None and sent == after:
                        engine_abort()
            finally:
                await events.aclose()
            if (
                fault is not None
                and fault not in SOFT_FAULTS
                and after is not None
                and not job.client_gone
            ):
                # the stream ended before `after_chunks` events: fire the fault at the end
                if not headers_sent:
                    await start(200, _SSE_CT)
                entry["fault"] = fault
                await _apply_fault(fault, cycle, job, b, send=send)
                return
            if fault in ("omit_done", "close_after_response"):
                entry["fault"] = fault
            await body(b"", False)
            entry["outcome"] = _outcome(job)
            if fault == "close_after_response":
                await _close_after(cycle, job)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            if job.admitted:
                state.release(job)
            for s in job.samples:
                if s.finish is None:
                    s.finish = {
                        "type": "abort",
                        "message": "connection closed",
                        "status_code": None,
                        "err_type": None,
                    }
            state.jobs.pop(job.seq, None)
            if entry["outcome"] is None:
                entry["outcome"] = (
                    "client_disconnected"
                    if job.client_gone
                    else f"fault:{entry['fault']}"
                    if entry["fault"]
                    else "error"
                )

    async def _close_after(cycle: Any, job: Job) -> None:
        """Close the socket right after a complete keep-alive response (aiohttp#7297)."""
        transport = getattr(cycle, "transport", None)
        if transport is None:
            raise RuntimeError("close_after_response needs a real socket (serve with uvicorn)")
        job.fault_fired = True
        job.entry["fault"] = "close_after_response"
        transport.close()

    def _outcome(job: Job) -> str:
        if job.client_gone:
            return "client_disconnected"
        if any((s.finish or {}).get("type") == "abort" for s in job.samples):
            return "aborted"
        return "completed"

    async def _apply_fault(
        fault: str, cycle: Any, job: Job, b: Behaviour | None, send: Any = None
    ) -> None:
        transport = getattr(cycle, "transport", None)
        if fault == "hang":
            while not job.client_gone and not state.closing.is_set():
                job.wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(job.wake.wait(), 0.05)
            return
        if fault in ("truncate", "raw_text"):
            assert send is not None
            if fault == "raw_text" and b is not None:
                await send(
                    {"type": "http.response.body", "body": b.raw.encode(), "more_body": True}
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            job.entry["outcome"] = f"fault:{fault}"
            return
        if transport is None:
            raise RuntimeError(f"fault {fault!r} needs a real socket (serve the app with uvicorn)")
        job.fault_fired = True
        if fault == "reset":
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        else:
            transport.close()
        job.entry["outcome"] = f"fault:{fault}"
        for _ in range(50):  # let uvicorn see connection_lost before the handler returns
            if getattr(cycle, "disconnected", True):
                break
            await asyncio.sleep(0.001)

    bound = [
        ("/v1/responses", endpoints.responses, ["POST"]),
        ("/v1/embeddings", embeddings.embeddings, ["POST"]),
        ("/v1/rerank", embeddings.rerank, ["POST", "PUT"]),
    ]
    logged_routes = [
        ("/v1/models", endpoints.models, ["GET"]),
        ("/v1/models/{model:path}", endpoints.model_one, ["GET"]),
        ("/health", endpoints.health, ["GET"]),
        ("/health_generate", endpoints.health, ["GET"]),
        ("/server_info", endpoints.server_info, ["GET"]),
        ("/get_server_info", endpoints.server_info, ["GET"]),
        ("/model_info", endpoints.model_info, ["GET"]),
        ("/get_model_info", endpoints.model_info, ["GET"]),
        ("/metrics", metrics, ["GET"]),
        ("/v1/loads", endpoints.loads, ["GET"]),
        ("/abort_request", endpoints.abort_request, ["POST"]),
        ("/flush_cache", endpoints.flush_cache, ["GET", "POST"]),
    ]
    control = [
        ("/_fake/script", admin.c_script, ["POST"]),
        ("/_fake/requests", admin.c_requests, ["GET"]),
        ("/_fake/reset", admin.c_reset, ["POST"]),
        ("/_fake/health", admin.c_health, ["POST"]),
        ("/_fake/metrics", admin.c_metrics, ["POST"]),
        ("/_fake/state", admin.c_state, ["GET"]),
    ]
    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        *(Route(p, _bind(state, h), methods=m) for p, h, m in bound),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/generate", generate, methods=["POST", "PUT"]),
        *(Route(p, logged(state, h), methods=m) for p, h, m in logged_routes),
        *(Route(p, _bind(state, h), methods=m) for p, h, m in control),
    ]
    app = _FakeStarlette(routes=routes)
    app.state.fake = state
    return app
