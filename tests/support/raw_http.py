"""HTTP/1.x over a raw socket, for tests that must see the wire: status lines, framing, interim
responses, how many responses a connection carries and when the server closes it."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Self

__all__ = ["RawConn", "RawResponse"]


@dataclass
class RawResponse:
    """One response as read: ``status_line`` (bytes, no CRLF), ``headers`` (lower-case names;
    a repeated name keeps its values joined by ``, ``), ``body`` (framing removed) and
    ``framing``: ``length`` (Content-Length), ``chunked`` or ``close`` (read to the close)."""

    status_line: bytes
    headers: dict[str, str]
    body: bytes
    framing: str

    @property
    def status(self) -> int:
        return int(self.status_line.split()[1])


class RawConn:
    """A client connection to ``127.0.0.1:port`` that keeps what it read beyond a response.

    Raises ``EOFError`` when the server closes before a response is whole, ``TimeoutError``
    when nothing arrives for ``timeout`` s.
    """

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self.buf += data

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self, sep: bytes = b"\r\n") -> bytes:
        while sep not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(sep)
        return line

    def head(self) -> tuple[bytes, dict[str, str]]:
        """The next status line and header fields (an interim ``1xx`` included)."""
        block = self._line(b"\r\n\r\n")
        status_line, *lines = block.split(b"\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.decode("latin-1").partition(":")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        return status_line, headers

    def response(self) -> RawResponse:
        """The next response, its body read by its framing (to the close when it has none)."""
        return self.response_after(*self.head())

    def response_after(self, status_line: bytes, headers: dict[str, str]) -> RawResponse:
        """The response whose status line and fields :meth:`head` read, its body read now."""
        if "content-length" in headers:
            return RawResponse(status_line, headers, self._take(int(headers["content-length"])), "length")
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while size := int(self._line().split(b";")[0], 16):
                body += self._take(size)
                assert self._take(2) == b"\r\n", "chunk data longer than its size"
            assert self._line() == b"", "trailer fields after the last chunk"
            return RawResponse(status_line, headers, body, "chunked")
        return RawResponse(status_line, headers, self.rest(), "close")

    def rest(self) -> bytes:
        """Every byte until the server closes (what was already read included)."""
        try:
            while True:
                self._fill()
        except EOFError:
            pass
        out, self.buf = self.buf, b""
        return out

    def closed_within(self, timeout: float) -> float:
        """Seconds until the server closed the connection (an EOF or a reset), with nothing
        more read; ``AssertionError`` when bytes arrive or it stays open ``timeout`` s."""
        t0 = time.monotonic()
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        except TimeoutError:
            raise AssertionError(f"still open after {timeout} s") from None
        assert data == b"" and self.buf == b"", (self.buf + data)[:200]
        return time.monotonic() - t0
