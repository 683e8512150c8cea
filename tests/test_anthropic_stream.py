"""The stream fold (agentd/llm/anthropic_stream.py) on event sequences shaped as the API sends.

The adapter's wire behaviour (errors, drops, retries) is covered through the real SDK and the
fake in tests/anthropic_corpus.py; these are the shapes the fake does not produce: citations,
server tool blocks, cumulative usage on message_delta, an input cut by max_tokens, events out of
order.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentd.llm.anthropic_adapter import _parse_response
from agentd.llm.anthropic_stream import MessageFold, StreamIncomplete
from agentd.llm.types import OpaqueBlock, TextBlock, ToolUseBlock


def start(**usage: Any) -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 1,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
                **usage,
            },
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **d: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def end(stop_reason: str = "end_turn", **usage: Any) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 42, **usage},
        },
        {"type": "message_stop"},
    ]


def fold(events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    f = MessageFold()
    texts = [t for t in map(f.add, events) if t is not None]
    return f.result(), texts


def test_text_grows_and_usage_is_cumulative() -> None:
    message, texts = fold(
        [
            start(cache_creation={"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 7}),
            {"type": "ping"},
            block_start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="Hel"),
            delta(0, type="text_delta", text="lo."),
            stop(0),
            # Newer API versions repeat the input counts here; a null must not erase a count.
            *end(input_tokens=12, cache_read_input_tokens=None),
        ]
    )
    assert texts == ["Hel", "Hello."]
    response = _parse_response(message)
    assert response.text == "Hello."
    assert response.stop_reason == "end_turn"
    assert response.usage.model_dump() == {
        "input_tokens": 12,
        "output_tokens": 42,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cache_write_1h_tokens": 7,
    }


def test_tool_input_arrives_in_pieces() -> None:
    message, _ = fold(
        [
            start(),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="Let me check."),
            stop(0),
            block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}),
            delta(1, type="input_json_delta", partial_json=""),
            delta(1, type="input_json_delta", partial_json='{"city": "Os'),
            delta(1, type="input_json_delta", partial_json='lo", "days": 2}'),
            stop(1),
            *end("tool_use"),
        ]
    )
    response = _parse_response(message)
    assert response.tool_uses == [
        ToolUseBlock(id="toolu_1", name="weather", input={"city": "Oslo", "days": 2})
    ]


def test_a_tool_input_cut_by_max_tokens_keeps_what_arrived() -> None:
    message, _ = fold(
        [
            start(),
            block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "note", "input": {}}),
            delta(0, type="input_json_delta", partial_json='{"title": "a", "body": "unfini'),
            stop(0),
            *end("max_tokens"),
        ]
    )
    assert _parse_response(message).tool_uses[0].input == {"title": "a"}


def test_web_search_blocks_and_citations() -> None:
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.org/a",
                "title": "A",
                "encrypted_content": "xyz",
                "page_age": None,
            }
        ],
    }
    citation = {
        "type": "web_search_result_location",
        "url": "https://example.org/a",
        "title": "A",
        "encrypted_index": "abc",
        "cited_text": "a fact",
    }
    message, _ = fold(
        [
            start(),
            block_start(
                0,
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            ),
            delta(0, type="input_json_delta", partial_json='{"query": "a"}'),
            stop(0),
            block_start(1, result),
            stop(1),
            block_start(2, {"type": "text", "text": "", "citations": None}),
            delta(2, type="citations_delta", citation=citation),
            delta(2, type="text_delta", text="A fact."),
            stop(2),
            *end(),
        ]
    )
    response = _parse_response(message)
    assert response.content[0] == OpaqueBlock(
        raw={
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "a"},
        }
    )
    # The API's nulls are left out of what is sent back, as the SDK's exclude_none dump did.
    assert "page_age" not in response.content[1].raw["content"][0]  # type: ignore[union-attr]
    assert response.content[2] == TextBlock(text="A fact.", citations=[citation])
    assert response.sources == [("A", "https://example.org/a")]


@pytest.mark.parametrize(
    "events, where",
    [
        (
            [
                start(),
                block_start(0, {"type": "text", "text": ""}),
                delta(0, type="text_delta", text="Half"),
            ],
            "inside a content block",
        ),
        ([start(), block_start(0, {"type": "text", "text": ""}), stop(0)], "without message_stop"),
        ([], "without message_stop"),
    ],
)
def test_a_stream_that_ends_early_is_not_an_answer(events: list[Any], where: str) -> None:
    f = MessageFold()
    for event in events:
        f.add(event)
    with pytest.raises(StreamIncomplete, match=where):
        f.result()


@pytest.mark.parametrize(
    "events",
    [
        [block_start(0, {"type": "text", "text": ""})],  # before message_start
        [start(), delta(0, type="text_delta", text="x")],  # a delta for a block never opened
        [start(), block_start(1, {"type": "text", "text": ""})],  # an index skipped
        [start(), {"no": "type"}],
    ],
)
def test_malformed_events_are_a_transient_error(events: list[Any]) -> None:
    f = MessageFold()
    with pytest.raises(ValueError, match="malformed stream event"):
        for event in events:
            f.add(event)
