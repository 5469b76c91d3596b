"""Conversation affinity across pools with two router replicas over real HTTP: a speculative and
a plain fake with prefix caches, two routers whose speed models disagree on the faster pool
(``routing.prefix_cache.pool_affinity_ratio``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, router_config, wait_until, write_router_yaml

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]
CONVERSATIONS, TURNS = 6, 4


def speed(prefill_s_per_token: float) -> dict[str, float]:
    # prefill dominates: the predictions of two pools differ by their prefill rates' ratio
    return {"decode_s_per_token": 1e-5, "batch_knee": 1e6, "prefill_s_per_token": prefill_s_per_token}


class Replicas:
    """Two routers over the same two fakes; replica ``a`` predicts the speculative pool 5%
    faster, replica ``b`` the plain pool (learning off: the speed blocks are the models)."""

    def __init__(self, tmp: Path, tokenizer: Path, ratio: float) -> None:
        self.spec = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096, prefix_cache_tokens=100_000,
                                          speculative_algorithm="EAGLE3", spec_accept_length=3.0)).start()
        self.plain = FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                                           prefix_cache_tokens=100_000)).start()
        self.routers: list[RouterServer] = []
        for name, spec_p, plain_p in (("a", 1.0e-3, 1.05e-3), ("b", 1.05e-3, 1.0e-3)):
            doc = router_config(tokenizer, self.spec.base_url, self.plain.base_url, **{
                "pools.0.speed": {**speed(spec_p), "accept_length_greedy": 3.0, "accept_length_sampled": 3.0},
                "pools.1.speed": speed(plain_p),
                "routing.prefix_cache": {"pool_affinity_ratio": ratio, "new_affinity_ratio": min(ratio, 1.1)},
                "server.log_requests": True})
            self.routers.append(RouterServer(write_router_yaml(tmp / f"router-{name}.yaml", doc)).start())
        for r in self.routers:
            wait_until(lambda r=r: all(ep.healthy for ep in r.state.runtime.all_endpoints()), 15,
                       "the fakes to become healthy")
        self.clients = [httpx.Client(base_url=r.base_url, timeout=30) for r in self.routers]

    def close(self) -> None:
        for c in self.clients:
            c.close()
        for r in self.routers:
            r.stop()
        self.spec.stop()
        self.plain.stop()


@pytest.fixture
def replicas(tmp_path: Path, tokenizer_dir: Path, request: pytest.FixtureRequest) -> Iterator[Replicas]:
    r = Replicas(tmp_path, tokenizer_dir, request.param)
    try:
        yield r
    finally:
        r.close()


def conversation(i: int) -> list[str]:
    return [" ".join(WORDS[(i * 5 + t * 3 + k) % len(WORDS)] for k in range(30 + t)) for t in range(TURNS)]


def play(replicas: Replicas) -> tuple[dict[int, list[str]], dict[int, list[int]], dict[int, list[int]], list[str]]:
    """Turn ``t`` of every conversation through router ``t % 2``, one request at a time; returns
    per conversation the pools (``x-specgate-pool``), cached and prompt tokens of its turns, and
    the requests' ids (``x-request-id``) in the order sent."""
    system = {"role": "system", "content": "You answer briefly. " * 8}
    pools: dict[int, list[str]] = {}
    cached: dict[int, list[int]] = {}
    prompts: dict[int, list[int]] = {}
    rids: list[str] = []
    for t in range(TURNS):
        for i in range(CONVERSATIONS):
            msgs = [system]
            for k in range(t + 1):
                msgs.append({"role": "user", "content": conversation(i)[k]})
                if k < t:
                    msgs.append({"role": "assistant", "content": " ".join(f"tok{j}" for j in range(8))})
            r = replicas.clients[t % 2].post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 8})
            assert r.status_code == 200, r.text
            pools.setdefault(i, []).append(r.headers["x-specgate-pool"])
            rids.append(r.headers["x-request-id"])
            usage = r.json()["usage"]
            cached.setdefault(i, []).append(usage["prompt_tokens_details"]["cached_tokens"])
            prompts.setdefault(i, []).append(usage["prompt_tokens"])
    return pools, cached, prompts, rids


@pytest.mark.parametrize("replicas", [1.25], indirect=True)
def test_a_conversation_keeps_its_pool_across_replicas(replicas: Replicas, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specgate.access")
    pools, cached, prompts, rids = play(replicas)
    assert all(len(set(p)) == 1 for p in pools.values()), pools
    assert {p[0] for p in pools.values()} == {"spec", "plain"}  # the anchors spread conversations
    # every later turn finds its whole previous turn (prompt + its 8-token answer) cached
    for i, c in cached.items():
        assert c[1:] == [p + 8 for p in prompts[i][:-1]], (i, c, prompts[i])

    def lines() -> dict[str, dict[str, object]]:  # a response's line follows its last byte
        return {(d := orjson.loads(r.getMessage()))["request_id"]: d
                for r in caplog.records if r.name == "specgate.access"}

    wait_until(lambda: len(lines()) == CONVERSATIONS * TURNS, 5, "every access-log line")
    log = lines()
    # the very first request (replica a, nothing cached anywhere): spec predicted faster, plain
    # within 1.1x (new_affinity_ratio), and conversation 0's anchor ranks plain first
    first = log[rids[0]]
    assert (first["pool"], first["reason"]) == ("plain", "prefix_affinity")
    predicted = first["predicted_s"]
    assert isinstance(predicted, dict) and predicted["spec"] < predicted["plain"] <= 1.1 * predicted["spec"]
    # each replica routes some turns against its own prediction, and some with it
    assert {line["reason"] for line in log.values()} == {"speculative", "plain_faster", "prefix_affinity"}


@pytest.mark.parametrize("replicas", [1.0], indirect=True)
def test_without_affinity_the_replicas_split_a_conversation(replicas: Replicas) -> None:
    """``pool_affinity_ratio: 1``: each replica sends every turn to the pool it predicts
    faster (its own cache of the conversation counted), so the turns alternate pools."""
    pools, _, _, _ = play(replicas)
    assert all(p == ["spec", "plain", "spec", "plain"] for p in pools.values()), pools
