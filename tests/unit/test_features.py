"""Request validation, budget precedence and prompt counting (router.request.features)."""

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

RULES = Rules(max_context_tokens=4096, default_max_tokens=256, long_prompt_tokens=1024)
POOLS = (PoolSnapshot("plain", False, 4096, 0, (EndpointSnapshot("http://p", True, 0),)),)


def refused(features):
    d = decide(features, POOLS, RULES)
    return d.outcome is Outcome.REFUSED and d.reason is Reason.CONTEXT_CAP

MSG = [{"role": "user", "content": "hi"}]


def chat(**kw):
    return parse_chat({"model": "m", "messages": MSG, **kw}, max_n=128)


@pytest.mark.parametrize("value", [-5, 0, "100", True, False, 1.5, 1.0, [], {}])
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_budget_fields_are_strict_positive_integers(field, value):  # vllm-project/vllm#36789
    with pytest.raises(InvalidRequest) as exc:
        chat(**{field: value})
    assert exc.value.status == 400
    assert exc.value.param == field
    assert exc.value.type == "invalid_request_error"


@pytest.mark.parametrize("value", [0, -1, 9223372036854775807, 129, "4", True, 2.0])
def test_n_validation(value):  # sgl-project/sglang#37202
    with pytest.raises(InvalidRequest) as exc:
        chat(n=value)
    assert exc.value.param == "n"


def test_max_completion_tokens_wins_over_max_tokens():  # sgl-project/sglang#17516
    assert chat(max_tokens=16, max_completion_tokens=100_000_000).max_new_tokens == 100_000_000
    assert chat(max_tokens=100_000_000, max_completion_tokens=16).max_new_tokens == 16
    assert chat(max_completion_tokens=7).max_new_tokens == 7
    assert chat(max_tokens=9).max_new_tokens == 9
    assert chat(max_tokens=None).max_new_tokens is None


