"""Graceful drain of a real router process (``specgate router`` subprocess on 127.0.0.1) in
front of slow fake SGLang pools: SIGTERM / ``GET /drain``, the listen window, the cut at the
deadline, the aborts, the exit status and the log line (router/front/drain.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import pytest

from router.front.drain import SHUTDOWN_EVENT
from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import free_port, router_config, wait_until, write_router_yaml

REPO = Path(__file__).resolve().parents[2]
STEP_S = 0.05  # the fakes' decode step: 20 tokens per second


class RouterProcess:
    """``python -m router.cli router`` run from this checkout, stderr captured."""

    def __init__(self, tmp: Path, tokenizer: Path, listen_s: float, timeout_s: float) -> None:
        fake = FakeConfig(model_name="tiny-llama", context_length=4096, tokenizer_path=str(tokenizer),
                          decode_step_s=STEP_S, on_disconnect="ignore")
        self.spec = FakeServer(fake).start()
        self.plain = FakeServer(fake).start()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = write_router_yaml(tmp / "router.yaml",
                                router_config(tokenizer, self.spec.base_url, self.plain.base_url))
        text = cfg.read_text().replace("log_requests: false", f"log_requests: false\n  port: {self.port}\n"
                                       f"  drain_listen_s: {listen_s}\n  drain_timeout_s: {timeout_s}")
        cfg.write_text(text)
        self.stderr = tmp / "router.err"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "router.cli", "router", "--config", str(cfg)], cwd=REPO,
            stdout=subprocess.DEVNULL, stderr=self.stderr.open("wb"),
            env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            wait_until(self._ready, 60, "router /ready")
        except BaseException:
            self.close()  # the fixture never saw this object: do not leave the router running
            raise

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"router exited {self.proc.returncode}: {self.stderr.read_text()}")
        try:
            return httpx.get(self.url + "/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def running(self) -> int:
        return sum(len(httpx.get(f.base_url + "/_fake/state").json()["running"]) for f in (self.spec, self.plain))

    def aborts(self) -> list[str]:
        return [a["rid"] for f in (self.spec, self.plain)
                for a in httpx.get(f.base_url + "/_fake/requests").json()["aborts"]]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.spec.stop()
        self.plain.stop()


@pytest.fixture
def router_factory(tmp_path: Path, tokenizer_dir: Path):
    made: list[RouterProcess] = []

    def make(listen_s: float, timeout_s: float) -> RouterProcess:
        made.append(RouterProcess(tmp_path, tokenizer_dir, listen_s, timeout_s))
        return made[-1]

    yield make
    for r in made:
        r.close()


def chat(max_tokens: int, rid: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny-llama", "stream": True, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": "lorem ipsum " * 25}]}
    if rid is not None:
        body["rid"] = rid
    return body


async def stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                 started: asyncio.Event | None = None) -> tuple[int, bytes, str | None]:
    """POST a stream; returns (status, the whole body, the response's Connection header)."""
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        out = b""
        async for chunk in resp.content.iter_any():
            out += chunk
            if started is not None:
                started.set()
        return resp.status, out, resp.headers.get("connection")


def events(raw: bytes) -> list[bytes]:
    return [e for e in raw.split(b"\n\n") if e]


def contents(raw: bytes) -> list[str]:
    out = []
    for e in events(raw):
        if e.startswith(b"data: {") and b'"choices"' in e:
            for c in orjson.loads(e[6:])["choices"]:
                if c["delta"].get("content"):
                    out.append(c["delta"]["content"])
    return out


def test_sigterm_drains_short_streams_and_cuts_the_rest(router_factory) -> None:
    r = router_factory(listen_s=1.0, timeout_s=1.5)

    async def run() -> dict[str, Any]:
        async with aiohttp.ClientSession() as s:
            long_started, short_started = asyncio.Event(), asyncio.Event()
            long = asyncio.create_task(stream(s, r.url, chat(400, rid="drain-long"), long_started))
            short = asyncio.create_task(stream(s, r.url, chat(30), short_started))  # ~1.5 s
            await asyncio.wait_for(asyncio.gather(long_started.wait(), short_started.wait()), 10)
            t0 = time.monotonic()
            r.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0)  # the probes below run during the listen window
            async with aiohttp.ClientSession() as fresh:  # a new connection, after the signal
                async def until_draining() -> tuple[int, int, str | None]:
                    while True:
                        async with fresh.get(r.url + "/ready") as ready:
                            if ready.status == 503:
                                async with fresh.get(r.url + "/health") as health:
                                    return ready.status, health.status, health.headers.get("connection")
                        await asyncio.sleep(0.02)
                probes = await asyncio.wait_for(until_draining(), 5)
                late = await stream(fresh, r.url, chat(4))  # arrives during the listen window
            window = time.monotonic() - t0
            return {"long": await long, "short": await short, "probes": probes, "late": late,
                    "window_s": window}

    out = asyncio.run(run())
    assert out["window_s"] < 1.0, "the probes and the late stream ran inside the listen window"
    assert out["probes"] == (503, 200, "close")
    status, raw, connection = out["late"]
    assert (status, connection) == (200, "close")
    assert contents(raw) == ["tok0", " tok1", " tok2", " tok3"] and raw.endswith(b"data: [DONE]\n\n")
    status, raw, _ = out["short"]
    assert status == 200 and raw.endswith(b"data: [DONE]\n\n") and b'"error"' not in raw
    assert contents(raw) == ["tok0"] + [f" tok{i}" for i in range(1, 30)]
    status, raw, _ = out["long"]
    assert status == 200
    assert events(raw)[-1] + b"\n\n" == SHUTDOWN_EVENT
    assert raw.count(b'"error"') == 1 and b"[DONE]" not in raw
    assert 10 < len(contents(raw)) < 400
    assert r.proc.wait(15) == 1
    wait_until(lambda: r.running() == 0, 5, "the engines' running requests to reach 0")
    assert "drain-long" in r.aborts()
    log = r.stderr.read_text()
    assert "drain finished: 2 drained, 1 cut, exit 1" in log, log
    assert "Traceback" not in log


