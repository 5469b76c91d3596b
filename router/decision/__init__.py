"""The routing decision, pure (no I/O, no clock): :func:`decide` and the snapshot types
(``policy``; ``snapshot``: :class:`PoolSnapshot`, :class:`EndpointSnapshot`, :class:`Rules`), one small
function per rule of the speculative pool (``checks``), a request's predicted completion time
(``predict``) and the choice among pools by it (``predicted``, ``affinity``), the speed models
learned from finished requests (``learn``, ``drift``, ``prediction_check``), live acceptance per
temperature class (``acceptance``), the bypass flags and their hysteresis steps (``bypass``,
``hysteresis``) and the prefix-cache-aware endpoint choice (``prefix``).

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``request``,
``ops``, ``config``, ``errors``, ``reasons``; never one above.
"""
