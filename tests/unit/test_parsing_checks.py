"""parse_chat's checks decided inline for the usual fields (router.request.parsing, router.request.capabilities,
router.request.sampling): the same errors, in the same order, as each field's full check."""

from __future__ import annotations

import pytest

from router.errors import InvalidRequest
from router.request.capabilities import validate
from router.request.parsing import parse_chat, parse_completions
from router.request.sampling import validate_sampling

MSG = [{"role": "user", "content": "hi"}]


def _error(doc, **kw):
    with pytest.raises(InvalidRequest) as exc:
        parse_chat(doc, max_n=kw.get("max_n", 8))
    return exc.value.param, exc.value.message


@pytest.mark.parametrize(("fields", "param", "message"), [
    ({"n": 9}, "n", "`n` must be <= 8"),
    ({"n": 0}, "n", "`n` must be >= 1, got 0"),
    ({"n": True}, "n", "`n` must be an integer, got bool"),
    ({"max_tokens": 0}, "max_tokens", "`max_tokens` must be >= 1, got 0"),
    ({"max_tokens": 1.0}, "max_tokens", "`max_tokens` must be an integer, got float"),
    ({"max_completion_tokens": "8"}, "max_completion_tokens", "`max_completion_tokens` must be an integer, got str"),
    ({"n": 0, "max_tokens": 0}, "n", "`n` must be >= 1, got 0"),                  # first field wins
    ({"max_tokens": 0, "max_completion_tokens": 0}, "max_tokens", "`max_tokens` must be >= 1, got 0"),
    ({"top_logprobs": 21, "max_tokens": 0}, "max_tokens", "`max_tokens` must be >= 1, got 0"),
    ({"top_logprobs": 21}, "top_logprobs", "`top_logprobs` must be <= 20"),
    ({"top_logprobs": -1, "messages": []}, "top_logprobs", "`top_logprobs` must be >= 0, got -1"),
    ({"regex": 1, "seed": "x"}, "regex", "`regex` must be a string, got int"),
    ({"temperature": 1, "seed": "x"}, "seed", "`seed` must be a 64-bit integer"),
    ({"min_p": 2}, "min_p", "`min_p` must be a number in [0, 1]"),
    ({"tools": {}}, "tools", "`tools` must be an array"),
    ({"tools": [{}], "regex": 1}, "tools", "each tool needs function.name"),           # tools before constraints
    ({"top_logprobs": 21, "messages": [], "tools": {}}, "top_logprobs", "`top_logprobs` must be <= 20"),
    ({"tool_choice": "sometimes"}, "tool_choice",
     '`tool_choice` must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}'),
])
def test_errors_and_their_order_are_kept(fields, param, message):
    assert _error({"model": "m", "messages": MSG, **fields}) == (param, message)


def test_valid_and_null_fields_pass():
    doc = {"model": "m", "messages": MSG, "n": 8, "max_tokens": 1, "max_completion_tokens": None,
           "top_logprobs": 20, "regex": None, "seed": None, "min_p": None, "response_format": None,
           "tool_choice": None, "logit_bias": None, "min_tokens": None}
    parsed = parse_chat(doc, max_n=8)
    assert (parsed.n, parsed.max_new_tokens, parsed.stream) == (8, 1, False)
    assert parse_chat({"model": "m", "messages": MSG, "n": None}, max_n=8).n == 1
    assert parse_completions({"prompt": "x", "max_completion_tokens": 3, "max_tokens": 9}, max_n=1).max_new_tokens == 3
    validate({})
    validate_sampling({})


@pytest.mark.parametrize(("messages", "message"), [
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b", "tool_calls": [{}]}],
     "messages[1].tool_calls is only allowed on assistant messages"),
    ([{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}], "messages[1].tool_call_id must be a string"),
    ([{"role": "system", "content": "a"}, {"role": "user", "content": None}],
     "messages[1].content is required for role `user`"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": 5}],
     "messages[1].content must be a string, an array of parts or null"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": "x"}],
     "messages[1].tool_calls must be a list or null"),
])
def test_message_errors_name_their_message(messages, message):
    assert _error({"model": "m", "messages": messages}) == ("messages", message)


def test_plain_text_messages_with_null_tool_calls_pass():
    doc = {"model": "m", "messages": [{"role": "system", "content": "s", "tool_calls": None},
                                       {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
                                       {"role": "developer", "content": ""}]}
    assert parse_chat(doc, max_n=1).media_tokens == 0


@pytest.mark.parametrize(("fields", "param"), [({"seed": 1.5}, "seed"), ({"regex": 3}, "regex"),
                                               ({"regex": 3, "min_p": -1}, "regex"), ({"min_tokens": -1}, "min_tokens")])
def test_completions_check_the_same_fields(fields, param):
    with pytest.raises(InvalidRequest) as exc:
        parse_completions({"prompt": "x", **fields}, max_n=1)
    assert exc.value.param == param
