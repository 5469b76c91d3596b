"""``Behaviour``: one scripted behaviour (fault injection) posted to ``/_fake/script``.

What each fault does on the wire is carried out by :mod:`serving.fake_sglang.faults` and
:mod:`serving.fake_sglang.serve`; this module only holds the validated description.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["FAULTS", "GEN_PATHS", "SOFT_FAULTS", "Behaviour"]

#: The generation paths a behaviour may be limited to.
GEN_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")
FAULTS = (
    "reset", "close", "hang", "truncate", "omit_done", "raw_text",
    "close_after_response", "queue_full", "abort",
)
#: Faults that let the response run its normal course (not fired at ``after_chunks``).
SOFT_FAULTS = ("omit_done", "close_after_response", "abort")


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
        if b.fault is not None and b.fault not in FAULTS:
            raise ValueError(f"fault must be one of {list(FAULTS)}")
        if b.after_chunks is not None and (
            not isinstance(b.after_chunks, int) or b.after_chunks < 0
        ):
            raise ValueError("after_chunks must be an integer >= 0 or null")
        if b.delay_s < 0 or (b.chunk_delay_s is not None and b.chunk_delay_s < 0):
            raise ValueError("delays must be >= 0")
        if b.path is not None and b.path not in GEN_PATHS:
            raise ValueError(f"path must be one of {list(GEN_PATHS)}")
        if b.sse_events is not None and not all(isinstance(e, str) for e in b.sse_events):
            raise ValueError("sse_events must be a list of strings")
        if b.max_tokens is not None and (not isinstance(b.max_tokens, int) or b.max_tokens < 0):
            raise ValueError("max_tokens must be an integer >= 0")
        return b
