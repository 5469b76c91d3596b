"""specgate probe-context against a fake that rejects cleanly and one that dies."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from router.cli import main
from serving.fake_sglang import FakeConfig, run_fake_server
from serving.probe import probe_context
from tests.support import free_port, wait_until


def test_bisection_finds_sglang_limit_on_fake():
    # SGLang 0.5.23 (as the fake models it): P >= C - 6 is refused, so 512 -> largest P = 505.
    with run_fake_server(FakeConfig(model_name="m", context_length=512)) as url:
        report = asyncio.run(probe_context(url, 16, 4096, margin=0.1))
    assert report.largest_ok == 505
    assert report.smallest_failing == 506
    assert report.suggested_cap == 454
    assert {p.outcome for p in report.probes} == {"ok", "rejected"}
    assert report.probes[0].prompt_tokens == 16 and report.probes[1].prompt_tokens == 4096
    assert len(report.probes) <= 2 + 12   # log2(4080) bisection steps


class Dying:
    """An engine that serves prompts up to ``limit`` tokens and dies (for good) above it."""

    def __init__(self, limit: int) -> None:
        self.limit, self.dead, self.calls = limit, False, 0

        async def completions(request: Request):
            self.calls += 1
            doc = await request.json()
            if self.dead:
                return JSONResponse({"error": "dead"}, status_code=503)
            if len(doc["prompt"]) > self.limit:
                self.dead = True
                return JSONResponse({"object": "error", "message": "illegal memory access"}, status_code=500)
            return JSONResponse({"choices": [{"text": "x"}]})

        async def health(request: Request):
            return JSONResponse({}, status_code=503 if self.dead else 200)

        self.app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]),
                                     Route("/health", health)])


@pytest.fixture
def dying():
    eng = Dying(3000)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(eng.app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    wait_until(lambda: server.started, 10, "the dying engine to start")
    yield eng, f"http://127.0.0.1:{port}"
    server.should_exit = True
    t.join(5)


def test_probe_stops_when_the_engine_dies(dying):
    eng, url = dying
    report = asyncio.run(probe_context(url, 1000, 300_000, recovery_timeout_s=0.5))
    assert report.probes[-1].outcome == "crashed" and report.probes[-1].status == 500
    assert report.stopped_early is True
    assert report.largest_ok == 1000 and report.smallest_failing == 300_000
    assert eng.calls == 2


def test_cli_refuses_without_staging_flag(capsys):
    assert main(["probe-context", "--endpoint", "http://127.0.0.1:9", "--low", "1", "--high", "2"]) == 2
    assert "--i-know-this-is-staging" in capsys.readouterr().err


def test_cli_prints_cap(capsys):
    with run_fake_server(FakeConfig(model_name="m", context_length=256)) as url:
        assert main(["probe-context", "--endpoint", url, "--low", "8", "--high", "1000",
                     "--margin", "0", "--i-know-this-is-staging"]) == 0
    out = capsys.readouterr().out
    assert "largest prompt served: 249 tokens" in out
    assert "limits.max_context_tokens: 249" in out
