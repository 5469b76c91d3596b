"""The real :class:`router.upstream.proxy.ProxyResponse` over :class:`tests.support.transport.MockTransport`:
no sockets, a real ASGI ``send``/``receive`` pair, waits on events (the proxy's contract is its
module docstring; the same cases over 127.0.0.1 and aiohttp are tests/integration/
test_router_proxy.py, test_backpressure.py and test_keepalive.py).

Every test ends with :meth:`Fleet.settled`: each lease taken was released exactly once, no
endpoint keeps an in-flight request, and ``on_done`` ran once. ``job.rejections`` and
``job.stale_retries`` are what the pipeline counts as ``specgate_engine_rejections_total`` and
``specgate_upstream_stale_connection_retries_total``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from router.config.tree import UpstreamConfig
from router.decision.policy import Decision
from router.reasons import Reason
from router.request.features import RequestFeatures
from router.state.endpoint import Endpoint
from router.upstream.proxy import (
    ENGINE_ABORT_EVENT,
    UPSTREAM_FAILED_EVENT,
    ProxyJob,
    ProxyResponse,
    Redecision,
)
from router.upstream.transport import ConnectFailed, ConnectionBroken, PayloadBroken
from tests.support.transport import HANG, MockAbort, MockRequest, MockTransport, Scripted, sse

SPEC_A, SPEC_B, PLAIN = "http://spec-a.test:30000", "http://spec-b.test:30000", "http://plain.test:30000"
CHAT = "/v1/chat/completions"
BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"rid":"rid-1"}'
NOW = 100.0  # the proxy's clock (s)
OVERLOADED = (b'{"error":{"message":"all pools are at capacity","type":"server_error","param":null,'
              b'"code":"engine_overloaded"}}')
CONNECTION_FAILED = (b'{"error":{"message":"upstream connection failed","type":"server_error","param":null,'
                     b'"code":"upstream_connection_error"}}')
WORKER_FAILED = (b'{"error":{"message":"upstream worker failed","type":"server_error","param":null,'
                 b'"code":"upstream_error"}}')
ROLE = b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'
QUEUE_FULL = (b'{"error": {"object": "error", "message": "The request queue is full.", '
              b'"type": "SERVICE_UNAVAILABLE", "param": null, "code": 503}}')


def tok(text: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
                      separators=(",", ":")).encode()


def answer(text: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}]}, separators=(",", ":")).encode()


class Ledger:
    """A :class:`router.state.endpoint.LeaseLedger` that records every lease taken and returned."""

    def __init__(self) -> None:
        self.taken: list[tuple[str, str]] = []
        self.returned: list[tuple[str, str]] = []

    def acquired(self, endpoint: Endpoint) -> str:
        lease_id = f"L{len(self.taken)}"
        self.taken.append((endpoint.url, lease_id))
        return lease_id

    def released(self, endpoint: Endpoint, lease_id: str) -> None:
        self.returned.append((endpoint.url, lease_id))


class Fleet:
    """Healthy endpoints in preference order and the proxy's ``redecide``: the first endpoint
    that is healthy and neither excluded nor in an excluded pool."""

    def __init__(self, *urls: str) -> None:
        self.ledger = Ledger()
        self.endpoints = {u: Endpoint(u, "plain" if u == PLAIN else "spec", state="healthy", ledger=self.ledger)
                          for u in urls}

    def __getitem__(self, url: str) -> Endpoint:
        return self.endpoints[url]

    def redecide(self, excluded: frozenset[str], excluded_pools: frozenset[str] = frozenset()) -> Redecision:
        for ep in self.endpoints.values():
            if ep.healthy and ep.url not in excluded and ep.pool not in excluded_pools:
                reason = Reason.SPECULATIVE if ep.pool == "spec" else Reason.SPEC_UNHEALTHY
                return Redecision(Decision(ep.pool, ep.url, reason), ep.lease())
        return Redecision(Decision(None, None, Reason.NO_HEALTHY_UPSTREAM))

    def settled(self) -> bool:
        counts = collections.Counter(self.ledger.returned)
        assert sorted(counts) == sorted(self.ledger.taken) and set(counts.values()) <= {1}, self.ledger.__dict__
        assert all(ep.inflight == 0 for ep in self.endpoints.values())
        return True


@dataclass
class Result:
    job: ProxyJob
    messages: list[dict[str, Any]] = field(default_factory=list)
    done: list[ProxyJob] = field(default_factory=list)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.messages[0]["headers"]}

    @property
    def body(self) -> bytes:
        bodies = self.messages[1:]
        assert bodies and bodies[-1]["more_body"] is False and all(m["more_body"] for m in bodies[:-1])
        return b"".join(m["body"] for m in bodies)

    def error(self) -> tuple[str, str | None, str | None]:
        err = json.loads(self.body)["error"]
        assert set(err) == {"message", "type", "param", "code"}
        return err["type"], err["code"], err["param"]


class Client:
    """One request through the real ProxyResponse: ``send`` records the ASGI messages (and sets
    :attr:`body_sent` on a body message); ``receive`` answers ``http.disconnect`` once
    :attr:`gone` is set."""

    def __init__(self, fleet: Fleet, transport: MockTransport, *, stream: bool,
                 upstream: UpstreamConfig | None = None, rids: tuple[str, ...] = ("rid-1",)) -> None:
        first = fleet.redecide(frozenset())
        assert first.lease is not None
        features = RequestFeatures(prompt_tokens=12, max_new_tokens=16, stream=stream)
        self.job = ProxyJob("req-1", CHAT, BODY, features, first.decision, first.lease, rids, time.perf_counter())
        self.result = Result(self.job)
        self.gone = asyncio.Event()
        self.body_sent = asyncio.Event()
        self.spawned: list[asyncio.Task[Any]] = []
        self.response = ProxyResponse(
            self.job, transport=transport, upstream=upstream or UpstreamConfig(), redecide=fleet.redecide,
            on_done=self.result.done.append, spawn=lambda coro: self.spawned.append(asyncio.ensure_future(coro)),
            retry_after_s=3, clock=lambda: NOW)

    async def send(self, message: dict[str, Any]) -> None:
        self.result.messages.append(message)
        if message["type"] == "http.response.body":
            self.body_sent.set()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def run(self) -> Result:
        await self.response({"type": "http", "path": CHAT}, self.receive, self.send)
        await asyncio.gather(*self.spawned)  # the fire-and-forget /abort_request calls
        assert self.result.done == [self.job]  # on_done exactly once
        return self.result


def by_endpoint(script: dict[str, Any]):
    """A handler answering each endpoint from ``script[url]``: a Scripted, an exception to
    raise, or a list of either, used in turn."""
    queues = {url: list(v) if isinstance(v, list) else [v] for url, v in script.items()}

    def handler(request: MockRequest) -> Scripted:
        queue = queues[request.base]
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return Scripted(item.status, list(item.chunks), dict(item.headers))  # a fresh body per request

    return handler


async def proxy(fleet: Fleet, script: dict[str, Any], *, stream: bool = False, **kw: Any) -> tuple[Result, MockTransport]:
    transport = MockTransport(by_endpoint(script))
    result = await Client(fleet, transport, stream=stream, **kw).run()
    assert all(r.body == BODY and r.headers["x-request-id"] == "req-1" for r in transport.requests)
    assert all(r.closed for r in transport.responses)  # every response the proxy got is closed
    return result, transport


# -- before the first byte: failover -------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_connect_refused_marks_down_and_fails_over_to_the_pools_other_endpoint(stream):
    fleet = Fleet(SPEC_A, SPEC_B, PLAIN)
    good = Scripted.stream(sse(ROLE, tok("hi"))) if stream else Scripted.json(200, answer("hi"))
    r, t = await proxy(fleet, {SPEC_A: ConnectFailed("refused"), SPEC_B: good}, stream=stream)
    assert r.status == 200
    assert r.body == (b"".join(sse(ROLE, tok("hi"))) if stream else answer("hi"))
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("spec", "speculative")
    assert t.bases() == [SPEC_A, SPEC_B] and [q.fresh for q in t.requests] == [False, False]
    assert fleet[SPEC_A].state == "unhealthy" and fleet[SPEC_B].healthy
    assert (r.job.attempts, r.job.outcome, r.job.status) == (2, "connect_failed", 200)
    assert t.aborts == []  # nothing reached an engine
    assert fleet.settled()


async def test_connect_refused_everywhere_is_502_and_every_endpoint_is_down():
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: ConnectFailed("refused"), PLAIN: ConnectFailed("refused")})
    assert (r.status, r.error()) == (502, ("server_error", "upstream_error", None))
    assert t.bases() == [SPEC_A, PLAIN]
    assert not fleet[SPEC_A].healthy and not fleet[PLAIN].healthy
    assert fleet.settled()


@pytest.mark.parametrize("stream", [False, True])
async def test_engine_500_fails_over_to_the_other_pool_without_marking_it_down(stream):
    fleet = Fleet(SPEC_A, PLAIN)
    good = Scripted.stream(sse(ROLE, tok("ok"))) if stream else Scripted.json(200, answer("ok"))
    r, t = await proxy(fleet, {SPEC_A: Scripted.json(500, b"Internal Server Error"), PLAIN: good}, stream=stream)
    assert r.status == 200 and r.headers["x-specgate-pool"] == "plain"
    assert r.body == (b"".join(sse(ROLE, tok("ok"))) if stream else answer("ok"))
    assert t.bases() == [SPEC_A, PLAIN]
    assert fleet[SPEC_A].healthy  # it answered: not a health signal
    assert fleet.settled()


async def test_engine_500_everywhere_is_502_upstream_error():
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: Scripted.json(500, b"boom"), PLAIN: Scripted.json(502, b"bad gateway")})
    assert (r.status, r.body) == (502, WORKER_FAILED)
    assert t.bases() == [SPEC_A, PLAIN]
    assert fleet.settled()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status,message,expected", [
    (400, "The input (5000 tokens) is longer than the model's context length (2048 tokens).",
     ("invalid_request_error", "context_length_exceeded", "messages")),
    (400, "bad sampling param", ("invalid_request_error", None, None)),
    (422, "unprocessable", ("invalid_request_error", None, None)),
])
async def test_engine_4xx_is_the_same_status_as_an_openai_error_and_not_retried(stream, status, message, expected):
    fleet = Fleet(SPEC_A, PLAIN)
    engine = json.dumps({"object": "error", "message": message, "type": "BadRequestError", "param": None,
                         "code": status})
    r, t = await proxy(fleet, {SPEC_A: Scripted.json(status, engine)}, stream=stream)
    assert (r.status, r.error()) == (status, expected)
    assert json.loads(r.body)["error"]["message"] == message
    assert r.headers["content-type"] == "application/json" and r.headers["x-should-retry"] == "false"
    assert t.bases() == [SPEC_A] and fleet[SPEC_A].healthy
    assert fleet.settled()


# -- engine back-pressure ------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_503_with_retry_after_from_both_pools_is_503_engine_overloaded(stream):
    fleet = Fleet(SPEC_A, PLAIN)
    full = json.dumps({"object": "error", "message": "The request queue is full.", "type": "503",
                       "param": None, "code": 503})
    r, t = await proxy(fleet, {SPEC_A: Scripted.json(503, full, {"Retry-After": "4"}),
                               PLAIN: Scripted.json(503, full, {"Retry-After": "7"})}, stream=stream)
    assert (r.status, r.body) == (503, OVERLOADED)
    assert r.headers["retry-after"] == "7"  # the largest an engine sent
    assert r.headers["content-type"] == "application/json"
    assert t.bases() == [SPEC_A, PLAIN]
    assert r.job.rejections == [("spec", "http_503"), ("plain", "http_503")]
    assert (r.job.outcome, r.job.status) == ("engine_overloaded", 503)
    assert (fleet[SPEC_A].backpressure_until, fleet[PLAIN].backpressure_until) == (NOW + 4, NOW + 7)
    assert fleet[SPEC_A].backpressured(NOW) and fleet[PLAIN].backpressured(NOW)
    assert fleet[SPEC_A].healthy and fleet[PLAIN].healthy  # busy is not dead
    assert fleet.settled()


async def test_503_without_retry_after_uses_the_configured_hold_and_retry_after():
    fleet = Fleet(SPEC_A, PLAIN)
    up = UpstreamConfig(backpressure_hold_s=1.5)
    r, _ = await proxy(fleet, {SPEC_A: Scripted.json(503, b""), PLAIN: Scripted.json(503, b"")}, upstream=up)
    assert (r.status, r.body, r.headers["retry-after"]) == (503, OVERLOADED, "3")  # retry_after_s
    assert fleet[SPEC_A].backpressure_until == NOW + 1.5
    assert fleet.settled()


async def test_retry_after_above_the_max_hold_is_capped():
    fleet = Fleet(SPEC_A, PLAIN)
    up = UpstreamConfig(backpressure_max_hold_s=10)
    r, _ = await proxy(fleet, {SPEC_A: Scripted.json(429, b"", {"retry-after": "600"}),
                               PLAIN: Scripted.json(200, answer("x"))}, upstream=up)
    assert r.status == 200
    assert fleet[SPEC_A].backpressure_until == NOW + 10
    assert fleet.settled()


@pytest.mark.parametrize("stream", [False, True])
async def test_429_then_success_on_the_other_pool(stream):
    fleet = Fleet(SPEC_A, SPEC_B, PLAIN)
    good = Scripted.stream(sse(ROLE, tok("p"))) if stream else Scripted.json(200, answer("p"))
    r, t = await proxy(fleet, {SPEC_A: Scripted.json(429, b'{"message":"Too many requests"}', {"retry-after": "2"}),
                               SPEC_B: Scripted.json(200, answer("never")), PLAIN: good}, stream=stream)
    assert r.status == 200
    assert (r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]) == ("plain", "spec_unhealthy")
    assert r.body == (b"".join(sse(ROLE, tok("p"))) if stream else answer("p"))
    assert t.bases() == [SPEC_A, PLAIN]  # the refusing pool is excluded, not only its endpoint
    assert r.job.rejections == [("spec", "http_429")]
    assert fleet[SPEC_A].backpressure_until == NOW + 2 and fleet[SPEC_A].backpressure_count == 1
    assert fleet[SPEC_A].healthy
    assert fleet.settled()


async def test_refusal_then_500_elsewhere_answers_the_500s_502():
    fleet = Fleet(SPEC_A, PLAIN)
    r, _ = await proxy(fleet, {SPEC_A: Scripted.json(500, b""), PLAIN: Scripted.json(503, b"")})
    assert (r.status, r.body) == (502, WORKER_FAILED)  # a failure that was not a refusal stands
    assert fleet.settled()


async def test_stream_error_event_before_content_is_back_pressure():
    """SGLang's queue-full refusal after the status line: HTTP 200 and one error event with
    code 503 (sgl-project/sglang#28175)."""
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream(sse(QUEUE_FULL)),
                               PLAIN: Scripted.stream(sse(ROLE, tok("fine")))}, stream=True)
    assert r.status == 200 and r.headers["x-specgate-pool"] == "plain"
    assert r.body == b"".join(sse(ROLE, tok("fine")))
    assert b"queue is full" not in r.body
    assert t.bases() == [SPEC_A, PLAIN]
    assert r.job.rejections == [("spec", "stream_error")]
    assert fleet[SPEC_A].backpressure_until == NOW + UpstreamConfig().backpressure_hold_s
    assert fleet.settled()


