"""The tokeniser thread count: the process's CPUs (affinity, capped by a cgroup v2 quota)
minus one for the event loop, clamped to 2-8; ``server.tokenizer_threads`` overrides it."""

from __future__ import annotations

import pytest

from router.app.asgi import tokenizer_executor, tokenizer_threads
from router.config.tree import ServerConfig


@pytest.mark.parametrize(("cpus", "cpu_max", "expected"), [
    (2, None, 2),                   # two cores, no quota file: one is the loop's, but at least 2
    (4, None, 3),
    (64, None, 8),                  # capped at 8
    (64, "max 100000", 8),          # no quota
    (64, "200000 100000", 2),       # a Kubernetes CPU limit of 2 on a 64-core node
    (64, "450000 100000", 4),       # 4.5 CPUs -> 5 usable, one for the loop
    (3, "800000 100000", 2),        # the affinity is the smaller
    (16, "garbage", 8),             # an unreadable quota: the affinity alone
])
def test_threads_follow_the_usable_cpus(tmp_path, monkeypatch, cpus, cpu_max, expected) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)))
    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max + "\n")
    assert tokenizer_threads(str(path)) == expected


def test_the_config_value_wins_and_is_bounded() -> None:
    executor = tokenizer_executor(5)
    try:
        assert executor._max_workers == 5
    finally:
        executor.shutdown()
    assert ServerConfig().tokenizer_threads is None
    assert ServerConfig(tokenizer_threads=3).tokenizer_threads == 3
    for bad in (0, 65, "4", 2.0):
        with pytest.raises(ValueError, match="tokenizer_threads"):
            ServerConfig(tokenizer_threads=bad)