def test_prestop_drain_then_sigterm_exits_zero_when_everything_finished(router_factory) -> None:
    r = router_factory(listen_s=0.5, timeout_s=5.0)

    async def run() -> tuple[int, bytes, str | None]:
        async with aiohttp.ClientSession() as s:
            started = asyncio.Event()
            task = asyncio.create_task(stream(s, r.url, chat(80), started))  # ~4 s
            await asyncio.wait_for(started.wait(), 10)
            # the preStop hook, then the kubelet's SIGTERM: one drain, not a forced one
            proc = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "router.cli", "drain", "--port", str(r.port)],
                cwd=REPO, capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stderr
            assert orjson.loads(proc.stdout)["draining"] is True
            r.proc.send_signal(signal.SIGTERM)
            return await task

    status, raw, _ = asyncio.run(run())
    assert status == 200 and raw.endswith(b"data: [DONE]\n\n") and b'"error"' not in raw
    assert r.proc.wait(15) == 0
    assert "drain finished: 1 drained, 0 cut, exit 0" in r.stderr.read_text()
    assert r.aborts() == []


def test_a_second_sigterm_cuts_at_once(router_factory) -> None:
    r = router_factory(listen_s=30.0, timeout_s=30.0)

    async def run() -> tuple[tuple[int, bytes, str | None], float]:
        async with aiohttp.ClientSession() as s:
            started = asyncio.Event()
            task = asyncio.create_task(stream(s, r.url, chat(400, rid="drain-forced"), started))
            await asyncio.wait_for(started.wait(), 10)
            r.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: httpx.get(r.url + "/ready").status_code == 503, 5, "/ready 503")
            t0 = time.monotonic()
            r.proc.send_signal(signal.SIGTERM)
            result = await task
            return result, time.monotonic() - t0

    (status, raw, _), cut_after = asyncio.run(run())
    assert cut_after < 5.0
    assert status == 200 and events(raw)[-1] + b"\n\n" == SHUTDOWN_EVENT
    assert r.proc.wait(15) == 1
    wait_until(lambda: r.running() == 0, 5, "the engines' running requests to reach 0")
    assert "drain-forced" in r.aborts()
    assert "drain finished: 0 drained, 1 cut (second signal), exit 1" in r.stderr.read_text()