async def test_stream_error_event_with_code_400_is_a_real_400():
    fleet = Fleet(SPEC_A, PLAIN)
    event = json.dumps({"error": {"object": "error", "type": "BadRequest", "param": None, "code": 400,
                                  "message": "Input length (4093 tokens) exceeds the maximum allowed length"}})
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream(sse(ROLE, event))}, stream=True)
    assert (r.status, r.error()) == (400, ("invalid_request_error", "context_length_exceeded", "messages"))
    assert t.bases() == [SPEC_A]
    assert fleet.settled()


async def test_stream_abort_before_content_is_back_pressure():
    fleet = Fleet(SPEC_A, PLAIN)
    aborted = b'{"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}'
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream(sse(ROLE, aborted)),
                               PLAIN: Scripted.stream(sse(ROLE, tok("x")))}, stream=True)
    assert r.status == 200 and r.body == b"".join(sse(ROLE, tok("x")))
    assert t.bases() == [SPEC_A, PLAIN] and r.job.rejections == [("spec", "stream_abort")]
    assert fleet.settled()


async def test_nonstream_abort_without_output_is_resent_as_back_pressure():
    """A 200 body whose choice ended ``finish_reason: "abort"`` with no output (an engine
    eviction, sgl-project/sglang#16369) is never relayed as a 200."""
    fleet = Fleet(SPEC_A, PLAIN)
    evicted = b'{"choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"abort"}]}'
    r, t = await proxy(fleet, {SPEC_A: Scripted.json(200, evicted), PLAIN: Scripted.json(200, answer("ok"))})
    assert (r.status, r.body) == (200, answer("ok"))
    assert t.bases() == [SPEC_A, PLAIN]
    assert r.job.rejections == [("spec", "body_abort")]
    assert fleet[SPEC_A].backpressured(NOW) and fleet[SPEC_A].healthy
    assert fleet.settled()


