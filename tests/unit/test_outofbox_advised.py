"""benchmarks/outofbox.py --advised: the learned router at the split the advice names, as a
ratio of the better static deployment (a tiny seeded day; the advice stubbed, and once
advise_split itself)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from benchmarks.outofbox import _stats, advised_row, advised_text, run_advised
from loadtests.dayfamilies import get_family
from loadtests.dayrouter import PolicyRouter, settings_for
from loadtests.daysim import (
    adaptive_max_batch,
    all_adaptive,
    all_plain,
    all_spec,
    fronted,
    simulate_day,
)
from loadtests.split import SplitAdvice, advise_split

SEED = 3


def _day() -> tuple[list[Any], Any, Any, int]:
    family = get_family("default")
    reqs = family.shape("heavy", 2).requests(SEED)[:60]
    settings = settings_for(family.model, long_prompt_tokens=family.scaled_tokens(32768),
                            context_tokens=family.scaled_tokens(12288))
    return reqs, family.model, settings, adaptive_max_batch(family.model, family.scaled_tokens(12288))


def _advice(k: int, n: int = 2) -> SplitAdvice:
    """What advise_split would return advising ``k``: a decoy row at another k with a lower mean."""
    best = f"routed {k}s+{n - k}p"
    return SplitAdvice(n, "mean_s", k, best, [{"k": (k + 1) % (n + 1), "deployment": "decoy", "mean_s": 0.5},
                                              {"k": k, "deployment": best, "mean_s": 4.25}])


@pytest.mark.parametrize("k", [0, 1, 2])
def test_the_learned_router_runs_at_the_advised_split_and_the_ratio_is_exact(k: int) -> None:
    reqs, model, settings, amb = _day()
    calls: list[dict[str, Any]] = []

    def advise(r: Any, n: int, m: Any, **kw: Any) -> SplitAdvice:
        calls.append({"requests": r, "n": n, "model": m, **kw})
        return _advice(k)

    row = run_advised(reqs, 2, model, settings, seed=SEED, adaptive_batch=amb, advise=advise)
    assert calls == [{"requests": reqs, "n": 2, "model": model, "settings": settings, "seed": SEED}]
    assert (row["k"], row["split"], row["advised"], row["predicted_mean_s"]) == (k, f"{k}s+{2 - k}p",
                                                                                   f"routed {k}s+{2 - k}p", 4.25)
    learned = replace(settings, predict=False, learn=True)
    mine = _stats(simulate_day(reqs, fronted(k, 2, lambda: PolicyRouter(learned)), model, seed=SEED))
    static = {lbl: _stats(simulate_day(reqs, dep, model, seed=SEED))
              for lbl, dep in (("all-plain", all_plain(2)), ("all-spec", all_spec(2)),
                               ("all-adaptive", all_adaptive(2, amb)))}
    best = min(static, key=lambda s: static[s]["mean_s"])
    assert row["static"] == best and row["static_mean_s"] == static[best]["mean_s"]
    assert (row["mean_s"], row["p90_s"]) == (mine["mean_s"], mine["p90_s"])
    assert row["ratio"] == mine["mean_s"] / static[best]["mean_s"]
    assert row["p90_ratio"] == mine["p90_s"] / static[best]["p90_s"]
    assert row["ok"] is (row["ratio"] <= 1.0)
    assert advised_text(row).startswith(f"advised {k}s+{2 - k}p (routed {k}s+{2 - k}p, predicted mean 4.25 s)")


def test_the_row_ratio_and_verdict_from_given_numbers() -> None:
    stats = {"all-plain": {"mean_s": 10.0, "p90_s": 20.0}, "all-spec": {"mean_s": 8.0, "p90_s": 16.0},
             "all-adaptive": {"mean_s": None, "p90_s": None}, "learned 0s+2p": {"mean_s": 8.0, "p90_s": 18.0}}
    row = advised_row(_advice(0), stats)
    assert (row["static"], row["ratio"], row["p90_ratio"], row["ok"]) == ("all-spec", 1.0, 1.125, True)
    row = advised_row(_advice(0), {**stats, "learned 0s+2p": {"mean_s": 8.5, "p90_s": 12.0}})
    assert (row["ratio"], row["p90_ratio"], row["ok"]) == (8.5 / 8.0, 0.75, False)
    with pytest.raises(KeyError):  # the learned router measured at another split is not used
        advised_row(_advice(1), stats)


def test_by_default_the_split_is_advise_splits() -> None:
    reqs, model, settings, amb = _day()
    advice = advise_split(reqs, 2, model, settings=settings, seed=SEED)
    row = run_advised(reqs, 2, model, settings, seed=SEED, adaptive_batch=amb)
    assert (row["k"], row["advised"]) == (advice.best_k, advice.best)
    assert row["predicted_mean_s"] == min(p["mean_s"] for p in advice.predictions)
