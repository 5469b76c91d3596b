"""The upstream connector marks a request sent on a pooled (reused) connection, with no aiohttp
trace hooks on the session (:class:`router.upstream.relay.ReuseMarkingConnector`).

Real HTTP on 127.0.0.1 (an aiohttp server), so the keep-alive pool is aiohttp's own.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from router.app.asgi import _default_session
from router.config.tree import parse_config
from router.upstream.relay import ConnTrace, ReuseMarkingConnector


async def _server(release: asyncio.Event | None = None) -> tuple[web.AppRunner, str]:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def hold(request: web.Request) -> web.StreamResponse:  # body ends once released
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"a")
        assert release is not None
        await release.wait()
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/hold", hold)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _get(session: aiohttp.ClientSession, url: str, marks: object) -> bool:
    mark = ConnTrace()
    token = marks.set(mark)  # type: ignore[attr-defined]
    try:
        async with session.get(url) as resp:
            assert await resp.text() == "ok"
    finally:
        marks.reset(token)  # type: ignore[attr-defined]
    return mark.reused


async def test_first_request_is_fresh_then_pooled_connection_is_marked_reused():
    runner, base = await _server()
    connector = ReuseMarkingConnector(limit=10)
    session = aiohttp.ClientSession(connector=connector)
    try:
        assert await _get(session, base + "/ok", connector.marks) is False   # a new connection
        assert await _get(session, base + "/ok", connector.marks) is True    # the kept-alive one
        async with session.get(base + "/ok") as resp:  # no mark set: nothing to tell, no error
            assert resp.status == 200
    finally:
        await session.close()
        await runner.cleanup()


async def test_a_new_connection_while_the_pooled_one_is_busy_is_not_marked_reused():
    release = asyncio.Event()
    runner, base = await _server(release)
    connector = ReuseMarkingConnector(limit=10)
    session = aiohttp.ClientSession(connector=connector)
    try:
        assert await _get(session, base + "/ok", connector.marks) is False
        held = await session.get(base + "/hold")  # takes the pooled connection and keeps it
        assert await _get(session, base + "/ok", connector.marks) is False  # so this one is new
        release.set()
        await held.read()
        held.release()
    finally:
        await session.close()
        await runner.cleanup()


async def test_default_session_has_no_trace_hooks(tmp_path):
    cfg = parse_config({"model": {"name": "m", "tokenizer": str(tmp_path)},
                        "limits": {"max_context_tokens": 4096, "default_max_tokens": 64},
                        "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 4}},
                        "pools": [{"name": "plain", "speculative": False, "endpoints": ["http://127.0.0.1:9"]}]})
    session = _default_session(cfg)
    try:
        assert session.trace_configs == []
        assert isinstance(session.connector, ReuseMarkingConnector)
    finally:
        await session.close()