async def test_nonstream_abort_with_output_is_502_engine_abort():
    fleet = Fleet(SPEC_A, PLAIN)
    cut = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"half"},"finish_reason":"abort"}]}'
    r, t = await proxy(fleet, {SPEC_A: Scripted.json(200, cut)})
    assert (r.status, r.error()) == (502, ("server_error", "engine_abort", None))
    assert t.bases() == [SPEC_A]
    assert fleet.settled()


# -- stale keep-alive connections ----------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_stale_reused_connection_is_aborted_then_resent_fresh_on_the_same_lease(stream):
    fleet = Fleet(SPEC_A, PLAIN)
    good = Scripted.stream(sse(ROLE, tok("again"))) if stream else Scripted.json(200, answer("again"))
    transport = MockTransport(by_endpoint({SPEC_A: [ConnectionBroken("reset", reused=True), good]}))
    client = Client(fleet, transport, stream=stream)
    lease = client.job.lease
    r = await client.run()
    assert r.status == 200 and r.headers["x-specgate-pool"] == "spec"
    assert r.body == (b"".join(sse(ROLE, tok("again"))) if stream else answer("again"))
    assert [(type(e).__name__, e.base, getattr(e, "fresh", None)) for e in transport.log] == [
        ("MockRequest", SPEC_A, False), ("MockAbort", SPEC_A, True), ("MockRequest", SPEC_A, True)]
    assert transport.aborts == [MockAbort(SPEC_A, "rid-1", True)]  # before the resend
    assert r.job.lease is lease and len(fleet.ledger.taken) == 1  # same endpoint, same lease
    assert (r.job.stale_retries, r.job.attempts, r.job.outcome) == (["spec"], 1, "ok")
    assert fleet[SPEC_A].healthy  # not a health signal
    assert fleet.settled()


