"""The SGLang-scheduler engine model's rules, step by step with exact expectations: admission by
KV with the new-token ratio, chunked prefill, a retraction and its re-prefill, the radix cache,
max_running_requests, mixed chunks, the step cost, the gauge and determinism by seed."""

from __future__ import annotations

import dataclasses

import pytest

from loadtests.dayfamilies import get_family
from loadtests.sglang_families import FAMILIES, Roofline, SglangFamily, get_sglang_family
from loadtests.sglang_radix import SHARED, RadixCache, shared_runs
from loadtests.sglang_sched import SchedReq, SglangScheduler, SglangStepEngine, sglang_fake_config
from serving.fake_sglang.stepping import StepRequest

#: 10 ms per pass, whatever its size (weights only; no compute, no KV reads, no launch cost).
FLAT = Roofline(hbm_bytes_per_s=1e12, peak_flops=1e30, weight_bytes=1e10, active_params=0.0,
                kv_bytes_per_token=0.0, attn_flops_per_pair=0.0, launch_s=0.0,
                draft_weight_bytes=1e9, draft_active_params=0.0)


def family(**kw: object) -> SglangFamily:
    base = {"name": "t", "summary": "t", "roofline": FLAT, "kv_tokens": 1000, "spec_kv_fraction": 1.0}
    return SglangFamily(**{**base, **kw})  # type: ignore[arg-type]


def run(e: SglangScheduler, steps: int, t: float = 0.0) -> list[list[tuple[int, int, bool]]]:
    """``steps`` steps: per step, ``(request uid, tokens, finished)`` for each emit."""
    log = []
    for _ in range(steps):
        dt = e.start_step(t)
        if dt is None:
            log.append([])
            continue
        t += dt
        log.append([(r.uid, n, done) for r, n, done in e.finish_step(t)])
    return log


def drain(e: SglangScheduler, limit: int = 100_000) -> list[list[tuple[int, int, bool]]]:
    log = []
    t = 0.0
    while (dt := e.start_step(t)) is not None and len(log) < limit:
        t += dt
        log.append([(r.uid, n, done) for r, n, done in e.finish_step(t)])
    return log


def test_admission_counts_the_running_requests_growth_at_the_new_token_ratio() -> None:
    e = SglangScheduler(family(), speculative=False, seed=0)
    a = e.submit("a", 300, 0, 3, 200, 0.0)
    b = e.submit("b", 300, 0, 3, 200, 0.0)
    # step 1: a needs 300 + 200 + 1 = 501 < 1000; b would need 501 < 1000 - 501: no
    assert run(e, 1) == [[(a.uid, 1, False)]]
    assert e.waiting == [b] and e.tree.protected_size == 300 and e.kv_used == 300
    # step 2: a's growth counts min(199, 4096) * 0.7 = 139.3: 501 < 700 - 139.3, so b is admitted
    # and prefilled in a step of its own (a does not decode beside it: no mixed chunk)
    assert run(e, 1) == [[(b.uid, 1, False)]]
    assert e.waiting == [] and [r.uid for r in e.running] == [a.uid, b.uid]
    assert run(e, 2) == [[(a.uid, 1, False), (b.uid, 1, False)], [(a.uid, 1, True), (b.uid, 1, True)]]
    assert e.start_step(1.0) is None and e.kv_used == 0
    # finished requests stay in the cache, unpinned: prompt + output - 1 tokens each
    assert e.tree.total_size == e.tree.evictable_size == 2 * 302
    assert e.new_token_ratio == 0.7  # back to its start when idle


def test_the_ratio_decays_per_decode_step_and_a_request_that_never_fits_is_refused() -> None:
    e = SglangScheduler(family(), speculative=False, seed=0)
    assert e.fits(500, 499) and not e.fits(500, 500)   # prompt + budget + 1 decode token
    e.submit("a", 10, 0, 5, 10, 0.0)
    run(e, 3)
    assert e.new_token_ratio == pytest.approx(0.7 - 2 * (0.7 - 0.098) / 600)


