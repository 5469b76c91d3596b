"""``specgate router`` refuses connections until it has started, then answers at once: a client
retrying refused connections during a restart on the same port never sits in the kernel's
backlog while the new process loads its tokenizer and runs its first scrape round."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import free_port, router_config, wait_until, write_router_yaml

#: The first scrape round (part of the start) waits this long on an endpoint that never answers.
SCRAPE_TIMEOUT_S = 3.0


def test_connections_are_refused_until_the_router_has_started(tmp_path: Path, tokenizer_dir: Path) -> None:
    with FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096)) as plain, \
            socket.socket() as blackhole:
        blackhole.bind(("127.0.0.1", 0))
        blackhole.listen(16)  # accepted by the kernel, never answered: the first scrape times out
        silent = f"http://127.0.0.1:{blackhole.getsockname()[1]}"
        doc = router_config(tokenizer_dir, plain_url=plain.base_url, **{
            "pools.0.endpoints": [plain.base_url, silent],
            "scrape": {"interval_s": 0.5, "timeout_s": SCRAPE_TIMEOUT_S, "stale_after_s": 10.0},
            "server": {"log_requests": False, "drain_listen_s": 0, "drain_timeout_s": 0}})
        path = write_router_yaml(tmp_path / "router.yaml", doc)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "router.cli", "router", "--config", str(path),
                                 "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def accepting() -> socket.socket | None:
                assert proc.poll() is None, "the router exited"
                try:
                    return socket.create_connection(("127.0.0.1", port), timeout=1)
                except ConnectionRefusedError:
                    return None

            conn = wait_until(accepting, 90, "the router to accept a connection")
            with conn:
                accepted = time.monotonic()
                conn.settimeout(30)
                conn.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
                try:
                    first = conn.recv(64)
                except TimeoutError:
                    first = b""
                waited = time.monotonic() - accepted
        finally:
            proc.terminate()
            proc.wait(30)
    # accepted only once serving: the answer comes in milliseconds, not after the start's
    # first scrape round (SCRAPE_TIMEOUT_S) and tokenizer load
    assert waited < 1.0, f"the first accepted connection waited {waited:.2f} s for an answer"
    assert first.startswith(b"HTTP/1.1 200")
