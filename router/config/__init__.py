"""The operator YAML as one frozen, strict, typed tree, pure: the root, its loading and cross-field
checks (``tree``: :class:`Config`, :func:`load_config`, re-exporting the sections' names), the
sections (``models``; ``pools``; ``routing``; ``server``: the router process; ``limits``:
``auth.rate_limits``; ``overrides``: routing thresholds changed at run time) and their building
blocks (``base``).

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``errors``,
``reasons``; never one above.
"""