def test_chunked_prefill_cuts_at_the_chunk_size_and_continues_first() -> None:
    e = SglangScheduler(family(chunked_prefill_size=256, kv_tokens=10_000), speculative=False, seed=0)
    a = e.submit("a", 600, 0, 2, 10, 0.0)
    b = e.submit("b", 100, 0, 2, 10, 0.0)
    chunks = []
    for _ in range(4):
        e.start_step(0.0)
        assert e._plan is not None
        chunks.append([(r.uid, n) for r, n in e._plan.prefill])
        e.finish_step(0.0)
    # a: 256 + 256 + 88; b joins the third step in the 168 tokens a leaves of the chunk
    assert chunks == [[(a.uid, 256)], [(a.uid, 256)], [(a.uid, 88), (b.uid, 100)], []]
    assert e.prefill_steps == 3 and e.steps == 4 and e.chunked is None
    assert a.output == 2 and b.output == 2 and a.prefix_hits == [0]


def test_max_prefill_tokens_also_bounds_a_prefill_batch() -> None:
    e = SglangScheduler(family(chunked_prefill_size=8192, max_prefill_tokens=150, kv_tokens=10_000),
                        speculative=False, seed=0)
    reqs = [e.submit(i, 100, 0, 1, 10, 0.0) for i in range(3)]
    e.start_step(0.0)
    assert e._plan is not None
    # the pass stops once 150 input tokens are spent: the first two are taken whole
    assert [(r.uid, n) for r, n in e._plan.prefill] == [(reqs[0].uid, 100), (reqs[1].uid, 100)]


def test_a_retracted_request_requeues_and_prefills_again_past_its_cached_prefix() -> None:
    e = SglangScheduler(family(kv_tokens=900), speculative=False, seed=0)
    a = e.submit("a", 100, 100, 450, 450, 0.0)   # the whole prompt is the shared prefix
    b = e.submit("b", 100, 100, 450, 450, 0.0)
    run(e, 2)                       # a's prefill; b's (admitted at 452 < 800 - 449 * 0.7)
    assert b.prefix_hits == [99] and e.tree.total_size == 100
    # each decode step adds one KV token per request: 100 + 2 * 400 fills the 900 tokens
    log = run(e, 400)
    assert all(len(s) == 2 for s in log) and a.output == b.output == 401 and e.free == 0
    # the next step cannot grow both: b (fewest outputs; on a tie the later) is retracted
    assert run(e, 1) == [[(a.uid, 1, False)]]
    assert e.retracted_total == 1 and b.retractions == 1 and e.waiting == [b] and b.output == 401
    assert b.private == 0 and b.node is None and e.free == 900 - 100 - 401
    # the ratio is re-estimated over the request kept, before its step: (401 + 20) / (450 + 1)
    assert e.new_token_ratio == pytest.approx(421 / 451)
    # b waits (401 + 49 + 1 does not fit beside a) until a finishes ...
    log = run(e, 48)
    assert log[-1] == [(a.uid, 1, True)] and e.waiting == [b]
    # ... then prefills prompt + output again, past the 100 shared tokens still cached
    e.start_step(10.0)
    assert e._plan is not None and [(r.uid, n) for r, n in e._plan.prefill] == [(b.uid, 401)]
    assert e.finish_step(10.1) == [(b, 1, False)]
    assert b.prefix_hits == [99, 100]
    rest = drain(e)
    assert sum(n for s in rest for _, n, _ in s) == 450 - 402 and b.output == 450 and e.kv_used == 0


def test_the_radix_cache_serves_a_shared_prefix_once_and_evicts_lru_leaves() -> None:
    e = SglangScheduler(family(kv_tokens=10_000), speculative=False, seed=0)
    a = e.submit("a", 100, 64, 1, 10, 0.0)
    drain(e)
    b = e.submit("b", 100, 64, 1, 10, 0.0)
    e.start_step(0.0)
    assert e._plan is not None and [(r.uid, n) for r, n in e._plan.prefill] == [(b.uid, 36)]
    e.finish_step(0.0)
    assert a.prefix_hits == [0] and b.prefix_hits == [64]
    # the tree: the shared 64 and each request's own 36
    assert e.tree.total_size == 64 + 36 + 36


