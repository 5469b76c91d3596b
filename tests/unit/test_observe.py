"""router.upstream.observe: usage and ending read from relayed bytes, whatever the chunk boundaries."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from router.ops.metrics import RouterMetrics
from router.upstream.observe import ResponseObserver, wants_tools
from tests.tool_events import (
    INCONSISTENT,
    parallel_tool_call_events,
    reasoning_only_events,
)


def _counts(m: RouterMetrics) -> tuple[float, float, float, float]:
    return tuple(c.values.get(("spec",), 0.0) for c in (  # type: ignore[return-value]
        m.completion_tokens, m.reasoning_tokens, m.usage_inconsistent, m.suspect_truncations))


def _run(events: list[str], step: int, *, tools: bool = True) -> tuple[float, ...]:
    m = RouterMetrics(CollectorRegistry())
    obs = ResponseObserver(m, tools=tools)
    data = "".join(events).encode()
    for i in range(0, len(data), step):
        obs.feed(data[i:i + step])
    obs.finish("spec")
    return _counts(m)


def test_any_chunking_gives_the_same_counts() -> None:
    for step in (1, 7, 64, 100_000):
        assert _run(parallel_tool_call_events(INCONSISTENT), step) == (12, 12, 1, 0)
        assert _run(reasoning_only_events(), step) == (9, 9, 0, 1)
        assert _run(reasoning_only_events(), step, tools=False) == (9, 9, 0, 0)


def test_whole_event_chunks_and_held_back_parts_give_the_same_counts() -> None:
    """One event per chunk (the relay's usual chunk: nothing held back) and chunks that end
    an event while a partial one is pending read the same."""
    for events, tools, want in ((parallel_tool_call_events(INCONSISTENT), True, (12, 12, 1, 0)),
                                (reasoning_only_events(), True, (9, 9, 0, 1))):
        for split in (False, True):
            m = RouterMetrics(CollectorRegistry())
            obs = ResponseObserver(m, tools=tools)
            for event in events:
                data = event.encode()
                if split:  # the first half is pending when the second (ending the event) arrives
                    obs.feed(data[:len(data) // 2])
                    data = data[len(data) // 2:]
                obs.feed(data)
            obs.finish("spec")
            assert _counts(m) == want


def test_bad_usage_never_raises() -> None:
    m = RouterMetrics(CollectorRegistry())
    for usage in (b'{"completion_tokens":"x"}', b'{"completion_tokens":5,"reasoning_tokens":-1}', b"[1",
                  b'{"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":9}}'):
        obs = ResponseObserver(m, tools=True)
        obs.feed(b'data: {"choices":[],"usage":' + usage + b"}\n\n")
        obs.body(b"not json")
        obs.finish("spec")
    assert _counts(m) == (9, 4, 3, 0)


def test_wants_tools() -> None:
    assert wants_tools({"tools": [{}]}) and wants_tools({"tools": [{}], "tool_choice": "required"})
    assert not wants_tools({"tools": []}) and not wants_tools({"tools": [{}], "tool_choice": "none"})
    assert not wants_tools({})