async def test_stale_connection_without_engine_ids_is_resent_with_no_abort():
    """``n > 1``: SGLang names each sample itself, so there is no rid to abort; the resend
    still goes out once, fresh."""
    fleet = Fleet(SPEC_A, PLAIN)
    transport = MockTransport(by_endpoint({SPEC_A: [ConnectionBroken("reset", reused=True),
                                                    Scripted.json(200, answer("n2"))]}))
    r = await Client(fleet, transport, stream=False, rids=()).run()
    assert (r.status, r.body) == (200, answer("n2"))
    assert [q.fresh for q in transport.requests] == [False, True] and transport.aborts == []
    assert fleet.settled()


@pytest.mark.parametrize("stream", [False, True])
async def test_break_on_a_fresh_connection_is_502_and_never_resent(stream):
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: ConnectionBroken("reset", reused=False)}, stream=stream)
    assert (r.status, r.body) == (502, CONNECTION_FAILED)
    assert r.headers["content-type"] == "application/json"
    assert t.bases() == [SPEC_A] and t.aborts == []
    assert not fleet[SPEC_A].healthy  # a fresh connection that breaks is a health signal
    assert (r.job.outcome, r.job.stale_retries) == ("upstream_connection_error", [])
    assert fleet.settled()


async def test_stale_resend_that_breaks_again_is_502_upstream_connection_error():
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: [ConnectionBroken("reset", reused=True),
                                        ConnectionBroken("reset", reused=False)]})
    assert (r.status, r.body) == (502, CONNECTION_FAILED)
    assert [(q.base, q.fresh) for q in t.requests] == [(SPEC_A, False), (SPEC_A, True)]
    assert t.aborts == [MockAbort(SPEC_A, "rid-1", True)]
    assert r.job.stale_retries == ["spec"] and not fleet[SPEC_A].healthy
    assert fleet.settled()


