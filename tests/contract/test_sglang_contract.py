"""SGLang 0.5.23's HTTP contract, checked on every backend (the fake and the real server).

What a router relies on: response shapes, SSE framing (``data: ...\\n\\n`` events, role chunk
first, finish chunk, optional usage chunk, ``[DONE]`` last), usage arithmetic, ``n``,
``max_completion_tokens`` precedence, ``rid`` as the response id, ``/abort_request``,
``/metrics`` gauge names, ``/server_info`` shape, ``/v1/models``, and the over-length errors
(status, flat body, exact wording, no SSE). Requests use ``ignore_eos`` and ``temperature 0``
so the real model's output length and text are deterministic.

When the real server disagrees with an expectation here, the expectation was read from
SGLang's source: fix the fake (and this file's expectation) to what the real server does.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import httpx
import pytest

from tests.support.backend import Backend
from tests.support.sse import split_sse, sse_events, words

GAUGES = (
    "num_running_reqs",
    "num_queue_reqs",
    "token_usage",
    "spec_accept_length",
    "spec_accept_rate",
)


def _msgs(text: str = "Say something.") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _chat(backend: Backend, **body: Any) -> dict[str, Any]:
    return {"model": backend.model, "temperature": 0, "ignore_eos": True, **body}


def _messages_of_at_least(backend: Backend, tokens: int) -> tuple[list[dict[str, Any]], int]:
    """A one-message chat whose prompt has at least ``tokens`` tokens; returns (messages, P)."""
    n = max(1, tokens)
    while True:
        msgs = _msgs(words(n))
        p = backend.chat_tokens(msgs)
        if p >= tokens:
            return msgs, p
        n += max(1, (tokens - p) // 2 + 1)


def _messages_of_exactly(backend: Backend, tokens: int) -> tuple[list[dict[str, Any]], int]:
    """A one-message chat of exactly ``tokens`` prompt tokens ("a a a ..." adds 1 per word on
    both backends); ``pytest.skip`` if the tokenizer cannot hit it."""
    n = 1
    while (p := backend.chat_tokens(_msgs(words(n, "a")))) < tokens:
        n += max(1, tokens - p)
    if p != tokens:
        pytest.skip(f"cannot build a prompt of exactly {tokens} tokens")
    return _msgs(words(n, "a")), p


def _error_body(backend: Backend, message: str) -> dict[str, Any]:
    return {
        "object": "error",
        "message": message,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }


# --------------------------------------------------------------------------------------------
# discovery endpoints
# --------------------------------------------------------------------------------------------


def test_models_lists_the_served_model(backend: Backend) -> None:
    with backend.client() as c:
        r = c.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    card = body["data"][0]
    assert card["id"] == backend.model
    assert card["object"] == "model"
    assert card["owned_by"] == "sglang"
    assert card["root"] == backend.model
    assert card["max_model_len"] == backend.context_length


def test_health_answers_200(backend: Backend) -> None:
    with backend.client() as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health_generate").status_code == 200


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_server_info_shape(backend: Backend, path: str) -> None:
    with backend.client() as c:
        r = c.get(path)
    assert r.status_code == 200
    info = r.json()
    assert isinstance(info["internal_states"], list) and info["internal_states"]
    assert all(isinstance(s, dict) for s in info["internal_states"])
    assert info["version"] == "0.5.23"
    assert info["served_model_name"] == backend.model
    assert isinstance(info["max_total_num_tokens"], int)
    state0 = info["internal_states"][0]
    if "avg_spec_accept_length" in state0:
        assert isinstance(state0["avg_spec_accept_length"], float)


def test_model_info_shape(backend: Backend) -> None:
    with backend.client() as c:
        r = c.get("/model_info")
    assert r.status_code == 200
    info = r.json()
    assert info["is_generation"] is True
    assert info["served_model_name"] == backend.model
    assert "model_path" in info and "weight_version" in info


def test_metrics_has_the_router_gauges(backend: Backend) -> None:
    with backend.client() as c:
        # A request long enough for SGLang to log its stats at least once (every 40 steps).
        r = c.post("/v1/chat/completions", json=_chat(backend, messages=_msgs(), max_tokens=48))
        assert r.status_code == 200
        m = c.get("/metrics")
    assert m.status_code == 200
    assert m.headers["content-type"].startswith("text/plain")
    for g in GAUGES:
        lines = [ln for ln in m.text.splitlines() if ln.startswith(f"sglang:{g}{{")]
        assert lines, f"sglang:{g} missing"
        assert f'model_name="{backend.model}"' in lines[0]
        assert 'engine_type="unified"' in lines[0] and 'tp_rank="0"' in lines[0]
        float(lines[0].rsplit(" ", 1)[1])
        assert f"# TYPE sglang:{g} gauge" in m.text


# --------------------------------------------------------------------------------------------
# chat completions
# --------------------------------------------------------------------------------------------


def test_chat_non_streaming_shape_and_usage(backend: Backend) -> None:
    msgs = _msgs("Tell me about the sea.")
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=_chat(backend, messages=msgs, max_tokens=8))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert isinstance(body["id"], str) and body["id"]
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == backend.model
    assert len(body["choices"]) == 1
    ch = body["choices"][0]
    assert ch["index"] == 0
    assert ch["message"]["role"] == "assistant"
    assert isinstance(ch["message"]["content"], str)
    assert ch["finish_reason"] == "length"
    assert "matched_stop" in ch and ch["matched_stop"] is None
    u = body["usage"]
    assert u["prompt_tokens"] == backend.chat_tokens(msgs)
    assert u["completion_tokens"] == 8
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert body["metadata"] == {
        "weight_version": "default",
        "weight_versions": [{"version": "default", "start": 0, "end": 8}],
    }


def test_chat_input_ids_replace_the_rendered_messages(backend: Backend) -> None:
    """SGLang 0.5.23's chat ``input_ids`` (sgl-project/sglang#23751): the engine runs exactly
    those ids, so ``usage.prompt_tokens`` is their count, whatever ``messages`` say; and its own
    length check counts the ids."""
    ids = [10 + i % 50 for i in range(40)]
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=_chat(backend, messages=_msgs("hi"), max_tokens=4, input_ids=ids))
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == 40
        over = [10] * backend.context_length
        r = c.post("/v1/chat/completions", json=_chat(backend, messages=_msgs("hi"), max_tokens=4, input_ids=over))
    assert r.status_code == 400
    assert "longer than the model's context length" in r.json()["message"]


def test_chat_rid_becomes_response_id(backend: Backend) -> None:
    rid = f"contract-{uuid.uuid4().hex}"
    with backend.client() as c:
        r = c.post(
            "/v1/chat/completions", json=_chat(backend, messages=_msgs(), max_tokens=2, rid=rid)
        )
        assert r.json()["id"] == rid
        s = c.post(
            "/v1/chat/completions",
            json=_chat(backend, messages=_msgs(), max_tokens=2, rid=rid + "-s", stream=True),
        )
    chunks, done = sse_events(s.content)
    assert done and {ch["id"] for ch in chunks} == {rid + "-s"}


def test_chat_streaming_framing(backend: Backend) -> None:
    msgs = _msgs("Count with me.")
    with backend.client() as c:
        plain = c.post("/v1/chat/completions", json=_chat(backend, messages=msgs, max_tokens=6))
        r = c.post(
            "/v1/chat/completions", json=_chat(backend, messages=msgs, max_tokens=6, stream=True)
        )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    payloads = split_sse(r.content)
    assert payloads[-1] == "[DONE]" and payloads.count("[DONE]") == 1
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    assert len({ch["id"] for ch in chunks}) == 1
    first = chunks[0]["choices"][0]
    assert first["delta"]["role"] == "assistant" and first["delta"]["content"] == ""
    assert first["finish_reason"] is None
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "length" and last["index"] == 0
    assert "content" not in last["delta"] or not last["delta"]["content"]
    middle = chunks[1:-1]
    assert all(m["choices"][0]["finish_reason"] is None for m in middle)
    assert all("role" not in m["choices"][0]["delta"] for m in middle)
    text = "".join(m["choices"][0]["delta"].get("content") or "" for m in middle)
    assert text == plain.json()["choices"][0]["message"]["content"]
    assert 1 <= len(middle) <= 6
    assert all("usage" not in ch for ch in chunks)


def test_chat_streaming_usage_chunk(backend: Backend) -> None:
    msgs = _msgs("Usage please.")
    body = _chat(
        backend, messages=msgs, max_tokens=5, stream=True, stream_options={"include_usage": True}
    )
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=body)
    chunks, done = sse_events(r.content)
    assert done
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    u = usage_chunk["usage"]
    assert u["prompt_tokens"] == backend.chat_tokens(msgs)
    assert u["completion_tokens"] == 5
    assert u["total_tokens"] == u["prompt_tokens"] + 5
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_chat_n_choices(backend: Backend) -> None:
    msgs = _msgs("Name a color.")
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=_chat(backend, messages=msgs, max_tokens=4, n=2))
        s = c.post(
            "/v1/chat/completions",
            json=_chat(
                backend,
                messages=msgs,
                max_tokens=4,
                n=2,
                stream=True,
                stream_options={"include_usage": True},
            ),
        )
    body = r.json()
    assert [ch["index"] for ch in body["choices"]] == [0, 1]
    assert all(ch["finish_reason"] == "length" for ch in body["choices"])
    p = backend.chat_tokens(msgs)
    assert body["usage"] == {
        **body["usage"],
        "prompt_tokens": p,
        "completion_tokens": 8,
        "total_tokens": p + 8,
    }
    chunks, done = sse_events(s.content)
    assert done
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8
    assert chunks[-1]["usage"]["prompt_tokens"] == p
    seen_role: set[int] = set()
    finishes: dict[int, str] = {}
    for ch in chunks[:-1]:
        (choice,) = ch["choices"]
        i = choice["index"]
        if choice["delta"].get("role") == "assistant":
            assert i not in seen_role
            seen_role.add(i)
        elif choice["finish_reason"] is not None:
            finishes[i] = choice["finish_reason"]
        else:
            assert i in seen_role, "content before the role chunk of its index"
            assert i not in finishes, "content after the finish chunk of its index"
    assert seen_role == {0, 1}
    assert finishes == {0: "length", 1: "length"}


@pytest.mark.parametrize(
    ("max_tokens", "max_completion_tokens", "expected"),
    [(12, 4, 4), (4, 12, 12), (None, 3, 3), (5, None, 5)],
)
def test_max_completion_tokens_wins(
    backend: Backend, max_tokens: int | None, max_completion_tokens: int | None, expected: int
) -> None:
    body = _chat(backend, messages=_msgs())
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if max_completion_tokens is not None:
        body["max_completion_tokens"] = max_completion_tokens
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    assert r.json()["usage"]["completion_tokens"] == expected


def test_chat_empty_messages_is_400(backend: Backend) -> None:
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=_chat(backend, messages=[], max_tokens=2))
    assert r.status_code == 400
    assert r.json() == _error_body(backend, "Messages cannot be empty.")


def test_invalid_json_is_400_flat(backend: Backend) -> None:
    with backend.client() as c:
        r = c.post(
            "/v1/chat/completions",
            content=b'{"model": "x", "messages": [',
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 400
    body = r.json()
    assert body["object"] == "error" and body["code"] == 400 and body["type"] == "Bad Request"


# --------------------------------------------------------------------------------------------
# completions
# --------------------------------------------------------------------------------------------


def test_completions_string_prompt(backend: Backend) -> None:
    prompt = "The capital of France is"
    with backend.client() as c:
        r = c.post("/v1/completions", json=_chat(backend, prompt=prompt, max_tokens=5))
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion"
    assert body["model"] == backend.model
    (ch,) = body["choices"]
    assert ch["index"] == 0 and isinstance(ch["text"], str)
    assert ch["finish_reason"] == "length" and ch["matched_stop"] is None
    assert body["usage"]["prompt_tokens"] == backend.text_tokens(prompt)
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 5


def test_completions_list_of_strings(backend: Backend) -> None:
    prompts = ["one two three", "four five"]
    with backend.client() as c:
        r = c.post("/v1/completions", json=_chat(backend, prompt=prompts, max_tokens=3))
    body = r.json()
    assert [ch["index"] for ch in body["choices"]] == [0, 1]
    assert body["usage"]["prompt_tokens"] == sum(backend.text_tokens(p) for p in prompts)
    assert body["usage"]["completion_tokens"] == 6


def test_completions_token_ids(backend: Backend) -> None:
    ids = [5, 6, 7, 8, 9, 10, 11]
    with backend.client() as c:
        r = c.post("/v1/completions", json=_chat(backend, prompt=ids, max_tokens=2))
    assert r.status_code == 200
    body = r.json()
    assert body["usage"]["prompt_tokens"] == len(ids)
    assert body["usage"]["completion_tokens"] == 2


def test_completions_default_max_tokens_is_16(backend: Backend) -> None:
    with backend.client() as c:
        r = c.post("/v1/completions", json=_chat(backend, prompt="Once upon a time"))
    assert r.json()["usage"]["completion_tokens"] == 16


def test_completions_streaming(backend: Backend) -> None:
    with backend.client() as c:
        r = c.post(
            "/v1/completions",
            json=_chat(
                backend,
                prompt="Hello there",
                max_tokens=4,
                stream=True,
                stream_options={"include_usage": True},
            ),
        )
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks, done = sse_events(r.content)
    assert done
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["object"] == "text_completion"
    assert "prompt_tokens_details" not in usage["usage"]  # exclude_none on this chunk only
    assert usage["usage"]["completion_tokens"] == 4
    body = chunks[:-1]
    assert all(ch["object"] == "text_completion" for ch in body)
    assert all(ch["usage"] is None for ch in body)
    assert body[-1]["choices"][0]["finish_reason"] == "length"
    assert all(ch["choices"][0]["finish_reason"] is None for ch in body[:-1])


def test_generate_native_minimal(backend: Backend) -> None:
    with backend.client() as c:
        r = c.post(
            "/generate",
            json={
                "text": "Hello",
                "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True},
            },
        )
    assert r.status_code == 200
    out = r.json()
    assert isinstance(out["text"], str)
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 4
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert isinstance(meta["id"], str)


# --------------------------------------------------------------------------------------------
# over-length and boundaries (SGLang 0.5.23 TokenizerManager._validate_one_request)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_chat_input_longer_than_context_is_400_before_sse(backend: Backend, stream: bool) -> None:
    c_len = backend.context_length
    msgs, p = _messages_of_at_least(backend, c_len + 3)
    with backend.client() as c:
        r = c.post(
            "/v1/chat/completions", json=_chat(backend, messages=msgs, max_tokens=4, stream=stream)
        )
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    n = p + backend.reserved_tokens
    assert r.json() == _error_body(
        backend,
        f"The input ({n} tokens) is longer than the model's context length ({c_len} tokens).",
    )


@pytest.mark.parametrize("stream", [False, True])
def test_chat_prompt_plus_max_tokens_over_context_is_400(backend: Backend, stream: bool) -> None:
    c_len = backend.context_length
    msgs, p = _messages_of_at_least(backend, 20)
    n = p + backend.reserved_tokens
    max_tokens = c_len - n + 1
    with backend.client() as c:
        r = c.post(
            "/v1/chat/completions",
            json=_chat(backend, messages=msgs, max_tokens=max_tokens, stream=stream),
        )
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json() == _error_body(
        backend,
        f"Requested token count exceeds the model's maximum context length of {c_len} tokens. "
        f"You requested a total of {n + max_tokens} tokens: {n} tokens from the input messages "
        f"and {max_tokens} tokens for the completion. Please reduce the number of tokens in the "
        f"input messages or the completion to fit within the limit.",
    )


def test_chat_max_tokens_above_context_is_400(backend: Backend) -> None:
    c_len = backend.context_length
    with backend.client() as c:
        r = c.post(
            "/v1/chat/completions", json=_chat(backend, messages=_msgs(), max_tokens=c_len + 1)
        )
    assert r.status_code == 400
    assert r.json() == _error_body(
        backend,
        f"max_completion_tokens is too large: {c_len + 1}."
        f"This model supports at most {c_len} completion tokens.",
    )


def test_prompt_plus_max_tokens_equal_to_context_is_clipped_by_two(backend: Backend) -> None:
    """Equality passes the check, then the scheduler clips to max_req_len - P - 1 (sglang#33814)."""
    c_len = backend.context_length
    with backend.client() as c:
        limit = c.get("/server_info").json()["max_req_input_len"]
        msgs, p = _messages_of_exactly(backend, limit - 12)  # a long prompt: a short answer
        max_tokens = c_len - p - backend.reserved_tokens
        r = c.post(
            "/v1/chat/completions", json=_chat(backend, messages=msgs, max_tokens=max_tokens)
        )
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == min(max_tokens, c_len - p - 2)


def test_completions_prompt_longer_than_context_is_400(backend: Backend) -> None:
    c_len = backend.context_length
    n = c_len + 5
    prompt = words(n)
    while backend.text_tokens(prompt) < c_len + 1:
        n += 50
        prompt = words(n)
    p = backend.text_tokens(prompt)
    with backend.client() as c:
        r = c.post("/v1/completions", json=_chat(backend, prompt=prompt, max_tokens=1, stream=True))
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["message"] == (
        f"The input ({p + backend.reserved_tokens} tokens) is longer than the model's context "
        f"length ({c_len} tokens)."
    )


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_over_scheduler_input_limit(backend: Backend, stream: bool) -> None:
    """P >= max_req_input_len passes the tokenizer checks but the scheduler aborts it: a 400
    when not streamed, an in-stream error event after HTTP 200 when streamed."""
    c_len = backend.context_length
    with backend.client() as c:
        limit = c.get("/server_info").json()["max_req_input_len"]
        msgs, p = _messages_of_exactly(backend, limit + 1)
        max_tokens = c_len - p - backend.reserved_tokens
        assert max_tokens >= 1
        body = _chat(
            backend,
            messages=msgs,
            max_tokens=max_tokens,
            stream=stream,
            stream_options={"include_usage": True} if stream else None,
        )
        r = c.post("/v1/chat/completions", json=body)
    message = (
        f"Input length ({p} tokens) exceeds the maximum allowed length ({limit} tokens). "
        f"Use a shorter input or enable --allow-auto-truncate."
    )
    if not stream:
        assert r.status_code == 400
        assert r.json() == _error_body(backend, message)
        return
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    payloads = split_sse(r.content)
    assert payloads[0] == json.dumps(
        {
            "error": {
                "object": "error",
                "message": message,
                "type": "BAD_REQUEST",
                "param": None,
                "code": 400,
            }
        }
    )
    usage = json.loads(payloads[1])
    assert usage["choices"] == []
    assert (usage["usage"]["prompt_tokens"], usage["usage"]["completion_tokens"]) == (1, 1)
    assert payloads[2:] == ["[DONE]"]


def test_n_zero_and_odd_roles(backend: Backend) -> None:
    with backend.client() as c:
        r = c.post("/v1/chat/completions", json=_chat(backend, messages=_msgs(), max_tokens=2, n=0))
        assert r.status_code == 400
        assert r.json() == {
            "object": "error",
            "message": "range() arg 3 must not be zero",
            "type": "BadRequest",
            "param": None,
            "code": 400,
        }
        r = c.post(
            "/v1/chat/completions",
            json=_chat(backend, messages=[{"role": "root", "content": "x"}], max_tokens=2),
        )
        assert r.status_code == 400
        assert r.json()["message"] == "unsupported chat role: root"
        for messages in ([{"role": "wizard", "content": "x"}], [None], "hi"):
            r = c.post("/v1/chat/completions", json=_chat(backend, messages=messages, max_tokens=2))
            assert r.status_code == 400
            assert (r.json()["object"], r.json()["type"]) == ("error", "Bad Request")


def test_metrics_counters_carry_is_streaming(backend: Backend) -> None:
    with backend.client() as c:
        c.post("/v1/chat/completions", json=_chat(backend, messages=_msgs(), max_tokens=2))
        text = c.get("/metrics").text
    assert "# TYPE sglang:num_requests_total counter" in text
    line = next(
        ln
        for ln in text.splitlines()
        if ln.startswith("sglang:num_requests_total{") and 'is_streaming="false"' in ln
    )
    assert f'model_name="{backend.model}"' in line and float(line.rsplit(" ", 1)[1]) >= 1


# --------------------------------------------------------------------------------------------
# abort
# --------------------------------------------------------------------------------------------


def test_abort_request_answers_200_for_unknown_rid(backend: Backend) -> None:
    with backend.client() as c:
        r = c.post("/abort_request", json={"rid": f"nobody-{uuid.uuid4().hex}"})
        assert (r.status_code, r.content) == (200, b"")
        assert c.post("/abort_request", json={}).status_code == 200
        r = c.post(
            "/abort_request", content=b"garbage", headers={"content-type": "application/json"}
        )
        assert r.status_code == 400


def _stream_then_abort(backend: Backend, path: str, body: dict[str, Any], rids: list[str],
                       after_events: int) -> bytes:
    """Stream ``body`` to ``path``; once ``after_events`` events arrived, ``POST /abort_request``
    each of ``rids`` (each answered 200); returns the whole raw stream."""
    raw = b""
    with (
        backend.client() as c,
        httpx.Client(base_url=backend.base_url, timeout=30) as ctl,
        c.stream("POST", path, json=body) as r,
    ):
        assert r.status_code == 200
        aborted = False
        for piece in r.iter_raw():
            raw += piece
            if not aborted and raw.count(b"data: ") >= after_events:
                for rid in rids:
                    assert ctl.post("/abort_request", json={"rid": rid}).status_code == 200
                aborted = True
    return raw


def test_abort_request_names_each_prompt_of_a_batch(backend: Backend) -> None:
    """A batch of prompts with a string ``rid`` runs as ``<rid>_0``, ``<rid>_1``, ...
    (``_normalize_rid``); aborting those ids ends every prompt's generation (what the router
    sends when a batch's client disconnects)."""
    rid = f"batch-{uuid.uuid4().hex}"
    max_tokens = min(1000, backend.context_length - 16)
    body = _chat(backend, prompt=["Once upon a time", "In a land far away"], max_tokens=max_tokens,
                 stream=True, rid=rid)
    raw = _stream_then_abort(backend, "/v1/completions", body, [f"{rid}_0", f"{rid}_1"], after_events=6)
    chunks, done = sse_events(raw)
    assert done
    finish = {ch["index"]: ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]}
    assert finish == {0: "abort", 1: "abort"}
    produced = sum(1 for c in chunks for ch in c["choices"] if ch.get("text"))
    assert produced < 2 * max_tokens


def test_abort_request_ends_a_long_stream(backend: Backend) -> None:
    rid = f"abort-{uuid.uuid4().hex}"
    msgs = _msgs("Write a very long story.")
    max_tokens = min(1000, backend.context_length - backend.chat_tokens(msgs) - 8)
    body = _chat(
        backend,
        messages=msgs,
        max_tokens=max_tokens,
        stream=True,
        rid=rid,
        stream_options={"include_usage": True},
    )
    raw = _stream_then_abort(backend, "/v1/chat/completions", body, [rid], after_events=4)
    chunks, done = sse_events(raw)
    assert done
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] < max_tokens
    assert chunks[-2]["choices"][0]["finish_reason"] == "abort"
    assert chunks[-2]["id"] == rid
    assert re.fullmatch(r"abort-[0-9a-f]{32}", chunks[-2]["id"])
