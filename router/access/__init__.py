"""Who may do what: client and admin API keys (``auth``), who may set the engine's ``priority``
(``admission``), the engine-internal fields a client must not set (``engine_fields``), and the
per-key limits: their rules without I/O (``limit_rules``: a key's buckets, the GCRA check), the
limiter (``limits``) and its Redis scripts (``limits_redis``).

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``shared``,
``decision``, ``request``, ``ops``, ``config``, ``errors``, ``reasons``; never one above.
"""
