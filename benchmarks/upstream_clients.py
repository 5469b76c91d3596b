"""The router's upstream HTTP client, measured alone: aiohttp vs the alternatives.

Results and method: docs/performance.md.

    .venv/bin/python benchmarks/upstream_clients.py [--requests 3000] [--runs 3] [--out clients.json]

The upstream client is a measured choice (aiohttp or another). This script is the
measurement: each client runs in its own process pinned to core 0, sending the router's
upstream request (the same headers, a small chat body) to ``benchmarks/fast_backend.py`` (core
1) on kept-alive connections, and reading the whole answer:

- non-streamed at concurrency 1 and 16, streamed (8 SSE events 1 ms apart) at concurrency 16;
- per cell: requests/s and the client process's CPU per request (us; ``time.process_time``,
  so a client's own worker threads count too), medians of ``--runs``.

Clients: ``h1`` (:class:`router.upstream.transport_h1.H1Transport`, the router's client for generation
requests: HTTP/1.1 on httptools' parser), ``aiohttp`` (with the router's settings: no cookie
jar, unlimited pool), ``aiohttp-tuned`` (aiohttp with automatic headers, decompression and the
per-request timeout object off, a 256 KiB read buffer, ``ClientSession._request`` called
directly), ``httpcore`` (httpx's transport layer alone, ``AsyncConnectionPool``, no httpx
models), ``httpx`` (the common reference), and two candidates installed by this script into
``.bench/clients`` (never into the project's environment): ``pyreqwest`` (Rust reqwest on a
tokio thread) and ``aiosonic`` (pure Python).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from router_overhead import CHAT_BODY, STREAM_BODY, free_port, stop_processes, wait_http

ROOT = Path(__file__).resolve().parent.parent
EXTRA = ROOT / ".bench" / "clients"
PINNED = {"pyreqwest": "pyreqwest==0.15.1", "aiosonic": "aiosonic==1.3.3"}
HEADERS = {"content-type": "application/json", "x-request-id": "bench", "accept-encoding": "identity"}
CELLS = (("nonstream", 1), ("nonstream", 16), ("stream", 16))


def ensure_extra_clients() -> None:
    """Install the candidate clients into ``.bench/clients`` (pip --target) once."""
    missing = [spec for name, spec in PINNED.items()
               if not any(EXTRA.glob(f"{name}-*.dist-info"))]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(EXTRA), *missing],
                       check=True)


async def _client(name: str, url: str, body: bytes, stream: bool):  # type: ignore[no-untyped-def]
    """``(one, close)`` for client ``name``: ``await one()`` sends the request and reads the
    whole answer; ``await close()`` releases the client's connections.

    Raises:
        ValueError: an unknown client name.
    """
    if name == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                        connector=aiohttp.TCPConnector(limit=0))
        target = aiohttp.client.URL(url)
        timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=5, sock_read=None)

        async def one() -> None:
            resp = await session.post(target, data=body, headers=HEADERS, timeout=timeout)
            while await resp.content.readany():
                pass
            resp.close()
        return one, session.close
    if name == "aiohttp-tuned":
        import aiohttp

        # aiohttp with what an engine request does not need turned off: no automatic headers,
        # no decompression, no per-request timeout object, no trace configs, bigger read buffer.
        session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
                                        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
                                        auto_decompress=False, read_bufsize=2**18,
                                        timeout=aiohttp.ClientTimeout(total=None))
        target = aiohttp.client.URL(url)

        async def one() -> None:
            resp = await session._request("POST", target, data=body, headers=HEADERS)
            while await resp.content.readany():
                pass
            resp.release()
        return one, session.close
    if name == "h1":
        import aiohttp

        from router import AiohttpTransport, H1Transport

        session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(),
                                        connector=aiohttp.TCPConnector(limit=0))
        transport = H1Transport(AiohttpTransport(session), max_connections=4096, keepalive_timeout_s=4.0)
        target = aiohttp.client.URL(url)

        async def one() -> None:
            resp = await transport.post(target, body, HEADERS, connect_timeout_s=5.0, fresh=False)
            reader = resp.content
            while await reader.readany():
                pass
            resp.close()

        async def close_h1() -> None:
            transport.close()
            await session.close()
        return one, close_h1
    if name == "httpcore":
        import httpcore

        pool = httpcore.AsyncConnectionPool(max_connections=None, keepalive_expiry=4.0)
        hdrs = list(HEADERS.items())

        async def one() -> None:
            async with pool.stream("POST", url, headers=hdrs, content=body) as resp:
                async for _ in resp.aiter_stream():
                    pass
        return one, pool.aclose
    if name == "httpx":
        import httpx

        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=None))

        async def one() -> None:
            async with client.stream("POST", url, content=body, headers=HEADERS) as resp:
                async for _ in resp.aiter_raw():
                    pass
        return one, client.aclose
    if name == "pyreqwest":
        from pyreqwest.client import ClientBuilder

        rclient = ClientBuilder().build()

        async def one() -> None:
            async with rclient.post(url).headers(HEADERS).body_bytes(body).build_streamed() as resp:
                reader = resp.body_reader
                while await reader.read_chunk() is not None:
                    pass
        return one, rclient.close
    if name == "aiosonic":
        import aiosonic

        sclient = aiosonic.HTTPClient()

        async def one() -> None:
            resp = await sclient.post(url, data=body, headers=HEADERS)
            if stream:
                async for _ in resp.read_chunks():
                    pass
            else:
                await resp.content()

        async def close() -> None:
            await sclient.connector.cleanup()
        return one, close
    raise ValueError(name)


def measure(name: str, port: int, mode: str, concurrency: int, requests: int) -> dict[str, float]:
    """One cell in this process (run it in a child pinned to a core).

    Returns ``{"rps": requests per second, "cpu_us_per_req": process CPU (us) per request}``
    over ``requests`` requests (a tenth for streams) after a 20-per-connection warm-up.
    """
    import uvloop

    stream = mode == "stream"
    body = (STREAM_BODY if stream else CHAT_BODY).encode()
    n = max(concurrency, requests // (10 if stream else 1))

    async def main() -> dict[str, float]:
        one, close = await _client(name, f"http://127.0.0.1:{port}/v1/chat/completions", body, stream)

        async def worker(k: int) -> None:
            for _ in range(k):
                await one()

        await asyncio.gather(*(worker(20) for _ in range(concurrency)))  # warm-up, connections
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker(n // concurrency) for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        await close()
        done = n // concurrency * concurrency
        return {"rps": done / wall, "cpu_us_per_req": cpu / done * 1e6}

    return uvloop.run(main())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="non-streamed requests per cell (streams: a tenth)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", default="h1,aiohttp,aiohttp-tuned,httpcore,pyreqwest,aiosonic,httpx")
    ap.add_argument("--out", default="bench-upstream-clients.json")
    ap.add_argument("--child", nargs=4, metavar=("CLIENT", "PORT", "MODE", "C"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, str(EXTRA))
        sys.path.insert(0, str(ROOT))  # router.upstream.transport_h1 for the h1 client
        name, port, mode, c = args.child
        print(json.dumps(measure(name, int(port), mode, int(c), args.requests)))
        return 0
    clients = args.clients.split(",")
    if {"pyreqwest", "aiosonic"} & set(clients):
        ensure_extra_clients()
    ncpu = os.cpu_count() or 2
    port = free_port()
    backend = subprocess.Popen(["taskset", "-c", str(ncpu - 1), sys.executable,
                                str(ROOT / "benchmarks" / "fast_backend.py"), "--port", str(port)],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    try:
        wait_http(f"http://127.0.0.1:{port}/health")
        for mode, c in CELLS:
            cell = results.setdefault(f"{mode} c={c}", {})
            for run in range(args.runs):
                for name in clients:  # interleaved, so drift hits every client alike
                    out = subprocess.run(["taskset", "-c", "0", sys.executable, __file__, "--requests",
                                          str(args.requests), "--child", name, str(port), mode, str(c)],
                                         capture_output=True, text=True, check=True).stdout
                    res = json.loads(out.strip().splitlines()[-1])
                    cell.setdefault(name, []).append(res)
                    print(f"{mode:9} c={c:<3} run {run + 1} {name:9} {res['rps']:8.0f} req/s "
                          f"{res['cpu_us_per_req']:6.0f} us CPU/req", flush=True)
    finally:
        stop_processes([backend])
    print(f"\n{'cell':15} " + " ".join(f"{n:>20}" for n in clients) + "   (req/s | client CPU us per request)")
    summary = {}
    for cell, per in results.items():
        med = {n: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for n, runs in per.items()}
        summary[cell] = med
        print(f"{cell:15} " + " ".join(f"{med[n]['rps']:>10.0f} | {med[n]['cpu_us_per_req']:>7.0f}" for n in clients))
    Path(args.out).write_text(json.dumps({"results": results, "summary": summary}, indent=2))
    print(f"JSON written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
