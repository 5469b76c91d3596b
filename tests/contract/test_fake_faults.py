"""The fake SGLang server's fault injection and control API, observed from raw HTTP clients.

Each scripted behaviour is checked at the byte or socket level with exact assertions: what
status and body arrive before the first byte, how many SSE events arrive before a reset, a
close or a hang, whether the chunked body is terminated, what the access log records, and
what the gauges report while requests are in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from serving.fake_sglang import (
    Behaviour,
    FakeConfig,
    FakeServer,
    overlength_body,
    run_fake_server,
)
from tests.support import free_port, make_test_tokenizer, wait_until
from tests.support.sse import split_sse, sse_events, words

REPO = Path(__file__).resolve().parents[2]
MODEL = "fault-model"


@pytest.fixture(scope="module")
def srv() -> Iterator[FakeServer]:
    with FakeServer(FakeConfig(model_name=MODEL, context_length=256)) as s:
        yield s


@pytest.fixture(autouse=True)
def _clean(request: pytest.FixtureRequest) -> None:
    if "srv" in request.fixturenames:
        s: FakeServer = request.getfixturevalue("srv")
        s.call(lambda st: st.reset())


def _chat(stream: bool = True, max_tokens: int = 10, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello world"}],
        "max_tokens": max_tokens,
        "stream": stream,
        **extra,
    }


def _raw_request(
    port: int,
    path: str,
    body: dict[str, Any],
    timeout_s: float = 5.0,
) -> tuple[bytes, str | None]:
    """POST over a plain socket with ``Connection: close``; (all bytes received, error name)."""
    data = json.dumps(body).encode()
    req = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode() + data
    out = b""
    err = None
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(req)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except OSError as e:
            err = type(e).__name__
    return out, err


def _split_http(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return status, headers, rest


def _dechunk(body: bytes) -> tuple[bytes, bool]:
    """Decode a chunked body; (payload, whether the terminating 0-chunk arrived)."""
    out = b""
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol == -1:
            return out, False
        size = int(body[pos:eol], 16)
        if size == 0:
            return out, body[eol : eol + 4] == b"\r\n\r\n"
        start = eol + 2
        if len(body) < start + size + 2:
            return out + body[start : start + size], False
        out += body[start : start + size]
        pos = start + size + 2


def _gauge(base_url: str, name: str) -> float:
    text = httpx.get(base_url + "/metrics").text
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"sglang:{name}{{")]
    return float(line.rsplit(" ", 1)[1])


def _gauge_becomes(base_url: str, name: str, value: float, timeout_s: float = 5.0) -> float:
    """Poll the gauge until it equals ``value``; returns it (``AssertionError`` after ``timeout_s``)."""
    wait_until(lambda: _gauge(base_url, name) == value, timeout_s, f"{name} == {value}")
    return value


# --------------------------------------------------------------------------------------------
# errors before the first byte
# --------------------------------------------------------------------------------------------


def test_scripted_500_json_before_first_byte(srv: FakeServer) -> None:
    srv.script({"status": 500, "message": "boom"})
    r = httpx.post(srv.base_url + "/v1/chat/completions", json=_chat())
    assert r.status_code == 500
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {
        "object": "error",
        "message": "boom",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
    assert srv.requests()["requests"][0]["outcome"] == "scripted_status"


def test_scripted_400_with_sglang_overlength_body(srv: FakeServer) -> None:
    body = overlength_body(4012, 2048)
    assert body == {
        "object": "error",
        "message": "The input (4012 tokens) is longer than the model's context length "
        "(2048 tokens).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    srv.script({"status": 400, "body": body})
    r = httpx.post(srv.base_url + "/v1/chat/completions", json=_chat())
    assert (r.status_code, r.headers["content-type"], r.json()) == (400, "application/json", body)


def test_scripted_503_default_body_and_headers(srv: FakeServer) -> None:
    srv.script({"status": 503, "headers": {"Retry-After": "7"}})
    r = httpx.post(srv.base_url + "/v1/completions", json={"prompt": "x", "stream": True})
    assert r.status_code == 503
    assert r.headers["retry-after"] == "7"
    assert r.json() == {
        "object": "error",
        "message": "Injected fault",
        "type": "503",
        "param": None,
        "code": 503,
    }


def test_scripted_plain_text_error(srv: FakeServer) -> None:
    srv.script({"status": 502, "body_text": "Bad Gateway"})
    r = httpx.post(srv.base_url + "/v1/chat/completions", json=_chat())
    assert r.status_code == 502
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.text == "Bad Gateway"


def test_script_path_filter_and_count(srv: FakeServer) -> None:
    srv.script({"path": "/v1/completions", "count": 2, "status": 500})
    with httpx.Client(base_url=srv.base_url) as c:
        assert c.post("/v1/chat/completions", json=_chat(stream=False)).status_code == 200
        comp = {"prompt": "a b", "max_tokens": 2}
        assert [c.post("/v1/completions", json=comp).status_code for _ in range(3)] == [
            500,
            500,
            200,
        ]


def test_script_rejects_unknown_fields(srv: FakeServer) -> None:
    r = httpx.post(srv.base_url + "/_fake/script", json={"fualt": "reset"})
    assert r.status_code == 400
    assert "fualt" in r.json()["error"]
    r = httpx.post(srv.base_url + "/_fake/script", json={"fault": "explode"})
    assert r.status_code == 400
    with pytest.raises(ValueError, match="count"):
        Behaviour.from_dict({"count": 0})


# --------------------------------------------------------------------------------------------
# delays
# --------------------------------------------------------------------------------------------


def test_delay_before_headers_counts_as_running(srv: FakeServer) -> None:
    srv.script({"delay_s": 1.0})
    result: dict[str, float] = {}

    def go() -> None:
        t0 = time.monotonic()
        with httpx.stream("POST", srv.base_url + "/v1/chat/completions", json=_chat()) as r:
            result["headers"] = time.monotonic() - t0
            r.read()

    t = threading.Thread(target=go)
    t.start()
    assert _gauge_becomes(srv.base_url, "num_running_reqs", 1.0) == 1.0
    assert "headers" not in result
    t.join()
    assert result["headers"] >= 0.98
    assert _gauge(srv.base_url, "num_running_reqs") == 0.0


async def test_chunk_delay_spaces_events() -> None:
    with run_fake_server(FakeConfig(model_name=MODEL)) as url:
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/_fake/script", json={"chunk_delay_s": 0.05}) as r:
                assert r.status == 200
            stamps: list[float] = []
            async with s.post(url + "/v1/chat/completions", json=_chat(max_tokens=4)) as r:
                buf = b""
                async for piece in r.content.iter_any():
                    buf += piece
                    while b"\n\n" in buf:
                        _, buf = buf.split(b"\n\n", 1)
                        stamps.append(time.monotonic())
    # role + 4 content + finish + [DONE], each written 50 ms after the previous one.
    assert len(stamps) == 7
    # (the first stamp is taken late: aiohttp hands the body over after parsing the headers)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps[1:]) >= 0.04, gaps


# --------------------------------------------------------------------------------------------
# connection faults
# --------------------------------------------------------------------------------------------


def test_reset_after_n_chunks(srv: FakeServer) -> None:
    srv.script({"fault": "reset", "after_chunks": 3})
    raw, err = _raw_request(srv.port, "/v1/chat/completions", _chat())
    assert err == "ConnectionResetError"
    status, headers, body = _split_http(raw)
    assert status == 200 and headers["content-type"] == "text/event-stream; charset=utf-8"
    payload, complete = _dechunk(body)
    assert not complete
    assert len(split_sse(payload)) == 3
    entry = srv.requests()["requests"][0]
    assert (entry["fault"], entry["outcome"], entry["client_disconnected"]) == (
        "reset",
        "fault:reset",
        False,
    )
    assert srv.requests()["disconnects"] == []


def test_reset_before_headers(srv: FakeServer) -> None:
    srv.script({"fault": "reset"})
    raw, err = _raw_request(srv.port, "/v1/chat/completions", _chat(stream=False))
    assert (raw, err) == (b"", "ConnectionResetError")


def test_close_after_n_chunks_leaves_chunked_body_unterminated(srv: FakeServer) -> None:
    srv.script({"fault": "close", "after_chunks": 2})
    raw, err = _raw_request(srv.port, "/v1/chat/completions", _chat())
    assert err is None  # a clean FIN, not a reset
    _, _, body = _split_http(raw)
    payload, complete = _dechunk(body)
    assert not complete
    assert len(split_sse(payload)) == 2
    with pytest.raises(httpx.RemoteProtocolError):
        srv.script({"fault": "close", "after_chunks": 2})
        httpx.post(srv.base_url + "/v1/chat/completions", json=_chat())


def test_truncate_ends_cleanly_without_finish_or_done(srv: FakeServer) -> None:
    srv.script({"fault": "truncate", "after_chunks": 3})
    r = httpx.post(srv.base_url + "/v1/chat/completions", json=_chat())
    assert r.status_code == 200
    chunks, done = sse_events(r.content)
    assert not done
    assert len(chunks) == 3
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks)


def test_omit_done_sends_everything_but_done(srv: FakeServer) -> None:
    srv.script({"fault": "omit_done"})
    r = httpx.post(
        srv.base_url + "/v1/chat/completions",
        json=_chat(max_tokens=3, stream_options={"include_usage": True}),
    )
    chunks, done = sse_events(r.content)
    assert not done
    assert [ch["choices"][0]["finish_reason"] if ch["choices"] else "usage" for ch in chunks] == [
        None,
        None,
        None,
        None,
        "length",
        "usage",
    ]


def test_raw_text_inside_sse_without_framing(srv: FakeServer) -> None:
    srv.script({"fault": "raw_text", "after_chunks": 2, "raw": "upstream exploded"})
    r = httpx.post(srv.base_url + "/v1/chat/completions", json=_chat())
    assert r.status_code == 200
    assert r.content.endswith(b"\n\nupstream exploded")
    events, tail = r.content.rsplit(b"\n\n", 1)
    assert tail == b"upstream exploded"
    assert len(split_sse(events + b"\n\n")) == 2
    with pytest.raises(AssertionError):
        split_sse(r.content)


def test_scripted_sse_bytes_are_sent_verbatim(srv: FakeServer) -> None:
    events = ['data: {"a": 1}\n\n', "event: x\ndata: y\n\n", 'data: {"error": "bad"}\n\n']
    srv.script({"sse_events": events})
    r = httpx.post(srv.base_url + "/v1/chat/completions", json=_chat())
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.content == "".join(events).encode()


def test_hang_after_chunks_until_client_leaves(srv: FakeServer) -> None:
    srv.script({"fault": "hang", "after_chunks": 2})
    got = b""
    with (
        pytest.raises(httpx.ReadTimeout),
        httpx.stream(
            "POST",
            srv.base_url + "/v1/chat/completions",
            json=_chat(),
            timeout=httpx.Timeout(5, read=0.4),
        ) as r,
    ):
        for piece in r.iter_raw():
            got += piece
    assert len(split_sse(got)) == 2
    chat = "/v1/chat/completions"
    wait_until(lambda: srv.requests(chat)["requests"][0]["outcome"] is not None, 3, "the request's outcome")
    entry = srv.requests(chat)["requests"][0]
    assert entry["outcome"] == "client_disconnected" and entry["client_disconnected"] is True
    (disc,) = srv.requests()["disconnects"]
    assert disc["phase"] == "streaming" and disc["seq"] == entry["seq"]
    assert _gauge(srv.base_url, "num_running_reqs") == 0.0


def test_hang_before_headers(srv: FakeServer) -> None:
    srv.script({"fault": "hang"})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            srv.base_url + "/v1/chat/completions",
            json=_chat(stream=False),
            timeout=httpx.Timeout(5, read=0.3),
        )
    wait_until(lambda: srv.requests()["disconnects"], 3, "the disconnect")
    assert srv.requests()["disconnects"][0]["phase"] == "before_headers"


# --------------------------------------------------------------------------------------------
# load, abort, disconnect
# --------------------------------------------------------------------------------------------


def _background_stream(url: str, body: dict[str, Any], out: dict[str, Any]) -> threading.Thread:
    def go() -> None:
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=10) as r:
                out["raw"] = r.read()
        except httpx.HTTPError as e:
            out["error"] = type(e).__name__

    t = threading.Thread(target=go)
    t.start()
    return t


def test_num_running_reqs_counts_in_flight_samples() -> None:
    cfg = FakeConfig(model_name=MODEL, decode_step_s=0.01, max_total_num_tokens=1000)
    with FakeServer(cfg) as s:
        outs: list[dict[str, Any]] = [{}, {}]
        threads = [
            _background_stream(s.base_url, _chat(max_tokens=500), outs[0]),
            _background_stream(s.base_url, _chat(max_tokens=500, n=2), outs[1]),
        ]
        assert _gauge_becomes(s.base_url, "num_running_reqs", 3.0) == 3.0
        assert 0 < _gauge(s.base_url, "token_usage") < 1
        httpx.post(s.base_url + "/abort_request", json={"abort_all": True})
        for t in threads:
            t.join()
        assert _gauge(s.base_url, "num_running_reqs") == 0.0
        assert _gauge(s.base_url, "token_usage") == 0.0


def test_max_running_requests_queues_the_rest() -> None:
    cfg = FakeConfig(model_name=MODEL, decode_step_s=0.01, max_running_requests=1)
    with FakeServer(cfg) as s:
        outs: list[dict[str, Any]] = [{}, {}]
        threads = [_background_stream(s.base_url, _chat(max_tokens=500), o) for o in outs]
        assert _gauge_becomes(s.base_url, "num_queue_reqs", 1.0) == 1.0
        assert _gauge(s.base_url, "num_running_reqs") == 1.0
        httpx.post(s.base_url + "/abort_request", json={"abort_all": True})  # the running one
        assert _gauge_becomes(s.base_url, "num_queue_reqs", 0.0) == 0.0
        assert _gauge_becomes(s.base_url, "num_running_reqs", 1.0) == 1.0  # the queued one starts
        httpx.post(s.base_url + "/abort_request", json={"abort_all": True})
        for t in threads:
            t.join()
        assert all(sse_events(o["raw"])[1] for o in outs)
        finishes = sorted(sse_events(o["raw"])[0][-1]["choices"][0]["finish_reason"] for o in outs)
        assert finishes == ["abort", "abort"]


def test_abort_request_ends_non_streaming_generation(srv: FakeServer) -> None:
    srv.script({"chunk_delay_s": 0.01})
    out: dict[str, Any] = {}

    def go() -> None:
        out["r"] = httpx.post(
            srv.base_url + "/v1/chat/completions",
            json=_chat(stream=False, max_tokens=200, rid="NS-1"),
            timeout=10,
        )

    t = threading.Thread(target=go)
    t.start()
    assert _gauge_becomes(srv.base_url, "num_running_reqs", 1.0) == 1.0
    assert httpx.post(srv.base_url + "/abort_request", json={"rid": "NS-1"}).status_code == 200
    t.join()
    body = out["r"].json()
    assert body["id"] == "NS-1"
    assert body["choices"][0]["finish_reason"] == "abort"
    assert 0 < body["usage"]["completion_tokens"] < 200
    log = srv.requests("/v1/chat/completions")
    assert log["aborts"][0]["rid"] == "NS-1" and log["aborts"][0]["matched"] is True
    assert log["requests"][0]["outcome"] == "aborted"


def test_abort_with_body_rid_does_not_reach_n_gt_1_samples(srv: FakeServer) -> None:
    srv.script({"chunk_delay_s": 0.01})
    out: dict[str, Any] = {}
    t = _background_stream(srv.base_url, _chat(max_tokens=200, n=2, rid="NRID"), out)
    assert _gauge_becomes(srv.base_url, "num_running_reqs", 2.0) == 2.0
    assert httpx.post(srv.base_url + "/abort_request", json={"rid": "NRID"}).status_code == 200
    assert srv.requests()["aborts"][0]["matched"] is False
    assert _gauge(srv.base_url, "num_running_reqs") == 2.0
    sample_rids = [r["rid"] for r in httpx.get(srv.base_url + "/_fake/state").json()["running"]]
    assert len(sample_rids) == 2 and all(len(r) == 32 for r in sample_rids)
    for rid in sample_rids:  # the per-sample ids do abort
        httpx.post(srv.base_url + "/abort_request", json={"rid": rid})
    t.join()
    chunks, done = sse_events(out["raw"])
    assert done
    assert {ch["id"] for ch in chunks} <= set(sample_rids)
    finishes = [ch["choices"][0]["finish_reason"] for ch in chunks]
    assert sorted(f for f in finishes if f) == ["abort", "abort"]


def test_client_disconnect_stops_generation(srv: FakeServer) -> None:
    srv.script({"chunk_delay_s": 0.01})
    with httpx.stream(
        "POST", srv.base_url + "/v1/chat/completions", json=_chat(max_tokens=200)
    ) as r:
        it = r.iter_raw()
        next(it)
    assert _gauge_becomes(srv.base_url, "num_running_reqs", 0.0) == 0.0
    entry = srv.requests("/v1/chat/completions")["requests"][0]
    assert entry["outcome"] == "client_disconnected"
    assert srv.requests()["disconnects"][0]["phase"] == "streaming"


def test_on_disconnect_ignore_keeps_generating_until_abort() -> None:
    cfg = FakeConfig(model_name=MODEL, decode_step_s=0.01, on_disconnect="ignore")
    with FakeServer(cfg) as s:
        with httpx.stream(
            "POST", s.base_url + "/v1/chat/completions", json=_chat(max_tokens=500, rid="LEAK")
        ) as r:
            next(r.iter_raw())
        wait_until(lambda: s.requests("/v1/chat/completions")["requests"][0]["client_disconnected"], 5,
                   "the fake to see the disconnect")
        assert _gauge(s.base_url, "num_running_reqs") == 1.0
        assert s.requests("/v1/chat/completions")["requests"][0]["client_disconnected"] is True
        assert httpx.post(s.base_url + "/abort_request", json={"rid": "LEAK"}).status_code == 200
        assert _gauge_becomes(s.base_url, "num_running_reqs", 0.0) == 0.0


def test_kill_resets_open_streams_and_refuses_new_connections() -> None:
    s = FakeServer(FakeConfig(model_name=MODEL, decode_step_s=0.01)).start()
    out: dict[str, Any] = {}
    t = _background_stream(s.base_url, _chat(max_tokens=1000), out)
    assert _gauge_becomes(s.base_url, "num_running_reqs", 1.0) == 1.0
    s.kill()
    t.join()
    assert out.get("error") in ("ReadError", "RemoteProtocolError")
    with pytest.raises(httpx.ConnectError):
        httpx.get(s.base_url + "/health")


def test_stop_is_prompt_with_a_hung_request() -> None:
    s = FakeServer(FakeConfig(model_name=MODEL)).start()
    s.script({"fault": "hang", "after_chunks": 1})
    out: dict[str, Any] = {}
    t = _background_stream(s.base_url, _chat(), out)
    assert _gauge_becomes(s.base_url, "num_running_reqs", 1.0) == 1.0
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 4
    t.join(5)
    assert not t.is_alive()


def test_restart_on_the_same_port() -> None:
    s = FakeServer(FakeConfig(model_name=MODEL)).start()
    port = s.port
    s.kill()
    with FakeServer(FakeConfig(model_name=MODEL), port=port) as s2:
        assert httpx.get(s2.base_url + "/health").status_code == 200


# --------------------------------------------------------------------------------------------
# control API: access log, health, metrics
# --------------------------------------------------------------------------------------------


def test_access_log_records_requests_not_control_calls(srv: FakeServer) -> None:
    t0 = time.time()
    with httpx.Client(base_url=srv.base_url) as c:
        c.post("/v1/chat/completions", json=_chat(stream=False, max_tokens=2, rid="LOG-1"))
        c.get("/health")
        c.get("/_fake/state")
        log = c.get("/_fake/requests").json()
        only_chat = c.get("/_fake/requests", params={"path": "/v1/chat/completions"}).json()
    assert [e["path"] for e in log["requests"]] == ["/v1/chat/completions", "/health"]
    first = log["requests"][0]
    assert first["body"]["rid"] == "LOG-1" and first["rids"] == ["LOG-1"]
    assert first["stream"] is False and first["status"] == 200 and first["outcome"] == "completed"
    assert first["method"] == "POST" and t0 <= first["time"] <= time.time()
    assert [e["path"] for e in only_chat["requests"]] == ["/v1/chat/completions"]
    httpx.post(srv.base_url + "/_fake/reset")
    assert httpx.get(srv.base_url + "/_fake/requests").json() == {
        "requests": [],
        "aborts": [],
        "disconnects": [],
    }


def test_health_switch(srv: FakeServer) -> None:
    with httpx.Client(base_url=srv.base_url) as c:
        assert c.post("/_fake/health", json={"status": 503}).status_code == 200
        assert c.get("/health").status_code == 503
        assert c.get("/health_generate").status_code == 503
        c.post("/_fake/health", json={"status": None, "delay_s": 0.3})
        t0 = time.monotonic()
        assert c.get("/health").status_code == 200
        assert time.monotonic() - t0 >= 0.28
        c.post("/_fake/health", json={"delay_s": None})
        r = c.get("/health")
        assert (r.status_code, r.content) == (200, b"")


def test_metrics_overrides_and_failure(srv: FakeServer) -> None:
    with httpx.Client(base_url=srv.base_url) as c:
        c.post(
            "/_fake/metrics",
            json={"gauges": {"num_running_reqs": 7, "num_queue_reqs": 3, "token_usage": 0.5}},
        )
        assert _gauge(srv.base_url, "num_running_reqs") == 7.0
        assert _gauge(srv.base_url, "num_queue_reqs") == 3.0
        assert _gauge(srv.base_url, "token_usage") == 0.5
        c.post("/_fake/metrics", json={"gauges": {"num_queue_reqs": None}})
        assert _gauge(srv.base_url, "num_queue_reqs") == 0.0
        assert _gauge(srv.base_url, "num_running_reqs") == 7.0
        c.post("/_fake/metrics", json={"status": 500})
        assert c.get("/metrics").status_code == 500
        c.post("/_fake/metrics", json={"status": None, "body_text": "garbage{"})
        assert c.get("/metrics").text == "garbage{"
        assert c.post("/_fake/metrics", json={"gauges": {"bogus": 1}}).status_code == 400


def test_metrics_exposition_exact_line(srv: FakeServer) -> None:
    text = httpx.get(srv.base_url + "/metrics").text
    assert (
        'sglang:num_running_reqs{engine_type="unified",model_name="fault-model",'
        'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0'
    ) in text.splitlines()
    assert "# TYPE sglang:prompt_tokens_total counter" in text
    assert (
        'sglang:num_requests_total{engine_type="unified",is_streaming="false",'
        'model_name="fault-model"} 0.0'
    ) in text.splitlines()


def test_data_parallel_series_and_underscore_prefix() -> None:
    cfg = FakeConfig(model_name=MODEL, dp_size=2, metrics_prefix="sglang_")
    with FakeServer(cfg) as s:
        httpx.post(
            s.base_url + "/_fake/metrics", json={"dp_gauges": {"1": {"num_running_reqs": 4}}}
        )
        lines = [
            ln
            for ln in httpx.get(s.base_url + "/metrics").text.splitlines()
            if ln.startswith("sglang_num_running_reqs{")
        ]
        info = httpx.get(s.base_url + "/server_info").json()
    labels = (
        'engine_type="unified",model_name="fault-model",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    )
    assert lines == [
        f'sglang_num_running_reqs{{dp_rank="0",{labels}}} 0.0',
        f'sglang_num_running_reqs{{dp_rank="1",{labels}}} 4.0',
    ]
    assert len(info["internal_states"]) == 2


def test_metrics_disabled_is_404() -> None:
    with FakeServer(FakeConfig(enable_metrics=False)) as s:
        assert httpx.get(s.base_url + "/metrics").status_code == 404


# --------------------------------------------------------------------------------------------
# SGLang semantics the fake reproduces
# --------------------------------------------------------------------------------------------


def test_speculative_reserved_tokens_and_accept_length() -> None:
    cfg = FakeConfig(
        model_name=MODEL,
        context_length=64,
        speculative_algorithm="EAGLE3",
        spec_accept_length=3.25,
        spec_accept_rate=0.56,
    )
    with FakeServer(cfg) as s, httpx.Client(base_url=s.base_url) as c:
        assert "avg_spec_accept_length" not in c.get("/server_info").json()["internal_states"][0]
        msgs = [{"role": "user", "content": words(58)}]  # P = 60, R = 4
        r = c.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 1})
        assert r.json()["message"] == (
            "The input (64 tokens) is longer than the model's context length (64 tokens)."
        )
        c.post("/v1/chat/completions", json=_chat(stream=False, max_tokens=2))
        state0 = c.get("/server_info").json()["internal_states"][0]
        assert state0["avg_spec_accept_length"] == 3.25
        assert _gauge(s.base_url, "spec_accept_length") == 3.25
        assert _gauge(s.base_url, "spec_accept_rate") == 0.56
        c.post("/_fake/metrics", json={"avg_spec_accept_length": 1.5})
        assert c.get("/server_info").json()["internal_states"][0]["avg_spec_accept_length"] == 1.5


def test_scheduler_input_check_streamed_and_not() -> None:
    # C = 64: max_req_len 63, max_req_input_len 58; P = 60 passes the tokenizer checks.
    with FakeServer(FakeConfig(model_name=MODEL, context_length=64)) as s:
        msgs = [{"role": "user", "content": words(58)}]
        r = httpx.post(
            s.base_url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 2}
        )
        assert r.status_code == 400
        assert r.json()["message"] == (
            "Input length (60 tokens) exceeds the maximum allowed length (58 tokens). "
            "Use a shorter input or enable --allow-auto-truncate."
        )
        r = httpx.post(
            s.base_url + "/v1/chat/completions",
            json={"messages": msgs, "max_tokens": 2, "stream": True},
        )
        assert r.status_code == 200
        assert r.content == (
            b'data: {"error": {"object": "error", "message": "Input length (60 tokens) exceeds '
            b"the maximum allowed length (58 tokens). Use a shorter input or enable "
            b'--allow-auto-truncate.", "type": "BAD_REQUEST", "param": null, "code": 400}}\n\n'
            b"data: [DONE]\n\n"
        )


def test_stop_string_and_eos(srv: FakeServer) -> None:
    r = httpx.post(
        srv.base_url + "/v1/chat/completions",
        json=_chat(stream=False, max_tokens=10, stop=["tok3"]),
    )
    ch = r.json()["choices"][0]
    assert (ch["message"]["content"], ch["finish_reason"], ch["matched_stop"]) == (
        "tok0 tok1 tok2 ",
        "stop",
        "tok3",
    )
    with FakeServer(FakeConfig(eos_after_tokens=3, eos_token_id=7)) as s:
        r = httpx.post(s.base_url + "/v1/completions", json={"prompt": "x", "max_tokens": 10})
        ch = r.json()["choices"][0]
        assert (ch["text"], ch["finish_reason"], ch["matched_stop"]) == (
            "tok0 tok1 tok2",
            "stop",
            7,
        )
        r = httpx.post(
            s.base_url + "/v1/completions",
            json={"prompt": "x", "max_tokens": 10, "ignore_eos": True},
        )
        assert r.json()["usage"]["completion_tokens"] == 10


def test_chat_without_limit_runs_to_the_clipped_room() -> None:
    with FakeServer(FakeConfig(model_name=MODEL, context_length=32)) as s:
        r = httpx.post(
            s.base_url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "a b"}]},
        )
        # P = 4, room = max_req_len - P - 1 = 31 - 4 - 1
        assert r.json()["usage"]["completion_tokens"] == 26
        assert r.json()["choices"][0]["finish_reason"] == "length"


def test_batch_rids_and_generate_errors(srv: FakeServer) -> None:
    with httpx.Client(base_url=srv.base_url) as c:
        r = c.post(
            "/v1/completions",
            json={"prompt": ["a", "b c"], "max_tokens": 1, "rid": "B", "stream": True},
        )
        chunks, _ = sse_events(r.content)
        assert sorted(ch["id"] for ch in chunks) == ["B_0", "B_1"]
        r = c.post("/generate", json={"text": words(300), "sampling_params": {"max_new_tokens": 1}})
        assert r.status_code == 400
        assert r.json() == {
            "error": {
                "message": "The input (300 tokens) is longer than the "
                "model's context length (256 tokens)."
            }
        }


def test_content_type_must_be_json(srv: FakeServer) -> None:
    r = httpx.post(
        srv.base_url + "/v1/chat/completions",
        content=json.dumps(_chat()),
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 400
    assert r.json()["type"] == "Bad Request"


def test_tokenizer_mode_counts_like_sglang(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    path = str(make_test_tokenizer(tmp_path / "tok"))
    tok = AutoTokenizer.from_pretrained(path)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    rendered = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    expected = len(tok.encode(rendered, add_special_tokens=False))
    with FakeServer(FakeConfig(model_name=MODEL, tokenizer_path=path)) as s:
        r = httpx.post(
            s.base_url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 1}
        )
        assert r.json()["usage"]["prompt_tokens"] == expected
        r = httpx.post(
            s.base_url + "/v1/completions", json={"prompt": "the lazy dog", "max_tokens": 1}
        )
        assert r.json()["usage"]["prompt_tokens"] == len(tok.encode("the lazy dog"))


async def test_in_process_app_with_httpx_asgi_transport() -> None:
    """The app also runs without a socket (faults that need one are the exception)."""
    from serving.fake_sglang import create_fake_app

    app = create_fake_app(FakeConfig(model_name=MODEL))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fake") as c:
        r = await c.post("/v1/chat/completions", json=_chat(max_tokens=2))
        chunks, done = sse_events(r.content)
        assert done and len(chunks) == 4
    assert app.state.fake.log[0]["outcome"] == "completed"
    await asyncio.sleep(0)


def test_cli_serves_and_stops_on_sigterm() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serving.fake_sglang",
            "--port",
            str(port),
            "--model-name",
            "cli-m",
            "--context-length",
            "128",
            "--speculative",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        def models() -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            except httpx.TransportError:
                return None

        r = wait_until(models, 20, "the CLI fake to start", interval=0.1)
        assert r.json()["data"][0]["id"] == "cli-m"
        assert r.json()["data"][0]["max_model_len"] == 128
        info = httpx.get(f"http://127.0.0.1:{port}/server_info").json()
        assert info["speculative_algorithm"] == "EAGLE3"
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn re-raises SIGTERM after its graceful shutdown
        assert proc.wait(10) in (0, -signal.SIGTERM)
        assert proc.stderr is not None
        proc.stderr.close()


def test_env_is_untouched() -> None:
    """No module-level state: two fakes in one process answer independently."""
    with FakeServer(FakeConfig(model_name="a")) as a, FakeServer(FakeConfig(model_name="b")) as b:
        a.script({"status": 500})
        assert httpx.post(b.base_url + "/v1/completions", json={"prompt": "x"}).status_code == 200
        assert httpx.post(a.base_url + "/v1/completions", json={"prompt": "x"}).status_code == 500
        assert a.requests()["requests"][0]["path"] == "/v1/completions"
        assert len(b.requests()["requests"]) == 1
    assert os.environ.get("SPECGATE_FAKE_GLOBAL") is None
