"""A second engine model: SGLang 0.5.23's scheduler as its source shows it, as a step engine.

Written independently of :mod:`loadtests.simulate` and :mod:`loadtests.daysim` (whose engine
admits by a never-retracted reservation and prefills beside decode), so that routing can be
measured on an engine whose rules the router was not written around. It follows these parts
of sgl-project/sglang at v0.5.23 (paths under ``python/sglang/srt/``):

Scheduling (``managers/scheduler.py``: ``get_next_batch_to_run``,
``_get_new_batch_prefill_raw``, ``update_running_batch``, ``on_idle``)
    Each step is *either* a prefill (extend) batch *or* a decode batch: a prefill runs whenever
    one can be formed (waiting requests that fit, or an unfinished chunked request), and the
    running requests decode only in steps without one (``--enable-mixed-chunk`` is off by
    default: ``arg_groups/fields/schedule.py``). With :attr:`SglangFamily.enable_mixed_chunk`
    a plain engine's decodes join the prefill step instead (their tokens count against the
    chunk). Requests whose prefill completes join the running batch for the next step.
    ``batch_is_full`` (set when admission ran out of KV or rows) skips admission until a
    running request leaves.

Admission (``managers/schedule_policy.py``: ``PrefillAdder``; ``mem_cache/prefill_budget.py``)
    FCFS over the waiting queue (``--schedule-policy fcfs``, the default). A request's prefix is
    matched in the radix cache (at most its length minus 1: the last token is always computed),
    and it is admitted while ``extend + min(max_new - output, 4096) + 1 <`` *remaining*, where
    remaining = free + evictable cache tokens - the running requests' expected growth
    ``min(max_new - output, 4096) * new_token_ratio`` - what this pass already admitted
    (``extend + 1 + its max_new``); the rows (``max_running_requests``) must allow it. The pass
    stops at ``chunked_prefill_size`` extend tokens (``max_prefill_tokens`` too): the request
    that crosses it is cut to the rest of the chunk and becomes the one *chunked* request
    (charged no ``max_new`` until its last chunk), continued first in the next prefill step
    (``add_chunked_req``).

The new-token ratio (``managers/scheduler_components/new_token_ratio_tracker.py``)
    Starts at ``0.7 * schedule_conservativeness``, falls by ``(0.7 - 0.098) / 600`` per decode
    step without retraction to ``0.14`` of its start, returns to the start when the engine is
    idle, and after a retraction is set to ``(decoded + 20 * n) / (max_new sum + 1)`` over the
    ``n`` requests kept (capped at 1).

Retraction (``managers/schedule_batch.py``: ``check_decode_mem``, ``retract_decode``, ``release_req``)
    Before a decode step the batch's new KV (1 token per request; on a speculative engine the
    top-up to ``2 * (gamma + 1)`` tokens ahead, ``mem_cache/allocation_sizing.py``) must fit
    in free + evictable cache tokens. If not, requests are retracted, fewest output tokens first
    (ties: the longest prompt first), at least one and until the rest fit (one is always kept):
    a retracted request frees its KV (its prompt stays in the cache, unpinned), the cache
    evicts ``20 * remaining`` tokens, and it goes to the end of the queue with its output so far,
    to be prefilled again (prompt + output, minus what the cache still holds).

The radix cache (``mem_cache/radix_cache.py``; :mod:`loadtests.sglang_radix`)
    A prefill chunk's tokens enter the cache as it completes (``cache_unfinished_req``), pinned
    by the request; a finished request's prompt + output enters unpinned (``cache_finished_req``).
    Used KV = cache + tokens that requests hold outside it; allocation evicts least recently
    used unpinned leaves. The gauge ``token_usage`` counts used minus evictable tokens.

Speculative decoding (EAGLE-3, ``speculative/eagle_worker_v2.py``: ``draft``, ``verify``)
    A decode step drafts ``gamma`` tokens per request (``gamma`` drafter passes), verifies
    ``gamma + 1`` positions per request in one target pass, and runs one drafter pass over the
    accepted tokens (draft extend). Acceptance is drawn per position: position ``j`` is accepted
    with probability ``alpha`` at the request's current context (:meth:`SglangFamily.alpha`)
    while all before it were, so a request emits ``k + 1`` tokens (``k`` accepted drafts plus the
    target's own). The KV pool is ``spec_kv_fraction`` of a plain engine's. The accept-length
    gauge is the mean ``k + 1`` over the last ``gauge_interval_steps`` decode steps
    (``managers/scheduler_metrics_mixin.py``), stale while idle.

Step time: :mod:`loadtests.sglang_families` (a roofline of the target's and drafter's passes).

Tokens: the engine is given counts, not ids. A request's first ``cached_tokens`` prompt tokens
(the fake's ``fake_step.cached_tokens`` hint, a day's ``Request.cached_tokens``) are read as a
prefix *shared by every request* (one system prompt / corpus: :data:`loadtests.sglang_radix.SHARED`),
the rest as its own; so a shared prefix is prefilled once per engine and hits afterwards while
the cache holds it (it starts cold and can be evicted), unlike the day model's "always warm".

Left out: overlap scheduling (the CPU work is inside ``launch_s``), priority scheduling and
preemption, LoRA, multimodal, hierarchical cache, page sizes above 1, cache-aware schedule
policies (``lpm``), the waiting requests' prefix touches by ``calc_priority``, retraction's
OOM abort (:meth:`SglangScheduler.fits` refuses a request that could need more than the pool),
CUDA-graph padding, and mixed chunks on a speculative engine.

:class:`SglangScheduler` is the engine (seeded, deterministic: one ``random.Random(seed)``,
draws in batch order); :class:`SglangStepEngine` is it behind the fake SGLang's step seam
(:class:`serving.fake_sglang.stepping.StepEngine`); :func:`sglang_fake_config` the matching
fake config. The day simulator in process: :mod:`loadtests.sglang_day`.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass

from loadtests.sglang_families import SglangFamily
from loadtests.sglang_radix import Node, RadixCache, Run, shared_runs
from serving.fake_sglang import FakeConfig
from serving.fake_sglang.stepping import StepEmit, StepGauges, StepRequest

__all__ = [
    "CLIP_MAX_NEW_TOKENS",
    "INIT_NEW_TOKEN_RATIO",
    "MIN_NEW_TOKEN_RATIO_FACTOR",
    "NEW_TOKEN_RATIO_DECAY_STEPS",
    "RETRACT_DECODE_STEPS",
    "SchedReq",
    "SglangScheduler",
    "SglangStepEngine",
    "sglang_fake_config",
]

#: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``: the most output tokens admission counts per request.
CLIP_MAX_NEW_TOKENS = 4096
#: ``SGLANG_INIT_NEW_TOKEN_RATIO``, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``,
#: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``, ``SGLANG_RETRACT_DECODE_STEPS`` (``srt/environ.py``).
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20


class SchedReq:
    """One request inside :class:`SglangScheduler` (tokens; seconds of the engine's clock).

    ``output`` tokens emitted so far; ``computed`` tokens of ``prompt + output`` whose KV exists
    (prefill progress); ``cached_len`` of them in the cache, pinned through ``node``;
    ``private`` KV tokens it holds outside the cache (decoded tokens, the speculative top-up);
    ``prefix_hits`` cache tokens it matched at each admission; ``retractions``; ``first_s`` /
    ``admitted_s`` (-1 until then); ``spec_tokens`` / ``verify_ct`` its verify steps' tokens.
    """

    __slots__ = ("admitted_s", "alpha_scale", "cached_len", "computed", "first_s", "gone", "key", "max_new",
                 "node", "output", "prefix_hits", "private", "prompt", "retractions", "sampled", "shared",
                 "spec_tokens", "target", "uid", "verify_ct")

    def __init__(self, key: object, uid: int, prompt: int, shared: int, target: int, max_new: int,
                 sampled: bool, alpha_scale: float) -> None:
        self.key, self.uid, self.prompt, self.shared = key, uid, prompt, shared
        self.target, self.max_new, self.sampled, self.alpha_scale = target, max_new, sampled, alpha_scale
        self.output = self.computed = self.cached_len = self.private = 0
        self.node: Node | None = None
        self.prefix_hits: list[int] = []
        self.retractions = 0
        self.first_s = self.admitted_s = -1.0
        self.spec_tokens = self.verify_ct = 0
        self.gone = False

    @property
    def fill(self) -> int:
        """Tokens a prefill must cover: prompt + output so far."""
        return self.prompt + self.output

    @property
    def committed(self) -> int:
        """KV tokens of a decoding request (the last output token's KV is written next step)."""
        return self.fill - 1

    def runs(self, length: int) -> tuple[Run, ...]:
        """Its first ``length`` tokens as cache runs."""
        owner: Hashable = ("req", self.uid)
        return shared_runs(self.shared, owner, length)


@dataclass(frozen=True)
class _Plan:
    """The step started and not yet finished: prefill chunks ``(req, extend)``, decoding rows."""

    prefill: tuple[tuple[SchedReq, int], ...]
    decode: tuple[SchedReq, ...]
    chunked: SchedReq | None


class SglangScheduler:
    """One engine under SGLang's scheduling rules (module docstring).

    Args:
        family: the engine family (step cost, limits, acceptance).
        speculative: runs the EAGLE-3 drafter.
        seed: seeds the acceptance draws.

    Attributes: ``waiting`` (FIFO list), ``running`` (decoding), ``chunked`` (the request
    between prefill chunks, or None), ``tree`` (the radix cache), ``new_token_ratio``,
    ``accept_length`` (gauge, None until its first update), ``generated_total``, ``steps``,
    ``busy_s``, ``prefill_steps``, ``retracted_total``, ``capacity``, ``max_running``.
    """

    def __init__(self, family: SglangFamily, speculative: bool, seed: int) -> None:
        self.family, self.speculative = family, speculative
        self.capacity = family.kv_capacity(speculative)
        self.max_running = family.max_running_requests(speculative)
        self.reserve = 2 * (family.gamma + 1) if speculative else 1
        self.rng = random.Random(seed)
        self.tree = RadixCache()
        self.waiting: list[SchedReq] = []
        self.running: list[SchedReq] = []
        self.chunked: SchedReq | None = None
        self.batch_is_full = False
        init = min(INIT_NEW_TOKEN_RATIO * family.schedule_conservativeness, 1.0)
        self.init_ratio, self.min_ratio = init, min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.ratio_decay = (self.init_ratio - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = init
        self.private_total = 0
        self.accept_length: float | None = None
        self._acc = [0, 0, 0]  # tokens, sequence-cycles, steps since the gauge's last update
        self.generated_total = 0
        self.steps = self.prefill_steps = self.retracted_total = 0
        self.busy_s = 0.0
        self._plan: _Plan | None = None
        self._uid = 0

    # ------------------------------------------------------------------ memory
    @property
    def free(self) -> int:
        """KV tokens neither in the cache nor held by a request."""
        return self.capacity - self.tree.total_size - self.private_total

    @property
    def kv_used(self) -> int:
        """Tokens in use, as SGLang's ``token_usage`` counts them (evictable cache excluded)."""
        return self.capacity - self.free - self.tree.evictable_size

    def _alloc(self, req: SchedReq, tokens: int) -> None:
        if tokens > self.free:
            self.tree.evict(tokens - self.free)
        req.private += tokens
        self.private_total += tokens

    def _release(self, req: SchedReq) -> None:
        """Drop a request's hold on KV: its private tokens freed, its cache path unpinned."""
        self.private_total -= req.private
        req.private = 0
        if req.node is not None:
            self.tree.unlock(req.node)
            req.node = None
        req.cached_len = 0

    def _cache(self, req: SchedReq, length: int, pin: bool) -> None:
        """Put ``req``'s first ``length`` tokens in the cache; its tokens there leave ``private``."""
        _, node = self.tree.insert(req.runs(length), length)
        moved = length - req.cached_len
        req.private -= moved
        self.private_total -= moved
        if pin:
            self.tree.lock(node)
        if req.node is not None:
            self.tree.unlock(req.node)
        req.node, req.cached_len = (node if pin else None), (length if pin else 0)

    # ------------------------------------------------------------------ requests
    def fits(self, prompt_tokens: int, max_new_tokens: int) -> bool:
        """Whether a request can always be served: its prompt, its whole budget and a decode
        step's top-up fit the pool (SGLang would otherwise abort it when alone and out of KV)."""
        return prompt_tokens + max_new_tokens + self.reserve <= self.capacity

    def submit(self, key: object, prompt_tokens: int, cached_tokens: int, output_tokens: int, max_new_tokens: int,
               temperature: float, alpha_scale: float = 1.0) -> SchedReq:
        """Queue a request (the caller checked :meth:`fits`); ``cached_tokens`` is its shared prefix."""
        self._uid += 1
        req = SchedReq(key, self._uid, prompt_tokens, min(cached_tokens, prompt_tokens),
                       max(1, min(output_tokens, max_new_tokens)), max_new_tokens, temperature > 0, alpha_scale)
        self.waiting.append(req)
        return req

    def abort(self, req: SchedReq) -> None:
        """Drop a request wherever it is (its KV released)."""
        if req.gone:
            return
        req.gone = True
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
            self.batch_is_full = False
        if self.chunked is req:
            self.chunked = None
        self._release(req)

    @property
    def running_count(self) -> int:
        """Requests holding a row: decoding, plus the chunked one (SGLang's ``num_running_reqs``)."""
        return len(self.running) + (1 if self.chunked is not None else 0)

    # ------------------------------------------------------------------ admission
    def _admit(self) -> tuple[list[tuple[SchedReq, int]], SchedReq | None]:
        """One ``PrefillAdder`` pass: the prefill chunks and the chunked request after it."""
        fam = self.family
        if not self.running:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return [], None
        if self.chunked is None and len(self.running) >= self.max_running:
            self.batch_is_full = True
            return [], None
        total_off = sum(min(r.max_new - r.output, CLIP_MAX_NEW_TOKENS) * self.new_token_ratio for r in self.running)
        cur_off = 0.0
        rem_chunk, rem_input = fam.chunked_prefill_size, fam.max_prefill_tokens
        if self._mixes():
            b = len(self.running)
            rem_chunk, rem_input, total_off, cur_off = rem_chunk - b, rem_input - b, total_off + b, cur_off + b
        plan: list[tuple[SchedReq, int]] = []
        chunked_next: SchedReq | None = None

        def room() -> tuple[float, float]:
            base = self.free + self.tree.evictable_size
            return base - total_off, base - cur_off

        if self.chunked is not None:
            r = self.chunked
            avail = min(rem_chunk, int(room()[0]))
            avail = avail if avail > 0 else rem_chunk
            ext = r.fill - r.computed
            take = min(ext, avail)
            charge = 0 if ext > avail else min(r.max_new - r.output, CLIP_MAX_NEW_TOKENS)
            total_off, cur_off = total_off + take + 1 + charge, cur_off + take + 1
            rem_chunk, rem_input = rem_chunk - take, rem_input - take
            plan.append((r, take))
            chunked_next = r if ext > avail else None
        for r in list(self.waiting):
            if rem_chunk <= 0 or rem_input <= 0 or self.batch_is_full:
                break
            if len(self.running) + len(plan) >= self.max_running:
                self.batch_is_full = True
                break
            hit, node = self.tree.match(r.runs(r.fill), r.fill - 1)
            self.tree.lock(node)
            ext = r.fill - hit
            max_new = min(r.max_new - r.output, CLIP_MAX_NEW_TOKENS)
            if not ext + max_new + 1 < room()[0]:
                self.tree.unlock(node)
                self.batch_is_full = bool(plan) or bool(self.running)
                break
            if ext > rem_chunk:
                ext, max_new, chunked_next = rem_chunk, 0, r
            self.waiting.remove(r)
            r.node, r.cached_len, r.computed = node, hit, hit
            r.prefix_hits.append(hit)
            total_off, cur_off = total_off + ext + 1 + max_new, cur_off + ext + 1
            rem_chunk, rem_input = rem_chunk - ext, rem_input - ext
            plan.append((r, ext))
            total, current = room()
            if total <= 0 or current <= 0:
                self.batch_is_full = True
                break
        return plan, chunked_next

    def _mixes(self) -> bool:
        return self.family.enable_mixed_chunk and not self.speculative and bool(self.running)

    # ------------------------------------------------------------------ decode memory
    def _decode_need(self, reqs: list[SchedReq]) -> int:
        return sum(max(0, r.committed + self.reserve - r.cached_len - r.private) for r in reqs)

    def _decode_fits(self, reqs: list[SchedReq]) -> bool:
        need = self._decode_need(reqs)
        if need > self.free:
            self.tree.evict(need - self.free)
        return need <= self.free

    def _retract(self) -> None:
        """``retract_decode``: retract until the rest fit (module docstring)."""
        keep = sorted(self.running, key=lambda r: (r.output, -r.prompt), reverse=True)
        first = True
        while first or not self._decode_fits(keep):
            if len(keep) == 1:
                break
            first = False
            r = keep.pop()
            self._release(r)
            r.computed = 0
            r.retractions += 1
            self.retracted_total += 1
            self.tree.evict(len(keep) * RETRACT_DECODE_STEPS)
            self.waiting.append(r)
        self.running = [r for r in self.running if r in keep]
        decoded = sum(r.output for r in self.running)
        budget = sum(r.max_new for r in self.running)
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (budget + 1))
        self.batch_is_full = False

    # ------------------------------------------------------------------ steps
    def start_step(self, now: float) -> float | None:
        """Plan the next step (prefill if one forms, else decode); its duration (s), None when idle."""
        chunks, chunked_next = self._admit()
        decode: list[SchedReq] = []
        if chunks:
            self.chunked = chunked_next
            for r, take in chunks:
                if r.admitted_s < 0:
                    r.admitted_s = now
                self._alloc(r, take)
            if self._mixes() and self._decode_fits(self.running):
                decode = list(self.running)
        elif self.running:
            if not self._decode_fits(self.running):
                self._retract()
            else:
                self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.min_ratio)
            decode = list(self.running)
        else:
            self.new_token_ratio = self.init_ratio
            self._plan = None
            return None
        for r in decode:
            self._alloc(r, max(0, r.committed + self.reserve - r.cached_len - r.private))
        self._plan = _Plan(tuple(chunks), tuple(decode), self.chunked)
        dt = self._step_s(chunks, decode)
        self.steps += 1
        self.prefill_steps += 1 if chunks else 0
        self.busy_s += dt
        return dt

    def _step_s(self, chunks: list[tuple[SchedReq, int]], decode: list[SchedReq]) -> float:
        roof, gamma = self.family.roofline, self.family.gamma
        ctx = sum(r.fill for r in decode)
        if chunks:
            n = sum(e for _, e in chunks) + len(decode)
            prefix = sum(r.computed for r, _ in chunks)
            pairs = sum(e * (r.computed + (e + 1) / 2) for r, e in chunks) + ctx
            dt = roof.forward_s(n, pairs, prefix + ctx)
            if self.speculative:  # the drafter's extend over the prompt chunk
                dt += roof.draft_forward_s(n, prefix)
            return dt
        b = len(decode)
        if not self.speculative:
            return roof.forward_s(b, ctx, ctx)
        verify = roof.forward_s(b * (gamma + 1), ctx * (gamma + 1), ctx)
        drafts = gamma * roof.draft_forward_s(b, ctx) + roof.draft_forward_s(b * (gamma + 1), ctx)
        return verify + drafts

    def finish_step(self, now: float) -> list[tuple[SchedReq, int, bool]]:
        """Apply the step that ends at ``now``: ``(request, tokens emitted, finished)`` for every
        request that emitted in it, in batch order."""
        plan, self._plan = self._plan, None
        if plan is None:
            return []
        out: list[tuple[SchedReq, int, bool]] = []
        if plan.decode:
            out += self._decode(plan.decode, now)
        if plan.prefill and not self.running:
            # the prefill batch becomes the running batch, without the flag the adder set
            self.batch_is_full = False
        for r, take in plan.prefill:
            if r.gone:
                continue
            r.computed += take
            self._cache(r, r.computed, pin=True)
            if r.computed < r.fill:
                continue
            if r.first_s < 0:
                r.first_s = now
            r.output += 1
            self.generated_total += 1
            done = r.output >= r.target
            out.append((r, 1, done))
            if done:
                self._finish(r)
            else:
                self.running.append(r)
        return out

    def _decode(self, rows: tuple[SchedReq, ...], now: float) -> list[tuple[SchedReq, int, bool]]:
        fam, rnd = self.family, self.rng.random
        spec = self.speculative  # mixed steps run on plain engines only
        out = []
        tokens = cycles = 0
        for r in rows:
            if r.gone:
                continue
            if spec:
                alpha = fam.alpha(r.fill, r.sampled, r.alpha_scale)
                k = 0
                while k < fam.gamma and rnd() < alpha:
                    k += 1
                r.spec_tokens += k + 1
                r.verify_ct += 1
                tokens, cycles = tokens + k + 1, cycles + 1
                emit = min(k + 1, r.target - r.output)
            else:
                emit = 1
            r.output += emit
            self.generated_total += emit
            done = r.output >= r.target
            out.append((r, emit, done))
            if done:
                self.running.remove(r)
                self._finish(r)
        if spec:
            acc = self._acc
            acc[0], acc[1], acc[2] = acc[0] + tokens, acc[1] + cycles, acc[2] + 1
            if acc[2] >= fam.gauge_interval_steps and acc[1]:
                self.accept_length = acc[0] / acc[1]
                acc[0] = acc[1] = acc[2] = 0
        return out

    def _finish(self, r: SchedReq) -> None:
        """``cache_finished_req``: its prompt + output enter the cache unpinned; its KV is released."""
        self._cache(r, r.committed, pin=False)
        self._release(r)
        self.batch_is_full = False
        r.gone = True


class SglangStepEngine:
    """A :class:`SglangScheduler` as the fake SGLang's step engine
    (:class:`serving.fake_sglang.stepping.StepEngine`; module docstring).

    Args:
        family: the engine family; speculative: run the drafter; seed: the acceptance draws.

    Attributes: ``engine`` (the scheduler: read its ``steps``, ``busy_s``, ``retracted_total``).
    """

    def __init__(self, family: SglangFamily, speculative: bool, seed: int) -> None:
        self.engine = SglangScheduler(family, speculative, seed)
        self.speculative = speculative
        self._reqs: dict[int, SchedReq] = {}

    def fits(self, req: StepRequest) -> bool:
        """:meth:`SglangScheduler.fits` for the request's prompt and budget."""
        return self.engine.fits(req.prompt_tokens, max(req.max_new_tokens, req.output_tokens))

    def submit(self, req: StepRequest) -> None:
        """Queue the sequence (FCFS)."""
        self._reqs[id(req.key)] = self.engine.submit(
            req.key, req.prompt_tokens, req.cached_tokens, req.output_tokens,
            max(req.max_new_tokens, req.output_tokens), req.temperature, req.alpha_scale)

    def abort(self, key: object) -> None:
        """Drop the sequence wherever it is; unknown keys are ignored."""
        r = self._reqs.pop(id(key), None)
        if r is not None:
            self.engine.abort(r)

    def start_step(self, now: float) -> float | None:
        """The scheduler's :meth:`SglangScheduler.start_step`."""
        return self.engine.start_step(now)

    def finish_step(self, now: float) -> list[StepEmit]:
        """The scheduler's :meth:`SglangScheduler.finish_step`, as what each sequence emitted."""
        out = []
        for r, tokens, done in self.engine.finish_step(now):
            if done:
                self._reqs.pop(id(r.key), None)
            out.append(StepEmit(r.key, tokens, done, r.spec_tokens, r.verify_ct))
        return out

    def gauges(self) -> StepGauges:
        """Running (with the chunked request), queued, KV in use, capacity, the accept-length gauge."""
        e = self.engine
        return StepGauges(e.running_count, len(e.waiting), e.kv_used, e.capacity, e.accept_length)


def sglang_fake_config(family: SglangFamily, speculative: bool, *, model_name: str = "day-model",
                       context_length: int = 262_144) -> FakeConfig:
    """The fake server's config for an engine of ``family``: its KV pool, ``max_running_requests``,
    EAGLE-3 with ``gamma`` steps on a speculative engine, no tokenizer (as
    :func:`loadtests.dayhttp.fake_config`)."""
    return FakeConfig(model_name=model_name, context_length=context_length,
                      max_total_num_tokens=family.kv_capacity(speculative),
                      max_running_requests=family.max_running_requests(speculative),
                      speculative_algorithm="EAGLE3" if speculative else None,
                      speculative_num_steps=family.gamma, speculative_eagle_topk=1,
                      speculative_num_draft_tokens=family.gamma + 1)
