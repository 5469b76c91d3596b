"""The day simulator's engine behind the fake SGLang server's HTTP: a day's requests over real HTTP.

:class:`DayStepEngine` adapts :class:`loadtests.daysim.Engine` (continuous batching, KV
admission by reservation, speculative acceptance draws; its module docstring) to the fake's
step-engine seam (:class:`serving.fake_sglang.stepping.StepEngine`), so a fake server
(``FakeServer(config, step_engine=DayStepEngine(...))``) spends the simulator's step times in
real seconds and answers with the simulator's token counts, KV gauges and per-request accept
lengths. :func:`fake_config` is the matching fake config (KV capacity, context, speculative
flags), :func:`chat_body` the request a day's :class:`loadtests.dayshapes.Request` becomes.

Prompt length: the body holds one user message of ``P - TEMPLATE_TOKENS`` words ``x``. The
router counts it with ``examples/fake-tokenizer`` (chat template applied): each ``x`` after the
first is one token ``" x"`` and the template adds 18 (:data:`TEMPLATE_TOKENS`), so the router
sees exactly ``P``; the fake counts words (its documented simple count: 1 + words + 1), i.e.
``P - 16``, and the step engine runs on that count. The 16 tokens are the template's markers
that the fake's simple count does not see (at most 3% of the shortest prompt of any day: 512
tokens on ``kv_limited``); the fake runs without a tokenizer because encoding a 131K-token
prompt costs it ~0.8 s of CPU (measured here), which would stall its step loop.

KV: the simulator's engine admits by reservation (prompt + budget, never retracted), so its
"used" KV, and the fake's ``token_usage``, is the sum of the admitted reservations, not SGLang's
tokens in use (which grow as sequences decode); admission behaves as SGLang's conservative bound.

Output length: ``max_tokens`` is the request's budget (``max_new_tokens``) and the fake's
``fake_step.output_tokens`` hint stops it at its natural length with ``finish_reason "stop"``
(:mod:`serving.fake_sglang.stepping`); ``fake_step.cached_tokens`` is its prefix-cached share,
``fake_step.alpha_scale`` its task's acceptance scale.
"""

from __future__ import annotations

import random
from typing import Any

from loadtests.dayshapes import EngineModel, Request
from loadtests.daysim import Engine
from serving.fake_sglang import FakeConfig
from serving.fake_sglang.stepping import StepEmit, StepGauges, StepRequest

__all__ = ["TEMPLATE_TOKENS", "DayStepEngine", "chat_body", "fake_config", "prompt_words"]

#: Tokens ``examples/fake-tokenizer``'s chat template adds to one user message of ``x`` words.
TEMPLATE_TOKENS = 18


class DayStepEngine:
    """A :class:`loadtests.daysim.Engine` as the fake's step engine (module docstring).

    Args:
        model: the engine family's model; speculative: run the drafter;
        seed: seeds the acceptance draws; url, pool: labels only.

    Attributes: ``engine`` (the simulator's engine; read its ``steps``, ``busy_s``).
    """

    def __init__(self, model: EngineModel, speculative: bool, seed: int, *, url: str = "", pool: str = "") -> None:
        self.engine = Engine(url, pool, speculative, model, random.Random(seed))
        self.speculative = speculative
        self._keys: dict[int, object] = {}
        self._rid = 0

    def _request(self, req: StepRequest, rid: int) -> Request:
        return Request(rid, 0.0, req.prompt_tokens, min(req.cached_tokens, req.prompt_tokens), req.output_tokens,
                       max(req.max_new_tokens, req.output_tokens), req.temperature, "http", req.alpha_scale)

    def fits(self, req: StepRequest) -> bool:
        """Whether the reservation ``P + max_new_tokens`` fits the engine's KV capacity."""
        return self.engine.fits(self._request(req, -1))

    def submit(self, req: StepRequest) -> None:
        """Queue the sequence (FIFO)."""
        self._rid += 1
        self._keys[self._rid] = req.key
        self.engine.submit(self._request(req, self._rid))

    def abort(self, key: object) -> None:
        """Drop the sequence wherever it is; a running one gives its KV reservation back."""
        rid = next((r for r, k in self._keys.items() if k is key), None)
        if rid is None:
            return
        del self._keys[rid]
        e = self.engine
        for s in list(e.waiting):
            if s.req.rid == rid:
                e.waiting.remove(s)
                return
        for s in e.prefilling:
            if s.req.rid == rid:
                e.prefilling.remove(s)
                e._chunk = [(c, t) for c, t in e._chunk if c is not s]
                e.kv_reserved -= s.reserve
                return
        for s in e.decoding:
            if s.req.rid == rid:
                e.decoding.remove(s)
                e.kv_reserved -= s.reserve
                e.ctx_sum -= s.context
                return

    def start_step(self, now: float) -> float | None:
        """The simulator's ``start_step``."""
        return self.engine.start_step(now)

    def finish_step(self, now: float) -> list[StepEmit]:
        """The simulator's ``finish_step``, as what each sequence emitted."""
        e = self.engine
        before = [(s, s.generated) for s in (*e.decoding, *e.prefilling)]
        done = {id(s) for s in e.finish_step(now)}
        out = []
        for s, g in before:
            if s.generated <= g:
                continue
            finished = id(s) in done
            key = self._keys.pop(s.req.rid) if finished else self._keys[s.req.rid]
            out.append(StepEmit(key, s.generated - g, finished, s.spec_tokens, s.verify_ct))
        return out

    def gauges(self) -> StepGauges:
        """Running, queued, KV reserved, capacity and the accept-length gauge."""
        e = self.engine
        return StepGauges(e.running, len(e.waiting), e.kv_reserved, e.capacity, e.accept_length)


def fake_config(model: EngineModel, speculative: bool, *, model_name: str = "day-model",
                context_length: int = 262_144) -> FakeConfig:
    """The fake server's config for an engine of ``model``: KV pool = the engine's capacity,
    EAGLE-3 with ``gamma`` steps on a speculative engine, no tokenizer (module docstring)."""
    gamma = model.speed.gamma
    cap = model.kv_capacity(speculative)
    return FakeConfig(model_name=model_name, context_length=context_length, max_total_num_tokens=cap,
                      max_running_requests=model.max_running,
                      speculative_algorithm="EAGLE3" if speculative else None, speculative_num_steps=gamma,
                      speculative_eagle_topk=1, speculative_num_draft_tokens=gamma + 1)


def prompt_words(prompt_tokens: int) -> int:
    """Words ``x`` in the user message whose chat prompt the router counts as ``prompt_tokens``."""
    return max(1, prompt_tokens - TEMPLATE_TOKENS)


def chat_body(req: Request, model_name: str) -> dict[str, Any]:
    """The chat request of a day's request (not streamed; module docstring)."""
    return {"model": model_name,
            "messages": [{"role": "user", "content": " ".join(["x"] * prompt_words(req.prompt_tokens))}],
            "max_tokens": req.max_new_tokens, "temperature": req.temperature,
            "fake_step": {"output_tokens": req.output_tokens, "cached_tokens": req.cached_tokens,
                          "alpha_scale": req.alpha_scale}}
