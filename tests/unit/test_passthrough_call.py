"""The pass-through's engine call (:func:`router.front.passthrough._call`) goes through the transport
seam: a stale keep-alive connection (reused, broken before the status line) is sent once more on
the same engine; any other failure is the caller's to fail over."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from yarl import URL

from router.front.passthrough import _call
from router.upstream.transport import ConnectFailed, ConnectionBroken
from tests.support.transport import MockRequest, MockTransport, Scripted

UPSTREAM = SimpleNamespace(nonstream_timeout_s=5.0, connect_timeout_s=1.0)
BASE = "http://127.0.0.1:9"


@dataclass
class _Endpoint:
    url: str = BASE

    def target(self, path: str) -> URL:
        return URL(self.url + path)


def scripted(*answers: Scripted | Exception) -> MockTransport:
    queue = list(answers)

    def handler(request: MockRequest) -> Scripted:
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return MockTransport(handler)


async def test_a_stale_connection_is_sent_once_more_on_the_same_engine():
    transport = scripted(ConnectionBroken("reset", reused=True), Scripted.json(200, '{"data": []}'))
    status, ctype, body = await _call(transport, _Endpoint(), "/v1/embeddings", b'{"input": "x"}', "rid-1",
                                      UPSTREAM, {"traceparent": "00-aa-bb-01"})
    assert (status, ctype, body) == (200, "application/json", b'{"data": []}')
    assert [(r.url, r.body) for r in transport.requests] == [(BASE + "/v1/embeddings", b'{"input": "x"}')] * 2
    sent = transport.requests[0].headers
    assert (sent["x-request-id"], sent["traceparent"], sent["accept-encoding"]) == ("rid-1", "00-aa-bb-01", "identity")


@pytest.mark.parametrize("failure", [ConnectionBroken("reset", reused=False), ConnectFailed("refused")])
async def test_other_failures_are_raised_after_one_try(failure):
    transport = scripted(failure, Scripted.json(200, "{}"))
    with pytest.raises(type(failure)):
        await _call(transport, _Endpoint(), "/v1/rerank", b"{}", "rid-2", UPSTREAM, {})
    assert len(transport.requests) == 1


async def test_an_engine_error_status_is_returned_not_raised():
    transport = scripted(Scripted.json(503, '{"error": "busy"}', {"Content-Type": "application/json; x=1"}))
    assert await _call(transport, _Endpoint(), "/v1/embeddings", b"{}", "rid-3", UPSTREAM, {}) == (
        503, "application/json; x=1", b'{"error": "busy"}')
