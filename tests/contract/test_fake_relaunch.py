"""The fake's ``/_fake/relaunch``: the same address relaunched with other flags (a restarted
engine: smaller context, another model) or told them at run time (an adapter loaded), observed
from raw HTTP clients: what ``/v1/models``, ``/metrics`` and ``/server_info`` then say, which
connections survive, and what the length checks refuse."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import wait_until

MODEL = "relaunch-model"


@pytest.fixture
def srv() -> Iterator[FakeServer]:
    with FakeServer(FakeConfig(model_name=MODEL, context_length=2048, max_total_num_tokens=8192,
                               decode_step_s=0.01)) as s:
        yield s


def _series(base_url: str, name: str) -> str:
    (line,) = [ln for ln in httpx.get(base_url + "/metrics").text.splitlines() if ln.startswith(f"sglang:{name}{{")]
    return line


def _chat(words: int, max_tokens: int = 4, model: str = MODEL) -> dict[str, Any]:
    return {"model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": " ".join(["w"] * words)}]}


def test_restart_smaller_and_as_another_model(srv: FakeServer) -> None:
    url = srv.base_url
    before = httpx.get(url + "/server_info").json()["startup_time"]
    assert httpx.post(url + "/v1/chat/completions", json=_chat(1500)).status_code == 200
    out: dict[str, Any] = {}

    def stream() -> None:
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json={**_chat(3, 1000), "stream": True},
                              timeout=10) as r:
                out["raw"] = r.read()
        except httpx.HTTPError as exc:
            out["error"] = type(exc).__name__

    t = threading.Thread(target=stream)
    t.start()
    wait_until(lambda: srv.call(lambda st: len(st.running)) == 1, 5, "the stream to run")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as kept:  # kept alive, idle
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
        r = httpx.post(url + "/_fake/relaunch", json={
            "flags": {"context_length": 1024, "max_total_num_tokens": 4096, "model_name": "other-model"}})
        assert r.status_code == 200 and r.json()["config"]["context_length"] == 1024
        t.join(5)
        assert out.get("error") in ("ReadError", "RemoteProtocolError")
        try:
            assert kept.recv(65536) == b""  # closed by the "new process"
        except ConnectionResetError:
            pass
    cards = httpx.get(url + "/v1/models").json()["data"]
    assert [(c["id"], c["max_model_len"]) for c in cards] == [("other-model", 1024)]
    assert _series(url, "context_len").endswith(" 1024.0") and 'model_name="other-model"' in _series(url, "context_len")
    assert _series(url, "max_total_num_tokens").endswith(" 4096.0")
    info = httpx.get(url + "/server_info").json()
    assert (info["served_model_name"], info["context_length"], info["max_total_num_tokens"]) == ("other-model", 1024, 4096)
    assert info["startup_time"] != before
    assert srv.requests()["requests"] == [r for r in srv.requests()["requests"] if r["path"] != "/v1/chat/completions"]
    refused = httpx.post(url + "/v1/chat/completions", json=_chat(1500, model="other-model"))
    assert refused.status_code == 400
    assert "longer than the model's context length (1024 tokens)" in refused.json()["message"]


def test_told_at_run_time_keeps_connections_and_counters(srv: FakeServer) -> None:
    url = srv.base_url
    with httpx.Client() as kept:
        assert kept.post(url + "/v1/chat/completions", json=_chat(3)).status_code == 200
        r = kept.post(url + "/_fake/relaunch", json={"flags": {"enable_lora": True, "lora_paths": ["sql=/a/sql"]},
                                                     "restart": False})
        assert r.status_code == 200
        cards = kept.get(url + "/v1/models").json()["data"]
        assert [(c["id"], c["parent"]) for c in cards] == [(MODEL, None), ("sql", MODEL)]
        assert kept.post(url + "/v1/chat/completions", json=_chat(3, model=f"{MODEL}:sql")).status_code == 200
    assert len(srv.requests("/v1/chat/completions")["requests"]) == 2


@pytest.mark.parametrize("body", [
    {"flags": {"no_such_flag": 1}},
    {"flags": {"tokenizer_path": "/x"}},
    {"flags": {"context_length": 2}},
    {"flags": [], "restart": True},
    {"flags": {}, "restart": "yes"},
    {"other": 1},
])
def test_bad_relaunch_bodies_are_400(srv: FakeServer, body: dict[str, Any]) -> None:
    r = httpx.post(srv.base_url + "/_fake/relaunch", json=body)
    assert r.status_code == 400 and "error" in r.json()
    assert httpx.get(srv.base_url + "/v1/models").json()["data"][0]["max_model_len"] == 2048
