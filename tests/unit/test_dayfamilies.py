"""Engine families, the days fitted to them, the mid-day shifts, shortened days and the
windowed means after a shift."""

from __future__ import annotations

import pytest

from loadtests.dayfamilies import FAMILIES, EngineFamily, get_family
from loadtests.dayreport import recovery_s, windowed_means
from loadtests.dayshapes import SHAPES, default_engine_model, get_shape
from loadtests.daysim import RequestRecord, adaptive_max_batch
from loadtests.split import SplitError, better_static


def test_every_family_builds_and_documents_its_sources() -> None:
    assert list(FAMILIES) == ["default", "kv_limited", "long_attention", "moe_spec_pays"]
    for name, build in FAMILIES.items():
        fam = build()
        assert fam.name == name and fam.summary and fam.summary == (build.__doc__ or "").strip().split("\n")[0]
        assert len(build.__doc__ or "") > 200
        # the router adapter's interface
        m = fam.model
        assert m.speed.t0_s > 0 and m.max_running >= 1 and 0 <= m.alpha(1000, True) <= m.alpha(1000, False)
        assert m.kv_capacity(True) < m.kv_capacity(False)
    assert get_family("default").model == default_engine_model()
    with pytest.raises(KeyError, match="unknown engine family 'nope'; known: default, kv_limited"):
        get_family("nope")
    with pytest.raises(ValueError, match="must be > 0"):
        EngineFamily("x", default_engine_model(), "x", rate_scale=0)


def test_kv_limited_a_6k_prompt_holds_a_tenth_and_long_prompts_fill_the_kv() -> None:
    fam = get_family("kv_limited")
    m = fam.model
    assert m.kv_capacity(False) == 10 * 6144 and m.kv_capacity(True) == int(0.75 * 10 * 6144)
    reqs = fam.shape("heavy").requests(0)
    long_ = [r for r in reqs if r.kind == "long"]
    assert min(r.prompt_tokens for r in long_) >= 5120 and max(r.prompt_tokens for r in long_) <= 8192
    # every request fits a speculative engine; eight long reservations overflow it
    assert max(r.prompt_tokens + r.max_new_tokens for r in reqs) <= m.kv_capacity(True)
    assert 8 * min(r.prompt_tokens + r.max_new_tokens for r in long_) > m.kv_capacity(True)
    assert fam.shape("heavy").long_prompt_tokens == fam.scaled_tokens(32768) == 2048


def test_long_attention_and_moe_families_have_the_economics_they_claim() -> None:
    la = get_family("long_attention").model.speed
    assert la.attn_s_per_token * 100_000 > la.t0_s * (1 + 1 / la.batch_knee)   # attention dominates at 100K
    assert la.alpha(100_000) < 0.3 < la.alpha(10_000)
    assert la.speedup(1, 12288) > 1.5 and la.speedup(1, 100_000) < 1.0
    moe = get_family("moe_spec_pays")
    assert moe.model.speed.speedup(200, moe.scaled_tokens(12288)) == pytest.approx(1.15, abs=0.01)
    amb = adaptive_max_batch(moe.model, moe.scaled_tokens(12288))
    assert amb is not None and amb > moe.model.max_running          # never switches off
    assert adaptive_max_batch(get_family("long_attention").model) == 17
    day = moe.shape("light")
    base = get_shape("light")
    assert day.rate_scale == 3 * base.rate_scale
    assert [(c.lo, c.out_hi, c.max_new_tokens) for c in day.mix] == [(2048, 2048, 4096), (20480, 2048, 4096)]


def test_shift_days_change_their_mix_at_mid_day() -> None:
    assert {"light", "heavy", "mixed", "shift_long", "shift_sampled"} <= set(SHAPES)
    sampled = get_shape("shift_sampled")
    reqs = sampled.requests(0)
    assert sampled.shift_at_s == 300.0 and sampled.duration_s == 600.0
    assert all(r.temperature == 0 for r in reqs if r.arrival_s < 300)
    assert all(r.temperature == 1 for r in reqs if r.arrival_s >= 300)
    long_ = get_shape("shift_long")
    reqs = long_.requests(0)
    assert not any(r.kind == "long" for r in reqs if r.arrival_s < 300)
    after = [r for r in reqs if r.arrival_s >= 300]
    assert 0.15 < sum(r.kind == "long" for r in after) / len(after) < 0.25


def test_shortened_day_keeps_the_rates_and_moves_bursts_and_shift() -> None:
    day = get_shape("mixed")
    q = day.shortened(0.25)
    assert q.duration_s == pytest.approx(day.duration_s / 4)
    assert [b.at_s for b in q.bursts] == [75.0] and q.bursts[0].requests == 20
    assert [s.rate_start for s in q.segments] == [s.rate_start for s in day.segments]
    assert get_shape("shift_long").shortened(0.5).shift_at_s == 150.0
    assert 0.2 < len(q.requests(0)) / len(day.requests(0)) < 0.3
    with pytest.raises(ValueError, match="factor in"):
        day.shortened(0)
    with pytest.raises(ValueError, match="scales > 0"):
        day.with_lengths(0)
    assert day.with_lengths() is day


def _rec(rid: int, at: float, e2e: float | None, status: str = "ok") -> RequestRecord:
    return RequestRecord(rid, at, "t", 10, 2, 0.0, 0, 2, "p", "u", False, "r", status=status, e2e_s=e2e)


def test_windowed_means_and_recovery_on_hand_records() -> None:
    recs = [_rec(0, 5.0, 99.0), _rec(1, 10.0, 4.0), _rec(2, 20.0, 6.0), _rec(3, 30.0, 2.0),
            _rec(4, 39.0, None, status="refused"), _rec(5, 45.0, 3.0), _rec(6, 50.0, 1.0)]
    w = windowed_means(recs, start_s=10.0, end_s=50.0, window_s=15.0)
    assert w == [{"start_s": 10.0, "end_s": 25.0, "requests": 2, "ok": 2, "mean_s": 5.0},
                 {"start_s": 25.0, "end_s": 40.0, "requests": 2, "ok": 1, "mean_s": 2.0},
                 {"start_s": 40.0, "end_s": 50.0, "requests": 1, "ok": 1, "mean_s": 3.0}]
    ref = [{**x, "mean_s": m} for x, m in zip(w, [4.0, 1.0, 2.9], strict=True)]
    assert recovery_s(w, ref, start_s=10.0) == 30.0          # 3.0 <= 1.05 * 2.9
    assert recovery_s(w, ref, start_s=10.0, tolerance=0.3) == 0.0
    assert recovery_s(w[:2], ref[:2], start_s=10.0) is None
    with pytest.raises(ValueError, match="same windows"):
        recovery_s(w, ref[:2], start_s=10.0)
    with pytest.raises(ValueError, match="window_s > 0"):
        windowed_means(recs, start_s=0.0, end_s=10.0, window_s=0)


def test_better_static_is_the_lowest_mean_of_the_three_static_deployments() -> None:
    rows = [{"deployment": "all-plain", "mean_s": 9.0}, {"deployment": "predict 1s+1p", "mean_s": 5.0},
            {"deployment": "all-spec", "mean_s": 8.0}, {"deployment": "all-adaptive", "mean_s": 8.0},
            {"deployment": "specgate 1s+1p", "mean_s": None}]
    assert better_static(rows)["deployment"] == "all-spec"
    rows[3]["mean_s"] = 7.5
    assert better_static(rows)["deployment"] == "all-adaptive"
    with pytest.raises(SplitError, match="no static deployment"):
        better_static(rows[1:2])
