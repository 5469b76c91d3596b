"""The router's window of finished requests for the planner (router/front/planwindow.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from router.config.tree import PlannerConfig
from router.front.planwindow import PlanWindow
from router.request.features import RequestFeatures


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _job(received: float, *, status: int = 200, outcome: str = "ok", pool: str | None = "spec",
         usage: Any = None, n: int = 1, prompts: int = 1, exact: bool = True, temperature: str = "greedy",
         speculation: str = "auto") -> Any:
    features = RequestFeatures(prompt_tokens=120, max_new_tokens=64, n=n, num_prompts=prompts,
                               prompt_tokens_lower=None if exact else 100, temperature_class=temperature,
                               speculation=speculation)
    return SimpleNamespace(status=status, outcome=outcome, decision=SimpleNamespace(pool=pool), features=features,
                           observer=SimpleNamespace(usage=usage), received_at=received)


USAGE = {"prompt_tokens": 120, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 60}}


def test_records_finished_requests_only() -> None:
    clock, cfg = Clock(), PlannerConfig()
    w = PlanWindow(cfg, clock)
    w.record(_job(99.0, usage=USAGE, speculation="off"), "m", cfg)
    w.record(_job(99.5, status=503), "m", cfg)
    w.record(_job(99.5, outcome="client_disconnect"), "m", cfg)
    w.record(_job(99.6, pool=None), "m", cfg)
    assert len(w) == 1 and w.recorded == 1
    doc = w.view("m")
    assert doc["window"] == {"requests": 1, "seconds": 1.0, "window_requests": 4096, "window_s": 900.0, "recorded": 1}
    assert doc["requests"] == [{"arrival_s": 0.0, "prompt_tokens": 120, "cached_tokens": 60, "output_tokens": 40,
                                "max_tokens": 64, "temperature_class": "greedy", "n": 1, "pool": "spec",
                                "duration_s": 1.0, "speculation": "off"}]


def test_sequences_and_engine_counts() -> None:
    clock, cfg = Clock(), PlannerConfig()
    w = PlanWindow(cfg, clock)
    # n = 2 of 2 prompts: 4 sequences, 100 tokens -> 25 each; a bounded prompt takes the engine's count
    w.record(_job(99.0, n=2, prompts=2, usage={"completion_tokens": 100, "prompt_tokens": 999}), "m", cfg)
    w.record(_job(99.5, exact=False, usage={"completion_tokens": 7, "prompt_tokens": 80}), "m", cfg)
    w.record(_job(99.8, usage=None, temperature="sampled"), "m", cfg)  # a stream without usage
    rows = w.view()["requests"]
    assert [(r["n"], r["prompt_tokens"], r["output_tokens"], r["temperature_class"]) for r in rows] == [
        (4, 120, 25, "greedy"), (1, 80, 7, "greedy"), (1, 120, None, "sampled")]


def test_bounded_by_count_and_age() -> None:
    clock, cfg = Clock(), PlannerConfig(window_requests=3, window_s=10.0)
    w = PlanWindow(cfg, clock)
    for i in range(5):
        w.record(_job(95.0 + i, usage=USAGE), "m", cfg)
    assert [r["arrival_s"] for r in w.view()["requests"]] == [0.0, 1.0, 2.0]  # arrivals 97, 98, 99
    clock.t = 107.5  # 97 is now older than 10 s
    assert len(w.entries()) == 2
    bigger = PlannerConfig(window_requests=5, window_s=10.0)
    w.record(_job(107.0, usage=USAGE), "m", bigger)  # a reload's new size: kept entries stay
    assert [e.arrival for e in w.entries()] == [98.0, 99.0, 107.0]


def test_views_per_model() -> None:
    clock, cfg = Clock(), PlannerConfig()
    w = PlanWindow(cfg, clock)
    w.record(_job(99.0, usage=USAGE), "a", cfg)
    w.record(_job(99.5, usage=USAGE), "b", cfg)
    assert w.view("b")["window"]["requests"] == 1
    assert w.view("b")["requests"][0]["arrival_s"] == 0.0
    assert w.view()["window"]["requests"] == 2
