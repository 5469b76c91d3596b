"""A fake SGLang 0.5.23 server: SGLang's real HTTP shapes, deterministic output, fault injection.

    python -m serving.fake_sglang --host 127.0.0.1 --port P --model-name NAME \
        [--context-length N] [--tokenizer PATH] [--speculative]

In a test: ``with run_fake_server(FakeConfig(...)) as base_url: ...`` (uvicorn in a background
thread on a free 127.0.0.1 port), or ``with FakeServer(FakeConfig(...)) as srv:`` when the test
also needs ``srv.kill()`` (drop every connection and stop listening, like ``kill -9``).

Everything below was read from SGLang 0.5.23's own source (the PyPI wheel:
``srt/entrypoints/http_server.py``, ``openai/serving_base.py``, ``serving_chat.py``,
``serving_completions.py``, ``sse_utils.py``, ``protocol.py``, ``usage_processor.py``,
``managers/tokenizer_manager.py``, ``managers/scheduler.py``, ``managers/io_struct.py``,
``observability/metrics_collector.py``) and is mimicked byte for byte where it matters to a
router. Where the fake deliberately differs, the section "Differences" says so.

Endpoints (SGLang's): ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /generate``,
``POST /v1/embeddings`` and ``POST /v1/rerank`` (with ``FakeConfig.is_embedding``),
``POST /v1/responses`` (minimal: text output, no tools, no scripting),
``GET /v1/models``, ``GET /v1/models/{model}``, ``GET /health``, ``GET /health_generate``,
``GET /server_info`` (= ``/get_server_info``), ``GET /model_info`` (= ``/get_model_info``),
``GET /metrics``, ``GET /v1/loads``, ``POST /abort_request``, ``GET|POST /flush_cache``.
Control API (the fake's own, never logged as traffic): ``POST /_fake/script``,
``GET /_fake/requests``, ``POST /_fake/reset``, ``POST /_fake/health``, ``POST /_fake/metrics``,
``GET /_fake/state``; see ``Behaviour`` and ``FakeState`` for their bodies.

Generation (deterministic): choice ``j`` of a request emits token ``i`` as the text ``tok{i}``
(with a leading space for ``i > 0``), so the output text is ``"tok0 tok1 ... tok{C-1}"`` and its
whitespace word count equals ``completion_tokens`` exactly. Every choice of one request gets the
same text (as greedy decoding would). Stop strings in ``stop`` end a choice with
``finish_reason "stop"`` and ``matched_stop`` = the string (trimmed from the text, as SGLang does
without ``no_stop_trim``). A choice that reaches its token limit ends with ``"length"`` and
``matched_stop: null``; with ``FakeConfig.eos_after_tokens = k`` a choice whose limit is larger
than ``k`` ends after ``k`` tokens with ``"stop"`` and ``matched_stop`` = ``eos_token_id``
(unless the request sets SGLang's ``ignore_eos: true``).

Token limit (SGLang's precedence and clipping):
- chat: ``max_completion_tokens or max_tokens`` (Python ``or``: ``max_completion_tokens`` wins
  when both are set, sglang#17516; a 0 falls through to ``max_tokens``); neither set -> no limit.
- completions: ``max_tokens``, default 16 (``CompletionRequest``); ``/generate``:
  ``sampling_params.max_new_tokens``, default 128 (``SamplingParams``).
- The scheduler then clips silently: ``limit = min(limit, max_req_len - P - 1)`` with
  ``max_req_len = min(context_length - 1, max_total_num_tokens - 1)``
  (``Scheduler.init_req_max_new_tokens``). So a request with ``P + max_tokens == context_length``
  passes the length check but gets ``context_length - P - 2`` tokens (sglang#33814).

Prompt tokens ``P``:
- ``--tokenizer PATH``: ``transformers.AutoTokenizer``; chat renders
  ``apply_chat_template(messages, tokenize=False, add_generation_prompt=True, tools=tools)`` and
  encodes it with ``add_special_tokens=False`` (SGLang's render-then-encode path); completions
  encode the prompt with the tokenizer's defaults (BOS included), token-id prompts count
  ``len(ids)``. A tokenizer without a chat template falls back to the simple chat count below.
- Without a tokenizer (the default, documented simple count): a text costs one token per
  whitespace-separated word (``len(text.split())``). A chat costs, per message, 1 (role marker)
  + the words of its content (a list of parts: the text parts joined by spaces; ``null``: 0)
  + the words of ``json.dumps`` of its ``tool_calls`` if any; plus, when ``tools`` is given,
  1 + the words of ``json.dumps(tools)``; plus 1 for the generation prompt. Example: one user
  message ``"hello world"`` -> P = 1 + 2 + 1 = 4.

Over-length (SGLang 0.5.23's checks, in this order; ``R`` = reserved draft tokens, which is
``max(speculative_eagle_topk * speculative_num_steps, speculative_num_draft_tokens)`` for
EAGLE/EAGLE3 and 0 otherwise, ``compute_num_reserved_tokens``):
1. chat only, when the server was given ``--context-length`` (``context_length_flag``):
   ``max_completion_tokens or max_tokens`` > ``context_length`` -> 400
   ``"max_completion_tokens is too large: X.This model supports at most C completion tokens."``
   (sic, no space; ``OpenAIServingChat._validate_request``).
2. ``P + R >= context_length`` -> 400 ``"The input (P+R tokens) is longer than the model's
   context length (C tokens)."`` (``TokenizerManager._validate_one_request``; equality fails).
3. limit set and ``limit + P + R > context_length`` -> 400 ``"Requested token count exceeds the
   model's maximum context length of C tokens. You requested a total of T tokens: P+R tokens
   from the input messages and X tokens for the completion. Please reduce the number of tokens
   in the input messages or the completion to fit within the limit."`` (equality passes).
4. ``P >= max_req_len - 5`` (``max_req_input_len``) -> the scheduler aborts the request with
   ``"Input length (P tokens) exceeds the maximum allowed length (M tokens). Use a shorter input
   or enable --allow-auto-truncate."``: HTTP 400 with the flat body when not streamed; when
   streamed, HTTP 200 and an in-stream error event
   ``data: {"error": {"object": "error", "message": ..., "type": "BAD_REQUEST", "param": null,
   "code": 400}}`` (``json.dumps`` spacing, no role chunk), then, with ``include_usage``, a usage
   chunk counting 1 prompt and 1 completion token per sample, then ``[DONE]`` (measured on the
   real 0.5.23 CPU server).
Checks 1-3 answer HTTP 400 *before any SSE byte*, streamed or not, with SGLang's flat body
``{"object":"error","message":...,"type":"BadRequestError","param":null,"code":400}``
(``create_error_response``); ``/generate`` answers ``{"error":{"message":...}}`` instead.

Request ids: a single request (n = 1) uses ``rid`` from the body as its id, else a fresh
``uuid4().hex``. A batch of prompts (completions with a list prompt) with a string ``rid`` uses
``rid_0, rid_1, ...`` (``_normalize_rid``). With ``n > 1`` SGLang regenerates one fresh uuid per
sample (``regenerate_rid``), so the body's ``rid`` is *not* the response id and ``/abort_request``
with it aborts nothing; the fake does the same. ``/abort_request`` matches in-flight sample ids
exactly (``TokenizerManager.abort_request`` looks the rid up by equality before the scheduler's
prefix match) and always answers 200 with an empty body; the aborted choice ends with
``finish_reason: "abort"`` (stream: the abort chunk, usage if asked, then ``[DONE]``).

Streaming (chat): per choice, a role chunk ``delta {"reasoning_content":null,"role":"assistant",
"content":""}`` right before its first content chunk; one content chunk per token
``delta {"reasoning_content":null,"content":"tok3"}``; after every choice finished, one finish
chunk per choice ``delta {"reasoning_content":null}`` with ``finish_reason``/``matched_stop``
(all carrying the id of the last sample that produced output, as SGLang does); with
``stream_options.include_usage`` a usage chunk with ``"choices":[]``; then ``data: [DONE]``.
Every event is ``data: <compact JSON>\\n\\n``. Headers go out with the first event (after prefill
and the first token), as SGLang awaits the first chunk before answering. Streaming
(completions): no role chunk, one chunk per token whose last carries ``finish_reason``, each
with ``"usage":null``; the usage chunk drops null fields (``exclude_none=True``).

Metrics (``/metrics``): Prometheus text of SGLang's scheduler gauges ``num_running_reqs``,
``num_queue_reqs``, ``token_usage``, ``spec_accept_length``, ``spec_accept_rate``,
``gen_throughput``, ``cache_hit_rate``, ``max_total_num_tokens``, ``context_len`` with the real
collector's labels ``engine_type="unified"``, ``model_name``, ``moe_ep_rank``, ``pp_rank``,
``tp_rank`` (+ ``dp_rank`` when ``dp_size > 1``, one series per rank), sorted by name as
prometheus_client's multiprocess collector prints them, and the tokenizer counters
``prompt_tokens_total``, ``generation_tokens_total``, ``num_requests_total`` (labels
``engine_type``, ``is_streaming``, ``model_name``) and ``num_aborted_requests_total`` (labels
``engine_type``, ``model_name``). The prefix is
``sglang:`` or, with ``metrics_prefix="sglang_"``, ``sglang_``.
``num_running_reqs`` counts samples (a request with ``n = 4`` counts 4) in flight right now;
``num_queue_reqs`` counts samples waiting for a slot when ``max_running_requests`` is set;
``token_usage`` = (sum of prompt + generated tokens of running samples) / ``max_total_num_tokens``.

Measured: ``tests/contract/test_sglang_contract.py`` runs the same checks against this fake and
the real SGLang 0.5.23 CPU server (tiny Llama); all of them pass on both (the boundary clipping,
the three over-length wordings, the in-stream scheduler error, ``n``, ``rid``, abort, metrics).
Two real-server facts a client must expect: under load SGLang coalesces several tokens into one
SSE content chunk (the fake sends one chunk per token), and ``/v1/models`` answers while the
server still warms up, ``/health`` being 503 until it is up.

Differences from real SGLang (deliberate or unverified):
- SGLang refreshes its gauges every 40 decode steps (``decode_log_interval``); the fake's are
  live. Its ``/health`` runs a 1-token generation and takes >= 1 s; the fake answers at once
  unless ``health_delay_s`` is set.
- Request-body validation is partial: malformed bodies get SGLang's 400 shape with
  ``"type":"Bad Request"`` but not pydantic's exact message text (SGLang's also embeds a Python
  traceback excerpt). Roles other than system/user/assistant/tool/function/developer are refused
  the same way (``"root"``: ``"unsupported chat role: root"``, type ``"BadRequest"``, as
  measured). ``n = 0`` not streamed -> 400 ``"range() arg 3 must not be zero"`` (type
  ``"BadRequest"``), ``n < 0`` -> one choice with ``prompt_tokens`` 0, as SGLang 0.5.23 does.
  Logprobs, tool-call parsing, reasoning, ``continuous_usage_stats``, ``echo`` and ``sglext``
  are not modelled.
- A client disconnect stops the fake's generation at once (``FakeConfig.on_disconnect =
  "abort"``, after ``disconnect_abort_delay_s``); SGLang aborts a streamed request 2 s after the
  disconnect (``create_abort_task``) and sometimes not at all (sglang#37833): set
  ``on_disconnect="ignore"`` to model that (only ``/abort_request`` or the token limit ends it).

State: everything lives on the ``FakeState`` built by ``create_fake_app`` (``app.state.fake``);
there is no module-level mutable state, so several fakes can run in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import socket
import struct
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Self

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from serving.fake_prefix_cache import PrefixCache, chat_units, text_units

__all__ = [
    "Behaviour",
    "FakeConfig",
    "FakeServer",
    "FakeState",
    "create_fake_app",
    "main",
    "overlength_body",
    "run_fake_server",
    "sglang_error_body",
    "simple_chat_tokens",
    "simple_text_tokens",
]

SGLANG_VERSION = "0.5.23"
_CYCLE_KEY = "fake_sglang.cycle"
_ROLES = frozenset({"system", "user", "assistant", "tool", "function", "developer"})
_GEN_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")
_SSE_CT = b"text/event-stream; charset=utf-8"
_DONE = b"data: [DONE]\n\n"
_FAULTS = (
    "reset", "close", "hang", "truncate", "omit_done", "raw_text",
    "close_after_response", "queue_full", "abort",
)
#: Faults that let the response run its normal course (not fired at ``after_chunks``).
_SOFT_FAULTS = ("omit_done", "close_after_response", "abort")
_CONN_KEY = "fake_sglang.connection_requests"
_QUEUE_FULL = "The request queue is full."
_GAUGES = (
    "num_running_reqs",
    "num_queue_reqs",
    "token_usage",
    "spec_accept_length",
    "spec_accept_rate",
    "gen_throughput",
    "cache_hit_rate",
)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeConfig:
    """How one fake SGLang server behaves. Frozen; unknown fields fail in ``from_dict``.

    Identity and limits:
        model_name: served model name (``/v1/models``, metric label ``model_name``).
        context_length: the model's context length in tokens (``C`` in the module docstring).
        context_length_flag: True mimics a server launched with ``--context-length`` (SGLang then
            also refuses chat ``max_tokens > C`` up front, check 1).
        max_total_num_tokens: KV pool size in tokens; bounds ``max_req_len`` and is the
            denominator of ``token_usage``.
        max_running_requests: samples allowed to run at once; more wait in the queue
            (``num_queue_reqs``). None: unlimited.
        tokenizer_path: a Hugging Face tokenizer directory for exact token counts; None uses the
            documented simple count.
        eos_token_id: the id reported as ``matched_stop`` when a choice "hits EOS".
        eos_after_tokens: a choice whose limit is above this many tokens stops after this many
            with ``finish_reason "stop"``; None: only the limit ends a choice.
    Speculative decoding:
        speculative_algorithm: None, "EAGLE", "EAGLE3", "NGRAM", ... (``--speculative-algorithm``).
        speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens: as SGLang's
            flags; for EAGLE/EAGLE3 they set the reserved tokens ``R`` of the length check.
        spec_accept_length: reported ``sglang:spec_accept_length`` and ``/server_info``
            ``avg_spec_accept_length`` (the latter only after a first token, as in SGLang).
        spec_accept_rate: reported ``sglang:spec_accept_rate``.
    Timing (seconds; 0 means "yield to the event loop only"):
        prefill_delay_s: fixed delay before the first token.
        prefill_s_per_token: extra delay per prompt token before the first token.
        decode_step_s: delay between two decode steps (one token of every running choice).
        health_delay_s: delay of ``/health`` and ``/health_generate`` (SGLang's is >= 1 s).
    Client disconnect:
        on_disconnect: "abort" (stop generating) or "ignore" (go on until the limit or an
            ``/abort_request``, like sglang#37833).
        disconnect_abort_delay_s: with "abort", how long generation goes on after the
            disconnect (SGLang: 2 s for streams).
    Metrics:
        enable_metrics: False makes ``/metrics`` answer 404 (server without ``--enable-metrics``).
        metrics_prefix: "sglang:" (0.5.23) or "sglang_" (some other versions).
        dp_size: data-parallel ranks; > 1 emits one series per rank with a ``dp_rank`` label
            and spreads requests over ranks round robin.
        weight_version: reported in ``metadata.weight_version``.
        max_log_entries: the access log keeps this many newest entries (memory bound for
            benchmarks).
    Embedding models (``--is-embedding``):
        is_embedding: serve ``/v1/embeddings`` and ``/v1/rerank``; without it both answer 400
            with SGLang's "does not appear to be an embedding model" message.
        embedding_dim: floats per embedding when the request gives no ``dimensions``; embedding
            ``k`` of input ``i`` is ``sin(i * 1000 + k + 1)`` (deterministic; a large
            ``dimensions`` makes a large response).
    Losslessness:
        perturb_output: token ``i >= 2`` of every choice is emitted as ``tok{i+1}``: an engine
            whose output differs from the target model's (what a lossless canary must catch).
            Read from ``FakeState.config`` per token, so a test may swap the config to turn it
            off.
        perturb_only_field: with ``perturb_output``, perturb only requests whose JSON body has
            this top-level field (e.g. ``"tools"``: only tool-calling answers differ).
    Prefix cache (``serving/fake_prefix_cache.py``):
        prefix_cache_tokens: 0 (default) for none; else a radix-like cache of this many tokens
            (LRU, leaves first) and SGLang's ``--enable-cache-report``: chat and single-text
            completion usage carries ``prompt_tokens_details`` =
            ``{"cached_tokens": N, "image_tokens": null, "audio_tokens": null,
            "video_tokens": null}`` (0.5.23's ``PromptTokensDetails``, always present then),
            and prefill costs ``prefill_s_per_token`` only for the uncached tokens.
    """

    model_name: str = "fake-model"
    context_length: int = 2048
    context_length_flag: bool = True
    max_total_num_tokens: int = 1 << 20
    max_running_requests: int | None = None
    tokenizer_path: str | None = None
    eos_token_id: int = 2
    eos_after_tokens: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int = 3
    speculative_eagle_topk: int = 1
    speculative_num_draft_tokens: int = 4
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    prefill_delay_s: float = 0.0
    prefill_s_per_token: float = 0.0
    decode_step_s: float = 0.0
    health_delay_s: float = 0.0
    on_disconnect: str = "abort"
    disconnect_abort_delay_s: float = 0.0
    enable_metrics: bool = True
    metrics_prefix: str = "sglang:"
    dp_size: int = 1
    weight_version: str = "default"
    max_log_entries: int = 100_000
    is_embedding: bool = False
    embedding_dim: int = 8
    perturb_output: bool = False
    perturb_only_field: str | None = None
    prefix_cache_tokens: int = 0

    def __post_init__(self) -> None:
        if self.context_length < 8:
            raise ValueError(f"context_length must be >= 8, got {self.context_length}")
        if self.max_total_num_tokens < 8:
            raise ValueError(f"max_total_num_tokens must be >= 8, got {self.max_total_num_tokens}")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise ValueError("max_running_requests must be >= 1 or None")
        if self.on_disconnect not in ("abort", "ignore"):
            raise ValueError(
                f"on_disconnect must be 'abort' or 'ignore', got {self.on_disconnect!r}"
            )
        if self.metrics_prefix not in ("sglang:", "sglang_"):
            raise ValueError(
                f"metrics_prefix must be 'sglang:' or 'sglang_', got {self.metrics_prefix!r}"
            )
        if self.dp_size < 1:
            raise ValueError(f"dp_size must be >= 1, got {self.dp_size}")
        if self.prefix_cache_tokens < 0:
            raise ValueError("prefix_cache_tokens must be >= 0")
        for name in (
            "prefill_delay_s",
            "prefill_s_per_token",
            "decode_step_s",
            "health_delay_s",
            "disconnect_abort_delay_s",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FakeConfig:
        """Build from a mapping; unknown keys raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown FakeConfig fields: {sorted(unknown)}")
        return cls(**data)

    @property
    def is_eagle(self) -> bool:
        """True for the algorithms whose draft tokens SGLang reserves in the length check."""
        return (self.speculative_algorithm or "").upper() in ("EAGLE", "EAGLE3", "FROZEN_KV_MTP")

    @property
    def num_reserved_tokens(self) -> int:
        """``R``: tokens SGLang adds to the input length before comparing with the context."""
        if not self.is_eagle:
            return 0
        return max(
            self.speculative_eagle_topk * self.speculative_num_steps,
            self.speculative_num_draft_tokens,
        )

    @property
    def max_req_len(self) -> int:
        """SGLang's ``max_req_len`` = min(context_length - 1, max_total_num_tokens - 1)."""
        return min(self.context_length - 1, self.max_total_num_tokens - 1)

    @property
    def max_req_input_len(self) -> int:
        """SGLang's ``max_req_input_len`` = max_req_len - 5 (scheduler's input check)."""
        return self.max_req_len - 5


# --------------------------------------------------------------------------------------------
# Scripted behaviours (fault injection)
# --------------------------------------------------------------------------------------------


@dataclass
class Behaviour:
    """One scripted behaviour, consumed by the next ``count`` matching generation requests.

    Posted as JSON to ``/_fake/script`` (a single object, a list, or ``{"behaviours": [...]}``);
    unknown keys are refused with 400. Fields:
        path: only requests to this path consume it (default: any of
            ``/v1/chat/completions``, ``/v1/completions``, ``/generate``).
        count: how many requests it applies to (>= 1).
        status: answer this HTTP status before any generation. The body is ``body`` (JSON),
            else ``body_text`` (sent as is, ``content_type`` default ``text/plain``), else
            SGLang's flat error ``{"object":"error","message":message,"type":T,"param":null,
            "code":status}`` with ``T`` = "BadRequestError" for 400, "InternalServerError" for
            500, else the status as a string (SGLang's ``HTTPException`` handler).
        message: the message of that default error body.
        headers: extra response headers for the ``status`` answer.
        delay_s: seconds to wait before the response headers (like a long prefill; the
            request counts as running meanwhile).
        chunk_delay_s: streamed: seconds between two SSE events as written (each event, the role
            and ``[DONE]`` included, waits this long after the previous one; decode steps then
            take no time of their own); not streamed: seconds per decode step. Replaces
            ``FakeConfig.decode_step_s``.
        fault: one of
            "reset": reset the TCP connection (RST, SO_LINGER 0);
            "close": close the connection abruptly (FIN without ending the chunked body);
            "hang": send nothing more, forever (until the client goes or the server stops);
            "truncate": end the HTTP response cleanly, without the rest (no finish chunk, no
                ``[DONE]``);
            "omit_done": send the whole stream except ``data: [DONE]``;
            "raw_text": write ``raw`` as plain bytes inside the SSE body (no ``data:`` framing),
                then end the response cleanly;
            "close_after_response": send the whole response with ``Connection: keep-alive``,
                then close the socket at once (aio-libs/aiohttp#7297);
            "queue_full": SGLang 0.5.23's answer when ``--max-queued-requests`` is exceeded
                (``Scheduler._abort_on_queued_limit``, sgl-project/sglang#28175): not streamed,
                HTTP 503 ``{"object":"error","message":"The request queue is full.",
                "type":"503","param":null,"code":503}`` (``str(HTTPStatus)`` on Python 3.11);
                streamed, HTTP 200, one event ``data: {"error": {"object": "error", "message":
                "The request queue is full.", "type": "SERVICE_UNAVAILABLE", "param": null,
                "code": 503}}`` (``json.dumps`` spacing, no role chunk), then ``data: [DONE]``;
            "abort": the engine aborts the request itself (shutdown, pause: no status code)
                once ``after_chunks`` events were sent (None: before the first token); the
                stream then ends as SGLang ends an aborted one, a chunk with
                ``"finish_reason":"abort"`` and ``data: [DONE]`` (vllm-project/vllm#57082).
        after_chunks: the fault fires after this many SSE events were sent; None fires it
            before the response headers (for a non-streamed request every fault fires before
            the headers). 0 fires it right after the headers.
        raw: the bytes (UTF-8 text) for "raw_text"; default ``"Internal Server Error"``.
        sse_events: answer 200 ``text/event-stream`` with exactly these strings, one write
            each (``chunk_delay_s`` apart), instead of generating.
        ignore_disconnect: this request keeps generating after its client goes.
        reused_only: only a request that arrives on a connection which already served a
            request consumes this behaviour (e.g. a "reset" of a reused keep-alive connection,
            sgl-project/sglang#20851); requests on fresh connections pass it by.
        max_tokens: generate at most this many tokens per choice (overrides the request's
            limit, for long streams without long prompts).
    """

    path: str | None = None
    count: int = 1
    status: int | None = None
    body: Any = None
    body_text: str | None = None
    content_type: str | None = None
    message: str = "Injected fault"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    chunk_delay_s: float | None = None
    fault: str | None = None
    after_chunks: int | None = None
    raw: str = "Internal Server Error"
    sse_events: list[str] | None = None
    ignore_disconnect: bool = False
    max_tokens: int | None = None
    reused_only: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Behaviour:
        """Validate and build; raises ``ValueError`` with a readable message."""
        if not isinstance(data, dict):
            raise TypeError("a behaviour must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown behaviour fields: {sorted(unknown)}")
        b = cls(**data)
        if not isinstance(b.count, int) or b.count < 1:
            raise ValueError("count must be an integer >= 1")
        if b.status is not None and not (isinstance(b.status, int) and 100 <= b.status <= 599):
            raise ValueError("status must be an HTTP status code")
        if b.fault is not None and b.fault not in _FAULTS:
            raise ValueError(f"fault must be one of {list(_FAULTS)}")
        if b.after_chunks is not None and (
            not isinstance(b.after_chunks, int) or b.after_chunks < 0
        ):
            raise ValueError("after_chunks must be an integer >= 0 or null")
        if b.delay_s < 0 or (b.chunk_delay_s is not None and b.chunk_delay_s < 0):
            raise ValueError("delays must be >= 0")
        if b.path is not None and b.path not in _GEN_PATHS:
            raise ValueError(f"path must be one of {list(_GEN_PATHS)}")
        if b.sse_events is not None and not all(isinstance(e, str) for e in b.sse_events):
            raise ValueError("sse_events must be a list of strings")
        if b.max_tokens is not None and (not isinstance(b.max_tokens, int) or b.max_tokens < 0):
            raise ValueError("max_tokens must be an integer >= 0")
        return b


# --------------------------------------------------------------------------------------------
# Token counting
# --------------------------------------------------------------------------------------------


def simple_text_tokens(text: str) -> int:
    """The fake's documented text count: whitespace-separated words (``len(text.split())``)."""
    return len(text.split())


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        return " ".join(p for p in parts if isinstance(p, str))
    return str(content)


def simple_chat_tokens(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> int:
    """The fake's documented chat count (module docstring, "Prompt tokens"); no errors."""
    total = 1  # generation prompt
    if tools:
        total += 1 + simple_text_tokens(json.dumps(tools))
    for m in messages:
        total += 1 + simple_text_tokens(_content_text(m.get("content")))
        if m.get("tool_calls"):
            total += simple_text_tokens(json.dumps(m["tool_calls"]))
    return total


class _TokenCounter:
    """Counts prompt tokens with a Hugging Face tokenizer, or the simple count without one."""

    def __init__(self, tokenizer_path: str | None) -> None:
        self.tokenizer: Any = None
        if tokenizer_path:
            from transformers import AutoTokenizer  # heavy import: only when asked for

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)

    def chat(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> int:
        tok = self.tokenizer
        if tok is None or not getattr(tok, "chat_template", None):
            return simple_chat_tokens(messages, tools)
        msgs = []
        for m in messages:
            d = dict(m)
            d["content"] = _content_text(d.get("content"))
            msgs.append(d)
        try:
            rendered = tok.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=True, tools=tools or None
            )
        except Exception as e:  # template errors are client errors in SGLang (400)
            raise _ClientError(str(e)) from e
        return len(tok.encode(rendered, add_special_tokens=False))

    def text(self, text: str) -> int:
        if self.tokenizer is None:
            return simple_text_tokens(text)
        return len(self.tokenizer.encode(text))

    def chat_units(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> list[Any]:
        """The chat prompt's tokens for the prefix cache (ids, or simple-count units)."""
        tok = self.tokenizer
        if tok is None or not getattr(tok, "chat_template", None):
            return chat_units(messages, tools, _content_text)
        msgs = [{**m, "content": _content_text(m.get("content"))} for m in messages]
        rendered = tok.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, tools=tools or None
        )
        return list(tok.encode(rendered, add_special_tokens=False))

    def text_units(self, text: str) -> list[Any]:
        """A text's tokens for the prefix cache (ids, or words)."""
        return text_units(text) if self.tokenizer is None else list(self.tokenizer.encode(text))


# --------------------------------------------------------------------------------------------
# Errors and JSON helpers
# --------------------------------------------------------------------------------------------


class _ClientError(Exception):
    """A request SGLang refuses with 400; ``kind`` picks the body's ``type``."""

    def __init__(self, message: str, kind: str = "BadRequestError", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _json(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(_dumps(obj), status_code=status, media_type="application/json", headers=headers)


def sglang_error_body(
    message: str, kind: str = "BadRequestError", code: int = 400
) -> dict[str, Any]:
    """SGLang 0.5.23's flat error body, e.g. for ``Behaviour(status=400, body=...)``."""
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def overlength_body(input_tokens: int, context_length: int) -> dict[str, Any]:
    """SGLang's 400 body for an input of ``input_tokens`` >= ``context_length`` (tokens)."""
    return sglang_error_body(
        f"The input ({input_tokens} tokens) is longer than the model's context length "
        f"({context_length} tokens)."
    )


def _sglang_error(message: str, kind: str = "BadRequestError", status: int = 400) -> Response:
    """SGLang's flat ``ErrorResponse`` body (``create_error_response``)."""
    return _json(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status}, status
    )


def _default_error_type(status: int) -> str:
    return {400: "BadRequestError", 500: "InternalServerError"}.get(status, str(status))


def _as_int(value: Any, name: str) -> int | None:
    """Pydantic-lax int coercion as SGLang's request models do; bad values: ``_ClientError``."""
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
    raise _ClientError(
        f"1 validation error: {name}: Input should be a valid integer", "Bad Request"
    )


# --------------------------------------------------------------------------------------------
# In-flight bookkeeping
# --------------------------------------------------------------------------------------------


@dataclass
class _Sample:
    """One generated sequence (a choice): what ``num_running_reqs`` counts."""

    rid: str
    index: int
    prompt_tokens: int
    limit: int
    generated: int = 0
    text: str = ""
    finish: dict[str, Any] | None = None
    abort_requested: bool = False
    dp_rank: int = 0


@dataclass
class _Job:
    """One HTTP generation request and its samples."""

    seq: int
    path: str
    stream: bool
    samples: list[_Sample]
    n: int
    model: str
    stop: list[str]
    include_usage: bool
    entry: dict[str, Any]
    behaviour: Behaviour | None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    client_gone: bool = False
    fault_fired: bool = False  # a reset/close we made ourselves is not a client disconnect
    ignore_disconnect: bool = False
    admitted: bool = False
    prompt_error: str | None = None  # scheduler-level abort message (check 4)
    ignore_eos: bool = False
    single: bool = True  # one prompt and n == 1 (/generate answers an object, not a list)
    cache_units: list[list[Any]] | None = None  # per prompt, when the prefix cache is on
    cached: list[int] = field(default_factory=list)  # cached tokens per prompt (prefix cache)


class FakeState:
    """All state of one fake server; built by ``create_fake_app`` as ``app.state.fake``.

    Must be used from the server's event loop (``FakeServer.call`` marshals to it).
    """

    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.counter = _TokenCounter(config.tokenizer_path)
        self.started = time.time()
        self._seq = 0
        self._dp_next = 0
        self.script_queue: list[Behaviour] = []
        self.log: deque[dict[str, Any]] = deque(maxlen=config.max_log_entries)
        self.aborts: deque[dict[str, Any]] = deque(maxlen=config.max_log_entries)
        self.disconnects: deque[dict[str, Any]] = deque(maxlen=config.max_log_entries)
        self.running: dict[str, _Sample] = {}
        self.queued: deque[tuple[_Job, asyncio.Future[None]]] = deque()
        self.jobs: dict[int, _Job] = {}
        self.health: dict[str, Any] = {}
        self.metrics_override: dict[str, Any] = {}
        self.avg_spec_accept_length: float | None = None
        # tokenizer counters, keyed by SGLang's ``is_streaming`` label value
        self.prompt_tokens_total = {"false": 0, "true": 0}
        self.generation_tokens_total = {"false": 0, "true": 0}
        self.num_requests_total = {"false": 0, "true": 0}
        self.num_aborted_requests_total = 0
        self.flushes = 0
        self.closing = asyncio.Event()
        #: requests served so far per connection (keyed by the uvicorn transport)
        self.connections: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.prefix_cache = PrefixCache(config.prefix_cache_tokens) if config.prefix_cache_tokens else None

    # -- control ---------------------------------------------------------------------------

    def script(self, behaviours: list[Behaviour]) -> int:
        """Queue behaviours (FIFO); returns the queue length."""
        self.script_queue.extend(behaviours)
        return len(self.script_queue)

    def reset(self) -> None:
        """Forget the log, aborts, disconnects, script queue, overrides and counters."""
        self.script_queue.clear()
        self.log.clear()
        self.aborts.clear()
        self.disconnects.clear()
        self.health.clear()
        self.metrics_override.clear()
        self.avg_spec_accept_length = None
        self.prompt_tokens_total = {"false": 0, "true": 0}
        self.generation_tokens_total = {"false": 0, "true": 0}
        self.num_requests_total = {"false": 0, "true": 0}
        self.num_aborted_requests_total = 0
        self.flushes = 0

    def requests(self, path: str | None = None) -> dict[str, Any]:
        """The access log: ``{"requests": [...], "aborts": [...], "disconnects": [...]}``."""
        reqs = [dict(e) for e in self.log if path is None or e["path"] == path]
        return {
            "requests": reqs,
            "aborts": list(self.aborts),
            "disconnects": list(self.disconnects),
        }

    def _take_behaviour(self, path: str, reused: bool = True) -> Behaviour | None:
        for i, b in enumerate(self.script_queue):
            if (b.path is None or b.path == path) and (reused or not b.reused_only):
                b.count -= 1
                if b.count <= 0:
                    del self.script_queue[i]
                return replace(b, count=1)
        return None

    def _log(self, request: Request, body: Any) -> dict[str, Any]:
        self._seq += 1
        entry: dict[str, Any] = {
            "seq": self._seq,
            "time": time.time(),
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": {k: v for k, v in request.headers.items()},
            "body": body,
            "rids": [],
            "stream": None,
            "status": None,
            "outcome": None,
            "client_disconnected": False,
            "fault": None,
        }
        self.log.append(entry)
        return entry

    # -- load ------------------------------------------------------------------------------

    def abort(self, rid: str) -> bool:
        """Abort the running or queued sample with exactly this rid; True if one matched."""
        s = self.running.get(rid)
        if s is None:
            for job, _ in self.queued:
                for qs in job.samples:
                    if qs.rid == rid:
                        s = qs
        matched = s is not None and s.finish is None
        if matched and s is not None:
            s.abort_requested = True
            for job in self.jobs.values():
                if s in job.samples:
                    self.wake(job)
        self.aborts.append({"time": time.time(), "rid": rid, "matched": matched})
        return matched

    def _admit_now(self, job: _Job) -> bool:
        limit = self.config.max_running_requests
        return limit is None or not self.running or len(self.running) + len(job.samples) <= limit

    async def admit(self, job: _Job) -> None:
        """Wait for a running slot (FIFO) then mark the job's samples running."""
        if not self.queued and self._admit_now(job):
            self._start(job)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queued.append((job, fut))
        try:
            await fut
        finally:
            with contextlib.suppress(ValueError):
                self.queued.remove((job, fut))

    def wake(self, job: _Job) -> None:
        """Interrupt the job's waits (prefill, decode step, queue) so it sees an abort."""
        job.wake.set()
        if not all(s.abort_requested for s in job.samples):
            return
        for queued_job, fut in list(self.queued):
            if queued_job is job and not fut.done():
                self.queued.remove((queued_job, fut))
                fut.set_result(None)

    def _start(self, job: _Job) -> None:
        job.admitted = True
        for s in job.samples:
            self.running[s.rid] = s

    def release(self, job: _Job) -> None:
        """Take the job's samples off the running set and admit waiting jobs."""
        for s in job.samples:
            self.release_sample(s, admit=False)
        self._admit_waiting()

    def release_sample(self, s: _Sample, admit: bool = True) -> None:
        """Take one finished sample off the running set."""
        if self.running.get(s.rid) is s:
            del self.running[s.rid]
            if admit:
                self._admit_waiting()

    def _admit_waiting(self) -> None:
        while self.queued:
            nxt, fut = self.queued[0]
            if fut.done():
                self.queued.popleft()
                continue
            if not self._admit_now(nxt):
                break
            self.queued.popleft()
            self._start(nxt)
            fut.set_result(None)

    def next_dp_rank(self) -> int:
        r = self._dp_next % self.config.dp_size
        self._dp_next += 1
        return r

    def gauges(self) -> list[dict[str, float]]:
        """Live gauge values per dp rank, after overrides."""
        cfg = self.config
        out = []
        for rank in range(cfg.dp_size):
            running = [s for s in self.running.values() if s.dp_rank == rank]
            queued = sum(1 for job, _ in self.queued for s in job.samples if s.dp_rank == rank)
            used = sum(s.prompt_tokens + s.generated for s in running)
            g = {
                "num_running_reqs": float(len(running)),
                "num_queue_reqs": float(queued),
                "token_usage": used / cfg.max_total_num_tokens,
                "spec_accept_length": cfg.spec_accept_length if cfg.speculative_algorithm else 0.0,
                "spec_accept_rate": cfg.spec_accept_rate if cfg.speculative_algorithm else 0.0,
                "gen_throughput": 0.0,
                "cache_hit_rate": 0.0,
            }
            g.update({k: float(v) for k, v in (self.metrics_override.get("gauges") or {}).items()})
            per = (self.metrics_override.get("dp_gauges") or {}).get(str(rank)) or {}
            g.update({k: float(v) for k, v in per.items()})
            out.append(g)
        return out


# --------------------------------------------------------------------------------------------
# Request parsing (SGLang's validation, partly)
# --------------------------------------------------------------------------------------------


def _stop_list(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise _ClientError(
        "1 validation error: stop: Input should be a valid string or list", "Bad Request"
    )


def _include_usage(body: dict[str, Any]) -> bool:
    so = body.get("stream_options")
    return bool(isinstance(so, dict) and so.get("include_usage"))


def _make_rids(rid: Any, batch: int, n: int, single: bool) -> list[str]:
    """Sample ids as SGLang 0.5.23 assigns them (module docstring, "Request ids")."""
    if n > 1:
        return [uuid.uuid4().hex for _ in range(batch * n)]
    if single:
        if rid is None:
            return [uuid.uuid4().hex]
        if isinstance(rid, str):
            return [rid]
        raise _ClientError("The rid should be a string or a list of strings.")
    if rid is None:
        return [uuid.uuid4().hex for _ in range(batch)]
    if isinstance(rid, str):
        return [f"{rid}_{i}" for i in range(batch)]
    if isinstance(rid, list) and all(isinstance(r, str) for r in rid):
        if len(rid) != batch:
            raise _ClientError(
                "The specified rids length mismatch with the batch_size for batch processing."
            )
        return list(rid)
    raise _ClientError("The rid should be a string or a list of strings.")


def _check_lengths(cfg: FakeConfig, prompt_tokens: int, limit: int | None) -> None:
    """SGLang's tokenizer-manager checks 2 and 3 (module docstring); raise ``_ClientError``."""
    c = cfg.context_length
    num = prompt_tokens + cfg.num_reserved_tokens
    if num >= c:
        raise _ClientError(
            f"The input ({num} tokens) is longer than the model's context length ({c} tokens)."
        )
    if limit is not None and limit + num > c:
        raise _ClientError(
            f"Requested token count exceeds the model's maximum context length of {c} tokens. "
            f"You requested a total of {limit + num} tokens: {num} tokens from the input messages "
            f"and {limit} tokens for the completion. Please reduce the number of tokens in the "
            f"input messages or the completion to fit within the limit."
        )
    if limit is not None and limit < 0:
        raise _ClientError(f"max_new_tokens must be at least 0, got {limit}.")


def _effective_limit(
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


async def _read_json(request: Request, entry: dict[str, Any] | None = None) -> Any:
    raw = await request.body()
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as e:
        if entry is not None:
            entry["body"] = raw.decode("utf-8", "replace")
        raise _ClientError(f"JSON decode error: {e}", "Bad Request") from e
    if entry is not None:
        entry["body"] = body
    return body


def _perturbed(config: FakeConfig, job: _Job) -> bool:
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
        entry = state._log(request, None)
        behaviour: Behaviour | None = None
        try:
            if kind != "generate":
                ct = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
                if ct != "application/json":
                    await _read_json(request, entry)
                    raise _ClientError(
                        "1 validation error: header content-type: "
                        "Unsupported Media Type: Only 'application/json' is allowed",
                        "Bad Request",
                    )
            body = await _read_json(request, entry)
            if not isinstance(body, dict):
                raise _ClientError(
                    "1 validation error: body: Input should be a valid dictionary", "Bad Request"
                )
            entry["stream"] = bool(body.get("stream", False))
            entry["reused_connection"] = reused = request.scope.get(_CONN_KEY, 0) > 0
            behaviour = state._take_behaviour(request.url.path, reused)
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
        except _ClientError as e:
            entry["status"] = e.status
            entry["outcome"] = "error"
            if kind == "generate":
                return _json({"error": {"message": e.message}}, e.status)
            return _sglang_error(e.message, e.kind, e.status)
        return _Asgi(lambda s, r, se: _serve_job(s, r, se, job, kind, prompts))

    async def _parse_chat(
        body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
    ) -> tuple[_Job, list[int]]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise _ClientError(
                "1 validation error: messages: Field required or not a list of message objects",
                "Bad Request",
            )
        for m in messages:
            role = m.get("role")
            if role == "root":
                raise _ClientError("unsupported chat role: root", "BadRequest")
            if role not in _ROLES:
                raise _ClientError(
                    "1 validation error: messages.role: 'role' must be one of "
                    + ", ".join(f"'{r}'" for r in sorted(_ROLES)),
                    "Bad Request",
                )
        if not messages:
            raise _ClientError("Messages cannot be empty.")
        n = _as_int(body.get("n", 1), "n")
        if n is None:
            raise _ClientError(
                "1 validation error: n: Input should be a valid integer", "Bad Request"
            )
        if n == 0 and not body.get("stream"):
            # SGLang 0.5.23 runs one choice, then fails on range(0, 1, n) in its usage sum
            raise _ClientError("range() arg 3 must not be zero", "BadRequest")
        mct = _as_int(body.get("max_completion_tokens"), "max_completion_tokens")
        mt = _as_int(body.get("max_tokens"), "max_tokens")
        limit = mct or mt  # SGLang: `max_completion_tokens or max_tokens`
        if cfg.context_length_flag and limit and limit > cfg.context_length:
            raise _ClientError(
                f"max_completion_tokens is too large: {limit}."
                f"This model supports at most {cfg.context_length} completion tokens."
            )
        tools = body.get("tools")
        if state.counter.tokenizer is not None:
            p = await asyncio.to_thread(state.counter.chat, messages, tools)
        else:
            p = state.counter.chat(messages, tools)
        _check_lengths(cfg, p, limit)
        rids = _make_rids(body.get("rid"), 1, max(n, 1), True)
        job = _new_job(
            entry, "/v1/chat/completions", body, rids, [p] * len(rids), n, limit, behaviour
        )
        if state.prefix_cache is not None:
            job.cache_units = [state.counter.chat_units(messages, tools)]
        return job, [p]

    async def _parse_completions(
        body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
    ) -> tuple[_Job, list[int]]:
        prompt = body.get("prompt")
        if prompt is None:
            raise _ClientError("1 validation error: prompt: Field required", "Bad Request")
        if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
            raise _ClientError("Prompt cannot be empty")
        n = _as_int(body.get("n", 1), "n")
        if n is None:
            raise _ClientError(
                "1 validation error: n: Input should be a valid integer", "Bad Request"
            )
        if n == 0 and not body.get("stream"):
            raise _ClientError("range() arg 3 must not be zero", "BadRequest")
        mt = _as_int(body.get("max_tokens", 16), "max_tokens")
        if mt is not None and mt <= 0:
            raise _ClientError(
                "1 validation error: max_tokens: Value error, max_tokens must be positive",
                "Bad Request",
            )
        prompts, single = await _prompt_counts(prompt)
        for p in prompts:
            _check_lengths(cfg, p, mt)
        en = max(n, 1)
        rids = _make_rids(body.get("rid"), len(prompts), en, single and en == 1)
        counts = [prompts[i // en] for i in range(len(prompts) * en)]
        job = _new_job(entry, "/v1/completions", body, rids, counts, n, mt, behaviour)
        if state.prefix_cache is not None and isinstance(prompt, str):
            job.cache_units = [state.counter.text_units(prompt)]
        return job, prompts

    async def _parse_generate(
        body: dict[str, Any], entry: dict[str, Any], behaviour: Behaviour | None
    ) -> tuple[_Job, list[int]]:
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise _ClientError("sampling_params must be an object")
        text, ids = body.get("text"), body.get("input_ids")
        if text is None and ids is None:
            raise _ClientError("Either text, input_ids or input_embeds should be provided.")
        prompts, single = await _prompt_counts(text if text is not None else ids)
        n = _as_int(sp.get("n", 1), "n") or 1
        limit = _as_int(sp.get("max_new_tokens", 128), "max_new_tokens")
        for p in prompts:
            _check_lengths(cfg, p, limit)
        rids = _make_rids(body.get("rid"), len(prompts), n, single and n == 1)
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
            raise _ClientError(
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
    ) -> _Job:
        stop = _stop_list(body.get("stop"))
        rank = state.next_dp_rank()
        samples = []
        error = None
        for i, (rid, p) in enumerate(zip(rids, prompt_counts, strict=True)):
            samples.append(
                _Sample(
                    rid=rid,
                    index=i,
                    prompt_tokens=p,
                    limit=_effective_limit(cfg, p, limit, behaviour),
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
        job = _Job(
            seq=entry["seq"],
            path=path,
            stream=bool(body.get("stream", False)),
            samples=samples,
            n=n,
            model=str(body.get("model", "default")),
            stop=stop,
            include_usage=_include_usage(body),
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
            payload = _dumps(b.body)
            ct = (b.content_type or "application/json").encode()
        elif b.body_text is not None:
            payload = b.body_text.encode()
            ct = (b.content_type or "text/plain; charset=utf-8").encode()
        else:
            payload = _dumps(
                {
                    "object": "error",
                    "message": b.message,
                    "type": _default_error_type(status),
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
            payload = _dumps({"object": "error", "message": _QUEUE_FULL, "type": "503",
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

    async def _sleep_or_wake(job: _Job, delay: float) -> None:
        if delay <= 0:
            await asyncio.sleep(0)
            return
        job.wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(job.wake.wait(), delay)

    def _finish(job: _Job, s: _Sample, finish: dict[str, Any]) -> None:
        s.finish = finish
        if finish["type"] == "abort":
            state.num_aborted_requests_total += 1
        state.release_sample(s)

    async def _steps(job: _Job) -> AsyncIterator[tuple[_Sample, str]]:
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

    def _usage(job: _Job) -> dict[str, Any]:
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
            + _dumps(
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

    async def _chat_events(job: _Job) -> AsyncIterator[bytes]:
        created = int(time.time())
        seen: set[int] = set()
        finished: list[_Sample] = []
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
                + _dumps(
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

    async def _completion_events(job: _Job) -> AsyncIterator[bytes]:
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
                + _dumps(
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
                + _dumps(
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

    def _meta(job: _Job, s: _Sample) -> dict[str, Any]:
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

    async def _generate_events(job: _Job) -> AsyncIterator[bytes]:
        async for s, _delta in _steps(job):
            out = {
                "text": s.text,
                "output_ids": list(range(s.generated)),
                "meta_info": _meta(job, s),
            }
            if len(job.samples) > 1:
                out["index"] = s.index
            yield b"data: " + _dumps(out) + b"\n\n"
        yield _DONE

    def _final_body(job: _Job, kind: str) -> tuple[int, Any]:
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
        scope: Any, receive: Any, send: Any, job: _Job, kind: str, prompts: list[int]
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
                data = _dumps(payload)
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
                        and fault not in _SOFT_FAULTS
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
                and fault not in _SOFT_FAULTS
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

    async def _close_after(cycle: Any, job: _Job) -> None:
        """Close the socket right after a complete keep-alive response (aiohttp#7297)."""
        transport = getattr(cycle, "transport", None)
        if transport is None:
            raise RuntimeError("close_after_response needs a real socket (serve with uvicorn)")
        job.fault_fired = True
        job.entry["fault"] = "close_after_response"
        transport.close()

    def _outcome(job: _Job) -> str:
        if job.client_gone:
            return "client_disconnected"
        if any((s.finish or {}).get("type") == "abort" for s in job.samples):
            return "aborted"
        return "completed"

    async def _apply_fault(
        fault: str, cycle: Any, job: _Job, b: Behaviour | None, send: Any = None
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

    # ---------------------------------------------------------------- other SGLang endpoints

    def _logged(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            entry = state._log(request, None)
            if request.method == "POST":
                raw = await request.body()
                try:
                    entry["body"] = orjson.loads(raw) if raw else None
                except orjson.JSONDecodeError:
                    entry["body"] = raw.decode("utf-8", "replace")
            resp = await handler(request)
            entry["status"] = resp.status_code
            entry["outcome"] = "completed"
            return resp

        return wrapped

    async def health(request: Request) -> Response:
        delay = state.health.get("delay_s")
        delay = cfg.health_delay_s if delay is None else float(delay)
        if delay > 0:
            await asyncio.sleep(delay)
        status = state.health.get("status") or 200
        return Response(status_code=int(status))

    async def models(request: Request) -> Response:
        return _json({"object": "list", "data": [_model_card(cfg.model_name)]})

    def _model_card(name: str) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": int(state.started),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": cfg.context_length,
        }

    async def model_one(request: Request) -> Response:
        name = request.path_params["model"]
        if name != cfg.model_name:
            return _json(
                {
                    "error": {
                        "message": f"The model '{name}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
                404,
            )
        return _json(_model_card(name))

    def _server_args() -> dict[str, Any]:
        return {
            "model_path": cfg.tokenizer_path or cfg.model_name,
            "tokenizer_path": cfg.tokenizer_path or cfg.model_name,
            "served_model_name": cfg.model_name,
            "context_length": cfg.context_length if cfg.context_length_flag else None,
            "device": "cpu",
            "tp_size": 1,
            "pp_size": 1,
            "dp_size": cfg.dp_size,
            "enable_metrics": cfg.enable_metrics,
            "max_running_requests": cfg.max_running_requests,
            "max_total_tokens": cfg.max_total_num_tokens,
            "speculative_algorithm": cfg.speculative_algorithm,
            "speculative_num_steps": cfg.speculative_num_steps
            if cfg.speculative_algorithm
            else None,
            "speculative_eagle_topk": cfg.speculative_eagle_topk
            if cfg.speculative_algorithm
            else None,
            "speculative_num_draft_tokens": (
                cfg.speculative_num_draft_tokens if cfg.speculative_algorithm else None
            ),
            "weight_version": cfg.weight_version,
        }

    async def server_info(request: Request) -> Response:
        internal = []
        for rank, g in enumerate(state.gauges()):
            st: dict[str, Any] = {
                **_server_args(),
                "dp_rank": rank,
                "world_size": cfg.dp_size,
                "startup_time": state.started,
                "effective_max_running_requests_per_dp": cfg.max_running_requests,
                "last_gen_throughput": g["gen_throughput"],
                "memory_usage": {
                    "weight": 0.0,
                    "kvcache": 0.0,
                    "token_capacity": cfg.max_total_num_tokens,
                },
            }
            override = state.metrics_override.get("avg_spec_accept_length")
            if override is not None:
                st["avg_spec_accept_length"] = float(override)
            elif cfg.speculative_algorithm and state.avg_spec_accept_length is not None:
                st["avg_spec_accept_length"] = state.avg_spec_accept_length
            internal.append(st)
        return _json(
            {
                **_server_args(),
                "status": "ready",
                "max_total_num_tokens": cfg.max_total_num_tokens,
                "max_req_input_len": cfg.max_req_input_len,
                "startup_time": state.started,
                "internal_states": internal,
                "version": SGLANG_VERSION,
                "frontend": "python",
            }
        )

    async def model_info(request: Request) -> Response:
        return _json(
            {
                "model_path": cfg.tokenizer_path or cfg.model_name,
                "served_model_name": cfg.model_name,
                "tokenizer_path": cfg.tokenizer_path or cfg.model_name,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": cfg.weight_version,
                "load_format": "auto",
                "reasoning_parser": None,
                "tool_call_parser": None,
                "disaggregation_mode": "null",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
            }
        )

    async def metrics(request: Request) -> Response:
        if not cfg.enable_metrics:
            return _json({"detail": "Not Found"}, 404)
        o = state.metrics_override
        if o.get("delay_s"):
            await asyncio.sleep(float(o["delay_s"]))
        if o.get("status"):
            return Response(
                o.get("body_text") or "Internal Server Error",
                status_code=int(o["status"]),
                media_type="text/plain",
            )
        if o.get("body_text") is not None:
            return Response(o["body_text"], media_type="text/plain; version=0.0.4; charset=utf-8")
        return Response(_render_metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")

    def _render_metrics() -> str:
        px = cfg.metrics_prefix
        lines: list[str] = []
        per_rank = state.gauges()
        docs = {
            "num_running_reqs": "The number of running requests.",
            "num_queue_reqs": "The number of requests in the waiting queue.",
            "token_usage": "The token usage.",
            "spec_accept_length": "Mean acceptance length of speculative decoding (accepted "
            "drafts + bonus token per forward).",
            "spec_accept_rate": "Speculative acceptance rate (`accepted drafts / proposed drafts` "
            "in batch).",
            "gen_throughput": "The generation throughput (token/s).",
            "cache_hit_rate": "The prefix cache hit rate.",
            "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
            "context_len": "Maximum context length.",
        }

        def labels(rank: int) -> str:
            lab = {
                "engine_type": "unified",
                "model_name": cfg.model_name,
                "moe_ep_rank": "0",
                "pp_rank": "0",
                "tp_rank": "0",
            }
            if cfg.dp_size > 1:
                lab["dp_rank"] = str(rank)
            return ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(lab.items()))

        for name in (*_GAUGES, "max_total_num_tokens", "context_len"):
            lines.append(f"# HELP {px}{name} {docs[name]}")
            lines.append(f"# TYPE {px}{name} gauge")
            for rank in range(cfg.dp_size):
                if name == "max_total_num_tokens":
                    v = float(cfg.max_total_num_tokens)
                elif name == "context_len":
                    v = float(cfg.context_length)
                else:
                    v = per_rank[rank][name]
                lines.append(f"{px}{name}{{{labels(rank)}}} {_fmt(v)}")
        model = _esc(cfg.model_name)
        for name, value, doc in (
            ("prompt_tokens", state.prompt_tokens_total, "Number of prefill tokens processed."),
            (
                "generation_tokens",
                state.generation_tokens_total,
                "Number of generation tokens processed.",
            ),
            ("num_requests", state.num_requests_total, "Number of requests processed."),
            (
                "num_aborted_requests",
                state.num_aborted_requests_total,
                "Number of requests aborted.",
            ),
        ):
            lines.append(f"# HELP {px}{name}_total {doc}")
            lines.append(f"# TYPE {px}{name}_total counter")
            if isinstance(value, dict):
                for streaming, v in value.items():
                    lines.append(
                        f'{px}{name}_total{{engine_type="unified",is_streaming="{streaming}",'
                        f'model_name="{model}"}} {_fmt(float(v))}'
                    )
            else:
                lines.append(
                    f'{px}{name}_total{{engine_type="unified",model_name="{model}"}} '
                    f"{_fmt(float(value))}"
                )
        return "\n".join(lines) + "\n"

    async def loads(request: Request) -> Response:
        out = []
        for rank, g in enumerate(state.gauges()):
            d: dict[str, Any] = {
                "timestamp": time.time(),
                "dp_rank": rank,
                "num_running_reqs": int(g["num_running_reqs"]),
                "num_waiting_reqs": int(g["num_queue_reqs"]),
                "num_used_tokens": int(g["token_usage"] * cfg.max_total_num_tokens),
                "max_total_num_tokens": cfg.max_total_num_tokens,
                "max_running_requests": cfg.max_running_requests or 0,
                "token_usage": g["token_usage"],
                "gen_throughput": g["gen_throughput"],
                "cache_hit_rate": g["cache_hit_rate"],
            }
            if cfg.speculative_algorithm:
                d["speculative"] = {
                    "accept_length": g["spec_accept_length"],
                    "accept_rate": g["spec_accept_rate"],
                }
            out.append(d)
        return _json(
            {
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                "version": SGLANG_VERSION,
                "accelerator": None,
                "num_accelerators": 1,
                "loads": out,
            }
        )

    async def abort_request(request: Request) -> Response:
        raw = await request.body()
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as e:
            return _sglang_error(f"1 validation error: JSON decode error: {e}", "Bad Request")
        if not isinstance(body, dict):
            return _sglang_error(
                "1 validation error: body: Input should be a valid dictionary", "Bad Request"
            )
        rid = body.get("rid") or ""
        if body.get("abort_all"):
            for s in list(state.running.values()):
                state.abort(s.rid)
        elif isinstance(rid, str) and rid:
            state.abort(rid)
        return Response(status_code=200)

    async def flush_cache(request: Request) -> Response:
        state.flushes += 1
        if state.prefix_cache is not None:
            state.prefix_cache.clear()
        return Response(
            "Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n",
            status_code=200,
        )

    # ---------------------------------------------------------------- control API

    async def c_script(request: Request) -> Response:
        try:
            data = orjson.loads(await request.body() or b"null")
            items = (
                data.get("behaviours") if isinstance(data, dict) and "behaviours" in data else data
            )
            if isinstance(items, dict):
                items = [items]
            if not isinstance(items, list):
                raise TypeError('expected a behaviour object, a list, or {"behaviours": [...]}')
            parsed = [Behaviour.from_dict(x) for x in items]
        except (ValueError, TypeError, orjson.JSONDecodeError) as e:
            return _json({"error": str(e)}, 400)
        return _json({"queued": state.script(parsed)})

    async def c_requests(request: Request) -> Response:
        return _json(state.requests(request.query_params.get("path")))

    async def c_reset(request: Request) -> Response:
        state.reset()
        return _json({"ok": True})

    async def c_health(request: Request) -> Response:
        try:
            data = orjson.loads(await request.body() or b"{}")
            if not isinstance(data, dict) or set(data) - {"status", "delay_s"}:
                raise TypeError('expected {"status": int|null, "delay_s": float|null}')
        except (ValueError, TypeError, orjson.JSONDecodeError) as e:
            return _json({"error": str(e)}, 400)
        for k, v in data.items():
            if v is None:
                state.health.pop(k, None)
            else:
                state.health[k] = v
        return _json({"health": state.health})

    async def c_metrics(request: Request) -> Response:
        allowed = {
            "status",
            "delay_s",
            "body_text",
            "gauges",
            "decoding_gauges",
            "dp_gauges",
            "avg_spec_accept_length",
        }
        try:
            data = orjson.loads(await request.body() or b"{}")
            if not isinstance(data, dict) or set(data) - allowed:
                raise ValueError(f"allowed keys: {sorted(allowed)}")
            for key in ("gauges", "decoding_gauges"):
                if data.get(key) is not None and set(data[key]) - set(_GAUGES):
                    raise ValueError(f"gauges must be among {list(_GAUGES)}")
        except (ValueError, TypeError, orjson.JSONDecodeError) as e:
            return _json({"error": str(e)}, 400)
        for k, v in data.items():
            if v is None:
                state.metrics_override.pop(k, None)
            elif k == "gauges":
                merged = dict(state.metrics_override.get("gauges") or {})
                for gk, gv in v.items():
                    if gv is None:
                        merged.pop(gk, None)
                    else:
                        merged[gk] = gv
                state.metrics_override["gauges"] = merged
            else:
                state.metrics_override[k] = v
        return _json({"metrics": state.metrics_override})

    async def c_state(request: Request) -> Response:
        return _json(
            {
                "running": [
                    {
                        "rid": s.rid,
                        "index": s.index,
                        "generated": s.generated,
                        "prompt_tokens": s.prompt_tokens,
                    }
                    for s in state.running.values()
                ],
                "queued": [s.rid for job, _ in state.queued for s in job.samples],
                "script_queue": [asdict(b) for b in state.script_queue],
                "gauges": state.gauges(),
            }
        )

    # ---------------------------------------------------------------- embedding endpoints

    def _embedding_input(doc: Any) -> list[Any]:
        if not isinstance(doc, dict):
            raise _ClientError("1 validation error: body: Input should be a valid dictionary", "Bad Request")
        value = doc.get("input")
        if not value or (isinstance(value, str) and not value.strip()):
            raise _ClientError("Input cannot be empty")
        if isinstance(value, str) or (isinstance(value, list) and all(type(t) is int for t in value)):
            return [value]
        if isinstance(value, list) and all(isinstance(v, (str, list)) for v in value):
            return list(value)
        raise _ClientError("1 validation error: input: Input should be a valid string or list", "Bad Request")

    def _input_tokens(value: Any) -> int:
        return len(value) if isinstance(value, list) else state.counter.text(value)

    async def embeddings(request: Request) -> Response:
        entry = state._log(request, None)
        try:
            doc = await _read_json(request, entry)
            inputs = _embedding_input(doc)
            if not cfg.is_embedding:
                raise _ClientError(
                    "This model does not appear to be an embedding model by default. Please add "
                    "`--is-embedding` when launching the server or try another model.")
        except _ClientError as e:
            entry["status"], entry["outcome"] = e.status, "error"
            return _sglang_error(e.message, e.kind, e.status)
        dim = doc.get("dimensions") if type(doc.get("dimensions")) is int else cfg.embedding_dim
        tokens = sum(_input_tokens(v) for v in inputs)
        entry["status"], entry["outcome"] = 200, "ok"
        return _json({
            "data": [{"embedding": [math.sin(i * 1000 + k + 1) for k in range(dim)], "index": i,
                      "object": "embedding"} for i in range(len(inputs))],
            "model": doc.get("model") or cfg.model_name, "object": "list",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                      "prompt_tokens_details": None}})

    async def rerank(request: Request) -> Response:
        entry = state._log(request, None)
        try:
            doc = await _read_json(request, entry)
            if not isinstance(doc, dict) or not isinstance(doc.get("documents"), list) or "query" not in doc:
                raise _ClientError("1 validation error: query, documents: Field required", "Bad Request")
            if not cfg.is_embedding:
                raise _ClientError(
                    "This model does not appear to be an embedding model by default. Please add "
                    "`--is-embedding` when launching the server or try another model.")
        except _ClientError as e:
            entry["status"], entry["outcome"] = e.status, "error"
            return _sglang_error(e.message, e.kind, e.status)
        docs = doc["documents"]
        scored = sorted(({"score": 1.0 / (i + 1), "document": d, "index": i} for i, d in enumerate(docs)),
                        key=lambda r: -r["score"])
        entry["status"], entry["outcome"] = 200, "ok"
        return _json(scored)

    # ---------------------------------------------------------------- responses endpoint

    async def responses(request: Request) -> Response:
        """A minimal ``/v1/responses``: ``max_output_tokens`` (default 16) tokens ``tok{i}``;
        streamed as ``event: <type>`` + ``data:`` events ending with ``response.completed``."""
        entry = state._log(request, None)
        try:
            doc = await _read_json(request, entry)
            if not isinstance(doc, dict) or not isinstance(doc.get("input"), (str, list)):
                raise _ClientError("1 validation error: input: Field required", "Bad Request")
        except _ClientError as e:
            entry["status"], entry["outcome"] = e.status, "error"
            return _sglang_error(e.message, e.kind, e.status)
        n = doc.get("max_output_tokens") if type(doc.get("max_output_tokens")) is int else 16
        rid = doc.get("request_id") or f"resp_{uuid.uuid4().hex}"
        entry["rids"] = [rid]
        text = " ".join(f"tok{i}" for i in range(n))
        body = {"id": rid, "object": "response", "created_at": int(time.time()),
                "model": doc.get("model") or cfg.model_name, "status": "completed",
                "output": [{"type": "message", "id": f"msg_{rid}", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "usage": {"input_tokens": 1, "output_tokens": n, "total_tokens": n + 1}}
        entry["status"], entry["outcome"] = 200, "ok"
        if not doc.get("stream"):
            return _json(body)

        def event(kind: str, **payload: Any) -> bytes:
            return f"event: {kind}\ndata: ".encode() + _dumps({"type": kind, **payload}) + b"\n\n"

        events = [event("response.created", response={**body, "status": "in_progress", "output": []})]
        events += [event("response.output_text.delta", item_id=f"msg_{rid}", output_index=0,
                         content_index=0, delta=("" if i == 0 else " ") + f"tok{i}") for i in range(n)]
        events.append(event("response.completed", response=body))

        async def gen() -> AsyncIterator[bytes]:
            for e in events:
                yield e

        from starlette.responses import StreamingResponse

        return StreamingResponse(gen(), media_type="text/event-stream")

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/rerank", rerank, methods=["POST", "PUT"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/generate", generate, methods=["POST", "PUT"]),
        Route("/v1/models", _logged(models), methods=["GET"]),
        Route("/v1/models/{model:path}", _logged(model_one), methods=["GET"]),
        Route("/health", _logged(health), methods=["GET"]),
        Route("/health_generate", _logged(health), methods=["GET"]),
        Route("/server_info", _logged(server_info), methods=["GET"]),
        Route("/get_server_info", _logged(server_info), methods=["GET"]),
        Route("/model_info", _logged(model_info), methods=["GET"]),
        Route("/get_model_info", _logged(model_info), methods=["GET"]),
        Route("/metrics", _logged(metrics), methods=["GET"]),
        Route("/v1/loads", _logged(loads), methods=["GET"]),
        Route("/abort_request", _logged(abort_request), methods=["POST"]),
        Route("/flush_cache", _logged(flush_cache), methods=["GET", "POST"]),
        Route("/_fake/script", c_script, methods=["POST"]),
        Route("/_fake/requests", c_requests, methods=["GET"]),
        Route("/_fake/reset", c_reset, methods=["POST"]),
        Route("/_fake/health", c_health, methods=["POST"]),
        Route("/_fake/metrics", c_metrics, methods=["POST"]),
        Route("/_fake/state", c_state, methods=["GET"]),
    ]
    app = _FakeStarlette(routes=routes)
    app.state.fake = state
    return app


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


# --------------------------------------------------------------------------------------------
# Runner
# --------------------------------------------------------------------------------------------


class FakeServer:
    """Serve a fake app with uvicorn in a background thread on 127.0.0.1.

    ``FakeServer(config, port=0, host="127.0.0.1")``: port 0 picks a free port (the listening
    socket is bound before the thread starts, so there is no race); another loopback ``host``
    (``127.0.0.2``...) lets several fakes share one port, like pods behind one Service;
    ``keep_alive_s`` is uvicorn's idle keep-alive (SGLang's ``SGLANG_TIMEOUT_KEEP_ALIVE``, 5 s by
    default there, sgl-project/sglang#20851). Use as a context manager or call
    ``start()`` then ``stop()``/``kill()``. Attributes once started: ``base_url``
    (``http://127.0.0.1:PORT``), ``port``, ``app``, ``state`` (``FakeState``).

    ``stop(grace_s)``: graceful: stop accepting, let open requests end (hung ones are ended),
    wait at most ``grace_s`` seconds, then cancel the rest.
    ``kill()``: abrupt, like ``kill -9`` of an engine: every open connection is reset (RST) and
    the port stops listening at once; clients see connection resets / refused connections.
    ``call(fn, *args)``: run ``fn(state, *args)`` on the server's event loop and return its
    result (for in-process control without HTTP).
    Errors: ``RuntimeError`` if uvicorn does not start within ``start_timeout_s`` seconds.
    """

    def __init__(
        self, config: FakeConfig | None = None, *, port: int = 0, start_timeout_s: float = 10.0,
        host: str = "127.0.0.1", keep_alive_s: float = 30.0,
    ) -> None:
        self.config = config or FakeConfig()
        self.app = create_fake_app(self.config)
        self.state: FakeState = self.app.state.fake
        self._want_port = port
        self.host = host
        self.keep_alive_s = keep_alive_s
        self._timeout = start_timeout_s
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self.port = 0
        self.base_url = ""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        """Bind, start uvicorn in a thread, wait until it serves; returns self."""
        import uvicorn

        sock = socket.socket(
            socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
        )  # IPPROTO_TCP: asyncio then sets TCP_NODELAY
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._want_port))
        sock.listen(2048)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.base_url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            ws="none",
            access_log=False,
            timeout_graceful_shutdown=2,
            timeout_keep_alive=self.keep_alive_s,  # type: ignore[arg-type]  # float works
        )
        self._server = uvicorn.Server(config)
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def serve() -> None:
                task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
                while not self._server.started and not task.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await task

            try:
                loop.run_until_complete(serve())
            finally:
                ready.set()
                pending = asyncio.all_tasks(loop)
                for t in pending:
                    t.cancel()
                with contextlib.suppress(Exception):
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()
                sock.close()

        self._thread = threading.Thread(target=run, name=f"fake-sglang-{self.port}", daemon=True)
        self._thread.start()
        if not ready.wait(self._timeout) or not self._server.started:
            self.stop()
            raise RuntimeError(f"fake SGLang server did not start on port {self.port}")
        return self

    def call(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 10.0) -> Any:
        """Run ``fn(state, *args)`` on the server loop; returns its result."""
        if self._loop is None:
            raise RuntimeError("server not started")

        async def go() -> Any:
            return fn(self.state, *args)

        return asyncio.run_coroutine_threadsafe(go(), self._loop).result(timeout_s)

    def script(self, *behaviours: dict[str, Any] | Behaviour) -> int:
        """Queue behaviours (dicts are validated like ``/_fake/script``)."""
        parsed = [b if isinstance(b, Behaviour) else Behaviour.from_dict(b) for b in behaviours]
        return int(self.call(lambda st: st.script(parsed)))

    def requests(self, path: str | None = None) -> dict[str, Any]:
        """The access log (see ``FakeState.requests``)."""
        return dict(self.call(lambda st: st.requests(path)))

    def stop(self, grace_s: float = 2.0) -> None:
        """Graceful stop; see the class docstring. Idempotent."""
        if self._thread is None:
            return
        loop, server = self._loop, self._server
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.state.closing.set)
        if server is not None:
            server.should_exit = True
        self._thread.join(grace_s + 5.0)
        self._thread = None

    def kill(self) -> None:
        """Abrupt stop: reset every connection and stop listening now. Idempotent."""
        if self._thread is None:
            return
        loop, server = self._loop, self._server
        done = threading.Event()

        def hard() -> None:
            try:
                for srv in list(getattr(server, "servers", []) or []):
                    srv.close()
                for conn in list(getattr(getattr(server, "server_state", None), "connections", [])):
                    tr = getattr(conn, "transport", None)
                    if tr is None:
                        continue
                    sock = tr.get_extra_info("socket")
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.setsockopt(
                                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                            )
                    tr.abort()
                self.state.closing.set()
                server.force_exit = True
                server.should_exit = True
            finally:
                done.set()

        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(hard)
                done.wait(5.0)
        self._thread.join(10.0)
        self._thread = None


@contextlib.contextmanager
def run_fake_server(config: FakeConfig | None = None, *, port: int = 0) -> Iterator[str]:
    """Serve ``config`` on a free 127.0.0.1 port for the ``with`` block; yields the base URL.

    The server is stopped gracefully on exit. For abrupt kills use ``FakeServer`` directly.
    """
    srv = FakeServer(config, port=port).start()
    try:
        yield srv.base_url
    finally:
        srv.stop()


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """``python -m serving.fake_sglang``: serve one fake until SIGINT/SIGTERM."""
    import uvicorn

    ap = argparse.ArgumentParser(
        prog="python -m serving.fake_sglang", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model-name", default="fake-model")
    ap.add_argument("--context-length", type=int, default=2048)
    ap.add_argument("--tokenizer", default=None, help="Hugging Face tokenizer directory")
    ap.add_argument(
        "--speculative",
        action="store_true",
        help="act as an EAGLE3 server (topk 1, 3 steps, 4 draft tokens)",
    )
    ap.add_argument("--spec-accept-length", type=float, default=None)
    ap.add_argument("--max-running-requests", type=int, default=None)
    ap.add_argument("--max-total-tokens", type=int, default=1 << 20)
    ap.add_argument("--decode-step-s", type=float, default=0.0)
    ap.add_argument("--prefill-delay-s", type=float, default=0.0)
    ap.add_argument("--dp-size", type=int, default=1)
    ap.add_argument("--metrics-prefix", default="sglang:", choices=["sglang:", "sglang_"])
    ap.add_argument("--prefix-cache-tokens", type=int, default=0,
                    help="radix-like prefix cache of this many tokens, with cache reports (0: off)")
    ap.add_argument("--prefill-s-per-token", type=float, default=0.0)
    args = ap.parse_args(argv)
    cfg = FakeConfig(
        model_name=args.model_name,
        context_length=args.context_length,
        tokenizer_path=args.tokenizer,
        speculative_algorithm="EAGLE3" if args.speculative else None,
        spec_accept_length=(
            args.spec_accept_length
            if args.spec_accept_length is not None
            else (3.0 if args.speculative else 0.0)
        ),
        spec_accept_rate=0.5 if args.speculative else 0.0,
        max_running_requests=args.max_running_requests,
        max_total_num_tokens=args.max_total_tokens,
        decode_step_s=args.decode_step_s,
        prefill_delay_s=args.prefill_delay_s,
        dp_size=args.dp_size,
        metrics_prefix=args.metrics_prefix,
        prefix_cache_tokens=args.prefix_cache_tokens,
        prefill_s_per_token=args.prefill_s_per_token,
    )
    uvicorn.run(
        create_fake_app(cfg),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=2,
    )
