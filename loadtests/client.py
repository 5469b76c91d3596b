"""Send one chat request to an OpenAI-compatible endpoint and time it.

One ``aiohttp`` POST to ``{base_url}/v1/chat/completions`` per request (``aiohttp`` rather
than the ``openai`` client so that the first byte, every SSE event and the router's
``x-specgate-pool``/``x-specgate-reason`` headers are timed and seen without a layer of
buffering in between). The SSE body is read line by line as it arrives.

Timings (seconds, ``time.perf_counter``), per request:

- ``ttft_s``: request sent -> first SSE event carrying output text (non-streamed: the whole
  response, so TTFT = end-to-end).
- ``itl_s``: gaps between consecutive events carrying output text (inter-token latency; an
  engine that streams several tokens per event, as speculative decoding may, shows fewer,
  longer gaps, so ``tpot_s`` is reported too).
- ``tpot_s``: ``(t_last - t_first) / (output_tokens - 1)``, time per output token after the
  first (needs >= 2 output tokens).
- ``e2e_s``: request sent -> end of the response.
- ``decode_tps``: ``(output_tokens - 1) / (t_last - t_first)``, the decode speed in tokens/s
  that the speedups in docs/loadtests.md compare; ``output_tps``: ``output_tokens / e2e_s``.

``output_tokens`` and ``prompt_tokens`` come from the response's ``usage`` (streams ask for it
with ``stream_options.include_usage``); without usage, output tokens = events with text.

Errors are classified, never raised: ``status`` is the HTTP status (0 when none arrived) and
``error`` one of ``http_<status>``, ``timeout``, ``connection``, ``incomplete_stream`` (the
stream ended without ``[DONE]``), ``stream_error`` (an error event or an unparsable event),
``cancelled`` (the load test's time limit), or None on success.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from loadtests.workload import RequestSpec

__all__ = ["RequestResult", "error_key", "send_request"]


@dataclass
class RequestResult:
    """The outcome and timings of one request (see the module docstring; seconds, tokens)."""

    target: str
    bucket: str
    load: float
    phase: str
    rep: int
    index: int
    task: str
    max_tokens: int
    prompt_tokens_target: int
    prompt_tokens_counted: int
    t_start: float = 0.0
    status: int = 0
    error: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    decode_tps: float | None = None
    output_tps: float | None = None
    itl_s: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    pool: str | None = None
    reason: str | None = None
    temperature: float | None = None
    accept_length: float | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed without error."""
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def error_key(r: RequestResult) -> str:
    """The key errors are counted by: the HTTP status for HTTP errors, else the error kind."""
    if r.error is None:
        return "ok"
    if r.error.startswith("http_"):
        return r.error[5:]
    return r.error


def _finish(r: RequestResult, t0: float, t_end: float, events: list[float], text_events: int) -> None:
    r.e2e_s = t_end - t0
    if r.output_tokens == 0:
        r.output_tokens = text_events
    if events:
        r.ttft_s = events[0] - t0
        r.itl_s = [b - a for a, b in itertools.pairwise(events)]
        if r.output_tokens >= 2 and events[-1] > events[0]:
            span = events[-1] - events[0]
            r.tpot_s = span / (r.output_tokens - 1)
            r.decode_tps = (r.output_tokens - 1) / span
    if r.e2e_s and r.e2e_s > 0:
        r.output_tps = r.output_tokens / r.e2e_s


def _accept_length(doc: Any) -> float | None:
    """``sglext.spec_tokens_details``'s accept length of a response or stream chunk (None without)."""
    from router import accept_length

    ext = doc.get("sglext") if isinstance(doc, dict) else None
    details = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
    return None if details is None else accept_length(json.dumps(details).encode())


async def send_request(
    session: aiohttp.ClientSession,
    base_url: str,
    spec: RequestSpec,
    result: RequestResult,
    *,
    model: str,
    stream: bool,
    ignore_eos: bool,
    temperature: float,
    timeout_s: float,
    clock_origin: float,
    headers: dict[str, str] | None = None,
    spec_details: bool = False,
) -> RequestResult:
    """Send ``spec`` to ``base_url``; fill and return ``result`` (never raises, except
    ``asyncio.CancelledError`` propagates after marking the result ``cancelled``).

    Args:
        session: the shared client session.
        base_url: ``http://host:port`` of the target (no path).
        spec: the request.
        result: pre-filled identity fields; timings and outcome are written into it.
        model: model name for the body.
        stream, ignore_eos, temperature: body options (see :class:`RequestSpec.body`).
        timeout_s: the whole request's limit (seconds).
        clock_origin: ``time.perf_counter()`` at the start of the run; ``t_start`` is relative.
        headers: extra request headers (the target's ``Authorization``).
        spec_details: ask a speculative engine for the request's own statistics
            (``return_spec_tokens_details``, SGLang 0.5.23); ``accept_length`` is then its
            ``sglext.spec_tokens_details.spec_accept_length`` (the mean over choices).
    """
    body = spec.body(model, stream=stream, ignore_eos=ignore_eos, temperature=temperature)
    result.temperature = temperature
    if spec_details:
        body["return_spec_tokens_details"] = True
    url = base_url.rstrip("/") + "/v1/chat/completions"
    t0 = time.perf_counter()
    result.t_start = t0 - clock_origin
    events: list[float] = []
    text_events = 0
    try:
        async with session.post(url, json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            result.status = resp.status
            result.pool = resp.headers.get("x-specgate-pool")
            result.reason = resp.headers.get("x-specgate-reason")
            if resp.status != 200:
                await resp.read()
                result.error = f"http_{resp.status}"
                _finish(result, t0, time.perf_counter(), [], 0)
                return result
            if not stream:
                data = await resp.json(content_type=None)
                t_end = time.perf_counter()
                usage = data.get("usage") or {}
                result.prompt_tokens = usage.get("prompt_tokens")
                result.output_tokens = int(usage.get("completion_tokens") or 0)
                result.accept_length = _accept_length(data) or result.accept_length
                choices = data.get("choices") or [{}]
                result.finish_reason = choices[0].get("finish_reason")
                _finish(result, t0, t_end, [t_end], 1)
                result.ttft_s = result.e2e_s
                return result
            done = False
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                now = time.perf_counter()
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    result.error = "stream_error"
                    continue
                if "error" in chunk or chunk.get("object") == "error":
                    result.error = "stream_error"
                    continue
                result.accept_length = _accept_length(chunk) or result.accept_length
                usage = chunk.get("usage")
                if usage:
                    result.prompt_tokens = usage.get("prompt_tokens")
                    result.output_tokens = int(usage.get("completion_tokens") or 0)
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content"):
                        events.append(now)
                        text_events += 1
                        break
                for choice in chunk.get("choices") or ():
                    if choice.get("finish_reason"):
                        result.finish_reason = choice["finish_reason"]
            t_end = time.perf_counter()
            if not done and result.error is None:
                result.error = "incomplete_stream"
            _finish(result, t0, t_end, events, text_events)
            return result
    except asyncio.CancelledError:
        result.error = "cancelled"
        _finish(result, t0, time.perf_counter(), events, text_events)
        raise
    except TimeoutError:
        result.error = "timeout"
    except aiohttp.ClientPayloadError:
        result.error = "incomplete_stream"
    except (aiohttp.ClientError, OSError):
        result.error = "connection"
    except ValueError:
        result.error = "stream_error"
    _finish(result, t0, time.perf_counter(), events, text_events)
    return result
