"""The floor for router-overhead benchmarks: specgate's server and client stack, none of its work.

Not a router: a pass-through proxy to one backend on exactly the stack ``specgate router``
runs (uvicorn with uvloop and httptools, the same uvicorn and interpreter settings, the
router's upstream client: ``--client httptools``, the default, is
:class:`router.upstream.transport_h1.H1Transport`, ``--client aiohttp`` one shared aiohttp session
built like specgate's; a raw ASGI app), doing only what any proxy
must: read the body, send it upstream, relay the answer. It counts no tokens, makes no
decision, keeps no metrics, holds no lease and watches no disconnect. Streams are relayed
like specgate relays them (the client's headers wait for the engine's first chunk, then
every chunk as it arrives); a non-streamed answer is read whole and sent with a
Content-Length.

``benchmarks/router_overhead.py`` runs it as the ``bare`` target, so that what specgate's own
work costs (specgate minus bare) is told apart from what the stack costs (bare minus direct).

    python benchmarks/bare_proxy.py --port 8100 --upstream http://127.0.0.1:31000 [--client aiohttp]
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path
from typing import Any

import aiohttp
import uvicorn
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from router import tune_interpreter


class BareProxy:
    """Raw ASGI pass-through of ``POST`` requests to ``upstream``.

    Args:
        upstream: the backend's base URL, e.g. ``http://127.0.0.1:31000``.
        client: ``httptools`` (the router's :class:`router.upstream.transport_h1.H1Transport`) or
            ``aiohttp`` (one session).
    """

    def __init__(self, upstream: str, client: str = "httptools") -> None:
        self.upstream = upstream.rstrip("/")
        self.client = client
        self.session: aiohttp.ClientSession | None = None
        self.transport: Any = None
        self.targets: dict[str, URL] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        assert self.session is not None
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        if self.transport is not None:
            url = self.targets.get(scope["path"])
            if url is None:
                url = self.targets[scope["path"]] = URL(self.upstream + scope["path"])
            resp = await self.transport.post(url, body, headers, connect_timeout_s=2.0, fresh=False)
            try:
                await self._relay(resp, send)
            finally:
                resp.close()
            return
        async with self.session.post(self.upstream + scope["path"], data=body, headers=headers) as resp:
            await self._relay(resp, send)

    async def _relay(self, resp: Any, send: Any) -> None:
        """Send ``resp`` on: a non-streamed answer whole with a Content-Length, a stream as it
        arrives (the headers wait for its first chunk)."""
        ctype = resp.headers.get("content-type", "application/json").encode("latin-1")
        if not resp.headers.get("content-type", "").startswith("text/event-stream"):
            data = await resp.read()
            await send({"type": "http.response.start", "status": resp.status,
                        "headers": [(b"content-type", ctype), (b"content-length", str(len(data)).encode())]})
            await send({"type": "http.response.body", "body": data, "more_body": False})
            return
        chunk = await resp.content.readany()
        await send({"type": "http.response.start", "status": resp.status,
                    "headers": [(b"content-type", ctype), (b"cache-control", b"no-cache")]})
        while chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = await resp.content.readany()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.session = _session()
                if self.client == "httptools":
                    from router import AiohttpTransport, H1Transport

                    self.transport = H1Transport(AiohttpTransport(self.session), max_connections=4096,
                                                 keepalive_timeout_s=4.0)
                gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.transport is not None:
                    self.transport.close()
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _session() -> aiohttp.ClientSession:
    """The upstream session, built as ``router.app.asgi._default_session`` builds specgate's."""
    connector = aiohttp.TCPConnector(limit=4096, limit_per_host=0, enable_cleanup_closed=False, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                 timeout=aiohttp.ClientTimeout(total=None))


def aiohttp_app(upstream: str) -> Any:
    """The same pass-through as an ``aiohttp.web`` application (aiohttp's own server, no
    ASGI): the ``aiohttp-web`` candidate of ``benchmarks/servers.py``."""
    from aiohttp import web

    upstream = upstream.rstrip("/")

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        session = request.app["session"]
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        async with session.post(upstream + request.path, data=body, headers=headers) as resp:
            ctype = resp.headers.get("content-type", "application/json")
            if not ctype.startswith("text/event-stream"):
                return web.Response(body=await resp.read(), status=resp.status, headers={"content-type": ctype})
            out = web.StreamResponse(status=resp.status, headers={"content-type": ctype, "cache-control": "no-cache"})
            chunk = await resp.content.readany()
            await out.prepare(request)
            while chunk:
                await out.write(chunk)
                chunk = await resp.content.readany()
            await out.write_eof()
            return out

    async def lifespan(app: web.Application) -> Any:
        app["session"] = _session()
        gc.freeze()
        yield
        await app["session"].close()

    async def health(request: web.Request) -> web.Response:
        return web.Response(body=b"", content_type="text/plain")

    app = web.Application()
    app.cleanup_ctx.append(lifespan)
    app.router.add_get("/health", health)
    app.router.add_post("/{tail:.*}", proxy)
    return app


def granian_app() -> BareProxy:
    """The ASGI app for Granian (``granian --factory benchmarks.bare_proxy:granian_app``); the
    backend's URL comes from ``SPECGATE_BARE_UPSTREAM`` (Granian passes no arguments)."""
    import os

    tune_interpreter()
    return BareProxy(os.environ["SPECGATE_BARE_UPSTREAM"])


#: ``--server`` choices: uvicorn with httptools (specgate's stack), with the router's head-limit
#: protocol on httptools (router.front.http_limits), with h11; aiohttp's own server.
SERVERS = ("uvicorn-httptools", "uvicorn-limits", "uvicorn-h11", "aiohttp-web")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="backend base URL")
    ap.add_argument("--server", choices=SERVERS, default="uvicorn-httptools")
    ap.add_argument("--client", choices=("httptools", "aiohttp"), default="httptools",
                    help="the upstream client (uvicorn servers only; aiohttp-web always uses aiohttp)")
    args = ap.parse_args()
    tune_interpreter()
    if args.server == "aiohttp-web":
        import asyncio

        import uvloop
        from aiohttp import web

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        web.run_app(aiohttp_app(args.upstream), host=args.host, port=args.port, access_log=None,
                    print=None, keepalive_timeout=30)
        return
    http: Any = "h11" if args.server == "uvicorn-h11" else "httptools"
    if args.server == "uvicorn-limits":  # specgate's protocol with its default server limits
        from router import ConnectionLimits, ServerConfig, limited_protocol

        limits = ConnectionLimits(ServerConfig(), lambda limit: None, lambda reason: None)
        http = limited_protocol(lambda: limits)
    # The same server settings as router.app.commands._router.
    uvicorn.run(BareProxy(args.upstream, args.client), host=args.host, port=args.port, loop="uvloop", http=http,
                log_level="warning", access_log=False, timeout_keep_alive=30, proxy_headers=False,
                server_header=False, lifespan="on")


if __name__ == "__main__":
    main()