def test_radix_tree_match_split_lock_and_evict() -> None:
    t = RadixCache()
    assert shared_runs(3, "x", 5) == ((SHARED, 0, 3), ("x", 3, 5)) and shared_runs(0, "x", 2) == (("x", 0, 2),)
    assert t.insert(shared_runs(4, "a", 10), 10)[0] == 0
    assert t.insert(shared_runs(4, "b", 6), 6)[0] == 4
    assert (t.total_size, t.evictable_size) == (12, 12)
    hit, node = t.match(shared_runs(2, "c", 8), 7)          # only 2 shared tokens: the node splits
    assert hit == 2 and (node.lo, node.hi) == (0, 2)
    hit, node = t.match(shared_runs(4, "a", 10), 9)         # stops at the limit, inside a's node
    assert hit == 9 and (node.lo, node.hi) == (4, 9)
    t.lock(node)
    assert (t.evictable_size, t.protected_size) == (3, 9)
    # b's leaf (touched before a's) goes; a's tail [9, 10) is the only other unpinned leaf
    assert t.evict(1) == 2 and t.total_size == 10
    assert t.evict(100) == 1 and (t.total_size, t.evictable_size) == (9, 0)
    t.unlock(node)
    assert t.evict(100) == 9 and t.total_size == 0
    with pytest.raises(ValueError, match="not locked"):
        t.unlock(node)


def test_max_running_requests_caps_the_batch() -> None:
    e = SglangScheduler(family(max_running=2, kv_tokens=10_000), speculative=False, seed=0)
    reqs = [e.submit(i, 10, 0, 3, 10, 0.0) for i in range(3)]
    log = run(e, 4)
    assert log[0] == [(reqs[0].uid, 1, False), (reqs[1].uid, 1, False)]
    assert log[2] == [(reqs[0].uid, 1, True), (reqs[1].uid, 1, True)]
    assert log[3] == [(reqs[2].uid, 1, False)]      # admitted once a row was free
    assert e.max_running == 2 and SglangScheduler(family(), True, 0).max_running == 48


def test_mixed_chunk_decodes_beside_the_prefill_and_spends_the_chunk() -> None:
    e = SglangScheduler(family(enable_mixed_chunk=True, chunked_prefill_size=100, kv_tokens=10_000),
                        speculative=False, seed=0)
    a = e.submit("a", 10, 0, 5, 10, 0.0)
    run(e, 1)
    b = e.submit("b", 300, 0, 2, 10, 0.0)
    e.start_step(0.0)
    assert e._plan is not None
    assert [(r.uid, n) for r, n in e._plan.prefill] == [(b.uid, 99)] and e._plan.decode == (a,)
    assert e.finish_step(0.0) == [(a, 1, False)]


def test_step_cost_is_the_roofline_of_the_passes() -> None:
    roof = Roofline(hbm_bytes_per_s=1e12, peak_flops=1e15, weight_bytes=1e10, active_params=1e10,
                    kv_bytes_per_token=1e5, attn_flops_per_pair=0.0, launch_s=0.001,
                    draft_weight_bytes=1e9, draft_active_params=1e9, draft_kv_bytes_per_token=1e3,
                    draft_launch_s=0.0005)
    # memory-bound at 1 token (10 ms of weights), compute-bound at 1,000 (20 ms), + KV + launch
    assert roof.forward_s(1, 0, 1000) == pytest.approx(0.001 + 0.010 + 1e-4)
    assert roof.forward_s(1000, 0, 0) == pytest.approx(0.001 + 0.020)
    moe = dataclasses.replace(roof, expert_bytes=1e10, experts=8, experts_per_token=2)
    assert moe.weights_read(1) == pytest.approx(1e10 + 1e10 * 0.25)
    assert moe.weights_read(2) == pytest.approx(1e10 + 1e10 * (1 - 0.75 ** 2))
    fam = family(roofline=roof, gamma=2, kv_tokens=10_000)
    e = SglangScheduler(fam, speculative=True, seed=0)
    e.submit("a", 999, 0, 50, 100, 0.0)
    run(e, 1)
    dt = e.start_step(1.0)
    verify = roof.forward_s(3, 3000, 1000)
    drafts = 2 * roof.draft_forward_s(1, 1000) + roof.draft_forward_s(3, 1000)
    assert dt == pytest.approx(verify + drafts)


