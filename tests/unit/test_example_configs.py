"""The shipped example configs load, with their files, as the docs use them."""

from __future__ import annotations

from pathlib import Path

from loadtests.cli import add_commands
from loadtests.workload import PromptFactory, Workload, parse_buckets
from router.app.commands import check_paths
from router.config.tree import load_config
from router.request.features import PromptCounter

ROOT = Path(__file__).resolve().parents[2]


def test_loadtest_fakes_config_matches_the_quick_start() -> None:
    cfg = load_config(ROOT / "examples" / "loadtest-fakes.yaml")
    check_paths(cfg)                                   # the shipped tokenizer is there
    assert [(p.name, p.speculative, [str(e) for e in p.endpoints]) for p in cfg.pools] == [
        ("spec", True, ["http://127.0.0.1:18101"]), ("plain", False, ["http://127.0.0.1:18102"])]
    assert (cfg.server.host, cfg.server.port) == ("127.0.0.1", 18100)
    spec = cfg.pools[0]
    assert (spec.gamma, spec.drafter_cost_ratio) == (4, 0.05)   # loadtest-fakes' defaults
    # The fakes enforce --context-length 8192 in words; the router counts with the fake tokenizer
    # (~4.5 tokens a word), so its cap must admit the quick start's longest (2,048-word) prompts.
    factory = PromptFactory.from_workload(Workload.from_dict({"buckets": "1k-2k", "copy_fraction": 0.25}))
    counter = PromptCounter(cfg.model.tokenizer)
    bucket = parse_buckets("1k-2k")[0]
    longest = max(counter.count_chat(list(factory.make(bucket, 16, "measure", r, i).messages))
                  for r in range(3) for i in range(16))
    assert 8192 < longest + 16 + spec.draft_reserved_tokens <= cfg.limits.max_context_tokens
    import argparse

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    fakes = parser.parse_args(["loadtest-fakes"])
    assert (fakes.model_name, fakes.gamma, fakes.c) == (cfg.model.name, spec.gamma, spec.drafter_cost_ratio)
    assert counter.render_chat([{"role": "user", "content": "hi"}]) == "<|user|>hi<|assistant|>"
    quick_start = (ROOT / "docs" / "loadtests.md").read_text()
    assert "specgate router --config examples/loadtest-fakes.yaml" in quick_start
    assert "--spec-port 18101 --plain-port 18102" in quick_start and "--context-length 8192" in quick_start
