"""SGLang's per-request speculative statistics, read and cut out byte for byte (router.upstream.specstats)."""

from __future__ import annotations

import orjson
import pytest

from router.upstream.specstats import accept_length, strip_body, strip_event

DETAILS = {"spec_accept_rate": 0.25, "spec_accept_length": 2.0, "spec_cap_length": 0.0,
           "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 12, "spec_num_proposed_drafts": 48,
           "spec_verify_ct": 12, "spec_correct_drafts_histogram": [4, 4, 4], "spec_cap_lens_histogram": []}


def _chat(**extra):
    return {"id": "c1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": 'a "}" b'},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 24, "total_tokens": 29}, **extra}


@pytest.mark.parametrize("indent", [False, True])
def test_a_body_without_the_details_is_what_sglang_sends_without_the_field(indent):
    dump = (lambda d: orjson.dumps(d, option=orjson.OPT_INDENT_2)) if indent else orjson.dumps
    asked = dump(_chat(sglext={"spec_tokens_details": DETAILS}))
    plain = dump(_chat())
    assert strip_body(asked) == (plain, 2.0)
    # sglext first, or holding more than the details: only the details go
    first = dump({"sglext": {"spec_tokens_details": DETAILS}, **_chat()})
    assert strip_body(first) == (plain, 2.0)
    both = dump(_chat(sglext={"cached_tokens_details": {"device": 3}, "spec_tokens_details": DETAILS}))
    assert strip_body(both) == (dump(_chat(sglext={"cached_tokens_details": {"device": 3}})), 2.0)
    assert strip_body(plain) == (plain, None)


def test_n_choices_give_the_mean_and_bad_values_none():
    assert accept_length(orjson.dumps([DETAILS, {**DETAILS, "spec_accept_length": 3.0}])) == 2.5
    assert accept_length(orjson.dumps({**DETAILS, "spec_accept_length": 0})) is None
    assert accept_length(orjson.dumps({**DETAILS, "spec_accept_length": True})) is None
    assert accept_length(b"{not json") is None
    assert accept_length(None) is None


def test_a_malformed_body_is_relayed_as_it_came():
    for body in (b'{"sglext": {"spec_tokens_details": {', b'["spec_tokens_details"]', b'{"a" 1, "spec_tokens_details": 2}'):
        assert strip_body(body) == (body, None)


def test_the_stream_event_that_carries_only_the_details_is_dropped():
    content = b'data: ' + orjson.dumps({"id": "c1", "choices": [{"index": 0, "delta": {"content": "hi"}}]})
    ext = b'data: ' + orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                    "choices": [], "sglext": {"spec_tokens_details": DETAILS}})
    usage = b'data: ' + orjson.dumps({"id": "c1", "choices": [], "usage": {"completion_tokens": 24}})
    stream = b"\n\n".join([content, ext, usage, b"data: [DONE]", b""])
    assert strip_event(stream) == (b"\n\n".join([content, usage, b"data: [DONE]", b""]), 2.0)
    # with other sglext fields (the client asked for them) only the details go
    other = b'data: ' + orjson.dumps({"id": "c1", "choices": [],
                                      "sglext": {"routed_experts": "x", "spec_tokens_details": DETAILS}})
    kept = b'data: ' + orjson.dumps({"id": "c1", "choices": [], "sglext": {"routed_experts": "x"}})
    assert strip_event(other + b"\n\n") == (kept + b"\n\n", 2.0)
    assert strip_event(content + b"\n\n") == (content + b"\n\n", None)
