"""Serving one generation job on the wire: headers, body, disconnects, faults, clean-up.

``serve_job`` is the raw ASGI answer of a parsed generation request. Streamed, the headers go
out with the first event (after prefill and the first token, as SGLang awaits the first chunk
before answering); not streamed, one JSON body once every choice finished. A client
disconnect aborts the job (``FakeConfig.on_disconnect``, ``disconnect_abort_delay_s``) and is
logged in ``FakeState.disconnects``; a behaviour's fault fires before the headers, or after
``after_chunks`` events (:mod:`serving.fake_sglang.faults`). Whatever happens, the job's samples
leave the running set exactly once and the access-log entry gets an ``outcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from serving.fake_sglang.behaviour import SOFT_FAULTS
from serving.fake_sglang.engine import steps
from serving.fake_sglang.errors import dumps
from serving.fake_sglang.faults import CYCLE_KEY, apply_fault, close_after
from serving.fake_sglang.render import (
    SSE_CT,
    chat_events,
    completion_events,
    final_body,
    generate_events,
)
from serving.fake_sglang.state import FakeState, Job

__all__ = ["serve_job"]


class _Reply:
    """The ASGI side of one job: sends the headers once and the body, watches for disconnect.

    ``headers_sent``: the response start went out; ``completed``: the last body part went out
    (a disconnect after it is not the client's).
    """

    def __init__(self, state: FakeState, job: Job, receive: Any, send: Any) -> None:
        self.state = state
        self.job = job
        self.receive = receive
        self.send = send
        self.headers_sent = False
        self.completed = False

    async def start(
        self, status: int, ct: bytes, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        """Send the response start (``close_after_response`` adds ``Connection: keep-alive``)."""
        self.headers_sent = True
        self.job.entry["status"] = status
        b = self.job.behaviour
        if b is not None and b.fault == "close_after_response":
            extra = [*(extra or []), (b"connection", b"keep-alive")]
        await self.send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", ct), *(extra or [])],
            }
        )

    async def body(self, data: bytes, more: bool) -> None:
        """Send a body part unless the client is gone."""
        if not more:
            self.completed = True
        if not self.job.client_gone:
            await self.send({"type": "http.response.body", "body": data, "more_body": more})

    def on_disconnect(self) -> None:
        """The client went: log it and abort the job (now, later, or not: ``on_disconnect``)."""
        job, state = self.job, self.state
        if self.completed or job.client_gone:
            return
        if job.fault_fired:
            job.client_gone = True
            return
        job.client_gone = True
        job.entry["client_disconnected"] = True
        state.disconnects.append(
            {
                "time": time.time(),
                "seq": job.seq,
                "rids": job.entry["rids"],
                "phase": "streaming" if self.headers_sent else "before_headers",
            }
        )
        if not job.ignore_disconnect:

            def do_abort() -> None:
                for s in job.samples:
                    if s.finish is None:
                        s.abort_requested = True
                state.wake(job)

            delay = state.launch_config.disconnect_abort_delay_s
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, do_abort)
            else:
                do_abort()

    async def watch(self) -> None:
        """Wait for ``http.disconnect`` (run as a task for the life of the response)."""
        while True:
            msg = await self.receive()
            if msg["type"] == "http.disconnect":
                self.on_disconnect()
                return

    def engine_abort(self) -> None:
        """The "abort" fault: the engine aborts every unfinished sample itself."""
        self.job.entry["fault"] = "abort"
        for s in self.job.samples:
            if s.finish is None:
                s.abort_requested = True
        self.state.wake(self.job)


def _outcome(job: Job) -> str:
    """The access-log outcome of a job that ran to its end."""
    if job.client_gone:
        return "client_disconnected"
    if any((s.finish or {}).get("type") == "abort" for s in job.samples):
        return "aborted"
    return "completed"


async def serve_job(
    state: FakeState,
    scope: Any,
    receive: Any,
    send: Any,
    job: Job,
    kind: str,
    prompts: list[int],
) -> None:
    """Answer ``job`` (``kind``: "chat", "completions" or "generate") as a raw ASGI app.

    ``prompts``: the prompt token counts (one per prompt of the body).
    """
    entry = job.entry
    job.single = len(prompts) == 1 and job.n == 1
    state.jobs[job.seq] = job
    b = job.behaviour
    cycle = scope.get(CYCLE_KEY)
    reply = _Reply(state, job, receive, send)
    watcher = asyncio.create_task(reply.watch())
    try:
        fault = b.fault if b is not None else None
        after = b.after_chunks if b is not None else None
        if fault == "abort" and (after is None or not job.stream):
            reply.engine_abort()
        if fault in ("reset", "close", "hang") and (after is None or not job.stream):
            if fault == "hang":
                await state.admit(job)
                if b is not None and b.delay_s:
                    await asyncio.sleep(b.delay_s)
            else:
                if b is not None and b.delay_s:
                    await asyncio.sleep(b.delay_s)
            entry["fault"] = fault
            await apply_fault(state, fault, cycle, job, b)
            return
        if job.stream:
            await _serve_stream(state, reply, cycle, kind, fault, after)
        else:
            await _serve_whole(state, reply, cycle, kind, fault)
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


async def _serve_whole(
    state: FakeState, reply: _Reply, cycle: Any, kind: str, fault: str | None
) -> None:
    """Not streamed: run the job to its end, then one body (or the "raw_text"/"truncate" one)."""
    job = reply.job
    entry, b = job.entry, job.behaviour
    async for _s, _d in steps(state, job):
        pass
    status, payload = final_body(state, job, kind)
    data = dumps(payload)
    if fault == "raw_text" and b is not None:
        entry["fault"] = fault
        await reply.start(200, b"text/plain; charset=utf-8")
        await reply.body(b.raw.encode(), False)
        entry["outcome"] = f"fault:{fault}"
        return
    if fault == "truncate":
        entry["fault"] = fault
        await reply.start(200, b"application/json")
        await reply.body(data[: len(data) // 2], False)
        entry["outcome"] = f"fault:{fault}"
        return
    await reply.start(status, b"application/json", [(b"content-length", str(len(data)).encode())])
    await reply.body(data, False)
    entry["outcome"] = _outcome(job)
    if fault == "close_after_response":
        await close_after(cycle, job)


async def _serve_stream(
    state: FakeState, reply: _Reply, cycle: Any, kind: str, fault: str | None, after: int | None
) -> None:
    """Streamed: one write per SSE event; a hard fault fires after ``after`` events."""
    job = reply.job
    entry, b = job.entry, job.behaviour
    render = {"chat": chat_events, "completions": completion_events, "generate": generate_events}
    events = render[kind](state, job)
    sent = 0
    try:
        async for ev in events:
            if (
                job.client_gone
                and not job.ignore_disconnect
                and state.launch_config.disconnect_abort_delay_s <= 0
            ):
                break
            if (
                fault is not None
                and fault not in SOFT_FAULTS
                and after is not None
                and sent >= after
            ):
                if not reply.headers_sent:
                    await reply.start(200, SSE_CT)
                entry["fault"] = fault
                await apply_fault(state, fault, cycle, job, b, send=reply.send)
                return
            if not reply.headers_sent:
                await reply.start(200, SSE_CT)
            if sent and b is not None and b.chunk_delay_s:
                await asyncio.sleep(b.chunk_delay_s)
            await reply.body(ev, True)
            sent += 1
            if fault == "abort" and after is not None and sent == after:
                reply.engine_abort()
    finally:
        await events.aclose()
    if (
        fault is not None
        and fault not in SOFT_FAULTS
        and after is not None
        and not job.client_gone
    ):
        # the stream ended before `after_chunks` events: fire the fault at the end
        if not reply.headers_sent:
            await reply.start(200, SSE_CT)
        entry["fault"] = fault
        await apply_fault(state, fault, cycle, job, b, send=reply.send)
        return
    if fault in ("omit_done", "close_after_response"):
        entry["fault"] = fault
    await reply.body(b"", False)
    entry["outcome"] = _outcome(job)
    if fault == "close_after_response":
        await close_after(cycle, job)