async def test_break_after_the_status_line_is_502_upstream_error():
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: Scripted(200, [b'{"choices":', PayloadBroken("cut")])})
    assert (r.status, r.body) == (502, WORKER_FAILED)
    assert t.bases() == [SPEC_A] and not fleet[SPEC_A].healthy
    assert r.job.outcome == "upstream_reset"
    assert fleet.settled()


# -- timeouts --------------------------------------------------------------------------------
FAST = UpstreamConfig(first_byte_timeout_s=0.05, first_byte_s_per_1k_tokens=0.0)


async def test_stream_first_byte_timeout_aborts_and_fails_over():
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream([HANG]), PLAIN: Scripted.stream(sse(ROLE, tok("late")))},
                       stream=True, upstream=FAST)
    assert r.status == 200 and r.headers["x-specgate-pool"] == "plain"  # nothing had reached the client
    assert r.body == b"".join(sse(ROLE, tok("late")))
    assert t.bases() == [SPEC_A, PLAIN]
    assert t.aborts == [MockAbort(SPEC_A, "rid-1", False)]
    assert r.job.extra["aborted"] == SPEC_A
    assert fleet.settled()


async def test_stream_first_byte_timeout_everywhere_is_504_and_aborts_both():
    fleet = Fleet(SPEC_A, PLAIN)
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream([HANG]), PLAIN: Scripted.stream([HANG])},
                       stream=True, upstream=FAST)
    assert (r.status, r.error()) == (504, ("server_error", "upstream_timeout", None))
    assert t.aborts == [MockAbort(SPEC_A, "rid-1", False), MockAbort(PLAIN, "rid-1", False)]
    assert fleet.settled()


