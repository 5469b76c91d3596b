"""Servable before routable: one-token warm-up probes before an endpoint's first client request.

SGLang answered ``/health`` (and ``/metrics``) before its startup warm-up finished while
generation stayed blocked for minutes (sgl-project/sglang#33719, fixed in #33787; the same gap
in its Rust front end, #37994 and #38010), and routers that trusted such probes sent requests
into a black hole (vllm-project/production-stack#619; the endpoint picker's answer,
kubernetes-sigs/gateway-api-inference-extension#558, is "healthy only once servable"). So an
endpoint with :attr:`router.state.endpoint.Endpoint.warmup_required` is routable only once real
generations succeeded on it.

Algorithm (one asyncio task, :class:`Warmer`): every ``health.warmup.interval_s`` seconds, for
each endpoint that is *warming* (its scrapes are green, it is not draining, it is not warm
yet), unless a probe of it is already running, start one probe sequence: ``POST <path>`` with
``{"model": <model.name>, "max_tokens": 1, "temperature": 0}`` and a one-word prompt (a chat
message for ``/v1/chat/completions``), the header ``x-specgate-probe: warmup``, a deadline of
``health.warmup.timeout_s``, straight to the engine (no lease, no client metrics). A probe
succeeds on HTTP 200 with a JSON body holding a non-empty ``choices`` list. Successes follow
one another at once until ``health.warmup.successes`` in a row make the endpoint warm
(:meth:`~router.state.endpoint.Endpoint.record_probe`); a failure ends the sequence and the next one
starts at a later round. A 503 (the fixed SGLang's "still warming" answer) is a failure like
any other, not an ejection: health stays with the scrapes. Results are counted in
``specgate_warmup_probes_total{pool, result}`` (``ok``, ``timeout``, ``http_error``,
``connect_error``, ``invalid``), and ``/ready`` lists each warming endpoint with its
:attr:`~router.state.endpoint.Endpoint.warm_detail`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from router.loops.tasks import LoopTask
from router.upstream.transport import TransportError

if TYPE_CHECKING:
    from router.config.tree import Config
    from router.ops.metrics import RouterMetrics
    from router.state.endpoint import Endpoint
    from router.state.fleet import Fleet
    from router.upstream.transport import Transport

__all__ = ["PROBE_HEADER", "Warmer", "probe_body"]

log = logging.getLogger("specgate.warmup")

#: Marks warm-up probes (engines' access logs and fakes can tell them from client requests).
PROBE_HEADER = "x-specgate-probe"


def probe_body(model: str, path: str) -> bytes:
    """The JSON body of one probe: one greedy token of ``model`` on ``path``."""
    doc: dict[str, Any] = {"model": model, "max_tokens": 1, "temperature": 0}
    if path == "/v1/completions":
        doc["prompt"] = "Hello"
    else:
        doc["messages"] = [{"role": "user", "content": "Hello"}]
    return orjson.dumps(doc)


def _valid(body: bytes) -> bool:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    choices = doc.get("choices") if isinstance(doc, dict) else None
    return isinstance(choices, list) and bool(choices)


class Warmer(LoopTask):
    """The warm-up probe loop (module docstring).

    Args:
        transport: the app's :class:`router.upstream.transport.Transport` (its client carries the
            engines' key).
        get_fleet: the current :class:`router.state.fleet.Fleet` (re-read every round, so reloads
            apply); an endpoint's probe asks for its own model's name.
        metrics: the router's series (``warmup_probes``).
        clock: monotonic clock (s), for log lines only.
    """

    _name = "specgate-warmup"

    def __init__(self, transport: Transport, get_fleet: Callable[[], Fleet],
                 metrics: RouterMetrics, clock: Callable[[], float] = time.monotonic) -> None:
        self._transport = transport
        self._get_fleet = get_fleet
        self._metrics = metrics
        self._clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}

    def round(self) -> None:
        """Start a probe sequence for every warming endpoint that has none running."""
        for runtime in self._get_fleet():
            cfg = runtime.config
            for ep in runtime.all_endpoints():
                if ep.warming and ep.url not in self._running:
                    task = asyncio.create_task(self._sequence(ep, cfg), name=f"specgate-warmup-{ep.url}")
                    self._running[ep.url] = task
                    task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        for url, running in list(self._running.items()):
            if running is task:
                del self._running[url]
        if not task.cancelled() and task.exception() is not None:  # counted, never silent
            log.error("warm-up probe task failed", exc_info=task.exception())

    async def _loop(self) -> None:
        try:
            while True:
                try:
                    self.round()
                except Exception:  # a bug in one round must not stop warm-up
                    log.exception("warm-up round failed")
                await asyncio.sleep(self._get_fleet().config.health.warmup.interval_s)
        finally:
            for task in list(self._running.values()):
                task.cancel()
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def _sequence(self, ep: Endpoint, cfg: Config) -> None:
        warm = cfg.health.warmup
        body = probe_body(cfg.model.name, warm.path)
        while ep.warming:
            ok, result, detail = await self._probe(ep, warm.path, body, warm.timeout_s)
            self._metrics.warmup_probes.labels(ep.pool, result).inc()
            ep.record_probe(ok, detail, warm.successes)
            if not ok:
                log.info("warm-up probe of %s (pool %s) failed: %s", ep.url, ep.pool, detail)
                return

    async def _probe(self, ep: Endpoint, path: str, body: bytes, timeout_s: float) -> tuple[bool, str, str]:
        """One probe: ``(ok, result label, detail)``."""
        headers = {"content-type": "application/json", PROBE_HEADER: "warmup", "accept-encoding": "identity"}
        try:
            got = await self._transport.fetch("POST", ep.url + path, body=body, headers=headers,
                                              timeout_s=timeout_s)
        except TimeoutError:
            return False, "timeout", f"no answer within {timeout_s} s"
        except TransportError as exc:
            return False, "connect_error", str(exc) or type(exc).__name__
        if got.status != 200:
            return False, "http_error", f"HTTP {got.status}"
        data = got.body
        if not _valid(data):
            return False, "invalid", "the answer has no choices"
        return True, "ok", "ok"
