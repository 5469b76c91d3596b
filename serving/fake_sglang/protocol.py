"""Request parsing: SGLang 0.5.23's validation of generation bodies, partly.

The token-limit precedence, the length checks 1-4 and the request ids are the module docstring
of :mod:`serving.fake_sglang` ("Token limit", "Over-length", "Request ids"); errors are
``ClientError`` (a 400 in SGLang's body shape).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import orjson
from starlette.requests import Request

from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.errors import ClientError
from serving.fake_sglang.state import FakeState, Job, Sample
from serving.fake_sglang.stepping import parse_hint

__all__ = [
    "ROLES",
    "as_int",
    "check_lengths",
    "effective_limit",
    "include_usage",
    "make_rids",
    "parse_chat",
    "parse_completions",
    "parse_generate",
    "read_json",
    "stop_list",
]

ROLES = frozenset({"system", "user", "assistant", "tool", "function", "developer"})


def as_int(value: Any, name: str) -> int | None:
    """Pydantic-lax int coercion as SGLang's request models do; bad values: ``ClientError``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ClientError(
        f"1 validation error: {name}: Input should be a valid integer", "Bad Request"
    )


# --------------------------------------------------------------------------------------------
# Request parsing (SGLang's validation, partly)
# --------------------------------------------------------------------------------------------


def stop_list(stop: Any) -> list[str]:
    """The ``stop`` field as a list of strings; ``ClientError`` for another type."""
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise ClientError(
        "1 validation error: stop: Input should be a valid string or list", "Bad Request"
    )


def include_usage(body: dict[str, Any]) -> bool:
    """Whether ``stream_options.include_usage`` is set."""
    so = body.get("stream_options")
    return bool(isinstance(so, dict) and so.get("include_usage"))


def make_rids(rid: Any, batch: int, n: int, single: bool) -> list[str]:
    """Sample ids as SGLang 0.5.23 assigns them (module docstring, "Request ids")."""
    if n > 1:
        return [uuid.uuid4().hex for _ in range(batch * n)]
    if single:
        if rid is None:
            return [uuid.uuid4().hex]
        if isinstance(rid, str):
            return [rid]
        raise ClientError("The rid should be a string or a list of strings.")
    if rid is None:
        return [uuid.uuid4().hex for _ in range(batch)]
    if isinstance(rid, str):
        return [f"{rid}_{i}" for i in range(batch)]
    if isinstance(rid, list) and all(isinstance(r, str) for r in rid):
        if len(rid) != batch:
            raise ClientError(
                "The specified rids length mismatch with the batch_size for batch processing."
            )
        return list(rid)
    raise ClientError("The rid should be a string or a list of strings.")


def check_lengths(cfg: FakeConfig, prompt_tokens: int, limit: int | None) -> None:
    """SGLang's tokenizer-manager checks 2 and 3 (module docstring); raise ``ClientError``."""
    c = cfg.context_length
    num = prompt_tokens + cfg.num_reserved_tokens
    if num >= c:
        raise ClientError(
            f"The input ({num} tokens) is longer than the model's context length ({c} tokens)."
        )
    if limit is not None and limit + num > c:
        raise ClientError(
            f"Requested token count exceeds the model's maximum context length of {c} tokens. "
            f"You requested a total of {limit + num} tokens: {num} tokens from the input messages "
            f"and {limit} tokens for the completion. Please reduce the number of tokens in the "
            f"input messages or the completion to fit within the limit."
        )
    if limit is not None and limit < 0:
        raise ClientError(f"max_new_tokens must be at least 0, got {limit}.")


def effective_limit(
    cfg: FakeConfig, prompt_tokens: int, limit: int | None, behaviour: Behaviour | None
) -> int:
    """Scheduler clipping: min(limit, max_req_len - P - 1), then the behaviour's cap."""
    room = max(0, cfg.max_req_len - prompt_tokens - 1)
    eff = room if limit is None else max(0, min(limit, room))
    if behaviour is not None and behaviour.max_tokens is not None:
        eff = min(eff, behaviour.max_tokens)
    return eff


# --------------------------------------------------------------------------------------------
# The app
# --------------------------------------------------------------------------------------------


async def read_json(request: Request, entry: dict[str, Any] | None = None) -> Any:
    """The JSON body (None when empty), also stored as ``entry["body"]``; ``ClientError``."""
    raw = await request.body()
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as e:
        if entry is not None:
            entry["body"] = raw.decode("utf-8", "replace")
        raise ClientError(f"JSON decode error: {e}", "Bad Request") from e
    if entry is not None:
        entry["body"] = body
    return body


def _parse_n(body: dict[str, Any]) -> int:
    """The body's ``n`` (default 1); ``ClientError`` (400) as SGLang words it when not an integer."""
    n = as_int(body.get("n", 1), "n")
    if n is None:
        raise ClientError("1 validation error: n: Input should be a valid integer", "Bad Request")
    return n


