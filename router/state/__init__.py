"""Live state, no I/O: one model's :class:`Runtime` (``runtime``: its pools, their snapshots and
the decision's call), a pool (``pool``) and its endpoints (``endpoint``: health, in-flight
leases, scraped load, back-pressure; ``engine_limits``: each endpoint's context bound), several
models behind one router (``fleet``; ``models``: a request's model and adapters,
in a fleet too), what each engine serves and reports (``identity``; ``engine_metrics``: the
``/metrics`` text parsed, pure) and the one door from engine signals to the policy's inputs
(``snapshots``, reused through ``snapshot_cache``).

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``access``,
``shared``, ``decision``, ``request``, ``ops``, ``config``, ``errors``, ``reasons``; never one
above.
"""
