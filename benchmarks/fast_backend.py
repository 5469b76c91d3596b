"""A deliberately minimal, fast fake SGLang backend for router-overhead benchmarks.

Not the contract fake (``serving/fake_sglang/`` models SGLang's behaviour in detail and is
slower): this one answers canned bytes from an ``asyncio.Protocol`` with ``httptools``, so a
single core serves far more requests per second than any router in front of it.

- ``POST /v1/chat/completions`` (and ``/v1/completions``): a fixed chat completion; with
  ``"stream": true`` in the body, ``--events`` SSE chunks ``--event-gap-ms`` apart (default 8
  events, 1 ms, as an engine emits decode steps), then ``data: [DONE]``.
- ``GET /health``, ``/health_generate``, ``/v1/models`` (the one model ``--model``, default
  ``bench``), ``/get_server_info``, ``/server_info``, ``/get_model_info``, ``/model_info``,
  ``/metrics``; ``POST /abort_request``: small JSON/text.

    python benchmarks/fast_backend.py --port 31000 [--events 8] [--event-gap-ms 1] [--model bench]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket

import httptools

CHAT = json.dumps({
    "id": "bench", "object": "chat.completion", "created": 0, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok0 tok1 tok2 tok3"},
                 "finish_reason": "length", "matched_stop": None}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}}).encode()
EVENT = (b'data: {"id":"bench","object":"chat.completion.chunk","created":0,"model":"bench",'
         b'"choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n')
DONE = b"data: [DONE]\n\n"
SMALL = {
    b"/health": (b"text/plain", b""),
    b"/health_generate": (b"text/plain", b""),
    b"/v1/models": (b"application/json", b'{"object":"list","data":[{"id":"bench","object":"model"}]}'),
    b"/get_server_info": (b"application/json", b'{"internal_states":[{"avg_spec_accept_length":0}]}'),
    b"/server_info": (b"application/json", b'{"internal_states":[{"avg_spec_accept_length":0}]}'),
    b"/get_model_info": (b"application/json", b'{"model_path":"bench","is_generation":true}'),
    b"/model_info": (b"application/json", b'{"model_path":"bench","is_generation":true}'),
    b"/metrics": (b"text/plain", b"sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n"),
    b"/abort_request": (b"application/json", b"{}"),
}


def _response(ctype: bytes, body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: " + ctype + b"\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


class _Conn(asyncio.Protocol):
    def __init__(self, events: int, gap_s: float, small: dict[bytes, tuple[bytes, bytes]] = SMALL) -> None:
        self.events, self.gap_s, self.small = events, gap_s, small
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body = self.url.split(b"?", 1)[0], b"".join(self.body)
        self.url, self.body = b"", []
        assert self.transport is not None
        if url in self.small:
            self.transport.write(_response(*self.small[url]))
        elif b'"stream":true' in body.replace(b" ", b""):
            asyncio.get_running_loop().create_task(self._stream(self.transport))
        else:
            self.transport.write(_response(b"application/json", CHAT))

    async def _stream(self, transport: asyncio.Transport) -> None:
        transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\n")
        chunk = hex(len(EVENT))[2:].encode() + b"\r\n" + EVENT + b"\r\n"
        for _ in range(self.events):
            await asyncio.sleep(self.gap_s)
            if transport.is_closing():
                return
            transport.write(chunk)
        transport.write(hex(len(DONE))[2:].encode() + b"\r\n" + DONE + b"\r\n0\r\n\r\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--events", type=int, default=8)
    ap.add_argument("--event-gap-ms", type=float, default=1.0)
    ap.add_argument("--model", default="bench", help="the model /v1/models lists (default bench)")
    args = ap.parse_args()
    import uvloop

    listed = json.dumps({"object": "list", "data": [{"id": args.model, "object": "model"}]}).encode()
    small = {**SMALL, b"/v1/models": (b"application/json", listed)}

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Conn(args.events, args.event_gap_ms / 1000, small),
                                          args.host, args.port, backlog=4096)
        async with server:
            await server.serve_forever()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