@pytest.mark.parametrize("doc", [
    {"model": "m", "messages": []},
    {"model": "m"},
    {"model": "m", "messages": "hi"},
    {"model": "m", "messages": [{"role": "user"}]},
    {"model": "m", "messages": [{"role": "wizard", "content": "hi"}]},
    {"model": "m", "messages": [None]},
    {"model": "m", "messages": [{"role": "user", "content": 123}]},
    {"model": "m", "messages": [{"role": "user", "content": []}]},
    {"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
    {"model": "m", "messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
    {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": "x"}]},
    {"model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {}}]}]},
    {"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]},
])
def test_malformed_messages_are_400_messages(doc):  # ai-dynamo/dynamo#2067, vllm-project/vllm#16774
    with pytest.raises(InvalidRequest) as exc:
        parse_chat(doc, max_n=8)
    assert exc.value.param == "messages"
    assert exc.value.status == 400


@pytest.mark.parametrize("doc", [[], None, "str", 123, 1.5])
def test_non_object_bodies(doc):  # vllm-project/vllm#42961
    with pytest.raises(InvalidRequest) as exc:
        parse_chat(doc, max_n=8)
    assert exc.value.code == "invalid_json"


def test_error_message_does_not_echo_huge_input():  # vllm-project/vllm#49239
    doc = {"model": "m", "messages": [{"role": "user", "content": 123}] * 10_000}
    with pytest.raises(InvalidRequest) as exc:
        parse_chat(doc, max_n=8)
    assert len(exc.value.body()) < 300


@pytest.mark.parametrize("prompt,ok", [
    ("hello", True), (["a", "b"], True), ([1, 2, 3], True), ([[1, 2], [3]], True),
    ([], False), ([[]], False), ([1, "a"], False), (None, False), (5, False), ([-1], False), ([True], False),
])
def test_completion_prompt_shapes(prompt, ok):
    if ok:
        assert parse_completions({"prompt": prompt}, max_n=8).param == "prompt"
    else:
        with pytest.raises(InvalidRequest) as exc:
            parse_completions({"prompt": prompt}, max_n=8)
        assert exc.value.param == "prompt"


def test_budget_and_cap_boundaries():
    f = make(chat(max_tokens=96), 4000, RULES)
    assert (f.prompt_tokens, f.max_new_tokens, f.budget_defaulted) == (4000, 96, False)
    assert not refused(f)
    f = make(chat(max_tokens=97), 4000, RULES)
    assert refused(f)
    msg = over_length_message(f, RULES)
    assert "4096" in msg and "4097" in msg and "4000" in msg
    # missing budget: min(D, S - P), forwarded explicitly
    f = make(chat(), 4086, RULES)
    assert (f.max_new_tokens, f.budget_defaulted) == (10, True)
    assert not refused(f)
    assert make(chat(), 10, RULES).max_new_tokens == 256
    # prompt alone over (or at) the cap
    for prompt in (4096, 4196):
        assert refused(make(chat(), prompt, RULES))
    assert refused(make(chat(max_tokens=10**12), 5, RULES))


def test_over_length_messages_state_only_what_was_counted():
    def message(prompt, lower=None, **kw):
        f = make(chat(**kw), prompt, RULES, prompt_tokens_lower=lower)
        assert refused(f)
        return over_length_message(f, RULES)

    head = "This model's maximum context length is 4096 tokens. However, "
    assert message(4096) == (head + "your messages resulted in 4096 tokens, which leaves no room for a "
                             "completion. Please reduce the length of the messages.")
    assert message(5000) == head + "your messages resulted in 5000 tokens. Please reduce the length of the messages."
    # bounded, not counted (4100 <= P <= 9000): only the lower bound is a true statement
    assert message(9000, lower=4100) == (head + "your messages resulted in at least 4100 tokens. Please "
                                         "reduce the length of the messages.")
    assert message(4000, max_tokens=97) == (head + "you requested 4097 tokens (4000 in the messages, 97 in "
                                            "the completion). Please reduce the length of the messages or "
                                            "completion.")
    assert message(4050, lower=4001, max_tokens=97) == (
        head + "you requested at least 4098 tokens (at least 4001 in the messages, 97 in the completion). "
        "Please reduce the length of the messages or completion.")
    # fits the cap but no pool: the third wording, from the same function
    small = (PoolSnapshot("plain", False, 3000, 0, (EndpointSnapshot("http://p", True, 0),)),)
    f = make(chat(max_tokens=100), 2950, RULES)
    assert decide(f, small, RULES).outcome is Outcome.REFUSED
    assert over_length_message(f, RULES) == (
        "This model's maximum context length is 4096 tokens and no pool can hold 3050 tokens "
        "(2950 in the messages, 100 in the completion).")
    f = make(chat(max_tokens=8), 300, RULES, prompt_tokens_lower=40)
    assert (f.prompt_exact, f.prompt_phrase(), f.prompt_phrase(8)) == (False, "at least 40", "at least 48")
    f = make(chat(max_tokens=8), 300, RULES)
    assert (f.prompt_exact, f.prompt_phrase(), f.prompt_phrase(8)) == (True, "300", "308")


def test_counter_counts_template_tools_and_null_content(tokenizer_dir):  # pamelafox/openai-messages-token-helper#20
    counter = PromptCounter(tokenizer_dir)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\":21}"},
        {"role": "assistant", "content": "It is 21 C.", "tool_calls": None},
        {"role": "user", "content": "Thanks"},
    ]
    doc = {"messages": messages, "tools": tools}
    parsed = parse_chat(doc, max_n=8)
    with_tools = counter.count(parsed)
    # The same text the template would render, counted by hand through the tokenizer.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    dumped = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
               "parameters": tools[0]["function"]["parameters"]}, "defer_loading": None}]
    rendered = tok.apply_chat_template(
        [messages[0],
         {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
         messages[2], {"role": "assistant", "content": "It is 21 C."}, messages[4]],
        tools=dumped, tokenize=False, add_generation_prompt=True)
    assert with_tools == len(tok.encode(rendered, add_special_tokens=False))
    without = counter.count(parse_chat({"messages": messages, "tools": tools, "tool_choice": "none"}, max_n=8))
    assert with_tools > without


def test_counter_completions_variants(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    assert counter.count(parse_completions({"prompt": "lorem ipsum"}, max_n=8)) == len(tok.encode("lorem ipsum"))
    assert counter.count(parse_completions({"prompt": ["lorem", "lorem ipsum dolor"]}, max_n=8)) == len(
        tok.encode("lorem ipsum dolor"))
    assert counter.count(parse_completions({"prompt": [5, 6, 7]}, max_n=8)) == 3
    assert counter.count(parse_completions({"prompt": [[5], [6, 7, 8, 9]]}, max_n=8)) == 4
    f = make(parse_completions({"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 5}, max_n=8), 3,
             Rules(max_context_tokens=100, default_max_tokens=10, long_prompt_tokens=50))
    assert (f.num_prompts, f.n, f.weight, f.param) == (3, 2, 13, "prompt")


def test_list_content_is_joined_like_sglang(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    a = counter.count(parse_chat({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "lorem"}, {"type": "text", "text": "ipsum"}]}]}, max_n=8))
    b = counter.count(parse_chat({"messages": [{"role": "user", "content": "lorem ipsum"}]}, max_n=8))
    assert a == b


def test_tool_dump_matches_sglang_function_serializer():
    from router.request.features import _tool_dump

    tool = {"type": "function", "function": {"parameters": {"type": "object"}, "name": "f", "strict": True,
                                             "extra": 1}}
    assert _tool_dump(tool) == {"type": "function", "defer_loading": None, "function": {
        "parameters": {"type": "object"}, "name": "f", "strict": True, "description": None}}
    assert list(_tool_dump(tool)["function"]) == ["parameters", "name", "strict", "description"]
    lazy = {"type": "function", "defer_loading": True, "function": {"name": "g"}}
    assert _tool_dump(lazy)["function"] == {"name": "g", "description": None, "parameters": None,
                                            "defer_loading": True}


def test_compiled_template_path_renders_like_apply_chat_template(tokenizer_dir, tmp_path):
    """The counter renders with the compiled template (docs/performance.md); the text must be exactly
    transformers' apply_chat_template's, including special tokens and the tool_use variant."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tok.chat_template = {
        "default": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                   "{% if add_generation_prompt %}[assistant]{% endif %}",
        "tool_use": "{{ bos_token }}TOOLS {{ tools | tojson }}{% for m in messages %}[{{ m.role }}]"
                    "{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
    }
    tok.save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    counter = PromptCounter(tmp_path)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo \u2028 {{x}}"}]
    for with_tools in (None, tools):
        expected = tok.apply_chat_template(messages, tools=with_tools, tokenize=False, add_generation_prompt=True)
        got = counter.render_chat(messages, tools=with_tools)
        assert got == expected
        assert got.startswith(tok.bos_token) and ("TOOLS" in got) == (with_tools is not None)
    # template kwargs take transformers' own path (they may override special tokens)
    assert counter.render_chat(messages, template_kwargs={"bos_token": "<B>"}).startswith("<B>")
    with pytest.raises(InvalidRequest):
        counter.render_chat([])