def test_drain_endpoint_is_for_loopback_clients_only(tmp_path: Path, tokenizer_dir: Path) -> None:
    from router.app.asgi import create_app

    cfg = write_router_yaml(tmp_path / "router.yaml",
                            router_config(tokenizer_dir, "http://127.0.0.1:9", "http://127.0.0.1:10"))
    app = create_app(cfg, scrape=False, watch=False)

    def client(ip: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app, client=(ip, 5000)), base_url="http://r")

    async def run() -> None:
        async with app.router.lifespan_context(app):
            async with client("10.1.2.3") as remote:
                resp = await remote.get("/drain")
                assert resp.status_code == 403
                assert resp.json()["error"]["code"] == "permission_denied"
                assert app.drain.active is False
                assert (await remote.get("/health")).headers.get("connection") is None
            async with client("127.0.0.1") as local:
                doc = (await local.get("/drain")).json()
                assert (doc["draining"], doc["listening"], doc["in_flight"]) == (True, True, 0)
                ready = await local.get("/ready")
                assert (ready.status_code, ready.json()["draining"]) == (503, True)
                health = await local.get("/health")
                assert (health.status_code, health.headers["connection"]) == (200, "close")

    asyncio.run(run())


def test_cut_releases_leases_aborts_and_counts_router_shutdown(tmp_path: Path, tokenizer_dir: Path) -> None:
    """The drain inside a served app (no process runner): the cut stream's lease is released
    once, its engine request aborted, and the outcome counted as ``router_shutdown``."""
    from tests.support.stack import Stack

    stack = Stack(tmp_path, tokenizer_dir, **{"server.drain_listen_s": 0.0, "server.drain_timeout_s": 0.3})
    try:
        stack.script(stack.spec, {"chunk_delay_s": STEP_S, "ignore_disconnect": True, "max_tokens": 400})
        stack.script(stack.plain, {"chunk_delay_s": STEP_S, "ignore_disconnect": True, "max_tokens": 400})
        c = stack.client
        with c.stream("POST", "/v1/chat/completions", json=chat(400, rid="cut-me")) as resp:
            chunks = resp.iter_bytes()
            raw = next(chunks)
            assert stack.inflight() == 1
            assert httpx.get(stack.router.base_url + "/drain").json()["draining"] is True
            raw += b"".join(chunks)
        assert events(raw)[-1] + b"\n\n" == SHUTDOWN_EVENT
        assert stack.settled_inflight() == 0
        wait_until(lambda: any(a["rid"] == "cut-me" for f in (stack.spec, stack.plain)
                             for a in stack.fake_log(f)["aborts"]), 5, "the abort")
        pool = next(p for p in ("spec", "plain")
                    if stack.router.metric("specgate_upstream_failures_total", pool=p, kind="router_shutdown"))
        assert stack.router.metric("specgate_upstream_failures_total", pool=pool, kind="router_shutdown") == 1
        assert sum(p.inflight() for p in stack.router.state.runtime.pools) == 0
        assert stack.router.app.drain.cut == 1
    finally:
        stack.close()


@pytest.mark.parametrize(("client", "loopback"), [
    (("127.0.0.1", 1), True), (("127.8.9.10", 1), True), (("::1", 1), True),
    (("::ffff:127.0.0.1", 1), True), (("10.0.0.1", 1), False), (("::ffff:10.0.0.1", 1), False),
    (("testclient", 1), False), (None, False),
])
def test_is_loopback(client, loopback) -> None:
    from router.front.drain import is_loopback

    assert is_loopback({"client": client}) is loopback
