"""The background loops, one :class:`~router.loops.tasks.LoopTask` each, started in the app's
lifespan: ``scraper`` (every endpoint's SGLang ``/metrics``; ``engine_reads``: its
``/v1/models`` and ``/server_info``), ``warmup`` (servable before routable), ``canary`` (the
live lossless canary) and ``discovery`` (a pool's endpoints from Kubernetes EndpointSlices).
Neither it nor ``router.front`` imports the other.

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``upstream``,
``state``, ``access``, ``shared``, ``decision``, ``request``, ``ops``, ``config``, ``errors``,
``reasons``; never one above.
"""
