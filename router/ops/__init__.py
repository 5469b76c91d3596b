"""What operators watch: every ``specgate_`` Prometheus series (``metrics``), OpenTelemetry traces
(``tracing``; ``spans``: ending a span) and a client's W3C Trace Context headers (``trace``).

May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): ``config``,
``errors``, ``reasons``; never one above.
"""
