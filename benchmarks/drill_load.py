"""The drills' client side: seeded chat-completion load through the router, every answer judged.

Used by ``benchmarks/drills.py`` (docs/reliability.md). A client sends, one after the other,
chat completions drawn from a seeded mix (streamed or not, greedy ``temperature: 0`` or
sampled ``temperature: 0.8`` with a ``seed``, ``max_tokens`` in a range); in a disconnect storm
some of them are closed by the client before the response headers (mid-prefill) or after a
few SSE events (mid-stream). A refused connection (the router is restarting) is retried every
0.1 s for up to ``refused_retry_s`` seconds and counted; nothing else is retried.

Each answer is judged against what the fake SGLang engine must produce: ``max_tokens = M``
gives the content ``"tok0 tok1 ... tok{M-1}"`` with ``finish_reason: "length"``
(``serving/fake_sglang/``). Verdicts (:data:`VERDICTS`):

- ``completed``: HTTP 200 with exactly that content and finish reason; a stream also ends
  with ``data: [DONE]`` and has no error event.
- ``clean_error``: a non-200 status whose body is an OpenAI error object
  (``{"error": {"message", "type", "param", "code"}}``), or a 200 stream with a
  ``data: {"error": ...}`` event (the code is tallied).
- ``fabricated``: a 200 whose content was cut or altered without an error: a stream that
  ends (cleanly, at the HTTP level) without finish reason or ``[DONE]`` and without an error
  event, a stream or body whose content differs from the expected one, a non-stream body
  that is not valid JSON.
- ``bad_error``: a non-200 status whose body is not an OpenAI error object.
- ``transport_before`` / ``transport_mid``: the connection failed with no response (reset,
  closed before the status line, refused past the retry window), or broke inside the body
  (an unterminated chunked body: the client *sees* that the answer is cut, unlike a
  fabricated one).
- ``hung``: no byte for ``read_timeout_s`` seconds.
- ``client_closed``: the client itself closed it (the storm's intended disconnects).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

__all__ = ["VERDICTS", "LoadPlan", "Tally", "expected_content", "run_load"]

VERDICTS = ("completed", "clean_error", "fabricated", "bad_error", "transport_before", "transport_mid",
            "hung", "client_closed")
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def expected_content(max_tokens: int) -> str:
    """The fake engine's output for ``max_tokens`` tokens."""
    return " ".join(f"tok{i}" for i in range(max_tokens))


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """The load of one drill.

    Attributes:
        clients: concurrent clients (each sends one request at a time).
        seed: seeds every client's draws (client ``i`` uses ``seed * 1000 + i``).
        max_tokens: inclusive range of ``max_tokens`` per request (tokens).
        stream_fraction: share of streamed requests.
        prefill_close_fraction, stream_close_fraction: shares of requests the client closes
            before the headers (after 0.02-0.2 s) or after 1-4 SSE events (streams only).
        refused_retry_s: how long a refused connection is retried (s).
        read_timeout_s: a request with no byte for this long is ``hung`` (s).
        drop_at_stop: at the stop, every client closes its request in flight (``client_closed``)
            instead of finishing it.
    """

    clients: int = 4
    seed: int = 0
    max_tokens: tuple[int, int] = (8, 40)
    stream_fraction: float = 0.5
    prefill_close_fraction: float = 0.0
    stream_close_fraction: float = 0.0
    refused_retry_s: float = 60.0
    read_timeout_s: float = 20.0
    drop_at_stop: bool = False


@dataclass
class Tally:
    """Counts of one drill's load: ``verdicts`` (every :data:`VERDICTS` key), ``error_codes``
    (the ``error.code`` of clean errors, or ``http_<status>`` when null), ``transport`` (the
    exception class and message of transport failures), ``refused_retries``, ``sent``."""

    sent: int = 0
    refused_retries: int = 0
    verdicts: Counter[str] = field(default_factory=lambda: Counter({v: 0 for v in VERDICTS}))
    error_codes: Counter[str] = field(default_factory=Counter)
    transport: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "refused_retries": self.refused_retries, **dict(self.verdicts),
                "error_codes": dict(sorted(self.error_codes.items())),
                "transport_kinds": dict(sorted(self.transport.items()))}


def _error_code(err: Any, status: int) -> str | None:
    """The code of an OpenAI error object, or None when ``err`` is not one."""
    if not isinstance(err, dict) or not {"message", "type", "param", "code"} <= set(err):
        return None
    return str(err["code"]) if err["code"] is not None else f"http_{status}"


