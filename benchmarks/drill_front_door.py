"""The front-door drills of :mod:`benchmarks.drills`: header floods and compressed bombs
under load (docs/reliability.md, drills 8 and 9)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.drills import Drill

__all__ = ["bomb", "headers"]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _flood(port: int, total: int) -> int:
    """One connection writing a head that never ends (64 KiB writes, up to ``total`` bytes);
    returns the bytes written before the router cut it."""
    block, sent = b"a" * 65536, 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-flood: ")
            while sent < total:
                s.sendall(block)
                sent += len(block)
        except OSError:
            pass
    return sent


async def headers(d: Drill, stop: asyncio.Event) -> None:
    """Header floods during the load: rounds of two connections streaming 48 MiB of header
    bytes each, never ending the head (router.http_limits cuts them at server.headers)."""
    assert d.router is not None and d.router.proc is not None
    pid, port = d.router.proc.pid, d.router.port
    base = _rss_kib(pid)
    peak, floods, written = base, 0, []
    await asyncio.sleep(d.args.duration * 0.1)
    while not stop.is_set() and floods < 8:
        written += await asyncio.gather(*(asyncio.to_thread(_flood, port, 48 << 20) for _ in range(2)))
        floods += 2
        peak = max(peak, _rss_kib(pid))
        await asyncio.sleep(0.5)
    d.notes.update(floods=floods, flood_max_bytes_written=max(written, default=0),
                   router_rss_growth_kib=peak - base)


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
