"""Live speed models over real HTTP: per-request acceptance asked of the speculative engine and
cut out of what the client receives, the fits fed by finished requests (router.decision.learn)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from router.decision.learn import context_bucket
from tests.support.stack import Stack
from tests.support.wait import wait_until

CHAT = "/v1/chat/completions"


@pytest.fixture()
def stack(tmp_path, tokenizer_dir):
    s = Stack(tmp_path, tokenizer_dir, **{"routing.learning": {"enabled": True, "explore_every": 0}})
    yield s
    s.close()


def _doc(**kw):
    return {"model": "tiny-llama", "max_tokens": 6, "temperature": 0,
            "messages": [{"role": "user", "content": "count to three"}], **kw}


def _spec(stack, **kw):
    """A greedy chat pinned to the speculative pool (the client's on hint)."""
    r = stack.client.post(CHAT, json=_doc(**kw), headers={"x-specgate-speculation": "on"})
    assert r.status_code == 200, r.text
    assert r.headers["x-specgate-pool"] == "spec"
    return r


def test_the_engine_is_asked_and_the_client_gets_what_sglang_sends_without_the_field(stack):
    r = _spec(stack)
    body = r.json()
    sent = stack.backend_requests(stack.spec)[-1]["body"]
    assert sent["return_spec_tokens_details"] is True
    assert b"sglext" not in r.content and b"spec_tokens_details" not in r.content
    direct = httpx.post(stack.spec.base_url + CHAT, json={**_doc(), "rid": "direct"}).json()
    assert list(body) == list(direct)  # the same members, in the same order
    assert int(r.headers["content-length"]) == len(r.content)
    # streamed: the sglext chunk is dropped, every other event relayed
    with stack.client.stream("POST", CHAT, json=_doc(stream=True, stream_options={"include_usage": True}),
                             headers={"x-specgate-speculation": "on"}) as s:
        raw = b"".join(s.iter_bytes())
    assert b"sglext" not in raw and raw.endswith(b"data: [DONE]\n\n")
    events = [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
    assert events[-1]["usage"]["completion_tokens"] == 6


def test_a_client_that_asks_keeps_the_details(stack):
    r = _spec(stack, return_spec_tokens_details=True)
    assert r.json()["sglext"]["spec_tokens_details"]["spec_accept_length"] == 2.5


def test_finished_requests_feed_the_fits(stack):
    rt = stack.router.state.runtime
    spec, plain = rt.pools
    for _ in range(3):
        _spec(stack)
    wait_until(lambda: spec.fit.count == 3, 5, "three observations")
    assert spec.fit.accept_table() == {("greedy", context_bucket(10)): 2.5}
    assert plain.fit.count == 0
    r = stack.client.post(CHAT, json=_doc(), headers={"x-specgate-speculation": "off"})
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain")
    assert "return_spec_tokens_details" not in stack.backend_requests(stack.plain)[-1]["body"]
    wait_until(lambda: plain.fit.count == 1, 5, "one observation")
    ready = stack.client.get("/ready").json()["pools"]
    assert ready["spec"]["speed_model"]["observations"] == 3
    assert ready["spec"]["speed_model"]["accept_length"] == {"greedy/le_1024": 2.5}
    assert ready["plain"]["speed_model"]["observations"] == 1
    assert ready["plain"]["speed_model"]["error"] is not None
    check = ready["spec"]["accept_length_check"]["greedy"]
    assert (check["learned"], check["cells"]) == (2.5, {"le_1024": 2.5})
    assert check["relative_error"] == (None if check["gauge"] is None else round((2.5 - check["gauge"]) / check["gauge"], 4))
    assert ready["spec"]["accept_length_check"]["sampled"]["learned"] is None
    assert ready["plain"]["accept_length_check"] is None
    text = stack.client.get("/metrics").text  # the learning series are set when /metrics is read
    assert 'specgate_speed_model_observations{pool="spec"} 3.0' in text.splitlines()
    assert 'specgate_accept_length_learned{bucket="le_1024",class="greedy",pool="spec"} 2.5' in text.splitlines()


def test_completions_and_several_choices_feed_the_fits(stack):
    rt = stack.router.state.runtime
    spec, plain = rt.pools
    hint = {"x-specgate-speculation": "on"}
    r = stack.client.post("/v1/completions", headers=hint,
                          json={"model": "tiny-llama", "prompt": "def f():", "max_tokens": 6, "temperature": 0})
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "spec")
    assert b"sglext" not in r.content
    assert stack.backend_requests(stack.spec, "/v1/completions")[-1]["body"]["return_spec_tokens_details"] is True
    wait_until(lambda: spec.fit.count == 1, 5, "the completion's observation")
    r = _spec(stack, n=3)  # three choices of 6 tokens: one observation of 6 tokens in a batch of 3
    assert len(r.json()["choices"]) == 3 and r.json()["usage"]["completion_tokens"] == 18
    wait_until(lambda: spec.fit.count == 2, 5, "the n=3 chat's observation")
    assert spec.fit.accept_table() == {}  # two observations of the cell: not yet used
    assert spec.fit.accept_length("greedy") == 2.5
    off = {"x-specgate-speculation": "off"}
    r = stack.client.post("/v1/completions", headers=off,
                          json={"model": "tiny-llama", "prompt": ["a", "b"], "max_tokens": 4, "temperature": 0})
    assert (r.status_code, r.headers["x-specgate-pool"]) == (200, "plain")
    wait_until(lambda: plain.fit.count == 1, 5, "the batch's observation")
    assert stack.client.get("/ready").json()["pools"]["plain"]["speed_model"]["observations"] == 1


def test_the_fit_learns_the_engines_prompt_count_not_the_byte_bound(stack, monkeypatch):
    rt = stack.router.state.runtime
    seen = []
    learn = rt.learn
    monkeypatch.setattr(rt, "learn", lambda *a, **kw: (seen.append(kw), learn(*a, **kw))[1])
    r = _spec(stack)
    wait_until(lambda: seen, 5, "an observation")
    usage = r.json()["usage"]["prompt_tokens"]
    # no decision threshold lies between the byte bounds of this short prompt: the router
    # decided on the upper bound, and learns the engine's count
    assert stack.backend_requests(stack.spec)[-1]["body"]["messages"][0]["content"] == "count to three"
    assert seen[0]["prompt_tokens"] == usage


def test_beyond_max_observations_per_s_a_request_is_not_measured(tmp_path, tokenizer_dir):
    """A budget of one observation (the burst of a rate far below the traffic's): the first
    request feeds the fit and asks the engine for its statistics; the next ones are relayed
    untouched and leave the fit alone; a client that asks for the details still gets them."""
    s = Stack(tmp_path, tokenizer_dir, **{"routing.learning": {"enabled": True, "explore_every": 0,
                                                               "max_observations_per_s": 0.001}})
    try:
        spec = s.router.state.runtime.pools[0]
        for _ in range(3):
            _spec(s)
        wait_until(lambda: s.inflight() == 0, 5, "the requests settled")
        assert spec.fit.count == 1
        sent = [r["body"] for r in s.backend_requests(s.spec)]
        assert [b.get("return_spec_tokens_details") for b in sent] == [True, None, None]
        r = _spec(s, return_spec_tokens_details=True)
        assert r.json()["sglext"]["spec_tokens_details"]["spec_accept_length"] == 2.5
        assert s.backend_requests(s.spec)[-1]["body"]["return_spec_tokens_details"] is True
        assert spec.fit.count == 1
    finally:
        s.close()


def test_a_bounded_prompt_teaches_the_tokens_per_byte_and_the_next_one_is_estimated(stack):
    """A short prompt is decided on its byte bound (no threshold between the bounds); its
    engine count (``usage.prompt_tokens``) over its rendered bytes is the model's tokens per
    byte, and the next bounded prompt's expected P is its bytes times that, within the bounds."""
    rt = stack.router.state.runtime
    assert rt.prompt_ratio.value is None
    r = _spec(stack)
    wait_until(lambda: rt.pools[0].fit.count == 1, 5, "the observation")
    assert stack.router.metric("specgate_prompt_tokens_count", kind="upper_bound") == 1  # decided on the bound
    size = rt.counter.text_bytes(rt.counter.render(_parsed(rt)))
    assert rt.prompt_ratio.count == 1
    assert rt.prompt_ratio.value == pytest.approx(r.json()["usage"]["prompt_tokens"] / size)
    lo, hi = rt.counter.bounds(rt.counter.render(_parsed(rt)))
    assert rt.prompt_ratio.estimate(size, lo, hi) == r.json()["usage"]["prompt_tokens"]


def _parsed(rt):
    from router.request.parsing import parse_chat

    return parse_chat(_doc(), max_n=rt.config.limits.max_n, media=None)
