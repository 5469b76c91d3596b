"""The prediction fallback over real HTTP: a pool whose speed model is wrong (an engine it
cannot fit: the model held at a speed block 10x too fast) falls back to the shorter queue,
and a corrected speed block hands the decisions back to the prediction (router.decision.prediction_check)."""

from __future__ import annotations

import pytest

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support.config import router_config, write_router_yaml
from tests.support.router import RouterServer
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"
STEP_S = 0.05  # the fakes' seconds per decode step
TOKENS = 6


def _speed(decode_s: float) -> dict:
    return {"decode_s_per_token": decode_s, "batch_knee": 1000.0, "prefill_s_per_token": 1e-7}


def _config(tokenizer, a: str, b: str, a_decode_s: float) -> dict:
    doc = router_config(tokenizer, None, None, **{
        "routing.learning": {"enabled": True, "explore_every": 0, "prior_weight": 1e9,  # the fit holds its prior
                             "change_detection": False,
                             "check": {"min_checks": 4, "window": 8, "fallback_enter": 0.5, "fallback_exit": 0.3}}})
    doc["pools"] = [{"name": "a", "speculative": False, "endpoints": [a], "speed": _speed(a_decode_s)},
                    {"name": "b", "speculative": False, "endpoints": [b], "speed": _speed(STEP_S)}]
    return doc


@pytest.fixture()
def engines(tokenizer_dir):
    """Engines a and b; b runs 1.5x slower than the speed block both are given says (its error,
    a third, stays below ``fallback_enter``): measured, b ranks behind a whenever the two tie."""
    fakes = [FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096, tokenizer_path=str(tokenizer_dir),
                                   decode_step_s=step)).start() for step in (STEP_S, STEP_S * 1.5)]
    yield fakes
    for f in fakes:
        f.stop()


def _chat(client) -> tuple[str, str]:
    r = client.post(CHAT, json={"model": "tiny-llama", "max_tokens": TOKENS, "temperature": 0.7,
                                "messages": [{"role": "user", "content": "count to three"}]})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == TOKENS
    return r.headers["x-specgate-pool"], r.headers["x-specgate-reason"]


def test_a_wrong_model_falls_back_to_the_shorter_queue_and_a_right_one_takes_over_again(tmp_path, tokenizer_dir,
                                                                                          engines):
    a, b = engines
    path = write_router_yaml(tmp_path / "router.yaml", _config(tokenizer_dir, a.base_url, b.base_url, STEP_S / 10))
    router = RouterServer(path).start(ready=True)
    try:
        wait_until(lambda: all(ep.healthy for ep in router.state.fleet.endpoints()), 15, "healthy endpoints")
        client = router.client
        # pool a is predicted 10x faster than it is: every request goes there, and every check is off
        assert [_chat(client) for _ in range(4)] == [("a", "plain_only")] * 4
        check = router.pool("a").check
        wait_until(lambda: check.checked["completion"] == 4, 5, "four checked predictions")
        error, n = check.error(check_now(router))
        assert n == 4 and error > 0.8
        router.wait_scrape_rounds(1)
        assert router.pool("a").prediction_fallback
        # the fallback first measures the pool never checked for these requests (b, idle: one
        # request, whose check finds b no faster than predicted: nothing more to look for),
        # then joins the shorter queue: the idle pools tie, and by what the checks measured a
        # still ranks first (its whole bias off, capped at 4x)
        assert _chat(client) == ("b", "explore")
        b_check = router.pool("b").check
        wait_until(lambda: b_check.checked["completion"] == 1, 5, "b's check")  # recorded after the answer
        assert [_chat(client) for _ in range(4)] == [("a", "shortest_queue")] * 4
        ready = client.get("/ready").json()["pools"]
        assert ready["a"]["prediction"]["fallback"] is True and ready["a"]["prediction"]["fallbacks"] == 1
        assert ready["b"]["prediction"]["fallback"] is False
        metrics = client.get("/metrics").text.splitlines()
        assert 'specgate_prediction_fallback{pool="a"} 1.0' in metrics
        assert 'specgate_prediction_fallbacks_total{pool="a"} 1.0' in metrics
        assert router.settled_metric("specgate_requests_total", 4, pool="a", reason="shortest_queue", status="200") == 4
        # the operator corrects the speed block: the new prior is right, the checks come back
        write_router_yaml(path, _config(tokenizer_dir, a.base_url, b.base_url, STEP_S))
        router.wait_reloads(1)
        # a's cells were the old model's (forgotten at the reload); b, measured 1.5x slower,
        # ranks behind it, so a takes the ties (chosen, it needs no exploring); 5 right checks
        # of its last 8 put its median below fallback_exit
        for _ in range(5):
            assert _chat(client) == ("a", "shortest_queue")
        wait_until(lambda: check.checked["completion"] == 13, 5, "thirteen checked predictions")
        router.wait_scrape_rounds(1)
        assert not router.pool("a").prediction_fallback
        assert _chat(client) == ("a", "plain_only")  # by prediction again (a and b predicted alike: the first)
        assert client.get("/ready").json()["pools"]["a"]["prediction"]["fallback"] is False
    finally:
        router.stop()


def check_now(router: RouterServer) -> float:
    """The router's clock (monotonic s)."""
    return router.state.clock()
