"""Multi-turn affinity over real HTTP: the router in front of 2 fake replicas with prefix caches."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, wait_until

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]


class Pair:
    def __init__(self, tmp: Path, tokenizer: Path, enabled: bool) -> None:
        self.fakes = [FakeServer(FakeConfig(model_name="tiny-llama", context_length=8192,
                                            prefix_cache_tokens=100_000)).start() for _ in range(2)]
        cfg = tmp / "router.yaml"
        cfg.write_text(yaml.safe_dump({
            "model": {"name": "tiny-llama", "tokenizer": str(tokenizer)},
            "limits": {"max_context_tokens": 8192, "default_max_tokens": 16},
            "pools": [{"name": "plain", "speculative": False, "endpoints": [f.base_url for f in self.fakes]}],
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 100, "exit": 99},
                        "prefix_cache": {"enabled": enabled}},
            "scrape": {"interval_s": 0.05, "timeout_s": 0.5, "stale_after_s": 1.0},
            "server": {"reload_interval_s": 0.1, "log_requests": True},
        }))
        self.router = RouterServer(cfg).start()
        wait_until(lambda: all(ep.healthy for ep in self.router.state.runtime.all_endpoints()), 15,
                   "the fakes to become healthy")
        self.client = httpx.Client(base_url=self.router.base_url, timeout=30)

    def close(self) -> None:
        self.client.close()
        self.router.stop()
        for f in self.fakes:
            f.stop()

    def served_by(self) -> dict[str, str]:
        """rid -> fake base URL, from the fakes' logs."""
        out = {}
        for f in self.fakes:
            for e in httpx.get(f.base_url + "/_fake/requests").json()["requests"]:
                for rid in e["rids"]:
                    out[rid] = f.base_url
        return out


@pytest.fixture
def pair(tmp_path: Path, tokenizer_dir: Path) -> Iterator[Pair]:
    p = Pair(tmp_path, tokenizer_dir, enabled=True)
    try:
        yield p
    finally:
        p.close()


def conversation(i: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + t * 3 + k) % len(WORDS)] for k in range(30 + t)) for t in range(4)]


def test_every_turn_of_a_conversation_stays_on_one_replica(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specgate.access")
    system = {"role": "system", "content": "You answer briefly. " * 8}
    rids: dict[int, list[str]] = {}
    cached: dict[int, list[int]] = {}
    prompts: dict[int, list[int]] = {}
    # turns interleaved over 12 conversations, one request at a time (with 6, the random ports'
    # rendezvous hash put all of them on one replica in about 3% of the runs: 2 * 2**-6)
    for t in range(4):
        for i in range(12):
            msgs = [system]
            for k in range(t + 1):
                msgs.append({"role": "user", "content": conversation(i)[k]})
                if k < t:
                    msgs.append({"role": "assistant", "content": " ".join(f"tok{j}" for j in range(8))})
            r = pair.client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 8,
                                                               "rid": f"c{i}-t{t}"})
            assert r.status_code == 200, r.text
            rids.setdefault(i, []).append(f"c{i}-t{t}")
            usage = r.json()["usage"]
            cached.setdefault(i, []).append(usage["prompt_tokens_details"]["cached_tokens"])
            prompts.setdefault(i, []).append(usage["prompt_tokens"])
    served = pair.served_by()
    homes = {i: {served[rid] for rid in rs} for i, rs in rids.items()}
    assert all(len(h) == 1 for h in homes.values()), homes
    # both replicas get conversations (the rendezvous hash spreads them)
    assert {next(iter(h)) for h in homes.values()} == {f.base_url for f in pair.fakes}
    # every later turn finds its whole previous turn (prompt + its 8-token answer) cached
    for i, c in cached.items():
        assert c[1:] == [p + 8 for p in prompts[i][:-1]], (i, c, prompts[i])

    def access_lines() -> list[dict[str, object]]:  # a response's line follows its last byte
        return [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "specgate.access"]

    wait_until(lambda: len(access_lines()) == 48, 5, "the 48 access-log lines")
    reasons = [line["endpoint_reason"] for line in access_lines()]
    assert len(reasons) == 48
    assert reasons[:12] == ["rendezvous"] * 12          # new conversations
    # turn 2 matches turn 1's prompt only when a whole block lies past the first user message
    # (else the rendezvous hash sends it to the same replica); later turns always match
    assert set(reasons[12:24]) <= {"prefix_match", "rendezvous"}
    assert reasons[24:] == ["prefix_match"] * 24
    m = pair.router.metric
    assert m("specgate_prefix_match_ratio_count", pool="plain",
             endpoint_reason="prefix_match") == reasons.count("prefix_match")
    assert m("specgate_prefix_index_blocks", pool="plain") > 0


def test_least_load_without_prefix_routing_splits_conversations(tmp_path: Path, tokenizer_dir: Path) -> None:
    """The same traffic with ``routing.prefix_cache.enabled: false``: turns alternate replicas
    (equal load, round-robin tie-break), so conversations do not keep a replica."""
    p = Pair(tmp_path, tokenizer_dir, enabled=False)
    try:
        msgs = [{"role": "user", "content": conversation(0)[0]}]
        for t in range(4):
            r = p.client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 8, "rid": f"t{t}"})
            assert r.status_code == 200
            msgs += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": conversation(0)[t + 1 if t < 3 else 0]}]
        served = p.served_by()
        assert len({served[f"t{t}"] for t in range(4)}) == 2
    finally:
        p.close()


def test_a_conversation_keeps_its_pool_across_the_saturation_bypass(tmp_path: Path, tokenizer_dir: Path) -> None:
    """enter 4 / exit 2, ``sticky_load_factor`` 2.0: the ceiling is 8 requests. The spec
    engine reports 5 running requests (saturated, under the ceiling), then 8 (at it), then 0
    (the bypass turns off)."""
    from tests.support.stack import Stack

    s = Stack(tmp_path, tokenizer_dir, **{"routing.saturation": {"enter": 4, "exit": 2}})
    system = {"role": "system", "content": "You answer briefly. " * 8}
    history: dict[int, list[dict[str, str]]] = {}

    def turn(i: int) -> tuple[str, str]:
        msgs = history.setdefault(i, [system])
        msgs.append({"role": "user", "content": conversation(i)[sum(m["role"] == "user" for m in msgs)]})
        r = s.client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 8})
        assert r.status_code == 200, r.text
        msgs.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
        return r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]

    def running(n: int) -> None:
        s.set_gauges(s.spec, num_running_reqs=n)
        s.wait_scrapes(2)

    try:
        assert turn(0) == ("spec", "speculative")
        running(5)
        assert turn(0) == ("spec", "prefix_affinity")   # cached there, 5 < 8: stays
        assert turn(1) == ("plain", "saturated")         # a new conversation is shed
        running(8)
        assert turn(0) == ("plain", "saturated")         # at the ceiling: moves
        running(0)
        assert turn(1) == ("plain", "prefix_affinity")   # bypass off: stays where it is cached
        assert turn(0) == ("plain", "prefix_affinity")
        assert turn(2) == ("spec", "speculative")        # a new conversation gets speculation
        m = s.router.metric
        assert m("specgate_requests_total", pool="spec", reason="prefix_affinity", status="200") == 1
        assert m("specgate_requests_total", pool="plain", reason="prefix_affinity", status="200") == 2
    finally:
        s.close()
