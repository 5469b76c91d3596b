"""The fake SGLang's prefix cache: the trie, and the cache report over HTTP."""

from __future__ import annotations

import httpx
import pytest

from serving.fake_sglang import FakeConfig, FakeServer, simple_chat_tokens
from serving.fake_sglang.prefix_cache import PrefixCache, chat_units


def test_match_leaves_one_token_to_compute() -> None:
    cache = PrefixCache(100)
    cache.insert([1, 2, 3, 4])
    assert cache.match([1, 2, 3, 4]) == 3
    assert cache.match([1, 2, 3, 4, 5, 6]) == 4
    assert cache.match([1, 9]) == 1
    assert cache.match([7, 8]) == 0
    assert len(cache) == 4


def test_capacity_evicts_least_recent_leaves_first() -> None:
    cache = PrefixCache(6)
    cache.insert([0, 1, 2, 3])        # shared head 0, 1
    cache.insert([0, 1, 5, 6])        # now 6 tokens
    cache.match([0, 1, 2, 3, 9])      # touch the first branch
    cache.insert([0, 1, 7])           # 7 tokens: the older branch's leaf (6) goes
    assert len(cache) == 6
    assert cache.match([0, 1, 5, 6, 9]) == 3
    assert cache.match([0, 1, 2, 3, 9]) == 4
    for i in range(20):
        cache.insert([100 + i, 200 + i, 300 + i])
        assert len(cache) <= 6
    assert cache.match([119, 219, 319, 0]) == 3
    cache.clear()
    assert len(cache) == 0 and cache.match([119, 219, 319, 0]) == 0


def test_chat_units_count_like_the_simple_count() -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    units = chat_units(msgs, None, lambda c: c or "")
    assert units == ["<system>", "be", "brief", "<user>", "hello", "world", "<assistant>"]
    assert len(units) == simple_chat_tokens(msgs)


@pytest.mark.parametrize("stream", [False, True])
def test_second_turn_reports_cached_tokens(stream: bool) -> None:
    with FakeServer(FakeConfig(prefix_cache_tokens=1000)) as srv, httpx.Client(base_url=srv.base_url) as c:
        msgs = [{"role": "system", "content": "you are a helpful assistant"},
                {"role": "user", "content": "tell me a story"}]

        def usage(messages):
            body = {"model": "m", "messages": messages, "max_tokens": 4, "stream": stream,
                    "stream_options": {"include_usage": True}}
            r = c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200
            if not stream:
                return r.json()["usage"], r.json()["choices"][0]["message"]["content"]
            import json
            events = [json.loads(line[6:]) for line in r.text.splitlines()
                      if line.startswith("data: {")]
            text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
            return events[-1]["usage"], text

        u1, reply = usage(msgs)
        assert u1["prompt_tokens"] == 12
        assert u1["prompt_tokens_details"] == {"cached_tokens": 0, "image_tokens": None,
                                               "audio_tokens": None, "video_tokens": None}
        assert reply == "tok0 tok1 tok2 tok3"
        turn2 = [*msgs, {"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]
        u2, _ = usage(turn2)
        # turn 1's prompt (12) and its 4 output tokens are cached; the assistant marker of turn 2
        # is turn 1's generation prompt, so 12 + 4 tokens match
        assert u2["prompt_tokens"] == 12 + 4 + 1 + 1 + 1
        assert u2["prompt_tokens_details"]["cached_tokens"] == 16
        assert c.post("/flush_cache").status_code == 200
        u3, _ = usage(turn2)
        assert u3["prompt_tokens_details"]["cached_tokens"] == 0


def test_no_cache_report_without_the_flag() -> None:
    with FakeServer(FakeConfig()) as srv, httpx.Client(base_url=srv.base_url) as c:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert c.post("/v1/chat/completions", json=body).json()["usage"]["prompt_tokens_details"] is None