async def test_nonstream_timeout_is_504_and_not_retried():
    fleet = Fleet(SPEC_A, PLAIN)
    up = UpstreamConfig(nonstream_timeout_s=0.05)
    r, t = await proxy(fleet, {SPEC_A: Scripted(200, [HANG])}, upstream=up)
    assert (r.status, r.error()) == (504, ("server_error", "upstream_timeout", None))
    assert t.bases() == [SPEC_A] and t.aborts == [MockAbort(SPEC_A, "rid-1", False)]
    assert fleet.settled()


# -- after the first byte --------------------------------------------------------------------
@pytest.mark.parametrize("fault", [PayloadBroken("cut"), ConnectionBroken("reset")], ids=["payload", "reset"])
async def test_midstream_failure_relays_the_content_then_one_error_event_and_no_done(fault):
    fleet = Fleet(SPEC_A, PLAIN)
    chunks = sse(ROLE, tok("a"), tok(" b"), done=False)
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream([*chunks, fault])}, stream=True)
    assert r.status == 200
    assert r.body == b"".join(chunks) + UPSTREAM_FAILED_EVENT
    assert t.bases() == [SPEC_A]  # never retried after the first byte
    assert not fleet[SPEC_A].healthy
    assert r.job.outcome == "upstream_reset_midstream"
    assert fleet.settled()


