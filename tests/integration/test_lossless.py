"""specgate verify-lossless against fakes (identical and scripted divergence)."""

from __future__ import annotations

import asyncio

import httpx

from drafters.lossless import verify_lossless
from router.cli import main
from serving.fake_sglang import FakeConfig, FakeServer


def test_identical_servers_pass(capsys):
    with FakeServer(FakeConfig(model_name="m")) as a, FakeServer(FakeConfig(model_name="m")) as b:
        report = asyncio.run(verify_lossless(a.base_url, b.base_url, ["x", "y", "z"], max_new_tokens=8))
        assert (report.identical, report.prompts, report.tokens_compared) == (True, 3, 24)
        assert main(["verify-lossless", "--spec", a.base_url, "--plain", b.base_url, "--max-new-tokens", "4"]) == 0
    assert "5 prompts, 20 tokens compared: identical" in capsys.readouterr().out


def test_first_divergence_is_reported(capsys):
    with FakeServer(FakeConfig(model_name="m")) as a, FakeServer(FakeConfig(model_name="m")) as b:
        # the spec server stops after 5 tokens on the second prompt: a divergence at position 5
        httpx.post(a.base_url + "/_fake/script", json=[{"path": "/generate", "count": 1},
                                                       {"path": "/generate", "max_tokens": 5}]).raise_for_status()
        report = asyncio.run(verify_lossless(a.base_url, b.base_url, ["x", "y"], max_new_tokens=8))
        assert not report.identical
        assert [(d.prompt, d.position, d.spec_token, d.plain_token) for d in report.divergences] == [(1, 5, None, 5)]
        httpx.post(a.base_url + "/_fake/script", json=[{"path": "/generate", "max_tokens": 2}]).raise_for_status()
        assert main(["verify-lossless", "--spec", a.base_url, "--plain", b.base_url, "--max-new-tokens", "4"]) == 1
    assert "prompt 0: first divergence at output token 2: spec None vs plain 2" in capsys.readouterr().out
