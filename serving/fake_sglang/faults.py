"""Scripted answers and transport faults of a ``Behaviour`` (``/_fake/script``).

``scripted_status``/``scripted_sse``/``queue_full`` answer instead of generating;
``apply_fault`` carries out "reset" (RST: ``SO_LINGER`` 0 then abort), "close" (FIN without
ending the chunked body), "hang", "truncate" and "raw_text" on a response in progress;
``close_after`` closes a keep-alive connection right after a complete response
(aio-libs/aiohttp#7297). The socket faults need uvicorn's request cycle, which the app keeps in
the ASGI scope under ``CYCLE_KEY``; ``CONN_KEY`` holds how many requests the connection served
before this one (for ``reused_only``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from typing import Any

from serving.fake_sglang.behaviour import Behaviour
from serving.fake_sglang.errors import default_error_type, dumps
from serving.fake_sglang.render import DONE, SSE_CT
from serving.fake_sglang.state import FakeState, Job

__all__ = [
    "CONN_KEY",
    "CYCLE_KEY",
    "QUEUE_FULL",
    "apply_fault",
    "close_after",
    "queue_full",
    "scripted_sse",
    "scripted_status",
]

CYCLE_KEY = "fake_sglang.cycle"
CONN_KEY = "fake_sglang.connection_requests"
QUEUE_FULL = "The request queue is full."


async def scripted_status(
    scope: Any, receive: Any, send: Any, entry: dict[str, Any], b: Behaviour
) -> None:
    """Answer ``b.status`` with ``b.body``/``body_text``/SGLang's error body."""
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


async def queue_full(send: Any, entry: dict[str, Any], stream: bool) -> None:
    """SGLang's "The request queue is full." answer (503, or 200 + an error event)."""
    entry["status"] = 200 if stream else 503
    entry["outcome"] = entry["fault"] = "queue_full"
    if stream:
        err = {"object": "error", "message": QUEUE_FULL, "type": "SERVICE_UNAVAILABLE",
               "param": None, "code": 503}
        payload = b"data: " + json.dumps({"error": err}).encode() + b"\n\n" + DONE
        headers = [(b"content-type", SSE_CT)]
    else:
        payload = dumps({"object": "error", "message": QUEUE_FULL, "type": "503",
                          "param": None, "code": 503})
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": entry["status"], "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def scripted_sse(
    scope: Any, receive: Any, send: Any, entry: dict[str, Any], b: Behaviour
) -> None:
    """Answer 200 SSE with exactly ``b.sse_events``, ``chunk_delay_s`` apart."""
    if b.delay_s:
        await asyncio.sleep(b.delay_s)
    entry["status"] = 200
    entry["outcome"] = "scripted_sse"
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", SSE_CT)]}
    )
    delay = b.chunk_delay_s or 0.0
    for i, ev in enumerate(b.sse_events or []):
        if i and delay:
            await asyncio.sleep(delay)
        await send({"type": "http.response.body", "body": ev.encode(), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def close_after(cycle: Any, job: Job) -> None:
    """Close the socket right after a complete keep-alive response (aiohttp#7297)."""
    transport = getattr(cycle, "transport", None)
    if transport is None:
        raise RuntimeError("close_after_response needs a real socket (serve with uvicorn)")
    job.fault_fired = True
    job.entry["fault"] = "close_after_response"
    transport.close()


async def apply_fault(
    state: FakeState, fault: str, cycle: Any, job: Job, b: Behaviour | None, send: Any = None
) -> None:
    """Carry out a hard fault ("hang", "truncate", "raw_text", "reset", "close").

    ``send`` (the raw ASGI send) is needed for "truncate" and "raw_text"; "reset" and "close"
    need ``cycle`` (uvicorn's, else ``RuntimeError``)."""
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
