"""The aiohttp :class:`router.upstream.transport.Transport`, with aiohttp's errors mapped: the
generation client with ``upstream.client: aiohttp``, and, under the default
:class:`router.upstream.transport_h1.H1Transport` (``upstream.client: httptools``), its fallback for
``https://`` engines and the aborts.

:class:`AiohttpTransport` holds the app's two upstream clients (``router.app.asgi``): the pooled
session, whose :class:`router.upstream.relay.ReuseMarkingConnector` tells whether a request went out
on a reused keep-alive connection, and the ``force_close`` session for the one resend after a
stale connection (sgl-project/sglang#20851, aio-libs/aiohttp#7363).

aiohttp to :mod:`router.upstream.transport`:

===================================================  =====================================
``ClientConnectorError`` (refused, DNS, unreachable)  :class:`~router.upstream.transport.ConnectFailed`
``ServerDisconnectedError``, other ``ClientOSError``  :class:`~router.upstream.transport.ConnectionBroken`
``ClientPayloadError`` (a body cut short)             :class:`~router.upstream.transport.PayloadBroken`
``ConnectionTimeoutError`` (``sock_connect``)         left as it is: a ``TimeoutError``
===================================================  =====================================

:meth:`AiohttpTransport.post` returns aiohttp's ``ClientResponse`` itself (it satisfies
:class:`router.upstream.transport.UpstreamResponse`), so a relayed chunk is one ``readany`` of aiohttp's
``StreamReader`` and nothing more; its read errors are mapped by :meth:`AiohttpTransport.map_error`
where the proxy catches :attr:`AiohttpTransport.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from yarl import URL

from router.upstream.relay import ConnTrace, ReuseMarkingConnector, abort_request
from router.upstream.transport import (
    ConnectFailed,
    ConnectionBroken,
    Fetched,
    PayloadBroken,
    TransportError,
    UpstreamResponse,
)

__all__ = ["AiohttpTransport"]


class AiohttpTransport:
    """:class:`router.upstream.transport.Transport` over aiohttp sessions.

    Args:
        session: the pooled upstream client (its connector a
            :class:`router.upstream.relay.ReuseMarkingConnector` for :attr:`ConnectionBroken.reused`;
            with another connector a break is never taken for a stale connection).
        fresh_session: a ``force_close`` client for ``fresh=True`` (None: ``session``).
    """

    errors: tuple[type[Exception], ...] = (TransportError, aiohttp.ClientPayloadError, aiohttp.ClientOSError,
                                           aiohttp.ServerDisconnectedError)

    __slots__ = ("_fresh", "_marks", "_session", "_timeout")

    def __init__(self, session: aiohttp.ClientSession,
                 fresh_session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._fresh = fresh_session or session
        connector = session.connector
        self._marks = connector.marks if isinstance(connector, ReuseMarkingConnector) else None
        self._timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=2.0, sock_read=None)

    async def post(self, url: URL | str, body: bytes, headers: Mapping[str, str], *,
                   connect_timeout_s: float, fresh: bool) -> UpstreamResponse:
        timeout = self._timeout
        if timeout.sock_connect != connect_timeout_s:  # one object while the config keeps its value
            timeout = self._timeout = aiohttp.ClientTimeout(total=None, connect=None,
                                                            sock_connect=connect_timeout_s, sock_read=None)
        if fresh or self._marks is None:
            session, mark, token = self._fresh if fresh else self._session, None, None
        else:
            session, mark = self._session, ConnTrace()
            token = self._marks.set(mark)  # read by the connector in this task (ReuseMarkingConnector)
        try:
            return await session.post(url, data=body, headers=headers, timeout=timeout)
        except aiohttp.ClientConnectorError as exc:  # before ClientOSError: it is one
            raise ConnectFailed(str(exc)) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise ConnectionBroken(str(exc), reused=mark is not None and mark.reused) from exc
        except aiohttp.ClientPayloadError as exc:
            raise PayloadBroken(str(exc)) from exc
        finally:
            if token is not None:
                self._marks.reset(token)  # type: ignore[union-attr]  # set above with it

    def map_error(self, exc: Exception) -> TransportError:
        if isinstance(exc, TransportError):
            return exc
        if isinstance(exc, aiohttp.ClientPayloadError):
            return PayloadBroken(str(exc))
        if isinstance(exc, aiohttp.ClientConnectorError):
            return ConnectFailed(str(exc))
        return ConnectionBroken(str(exc))

    async def fetch(self, method: str, url: str, *, body: bytes | None = None,
                    headers: Mapping[str, str] | None = None, timeout_s: float | None,
                    connect_timeout_s: float | None = None) -> Fetched:
        """:meth:`router.upstream.transport.Transport.fetch` on the pooled session (errors mapped as in
        the module docstring; aiohttp's own timeouts are ``TimeoutError`` already)."""
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        marks = self._marks
        mark = None if marks is None else ConnTrace()
        token = None if marks is None or mark is None else marks.set(mark)
        try:
            async with self._session.request(method, url, data=body, headers=headers, timeout=timeout) as resp:
                data = await resp.read()
                return Fetched(resp.status, {k.lower(): v for k, v in resp.headers.items()}, data)
        except TimeoutError:
            raise
        except aiohttp.ClientConnectorError as exc:  # before ClientOSError: it is one
            raise ConnectFailed(str(exc)) from exc
        except aiohttp.ClientPayloadError as exc:
            raise PayloadBroken(str(exc)) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ConnectionBroken(str(exc) or type(exc).__name__,
                                   reused=mark is not None and mark.reused) from exc
        finally:
            if marks is not None and token is not None:
                marks.reset(token)

    async def abort(self, base_url: str, rids: tuple[str, ...], timeout_s: float, *,
                    fresh: bool = False) -> None:
        await abort_request(self._fresh if fresh else self._session, base_url, rids, timeout_s)

    def close(self) -> None:
        """Nothing of its own: the app closes the sessions."""
