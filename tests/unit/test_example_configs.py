"""The shipped example configs load, with their files, as the docs use them."""

from __future__ import annotations

from pathlib import Path

from loadtests.cli import add_commands
from router.commands import check_paths
from router.config import load_config
from router.features import PromptCounter

ROOT = Path(__file__).resolve().parents[2]


def test_loadtest_fakes_config_matches_the_quick_start() -> None:
    cfg = load_config(ROOT / "examples" / "loadtest-fakes.yaml")
    check_paths(cfg)                                   # the shipped tokenizer is there
    assert [(p.name, p.speculative, [str(e) for e in p.endpoints]) for p in cfg.pools] == [
        ("spec", True, ["http://127.0.0.1:18101"]), ("plain", False, ["http://127.0.0.1:18102"])]
    assert (cfg.server.host, cfg.server.port) == ("127.0.0.1", 18100)
    spec = cfg.pools[0]
    assert (spec.gamma, spec.drafter_cost_ratio) == (4, 0.05)   # loadtest-fakes' defaults
    assert cfg.limits.max_context_tokens == 8192                 # the quick start's --context-length
    import argparse

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    fakes = parser.parse_args(["loadtest-fakes"])
    assert (fakes.model_name, fakes.gamma, fakes.c) == (cfg.model.name, spec.gamma, spec.drafter_cost_ratio)
    counter = PromptCounter(cfg.model.tokenizer)
    assert counter.render_chat([{"role": "user", "content": "hi"}]) == "<|user|>hi<|assistant|>"
    quick_start = (ROOT / "docs" / "loadtests.md").read_text()
    assert "specgate router --config examples/loadtest-fakes.yaml" in quick_start
    assert "--spec-port 18101 --plain-port 18102" in quick_start and "--context-length 8192" in quick_start
