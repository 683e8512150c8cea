"""Streams shaped as the API sends them, played by the fake (RawStream) to the adapter over the
official SDK: citations, server tool blocks, cumulative usage on message_delta, an input cut by
max_tokens, streams that end early and events out of order (a cut answer is never an answer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agentd.config import LLMConfig
from agentd.llm.anthropic_adapter import AnthropicLLM
from agentd.llm.types import (
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    OpaqueBlock,
    TextBlock,
    ToolUseBlock,
)
from tests.fakes import FakeAnthropic
from tests.fakes.anthropic import RawStream

REQUEST = LLMRequest(messages=[Message(role="user", content="hi")])


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic.running() as server:
        yield server


@pytest.fixture
async def llm(fake: FakeAnthropic) -> AsyncIterator[AnthropicLLM]:
    adapter = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "sk-ant-test")
    yield adapter
    await adapter.close()
    fake.reset()


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


async def play(
    fake: FakeAnthropic, llm: AnthropicLLM, events: list[dict[str, Any]]
) -> tuple[LLMResponse, list[str]]:
    texts: list[str] = []

    async def on_text(text: str) -> None:
        texts.append(text)

    fake.enqueue(RawStream(events))
    return await llm.complete(REQUEST, on_text), texts


async def test_text_grows_and_usage_is_cumulative(fake: FakeAnthropic, llm: AnthropicLLM) -> None:
    response, texts = await play(
        fake,
        llm,
        [
            start(cache_creation={"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 7}),
            {"type": "ping"},
            block_start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="Hel"),
            delta(0, type="text_delta", text="lo."),
            stop(0),
            # Newer API versions repeat the input counts here; a null must not erase a count.
            *end(input_tokens=12, cache_read_input_tokens=None),
        ],
    )
    assert texts == ["Hel", "Hello."]
    assert response.text == "Hello."
    assert response.stop_reason == "end_turn"
    assert response.usage.model_dump() == {
        "input_tokens": 12,
        "output_tokens": 42,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cache_write_1h_tokens": 7,
        "audio_seconds": 0.0,  # a model's answer transcribes nothing
    }


async def test_tool_input_arrives_in_pieces(fake: FakeAnthropic, llm: AnthropicLLM) -> None:
    response, _ = await play(
        fake,
        llm,
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
        ],
    )
    assert response.tool_uses == [
        ToolUseBlock(id="toolu_1", name="weather", input={"city": "Oslo", "days": 2})
    ]


async def test_a_tool_input_cut_by_max_tokens_keeps_what_arrived(
    fake: FakeAnthropic, llm: AnthropicLLM
) -> None:
    response, _ = await play(
        fake,
        llm,
        [
            start(),
            block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "note", "input": {}}),
            delta(0, type="input_json_delta", partial_json='{"title": "a", "body": "unfini'),
            stop(0),
            *end("max_tokens"),
        ],
    )
    assert response.tool_uses[0].input == {"title": "a"}


async def test_web_search_blocks_and_citations(fake: FakeAnthropic, llm: AnthropicLLM) -> None:
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
    response, _ = await play(
        fake,
        llm,
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
        ],
    )
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
    "events",
    [
        [
            start(),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="Half"),
        ],
        [start(), block_start(0, {"type": "text", "text": ""}), stop(0)],
        [],
    ],
)
async def test_a_stream_that_ends_early_is_not_an_answer(
    fake: FakeAnthropic, llm: AnthropicLLM, events: list[Any]
) -> None:
    with pytest.raises(LLMError) as failed:
        await play(fake, llm, events)
    assert failed.value.retryable and failed.value.reason == "malformed"


@pytest.mark.parametrize(
    "events",
    [
        [start(), delta(0, type="text_delta", text="x")],  # a delta for a block never opened
        [start(), block_start(1, {"type": "text", "text": ""})],  # an index skipped
        [start(), {"no": "type"}],
    ],
)
async def test_malformed_events_are_a_transient_error(
    fake: FakeAnthropic, llm: AnthropicLLM, events: list[Any]
) -> None:
    with pytest.raises(LLMError) as failed:
        await play(fake, llm, events)
    assert failed.value.retryable
