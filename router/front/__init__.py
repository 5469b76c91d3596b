"""One request's HTTP side, from the socket to the proxy: the routes (``api``: the generation
routes' entry, the probes and the error handlers; ``passthrough``: the non-generation endpoints;
``admin``; ``model_routes``; ``readiness``), the generation pipeline and its steps
(``pipeline``; the route kinds ``request_kinds`` and ``responses``; the end of a response
``record`` and the planner's window ``planwindow``), reading a request (``intake``: its body, content codings undone, and JSON; ``body``;
``context``: what the error path knows of it and the pipeline's per-request ``GenerationContext``), the wire (``http_limits``: a
request head's limits as bytes arrive; ``http_cycles``) and the process drain (``drain``).
It reads the app's state through the protocol ``appstate.FrontState``. Neither it nor ``router.loops`` imports the other.

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``upstream``,
``state``, ``access``, ``shared``, ``decision``, ``request``, ``ops``, ``config``, ``errors``,
``reasons``; never one above.
"""
