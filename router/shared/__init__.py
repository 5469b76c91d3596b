"""What router replicas share through Redis: in-flight leases, bypass flags and routing overrides
(``state``: in memory or in Redis, :func:`build_shared_state`), the Redis client with its
topology and error kinds (``redis_client``) and the circuit breaker in front of it
(``breaker``). Neither it nor ``router.decision`` imports the other.

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``request``,
``ops``, ``config``, ``errors``, ``reasons``; never one above.
"""