def test_speculative_acceptance_the_gauge_and_determinism_by_seed() -> None:
    fam = family(gamma=3, gauge_interval_steps=4, alpha_greedy=0.8, kv_tokens=100_000)

    def day(seed: int) -> tuple[list[list[tuple[int, int, bool]]], SglangScheduler]:
        e = SglangScheduler(fam, speculative=True, seed=seed)
        for i in range(4):
            e.submit(i, 50 + i, 0, 40, 40, 0.0)
        return drain(e), e

    log, e = day(7)
    assert log == day(7)[0] and log != day(8)[0]
    emitted = [n for s in log for _, n, _ in s]
    assert sum(emitted) == 4 * 40 and max(emitted) == 4 and min(emitted) == 1
    assert e.accept_length is not None and 1.0 <= e.accept_length <= 4.0
    # alpha 0 and 1: exactly the target's token, or all drafts accepted
    for alpha, per_step in ((0.0, 1), (1.0, 4)):
        e2 = SglangScheduler(dataclasses.replace(fam, alpha_greedy=alpha), speculative=True, seed=1)
        r = e2.submit("x", 10, 0, 13, 13, 0.0)
        steps = drain(e2)
        assert [n for s in steps for _, n, _ in s] == [1] + [per_step] * (12 // per_step)
        assert r.verify_ct == 12 // per_step and r.spec_tokens == 12


def test_step_engine_seam_aborts_and_reports_the_gauges() -> None:
    fam = family(kv_tokens=2000)
    eng = SglangStepEngine(fam, speculative=False, seed=0)
    a, b = StepRequest("a", 100, 40, 5, 10, 0.0), StepRequest("b", 3000, 0, 5, 10, 0.0)
    assert eng.fits(a) and not eng.fits(b)
    eng.submit(a)
    eng.submit(StepRequest("c", 100, 0, 2, 10, 0.0))
    assert eng.gauges().queued == 2
    dt = eng.start_step(0.0)
    assert dt == pytest.approx(0.010)
    emits = eng.finish_step(dt)
    assert [(x.key, x.tokens, x.finished) for x in emits] == [("a", 1, False), ("c", 1, False)]
    g = eng.gauges()
    assert (g.running, g.queued, g.kv_used_tokens, g.capacity_tokens, g.accept_length) == (2, 0, 200, 2000, None)
    eng.abort("a")
    eng.abort("nope")
    assert eng.gauges().running == 1 and eng.engine.kv_used == 100
    assert isinstance(eng.engine.running[0], SchedReq)


def test_families_document_their_figures_and_fit_the_day_families_kv() -> None:
    assert list(FAMILIES) == ["kv_limited", "moe_spec_pays"]
    for name, build in FAMILIES.items():
        fam = build()
        assert fam.name == name and len(build.__doc__ or "") > 400
        day = get_family(name).model
        assert fam.kv_capacity(False) == day.kv_capacity(False) and fam.kv_capacity(True) == day.kv_capacity(True)
        cfg = sglang_fake_config(fam, True)
        assert cfg.max_total_num_tokens == fam.kv_capacity(True) and cfg.speculative_num_draft_tokens == fam.gamma + 1
    kv = get_sglang_family("kv_limited").roofline
    assert kv.forward_s(1, 0, 0) == pytest.approx(0.001 + 70e9 / 3.6e12)
    with pytest.raises(KeyError, match="known: kv_limited, moe_spec_pays"):
        get_sglang_family("nope")
    with pytest.raises(ValueError, match=">= 1"):
        family(gamma=0)


def test_the_day_simulator_runs_a_day_on_the_sglang_engines() -> None:
    from loadtests.daysim import all_spec, simulate_day
    from loadtests.sglang_day import sglang_engines

    fam = get_family("kv_limited")
    reqs = fam.shape("light").shortened(0.05).requests(3)
    make = sglang_engines(get_sglang_family("kv_limited"))

    def day() -> list[tuple[str, float | None, float | None]]:
        res = simulate_day(reqs, all_spec(2), fam.model, seed=5, make_engine=make)
        return [(r.status, r.e2e_s, r.accept_length) for r in res.records]

    first = day()
    assert first == day() and len(first) == len(reqs) > 5
    assert all(s == "ok" and e is not None and e > 0 and a is not None and 1 <= a <= 4 for s, e, a in first)
    # not the day model's engine: the same requests and seed give other latencies
    own = simulate_day(reqs, all_spec(2), fam.model, seed=5)
    assert [r.e2e_s for r in own.records] != [e for _, e, _ in first]
