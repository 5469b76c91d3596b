"""The benchmark floor (``benchmarks/bare_proxy.py``) relays exactly what the fast backend sends.

``benchmarks/router_overhead.py`` compares specgate with this pass-through; the comparison
only means something if the floor does the same job: the same bytes back, streamed events
intact and in order, a non-streamed answer whole with its Content-Length.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.fast_backend import CHAT, EVENT
from tests.support import free_port, wait_until
from tests.support.sse import sse_events

ROOT = Path(__file__).resolve().parents[2]


def _wait(url: str, proc: subprocess.Popen[bytes]) -> None:
    def up() -> bool:
        assert proc.poll() is None, f"{proc.args} exited with {proc.returncode}"
        try:
            httpx.get(url, timeout=1)
        except httpx.TransportError:
            return False
        return True

    wait_until(up, 30, f"{url} to come up", interval=0.1)


@pytest.fixture(scope="module")
def ports() -> Iterator[tuple[int, int]]:
    backend_port, bare_port = free_port(), free_port()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "fast_backend.py"),
                               "--port", str(backend_port), "--events", "3", "--event-gap-ms", "5"])]
    try:
        _wait(f"http://127.0.0.1:{backend_port}/health", procs[0])
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "bare_proxy.py"),
                                       "--port", str(bare_port),
                                       "--upstream", f"http://127.0.0.1:{backend_port}"]))
        _wait(f"http://127.0.0.1:{bare_port}/health", procs[1])
        yield backend_port, bare_port
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def _post(port: int, stream: bool) -> httpx.Response:
    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": stream}
    return httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=10)


def test_nonstream_answer_is_relayed_whole(ports: tuple[int, int]) -> None:
    backend_port, bare_port = ports
    direct, bare = _post(backend_port, False), _post(bare_port, False)
    assert direct.status_code == bare.status_code == 200
    assert bare.content == direct.content == CHAT
    assert bare.headers["content-length"] == str(len(CHAT))
    assert bare.headers["content-type"] == "application/json"


def test_stream_events_are_relayed_in_order(ports: tuple[int, int]) -> None:
    backend_port, bare_port = ports
    direct, bare = _post(backend_port, True), _post(bare_port, True)
    assert direct.status_code == bare.status_code == 200
    assert bare.headers["content-type"] == "text/event-stream"
    assert bare.content == direct.content == EVENT * 3 + b"data: [DONE]\n\n"
    chunks, done = sse_events(bare.content)
    assert done
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == [" tok"] * 3
    assert json.loads(EVENT[len(b"data: "):]) == chunks[0]
