"""A live lossless canary: the same greedy prompts on the speculative and the plain pool.

Speculative decoding is lossless: with greedy decoding its output must equal the target
model's, token for token (Leviathan et al. 2023, arXiv:2211.17192, section 2; EAGLE-3,
arXiv:2503.01840). An engine bug (grammar over the draft tree, a broken kernel, a drafter
that fails verification) breaks that silently; this task makes it visible.

Algorithm, one *round*: for every speculative pool with a healthy endpoint, and the first plain
pool with one, send each probe (``POST /v1/chat/completions``, ``temperature: 0``,
``max_tokens: canary.max_tokens``, header ``x-specgate-canary: 1``) to one endpoint of each,
straight to the engine (not through the router's API: no lease, no client metrics, no
decision), and compare the answers' :func:`answer_key`: message content, reasoning content,
tool calls (name and arguments), finish reason and completion tokens. Identical keys are a
*match*; any difference a *mismatch*; a failed call an *error* (neither match nor mismatch:
the health checks own unreachable endpoints). Rounds run every ``canary.interval_s`` and as
soon as the config is reloaded or a pool's endpoint set changes (checked every
``canary.check_s``); a round is skipped (and retried at the next check) while a pool it needs
has no healthy endpoint.

Probes: ``canary.prompts`` (plain chat); a tool-calling probe when a speculative pool lists
``tool_calls`` in its ``capabilities``, and a thinking-enabled probe when one lists
``reasoning``, so the features a pool was allowed to serve are the ones checked.

On a mismatch: ``specgate_canary_rounds_total{pool, result="mismatch"}``,
``specgate_canary_mismatch{pool} = 1``, a warning log line naming the probe and the first
difference, and with ``canary.on_mismatch: eject``: a plain probe's mismatch takes the pool out
of rotation (decision reason ``canary_mismatch``); a tool-calling or thinking probe's mismatch
revokes only that kind from the pool's capabilities (requests needing it go to the plain pool
with the kind as the reason), both until a later round matches; ``alert`` only reports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from router.loops.tasks import LoopTask
from router.upstream.transport import TransportError

if TYPE_CHECKING:
    from router.config.tree import Config
    from router.ops.metrics import RouterMetrics
    from router.state.fleet import Fleet
    from router.state.runtime import Runtime
    from router.upstream.transport import Transport

__all__ = ["CANARY_HEADER", "Canary", "Probe", "answer_key", "probes"]

log = logging.getLogger("specgate.canary")

#: Marks the canary's engine requests (engines and access logs can tell them from clients').
CANARY_HEADER = "x-specgate-canary"

_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@dataclass(frozen=True, slots=True)
class Probe:
    """One canary prompt: a name (for logs), the chat fields sent besides model/sampling, and
    the capability kind it checks (None: plain sampling, the pool as a whole)."""

    name: str
    fields: dict[str, Any]
    kind: str | None = None


def probes(config: Config) -> list[Probe]:
    """The probes of one round for ``config`` (a :class:`router.config.tree.Config`)."""
    out = [Probe(f"prompt{i}", {"messages": [{"role": "user", "content": p}]})
           for i, p in enumerate(config.canary.prompts)]
    served = set().union(*(p.served_capabilities or () for p in config.pools if p.speculative))
    if "tool_calls" in served:
        out.append(Probe("tool_call", {"messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                                       "tools": _TOOLS, "tool_choice": "auto"}, "tool_calls"))
    if "reasoning" in served:
        out.append(Probe("reasoning", {"messages": [{"role": "user", "content": "Is 91 a prime number?"}],
                                       "chat_template_kwargs": {"enable_thinking": True}}, "reasoning"))
    return out


def answer_key(doc: Any) -> tuple[Any, ...]:
    """What must be identical between the pools: ``(content, reasoning_content, tool calls as
    (name, arguments) pairs, finish_reason, completion_tokens)`` of the first choice.

    Raises:
        ValueError: ``doc`` is not a chat completion.
    """
    try:
        choice = doc["choices"][0]
        msg = choice["message"]
        calls = tuple((c["function"]["name"], c["function"].get("arguments"))
                      for c in msg.get("tool_calls") or ())
        return (msg.get("content"), msg.get("reasoning_content"), calls, choice.get("finish_reason"),
                (doc.get("usage") or {}).get("completion_tokens"))
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"not a chat completion: {exc!r}") from None


class Canary(LoopTask):
    """The canary loop (one asyncio task), built in the app's lifespan.

    Args:
        transport: the app's :class:`router.upstream.transport.Transport`.
        get_fleet: returns the current :class:`router.state.fleet.Fleet` (read at every check); each
            model's speculative pools are compared with that model's plain pool, on its name.
        metrics: :class:`router.ops.metrics.RouterMetrics` (``canary_rounds``, ``canary_mismatch``).
        clock: monotonic clock (s).
    """

    _name = "specgate-canary"  # the loop idles while ``canary.enabled`` is false

    def __init__(self, transport: Transport, get_fleet: Callable[[], Fleet], metrics: RouterMetrics,
                 clock: Callable[[], float]) -> None:
        self._transport = transport
        self._fleet = get_fleet
        self._metrics = metrics
        self._clock = clock

    @staticmethod
    def _signature(runtime: Runtime) -> tuple[Any, ...]:
        return (id(runtime.config),) + tuple((p.name, tuple(sorted(p.endpoints))) for p in runtime.pools)

    async def _loop(self) -> None:
        last: dict[str, tuple[tuple[Any, ...], float]] = {}  # model -> (signature, last round's time)
        while True:
            fleet = self._fleet()
            cfg = fleet.config.canary
            for name, runtime in fleet.runtimes.items():
                if cfg.enabled:
                    sig = self._signature(runtime)
                    last_sig, last_round = last.get(name, (None, float("-inf")))
                    if sig != last_sig or self._clock() - last_round >= cfg.interval_s:
                        try:
                            ran = await self.run_round(runtime)
                        except Exception:
                            log.exception("canary round failed (model %s)", name)
                            ran = True
                        if ran:
                            last[name] = (sig, self._clock())
                else:
                    for pool in runtime.pools:  # a disabled canary ejects nothing
                        pool.canary_mismatch, pool.canary_revoked = False, frozenset()
            await asyncio.sleep(cfg.check_s)

    async def run_round(self, runtime: Runtime) -> bool:
        """Run one round on ``runtime``; returns False when it was skipped (a pool it needs has
        no healthy endpoint), True when every speculative pool got a result."""
        plain = next((ep for p in runtime.pools if not p.config.speculative
                      for ep in sorted(p.endpoints.values(), key=lambda e: e.url) if ep.healthy), None)
        spec_pools = [p for p in runtime.pools if p.config.speculative]
        if plain is None or not spec_pools:
            return False
        cfg = runtime.config
        round_probes = probes(cfg)
        complete = True
        for pool in spec_pools:
            ep = next((e for e in sorted(pool.endpoints.values(), key=lambda e: e.url) if e.healthy), None)
            if ep is None:
                complete = False
                continue
            differs = await self._compare(cfg, round_probes, ep.url, plain.url, pool.name)
            result = "error" if differs is None else "mismatch" if differs else "match"
            self._metrics.canary_rounds.labels(pool.name, result).inc()
            if differs is None:
                continue
            self._metrics.canary_mismatch.labels(pool.name).set(int(bool(differs)))
            eject = cfg.canary.on_mismatch == "eject"
            whole = eject and None in differs
            revoked = frozenset(k for k in differs if k is not None) if eject else frozenset()
            if (pool.canary_mismatch, pool.canary_revoked) != (whole, revoked):
                log.warning("canary: pool %s %s; kinds revoked: %s", pool.name,
                            "out of rotation" if whole else "in rotation", sorted(revoked) or "none")
            pool.canary_mismatch, pool.canary_revoked = whole, revoked
        return complete

    async def _compare(self, cfg: Config, round_probes: list[Probe], spec_url: str, plain_url: str,
                       pool: str) -> set[str | None] | None:
        """The :attr:`Probe.kind` of every probe whose answers differ (None in the set: a plain
        probe), or None when a call failed."""
        differs: set[str | None] = set()
        for probe in round_probes:
            body = {"model": cfg.model.name, "temperature": 0, "max_tokens": cfg.canary.max_tokens,
                    "stream": False, **probe.fields}
            try:
                spec, plain = await asyncio.gather(self._ask(spec_url, body, cfg), self._ask(plain_url, body, cfg))
                spec_key, plain_key = answer_key(spec), answer_key(plain)
            except (TimeoutError, TransportError, ValueError) as exc:
                log.warning("canary: probe %s on pool %s failed: %r", probe.name, pool, exc)
                return None
            if spec_key != plain_key:
                field = next(n for n, a, b in zip(("content", "reasoning_content", "tool_calls",
                                                   "finish_reason", "completion_tokens"), spec_key, plain_key)
                             if a != b)
                log.warning("canary: pool %s differs from the plain pool on probe %s (%s): %r != %r",
                            pool, probe.name, field, str(spec_key)[:200], str(plain_key)[:200])
                differs.add(probe.kind)
        return differs

    async def _ask(self, base_url: str, body: dict[str, Any], cfg: Any) -> Any:
        got = await self._transport.fetch(
            "POST", f"{base_url}/v1/chat/completions", body=orjson.dumps(body),
            headers={"content-type": "application/json", CANARY_HEADER: "1", "accept-encoding": "identity"},
            timeout_s=cfg.canary.timeout_s, connect_timeout_s=cfg.upstream.connect_timeout_s)
        if got.status != 200:
            raise ValueError(f"HTTP {got.status}: {got.body[:200]!r}")
        return orjson.loads(got.body)