async def test_stream_ending_without_done_gets_the_error_event():
    fleet = Fleet(SPEC_A, PLAIN)
    chunks = sse(ROLE, tok("a"), done=False)
    r, _ = await proxy(fleet, {SPEC_A: Scripted.stream(chunks)}, stream=True)
    assert r.body == b"".join(chunks) + UPSTREAM_FAILED_EVENT and b"[DONE]" not in r.body
    assert r.job.outcome == "upstream_truncated"
    assert fleet.settled()


async def test_engine_abort_after_content_is_the_content_then_one_engine_abort_event():
    fleet = Fleet(SPEC_A, PLAIN)
    aborted = b'{"choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}'
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream(sse(ROLE, tok("a"), aborted))}, stream=True)
    assert r.status == 200
    assert r.body == b"".join(sse(ROLE, tok("a"), done=False)) + ENGINE_ABORT_EVENT
    assert b"[DONE]" not in r.body and b'"abort"' not in r.body
    assert t.bases() == [SPEC_A] and fleet[SPEC_A].healthy
    assert r.job.outcome == "engine_abort"
    assert fleet.settled()


async def test_stream_idle_timeout_sends_the_timeout_event_and_aborts():
    from router.upstream.proxy import UPSTREAM_TIMEOUT_EVENT
    fleet = Fleet(SPEC_A, PLAIN)
    chunks = sse(ROLE, tok("a"), done=False)
    r, t = await proxy(fleet, {SPEC_A: Scripted.stream([*chunks, HANG])}, stream=True,
                       upstream=UpstreamConfig(idle_timeout_s=0.05))
    assert r.body == b"".join(chunks) + UPSTREAM_TIMEOUT_EVENT
    assert t.aborts == [MockAbort(SPEC_A, "rid-1", False)]
    assert r.job.outcome == "upstream_idle_timeout"
    assert fleet.settled()


# -- client disconnect -----------------------------------------------------------------------
async def test_client_disconnect_while_waiting_for_the_engine_aborts_upstream():
    fleet = Fleet(SPEC_A, PLAIN)

    async def never(request: MockRequest) -> Scripted:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    transport = MockTransport(never)
    client = Client(fleet, transport, stream=True, rids=("rid-1_0", "rid-1_1"))
    task = asyncio.create_task(client.run())
    await transport.arrived.wait()
    client.gone.set()
    r = await task
    assert r.messages == []  # nothing was sent to a client that left
    assert transport.aborts == [MockAbort(SPEC_A, "rid-1_0", False), MockAbort(SPEC_A, "rid-1_1", False)]
    assert (r.job.status, r.job.outcome) == (499, "client_disconnect")
    assert fleet.settled()


async def test_client_disconnect_mid_stream_aborts_upstream_and_closes_the_response():
    fleet = Fleet(SPEC_A, PLAIN)
    transport = MockTransport(by_endpoint({SPEC_A: Scripted.stream([*sse(ROLE, tok("a"), done=False), HANG])}))
    client = Client(fleet, transport, stream=True)
    task = asyncio.create_task(client.run())
    await client.body_sent.wait()
    client.gone.set()
    r = await task
    assert r.status == 200 and b"".join(m.get("body", b"") for m in r.messages[1:]) == b"".join(
        sse(ROLE, tok("a"), done=False))
    assert transport.aborts == [MockAbort(SPEC_A, "rid-1", False)]
    assert transport.responses[0].closed
    assert r.job.outcome == "client_disconnect"
    assert fleet.settled()


async def test_n_greater_than_one_disconnect_sends_no_abort():
    fleet = Fleet(SPEC_A)
    transport = MockTransport(by_endpoint({SPEC_A: Scripted.stream([HANG])}))
    client = Client(fleet, transport, stream=True, rids=())
    task = asyncio.create_task(client.run())
    await transport.arrived.wait()
    client.gone.set()
    r = await task
    assert transport.aborts == [] and r.job.status == 499
    assert fleet.settled()
