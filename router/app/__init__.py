"""The composition and the process. ``asgi`` builds everything in the lifespan (:func:`create_app`,
:class:`RouterApp`; the process's :class:`AppState` in ``appstate``); ``reload`` watches the config file, builds a new runtime
from ``runtime_inputs`` and swaps one reference (the ``tracing`` section through
``tracing_reload``); ``server`` runs the app under uvicorn with the router's protocol, signals
and drain; ``commands`` holds ``specgate router``, ``specgate config check`` and ``specgate
drain``. Only ``router/cli.py`` is above it; no package imports it, even for an
annotation (``router.front``'s handlers name the protocol
:class:`router.front.appstate.FrontState`, which :class:`AppState` satisfies).

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``front``,
``loops``, ``upstream``, ``state``, ``access``, ``shared``, ``decision``, ``request``, ``ops``,
``config``, ``errors``, ``reasons``; never one above.
"""