async def parse_chat(
    state: FakeState, body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
) -> tuple[Job, list[int]]:
    """Validate a chat body; returns the job and the prompt tokens ``[P]``. ``ClientError``."""
    cfg = state.launch_config
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
    n = _parse_n(body)
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
    ids = body.get("input_ids")
    if ids is not None:  # SGLang 0.5.23 runs these ids and skips the chat template (serving_chat)
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            raise ClientError(
                "1 validation error: input_ids: Input should be a valid list of integers",
                "Bad Request",
            )
        p = len(ids)
    elif state.counter.tokenizer is not None:
        p = await asyncio.to_thread(state.counter.chat, messages, tools)
    else:
        p = state.counter.chat(messages, tools)
    check_lengths(cfg, p, limit)
    rids = make_rids(body.get("rid"), 1, max(n, 1), True)
    job = _new_job(
        state, entry, "/v1/chat/completions", body, rids, [p] * len(rids), n, limit, behaviour
    )
    if state.prefix_cache is not None:
        job.cache_units = [list(ids) if ids is not None else state.counter.chat_units(messages, tools)]
    return job, [p]


async def parse_completions(
    state: FakeState, body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
) -> tuple[Job, list[int]]:
    """Validate a completions body; returns the job and P per prompt. ``ClientError``."""
    cfg = state.launch_config
    prompt = body.get("prompt")
    if prompt is None:
        raise ClientError("1 validation error: prompt: Field required", "Bad Request")
    if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
        raise ClientError("Prompt cannot be empty")
    n = _parse_n(body)
    if n == 0 and not body.get("stream"):
        raise ClientError("range() arg 3 must not be zero", "BadRequest")
    mt = as_int(body.get("max_tokens", 16), "max_tokens")
    if mt is not None and mt <= 0:
        raise ClientError(
            "1 validation error: max_tokens: Value error, max_tokens must be positive",
            "Bad Request",
        )
    prompts, single = await _prompt_counts(state, prompt)
    for p in prompts:
        check_lengths(cfg, p, mt)
    en = max(n, 1)
    rids = make_rids(body.get("rid"), len(prompts), en, single and en == 1)
    counts = [prompts[i // en] for i in range(len(prompts) * en)]
    job = _new_job(state, entry, "/v1/completions", body, rids, counts, n, mt, behaviour)
    if state.prefix_cache is not None and isinstance(prompt, str):
        job.cache_units = [state.counter.text_units(prompt)]
    return job, prompts


async def parse_generate(
    state: FakeState, body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
) -> tuple[Job, list[int]]:
    """Validate a ``/generate`` body; returns the job and P per prompt. ``ClientError``."""
    cfg = state.launch_config
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise ClientError("sampling_params must be an object")
    text, ids = body.get("text"), body.get("input_ids")
    if text is None and ids is None:
        raise ClientError("Either text, input_ids or input_embeds should be provided.")
    prompts, single = await _prompt_counts(state, text if text is not None else ids)
    n = as_int(sp.get("n", 1), "n") or 1
    limit = as_int(sp.get("max_new_tokens", 128), "max_new_tokens")
    for p in prompts:
        check_lengths(cfg, p, limit)
    rids = make_rids(body.get("rid"), len(prompts), n, single and n == 1)
    counts = [prompts[i // n] for i in range(len(prompts) * n)]
    body2 = dict(body)
    body2["stop"] = sp.get("stop")
    body2["ignore_eos"] = sp.get("ignore_eos", False)
    job = _new_job(state, entry, "/generate", body2, rids, counts, n, limit, behaviour)
    return job, prompts


async def _prompt_counts(state: FakeState, prompt: Any) -> tuple[list[int], bool]:
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
    state: FakeState,
    entry: dict[str, Any],
    path: str,
    body: dict[str, Any],
    rids: list[str],
    prompt_counts: list[int],
    n: int,
    limit: int | None,
    behaviour: Behaviour | None,
) -> Job:
    """The job of a parsed request: one sample per rid, limits clipped, check 4 noted."""
    cfg = state.launch_config
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
    speculative = cfg.spec_accept_length > 0 or (state.stepper is not None and state.stepper.engine.speculative)
    job.spec_details = body.get("return_spec_tokens_details") is True and speculative
    tau = body.get("fake_accept_length")  # a pacing wrapper's per-request tau (loadtests.simulate.PacedApp)
    if type(tau) in (int, float) and tau >= 1:
        job.accept_length = float(tau)
    if state.stepper is not None:
        job.step_hint = parse_hint(body.get("fake_step"))
    state.num_requests_total["true" if job.stream else "false"] += 1
    return job
