"""The router in front of two step-driven fakes (the day simulator's engine behind the fake's HTTP,
loadtests/dayhttp.py): learning on, every answer whole and exact, the spec details asked of the
speculative engine and cut out for a client that did not ask."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.dayhttp import DayStepEngine, fake_config
from loadtests.dayshapes import EngineModel
from loadtests.simulate import SimModel
from serving.fake_sglang import FakeServer
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"

#: A fast engine: 2 ms per step at batch 1, gamma 3, KV 4,000 tokens (3,000 on the speculative one).
MODEL = EngineModel(speed=SimModel(t0_s=0.002, batch_knee=40.0, attn_s_per_token=1e-8, prefill_s_per_token=1e-6,
                                   alpha_short=0.8, alpha_knee_tokens=4096.0, alpha_drop_per_doubling=0.05,
                                   gamma=3, c=0.05),
                    kv_tokens=4000, max_running=16, gauge_interval_steps=4)


@pytest.fixture()
def stepped(tmp_path: Path, tokenizer_dir: Path) -> Iterator[tuple[RouterServer, FakeServer, FakeServer]]:
    fakes = []
    for spec in (True, False):
        cfg = dataclasses.replace(fake_config(MODEL, spec, model_name="tiny-llama", context_length=2048),
                                  tokenizer_path=str(tokenizer_dir))
        fakes.append(FakeServer(cfg, step_engine=DayStepEngine(MODEL, spec, seed=1 if spec else 2)).start())
    spec_fake, plain_fake = fakes
    path = write_router_yaml(tmp_path / "router.yaml", router_config(
        tokenizer_dir, spec_fake.base_url, plain_fake.base_url,
        **{"routing.learning": {"enabled": True, "explore_every": 0}}))
    router = RouterServer(path).start()
    try:
        wait_until(lambda: all(ep.healthy for ep in router.state.fleet.endpoints()), 15, "healthy endpoints")
        yield router, spec_fake, plain_fake
    finally:
        router.stop()
        for f in fakes:
            f.stop()


def _doc(words: int, max_tokens: int, output: int, **kw: Any) -> dict[str, Any]:
    return {"model": "tiny-llama", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": " ".join(["hello"] * words)}],
            "fake_step": {"output_tokens": output}, **kw}


def test_answers_are_whole_and_exact_and_the_fits_learn(stepped: tuple[RouterServer, FakeServer, FakeServer]) -> None:
    router, spec_fake, _ = stepped
    client = router.client
    count = router.state.fleet.runtimes["tiny-llama"].counter
    for i, (hint, output) in enumerate([("on", 12), ("off", 9), ("on", 30), ("off", 5), (None, 7), (None, 20)]):
        headers = {} if hint is None else {"x-specgate-speculation": hint}
        doc = _doc(5 + i, 40, output)
        r = client.post(CHAT, json=doc, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["usage"]["completion_tokens"] == output
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["choices"][0]["message"]["content"] == " ".join(f"tok{j}" for j in range(output))
        # the fake counts with the router's tokenizer: the same prompt tokens on both sides
        assert body["usage"]["prompt_tokens"] == count.count_chat(doc["messages"])
        assert b"sglext" not in r.content
        if hint is not None:
            assert r.headers["x-specgate-pool"] == ("spec" if hint == "on" else "plain")
    sent = [e["body"] for e in httpx.get(spec_fake.base_url + "/_fake/requests").json()["requests"]
            if e["path"] == CHAT]
    assert sent and all(b.get("return_spec_tokens_details") is True for b in sent)

    def observed() -> int:  # the router learns from a response just after the client's last byte
        ready = client.get("/ready").json()["pools"]
        return int(ready["spec"]["speed_model"]["observations"] + ready["plain"]["speed_model"]["observations"])

    with contextlib.suppress(AssertionError):
        wait_until(lambda: observed() == 6, 2.0)
    assert observed() == 6


def test_a_client_that_asks_keeps_the_sequences_own_details(
        stepped: tuple[RouterServer, FakeServer, FakeServer]) -> None:
    router, _, _ = stepped
    r = router.client.post(CHAT, json=_doc(4, 40, 25, return_spec_tokens_details=True),
                           headers={"x-specgate-speculation": "on"})
    assert r.status_code == 200, r.text
    details = r.json()["sglext"]["spec_tokens_details"]
    # 24 tokens after the prefill's first one, 1-4 (gamma 3, plus the bonus) per verify step:
    # the step tokens are a whole number, at least 24, at most 3 past it (the last step's drafts)
    spec_tokens = details["spec_accept_length"] * details["spec_verify_ct"]
    assert spec_tokens == pytest.approx(round(spec_tokens), abs=1e-9)
    assert 24 <= round(spec_tokens) <= 27
    assert 6 <= details["spec_verify_ct"] <= 24
