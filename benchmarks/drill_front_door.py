"""The front-door drills of :mod:`benchmarks.drills`: header floods, compressed bombs and
HTTP/1.0, ``Expect`` and upgrade-offering clients under load (docs/reliability.md, drills 8,
9 and 12)."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.drills import Drill

__all__ = ["bomb", "clients", "headers"]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _flood(port: int, total: int) -> tuple[int, bool]:
    """One connection writing a head that never ends (64 KiB writes, ``total`` bytes), then
    reading; returns the bytes written and whether the 431 was read (the router discards
    what follows its answer for ``server.linger_s``, so a client that writes first and reads
    after still gets it)."""
    block, sent = b"a" * 65536, 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-flood: ")
            while sent < total:
                s.sendall(block)
                sent += len(block)
            answer = s.recv(64)
        except OSError:
            answer = b""
    return sent, answer.startswith(b"HTTP/1.1 431 ")


async def headers(d: Drill, stop: asyncio.Event) -> None:
    """Header floods during the load: rounds of two connections streaming 48 MiB of header
    bytes each, never ending the head (router.front.http_limits answers 431 at server.headers and
    discards the rest)."""
    assert d.router is not None and d.router.proc is not None
    pid, port = d.router.proc.pid, d.router.port
    base = _rss_kib(pid)
    peak, floods, answered = base, 0, 0
    await asyncio.sleep(d.args.duration * 0.1)
    while not stop.is_set() and floods < 8:
        results = await asyncio.gather(*(asyncio.to_thread(_flood, port, 48 << 20) for _ in range(2)))
        floods += 2
        answered += sum(read for _, read in results)
        peak = max(peak, _rss_kib(pid))
        await asyncio.sleep(0.5)
    d.notes.update(floods=floods, floods_read_431=answered, router_rss_growth_kib=peak - base)


#: The odd clients of :func:`clients`: (name, HTTP version, extra head fields, stream).
_CLIENTS = (
    ("http10_stream", b"1.0", b"", True), ("http10", b"1.0", b"", False),
    ("expect", b"1.1", b"expect: 100-continue\r\n", False),
    ("expect_stream", b"1.1", b"expect: 100-continue\r\n", True),
    ("expect_http10", b"1.0", b"expect: 100-continue\r\n", True),
    ("h2c_offer", b"1.1", b"connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n",
     True),
)


def _odd_client(port: int, name: str, version: bytes, extra: bytes, stream: bool, max_tokens: int) -> str | None:
    """One chat request as that client sends it; None when the answer is right (a 100 first
    only for an HTTP/1.1 ``Expect``, a 200 whose body is the whole answer: for HTTP/1.0 a
    stream delimited by the close, never chunked), else what was wrong."""
    from tests.support.raw_http import RawConn
    from tests.support.sse import sse_events

    body = json.dumps({"model": "tiny-llama", "stream": stream, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    head = (b"POST /v1/chat/completions HTTP/" + version + b"\r\nhost: x\r\ncontent-type: application/json\r\n"
            + extra + b"content-length: %d\r\n\r\n" % len(body))
    try:
        with RawConn(port, timeout=30) as c:
            if b"expect" in extra and version == b"1.1":
                c.send(head)
                if c.head()[0] != b"HTTP/1.1 100 Continue":
                    return "no 100 Continue"
                c.send(body)
            else:
                c.send(head + body)
            r = c.response()
    except (OSError, EOFError, AssertionError) as exc:
        return f"transport: {type(exc).__name__}"
    if r.status != 200:
        return f"status {r.status}"
    if version == b"1.0" and (r.framing == "chunked" or r.headers.get("connection") != "close"):
        return "HTTP/1.0 answer chunked or kept alive"
    if stream:
        try:
            if not sse_events(r.body)[1]:
                return "stream without [DONE]"
        except (AssertionError, ValueError):
            return "stream not SSE"
    elif "choices" not in json.loads(r.body):
        return "no choices"
    return None


async def clients(d: Drill, stop: asyncio.Event) -> None:
    """HTTP/1.0, ``Expect: 100-continue`` and ``Upgrade: h2c`` clients on raw sockets beside
    the load (:data:`_CLIENTS`, seeded order); notes: answers per kind and what went wrong."""
    assert d.router is not None
    port = d.router.port
    ok: dict[str, int] = {name: 0 for name, *_ in _CLIENTS}
    wrong: list[str] = []
    t_end = time.monotonic() + d.args.duration - 1.0

    async def one(rng: random.Random) -> None:
        while not stop.is_set() and time.monotonic() < t_end:
            name, version, extra, stream = rng.choice(_CLIENTS)
            problem = await asyncio.to_thread(_odd_client, port, name, version, extra, stream, rng.randint(4, 24))
            if problem is None:
                ok[name] += 1
            else:
                wrong.append(f"{name}: {problem}")

    await asyncio.gather(*(one(random.Random(d.args.seed * 10 + i)) for i in range(3)))  # three at a time
    d.notes.update(odd_clients_ok=ok, odd_clients_wrong=wrong)


async def bomb(d: Drill, stop: asyncio.Event) -> None:
    """gzip bombs during the load (48 MiB of prompt text in ~47 KiB; decoded cap 32 MiB)."""
    import gzip

    import httpx

    assert d.router is not None and d.router.proc is not None
    pid = d.router.proc.pid
    payload = await asyncio.to_thread(gzip.compress, b'{"model":"tiny-llama","messages":[{"role":"user",'
                                      b'"content":"' + b"a" * (48 << 20) + b'"}]}')
    base = _rss_kib(pid)
    peak, statuses = base, []
    await asyncio.sleep(d.args.duration * 0.1)
    async with httpx.AsyncClient(base_url=d.router.url, timeout=30) as client:
        while not stop.is_set() and len(statuses) < 8:
            r = await client.post("/v1/chat/completions", content=payload,
                                  headers={"content-type": "application/json", "content-encoding": "gzip"})
            statuses.append(r.status_code)
            peak = max(peak, _rss_kib(pid))
            await asyncio.sleep(0.5)
    d.notes.update(bombs=len(statuses), bomb_statuses=sorted(set(statuses)), bomb_bytes=len(payload),
                   router_rss_growth_kib=peak - base)
