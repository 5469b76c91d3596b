"""``/v1/responses`` documents -> the chat conversation SGLang renders (for the token count)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from router.errors import InvalidRequest
from router.front.responses import parse_responses, to_chat
from router.request.features import PromptCounter, parse_chat


def test_string_input_and_instructions() -> None:
    assert to_chat({"input": "hi", "instructions": "be brief"}) == {"messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}


def test_items_tools_and_tool_choice() -> None:
    doc = {
        "instructions": "sys",
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "weather"},
                                         {"type": "input_image", "image_url": "x"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "c1", "output": {"t": 20}},
        ],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                  {"type": "web_search_preview"}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert to_chat(doc) == {
        "messages": [
            {"role": "system", "content": "sys\n\ndev"},
            {"role": "user", "content": "weather"},
            {"role": "assistant", "content": "ok", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"t": 20}'},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": None,
                                                    "parameters": {"type": "object"}, "strict": False}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "chat_template_kwargs": {"enable_thinking": False},
    }


@pytest.mark.parametrize(("doc", "param"), [
    ([], None), ({"input": None}, "input"), ({"input": ""}, "input"), ({"input": [1]}, "input"),
    ({"input": [{"type": "function_call"}]}, "input"), ({"input": "x", "tools": {}}, "tools"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "max_output_tokens": True}, "max_output_tokens"),
    ({"input": "x", "stream": "yes"}, "stream"), ({"input": "x", "model": 1}, "model"),
])
def test_invalid_documents(doc: Any, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_responses(doc, max_n=8)
    assert info.value.param == param


def test_parsed_request_counts_like_the_equivalent_chat(tokenizer_dir: Path) -> None:
    counter = PromptCounter(tokenizer_dir)
    parsed = parse_responses({"input": "What is the weather?", "instructions": "be brief",
                              "max_output_tokens": 16, "stream": True}, max_n=8)
    assert (parsed.kind, parsed.max_new_tokens, parsed.n, parsed.stream, parsed.param) == (
        "chat", 16, 1, True, "input")
    chat = parse_chat({"messages": [{"role": "system", "content": "be brief"},
                                    {"role": "user", "content": "What is the weather?"}]}, max_n=8)
    assert counter.count(parsed) == counter.count(chat) > 0
