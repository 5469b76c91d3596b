"""A chat's ``input_ids`` (SGLang 0.5.23 runs them instead of the rendered messages): validated
as token ids and counted as the prompt (router.request.parsing, router.request.features)."""

from __future__ import annotations

import pytest

from router.decision.policy import (
    EndpointSnapshot,
    Outcome,
    PoolSnapshot,
    Reason,
    Rules,
    decide,
    over_length_message,
)
from router.decision.policy import request_features as make
from router.errors import InvalidRequest
from router.request.features import PromptCounter, parse_chat, parse_completions

MSG = [{"role": "user", "content": "hi"}]
RULES = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)


def chat(**kw):
    return parse_chat({"model": "m", "messages": MSG, "max_tokens": 8, **kw}, max_n=128)


def test_input_ids_make_the_prompt_and_name_the_field():
    parsed = chat(input_ids=[5, 6, 7])
    assert parsed.param == "input_ids"
    assert parsed.media_tokens == 0
    assert chat(input_ids=None).param == "messages"  # null: absent, as in SGLang
    assert chat().param == "messages"


@pytest.mark.parametrize("value", [[], "12 34", [-1, 5], [1.0, 2], [True, 2], [[1, 2]], {"0": 1}, 7])
def test_malformed_input_ids_are_400_naming_the_field(value):
    with pytest.raises(InvalidRequest) as exc:
        chat(input_ids=value)
    assert (exc.value.status, exc.value.param, exc.value.type) == (400, "input_ids", "invalid_request_error")


def test_messages_are_still_checked_with_input_ids():
    with pytest.raises(InvalidRequest) as exc:
        parse_chat({"messages": [], "input_ids": [1]}, max_n=128)
    assert exc.value.param == "messages"


def test_the_counter_counts_the_ids_not_the_messages(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    parsed = chat(input_ids=list(range(10, 10 + 300)))
    rendered = counter.render(parsed, splice=True)
    assert (rendered.texts, rendered.ids_len) == ((), 300)
    assert counter.bounds(rendered) == (300, 300)
    assert counter.count(parsed) == 300


@pytest.mark.parametrize(("doc", "param"), [
    ({"messages": MSG, "input_ids": [3, 999_999]}, "input_ids"),
    ({"prompt": [3, 999_999]}, "prompt"),
    ({"prompt": [[3], [4, 999_999]]}, "prompt"),
])
def test_an_id_outside_the_vocabulary_is_400(tokenizer_dir, doc, param):
    counter = PromptCounter(tokenizer_dir)
    parsed = parse_chat(doc, max_n=1) if "messages" in doc else parse_completions(doc, max_n=1)
    with pytest.raises(InvalidRequest) as exc:
        counter.render(parsed)
    assert (exc.value.status, exc.value.param) == (400, param)
    assert str(counter.vocab_size) in exc.value.message
    last = {"messages": MSG, "input_ids": [counter.vocab_size - 1]}
    assert counter.render(parse_chat(last, max_n=1)).ids_len == 1


def test_the_decision_reads_the_ids_count():
    plain = PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p", True, 0),))
    spec = PoolSnapshot("spec", True, 2048, 4, (EndpointSnapshot("http://s", True, 0),))
    parsed = chat(input_ids=[10] * 3000)
    d = decide(make(parsed, 3000, RULES), (spec, plain), RULES)
    assert (d.outcome, d.pool, d.reason) == (Outcome.ROUTED, "plain", Reason.LONG_CONTEXT)
    over = make(chat(input_ids=[10] * 5000), 5000, RULES)
    d = decide(over, (spec, plain), RULES)
    assert (d.outcome, d.reason) == (Outcome.REFUSED, Reason.CONTEXT_CAP)
    assert over.param == "input_ids"
    assert "5000" in over_length_message(over, RULES)
