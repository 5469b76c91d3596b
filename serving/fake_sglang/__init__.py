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
``GET /_fake/state``, ``POST /_fake/relaunch`` (other launch flags on the same address, as a
restarted engine or told at run time: ``FakeServer.relaunch``); see ``Behaviour`` and
``FakeState`` for their bodies.

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
  ``len(ids)``; a chat with ``input_ids`` counts ``len(input_ids)`` and renders no template
  (SGLang 0.5.23's ``serving_chat``: the engine runs exactly those ids), with or without a
  tokenizer. A tokenizer without a chat template falls back to the simple chat count below.
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
  are not modelled, except ``sglext.spec_tokens_details`` for ``return_spec_tokens_details:
  true`` on a speculative fake (the body's member; in a stream its own chunk before the usage
  chunk), whose ``spec_accept_length`` is the configured one, or the request's own
  ``fake_accept_length`` body field (a test-only hint, as ``fake_step``: the pacing wrapper
  ``loadtests.simulate.PacedApp`` sets it to the tau it paces the request by).
- A client disconnect stops the fake's generation at once (``FakeConfig.on_disconnect =
  "abort"``, after ``disconnect_abort_delay_s``); SGLang aborts a streamed request 2 s after the
  disconnect (``create_abort_task``) and sometimes not at all (sglang#37833): set
  ``on_disconnect="ignore"`` to model that (only ``/abort_request`` or the token limit ends it).

State: everything lives on the ``FakeState`` built by ``create_fake_app`` (``app.state.fake``);
there is no module-level mutable state, so several fakes can run in one process.

Layout (``serving/fake_sglang/``; every handler is a module function taking the ``FakeState``):
- ``config.py`` ``FakeConfig``; ``behaviour.py`` ``Behaviour`` (what ``/_fake/script`` takes);
  ``state.py`` ``FakeState`` (in-flight samples, admission queue, access log, counters);
- ``protocol.py`` request parsing and the length checks; ``tokens.py`` prompt counts;
  ``errors.py`` SGLang's error bodies;
- ``engine.py`` admission, prefill and decode steps (the speed model); ``stepping.py`` the
  step-engine seam (``create_fake_app(config, step_engine=...)``: one batched loop per server
  runs a step model, e.g. the day simulator's engine, ``loadtests/dayhttp.py``, and the gauges,
  usage and spec details are its numbers; the ``fake_step`` body hint gives a request's natural
  output length); ``prefix_cache.py`` the radix-like cache; ``render.py`` SSE framing and JSON bodies; ``serve.py`` one job on the wire;
  ``faults.py`` scripted answers and socket faults;
- ``endpoints.py`` the other SGLang endpoints; ``metrics.py`` ``/metrics``; ``embeddings.py``;
  ``admin.py`` the control API;
- ``app.py`` ``create_fake_app`` (the routes); ``server.py`` ``FakeServer``,
  ``run_fake_server``; ``cli.py`` and ``__main__.py`` the command line.
"""

from serving.fake_sglang.app import create_fake_app
from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.cli import main
from serving.fake_sglang.config import FakeConfig
from serving.fake_sglang.endpoints import SGLANG_VERSION
from serving.fake_sglang.errors import overlength_body, sglang_error_body
from serving.fake_sglang.server import FakeServer, run_fake_server
from serving.fake_sglang.state import FakeState
from serving.fake_sglang.tokens import simple_chat_tokens, simple_text_tokens

__all__ = [
    "SGLANG_VERSION",
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
