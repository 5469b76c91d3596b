"""Request parts several test modules send: :data:`TOOLS`, two OpenAI function tools (each with
a required string parameter), which make a chat request need the ``tool_calls`` capability."""

from __future__ import annotations

from typing import Any

__all__ = ["TOOLS"]

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
]
