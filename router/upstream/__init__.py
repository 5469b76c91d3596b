"""The engine side of one request: ``proxy`` relays it to its engine and the engine's bytes back,
unbuffered, given a ``proxy_job``; the HTTP seam ``transport`` and its clients ``transport_h1``
(HTTP/1.1 on httptools' parser) and ``transport_aiohttp``; ``relay`` (SSE framing, heartbeats,
the deadline, failover signals); ``observe`` (a response's usage and ending, read as relayed);
``specstats`` (SGLang's per-request speculative statistics); ``disconnect`` (a client that left
while its handler waits).

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``state``,
``access``, ``shared``, ``decision``, ``request``, ``ops``, ``config``, ``errors``, ``reasons``;
never one above.
"""
