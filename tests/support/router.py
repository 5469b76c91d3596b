"""The real router app (``router.app.asgi.create_app``) under uvicorn in a background thread, on
127.0.0.1 (real HTTP), with waits on the router's own counters."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Self

import httpx
import uvicorn

from tests.support.net import free_port
from tests.support.wait import wait_until

__all__ = ["RouterServer"]


class RouterServer:
    """One router process-in-a-thread.

    Args:
        config_path: the router YAML (watched for changes unless ``watch=False``).
        app_kwargs: passed to :func:`router.app.asgi.create_app` (``scrape=``, ``discovery=``...).

    Attributes:
        port, base_url: where it listens; client: an ``httpx.Client`` on ``base_url`` (30 s
        timeout, closed by :meth:`stop`); app: the app; state: its ``AppState`` (after start).
    """

    def __init__(self, config_path: Path, **app_kwargs: Any) -> None:
        from router.app.asgi import create_app
        from router.front.http_limits import app_limits, limited_protocol

        self.config_path = config_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(config_path, **app_kwargs)
        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                             loop="asyncio", http=limited_protocol(app_limits(self.app)), lifespan="on",
                             access_log=False)  # httptools with the head limits, as `specgate router` serves
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.client = httpx.Client(base_url=self.base_url, timeout=30)

    def start(self, *, ready: bool = False, timeout: float = 30.0) -> Self:
        """Start serving; with ``ready``, also wait until ``GET /ready`` answers 200 (a pool has
        a healthy endpoint).

        Raises:
            RuntimeError: the server thread died or did not start within ``timeout`` s.
        """
        self.thread.start()

        def started() -> bool:
            if not self.thread.is_alive():
                raise RuntimeError("router did not start (its thread ended)")
            return bool(self.server.started)

        try:
            wait_until(started, timeout, "the router to start", interval=0.02)
            if ready:
                wait_until(self._ready, timeout, "GET /ready to answer 200", interval=0.02)
        except AssertionError as exc:
            raise RuntimeError(str(exc)) from None
        return self

    def _ready(self) -> bool:
        try:
            return self.client.get("/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        """Stop serving (waits up to 15 s for the lifespan to end) and close ``client``."""
        self.client.close()
        self.server.should_exit = True
        self.thread.join(15)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- views ----------------------------------------------------------------------------
    @property
    def state(self) -> Any:
        """The app's ``router.app.asgi.AppState``."""
        return self.app.state.specgate

    def openai_client(self) -> Any:
        """An ``openai.OpenAI`` client on this router's ``/v1`` (no retries: a test sees each
        answer as the router sent it)."""
        import openai

        return openai.OpenAI(base_url=self.base_url + "/v1", api_key="unused", max_retries=0)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the router's Prometheus registry (0.0 when absent). For
        ``specgate_requests_total`` without a ``model`` label: the sum over every model."""
        registry = self.state.metrics.registry
        if name == "specgate_requests_total" and "model" not in labels:
            return sum(s.value for metric in registry.collect() for s in metric.samples
                       if s.name == name and set(s.labels) == {"model", *labels}
                       and all(s.labels[k] == v for k, v in labels.items()))
        value = registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def settled_metric(self, name: str, expected: float, timeout_s: float = 5.0, **labels: str) -> float:
        """:meth:`metric` once it reads ``expected`` (or more), else its value at the timeout: the
        router records a response (``router.front.record``) just after the client got its last
        byte, so a counter read right after a response may not have it yet. The caller asserts
        on the value returned."""
        with contextlib.suppress(AssertionError):  # the caller asserts on the value returned
            wait_until(lambda: self.metric(name, **labels) >= expected, timeout_s)
        return self.metric(name, **labels)

    def pool(self, name: str) -> Any:
        """The current pool ``name`` (of whichever model's runtime holds it)."""
        return next(p for rt in self.state.fleet for p in rt.pools if p.name == name)

    def urls(self, pool: str = "spec") -> set[str]:
        """Routable URLs of a pool (present and not draining)."""
        return {u for u, e in self.pool(pool).endpoints.items() if not e.draining}

    def healthy(self, pool: str = "spec") -> set[str]:
        """Healthy URLs of a pool."""
        return {u for u, e in self.pool(pool).endpoints.items() if e.healthy}

    # -- waits on the router's counters -----------------------------------------------------
    def wait_scrape_rounds(self, n: int = 1, timeout: float = 10.0) -> None:
        """Wait until ``n`` scrape rounds that *started after this call* have finished.

        The round in flight at the call may have read the endpoints before the caller's change,
        so this waits for ``n + 1`` more finished rounds.
        """
        target = self.state.scrape_rounds + n + 1
        wait_until(lambda: self.state.scrape_rounds >= target, timeout, f"{n} scrape round(s)")

    def wait_reloads(self, total: int, timeout: float = 10.0) -> None:
        """Wait until the reloader has acted on ``total`` config changes (applied or rejected)."""
        wait_until(lambda: self.state.reloads >= total, timeout, f"{total} config reload(s)")
