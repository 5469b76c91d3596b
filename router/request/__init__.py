"""A request's document made into the decision's inputs, pure: chat and completions bodies
validated (``parsing``, into ``parsed``'s :class:`ParsedRequest`), its features: prompt tokens, output budget, ``n`` (``features``; chat
renders by message shape in ``template_shapes``), what it needs from the engine that serves it
(``capabilities``) and its sampling controls (``sampling``). Neither it nor ``router.ops``
imports the other.

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``config``,
``errors``, ``reasons``; never one above.
"""