def _judge_body(status: int, raw: bytes, max_tokens: int, tally: Tally) -> str:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "fabricated" if status == 200 else "bad_error"
    if status != 200:
        code = _error_code(doc.get("error") if isinstance(doc, dict) else None, status)
        if code is None:
            return "bad_error"
        tally.error_codes[code] += 1
        return "clean_error"
    try:
        choice = doc["choices"][0]
        ok = choice["message"]["content"] == expected_content(max_tokens) and choice["finish_reason"] == "length"
    except (KeyError, IndexError, TypeError):
        ok = False
    return "completed" if ok else "fabricated"


class _Stream:
    """What one SSE stream said so far."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.finish: str | None = None
        self.done = False
        self.error: str | None = None
        self.events = 0

    def feed(self, line: bytes, status: int) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        self.events += 1
        if data == b"[DONE]":
            self.done = True
            return
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(doc, dict) and "error" in doc:
            self.error = _error_code(doc["error"], status) or "malformed_error_event"
            return
        for choice in doc.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                self.content.append(piece)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def verdict(self, max_tokens: int, tally: Tally) -> str:
        if self.error is not None:
            tally.error_codes[self.error] += 1
            return "clean_error"
        if self.done and self.finish == "length" and "".join(self.content) == expected_content(max_tokens):
            return "completed"
        return "fabricated"


async def _one(session: aiohttp.ClientSession, base: str, body: dict[str, Any], close: tuple[str, float] | None,
               plan: LoadPlan, tally: Tally) -> str:
    stream = bool(body.get("stream"))
    max_tokens = int(body["max_tokens"])
    retry_until = time.monotonic() + plan.refused_retry_s
    while True:
        started = False  # the status line arrived
        try:
            if close is not None and close[0] == "prefill":
                req = session.post(base + "/v1/chat/completions", json=body)
                try:
                    async with asyncio.timeout(close[1]):
                        async with req as r:
                            if stream:  # the headers came before the close: close now
                                r.close()
                                return "client_closed"
                            return _judge_body(r.status, await r.read(), max_tokens, tally)
                except TimeoutError:
                    return "client_closed"
            async with session.post(base + "/v1/chat/completions", json=body) as r:
                started = True
                if not stream or r.status != 200:
                    return _judge_body(r.status, await r.read(), max_tokens, tally)
                s = _Stream()
                async for line in r.content:
                    s.feed(line, r.status)
                    if close is not None and s.events >= close[1]:
                        r.close()
                        return "client_closed"
                return s.verdict(max_tokens, tally)
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ConnectionRefusedError) and time.monotonic() < retry_until:
                tally.refused_retries += 1
                await asyncio.sleep(0.1)
                continue
            tally.transport[_kind(exc)] += 1
            return "transport_before"
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return "hung"
        except aiohttp.ClientError as exc:
            tally.transport[_kind(exc)] += 1
            return "transport_mid" if started else "transport_before"


def _kind(exc: BaseException) -> str:
    """``ClassName: message`` of a transport failure (the message cut at 80 characters)."""
    return f"{type(exc).__name__}: {str(exc)[:80]}"


def _draw(rng: random.Random, plan: LoadPlan) -> tuple[dict[str, Any], tuple[str, float] | None]:
    stream = rng.random() < plan.stream_fraction
    body: dict[str, Any] = {
        "model": "tiny-llama", "stream": stream, "max_tokens": rng.randint(*plan.max_tokens),
        "messages": [{"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))}]}
    if rng.random() < 0.5:
        body["temperature"] = 0.0
    else:
        body.update(temperature=0.8, seed=rng.randint(0, 2**31 - 1))
    close: tuple[str, float] | None = None
    u = rng.random()
    if u < plan.prefill_close_fraction:
        close = ("prefill", rng.uniform(0.02, 0.2))
    elif stream and u < plan.prefill_close_fraction + plan.stream_close_fraction:
        close = ("stream", float(rng.randint(1, 4)))
    return body, close


async def run_load(base: str, plan: LoadPlan, stop: asyncio.Event) -> Tally:
    """Run ``plan.clients`` clients against ``base`` until ``stop`` is set, then let each
    finish its request in flight; returns the tally."""
    tally = Tally()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=plan.read_timeout_s)

    async def client(i: int, session: aiohttp.ClientSession) -> None:
        rng = random.Random(plan.seed * 1000 + i)
        while not stop.is_set():
            body, close = _draw(rng, plan)
            tally.sent += 1
            tally.verdicts[await _one(session, base, body, close, plan, tally)] += 1

    async def dropping(i: int, session: aiohttp.ClientSession) -> None:
        try:
            await client(i, session)
        except asyncio.CancelledError:
            tally.verdicts["client_closed"] += 1

    async with aiohttp.ClientSession(timeout=timeout) as session:
        tasks = [asyncio.create_task(dropping(i, session)) for i in range(plan.clients)]
        if plan.drop_at_stop:
            await stop.wait()
            for t in tasks:
                t.cancel()
        await asyncio.gather(*tasks)
    return tally
