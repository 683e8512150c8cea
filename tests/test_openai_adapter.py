"""OpenAI-compatible servers through the official `openai` client, against the fake Chat
Completions server: tools, tool results, images, streaming and usage mapped both ways; faults
retried or classified; a model without tools or images says so instead of dropping them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agentd.config import LLMConfig
from agentd.config.models import ProviderConfig
from agentd.llm.cut import prompt_chars
from agentd.llm.estimate import tokens_in
from agentd.llm.openai_adapter import OpenAILLM
from agentd.llm.types import (
    CutAttempt,
    ImageBlock,
    LLMError,
    LLMRequest,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
)
from tests.fakes.full_listener import full_listener
from tests.fakes.openai_chat import ChatError, ChatFault, ChatReply, FakeChat, _tokens

WEATHER = ToolSpec(
    name="weather",
    description="The weather now",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)


async def _no_sleep(_seconds: float) -> None:
    pass


@pytest.fixture(scope="module")
def chat() -> Iterator[FakeChat]:
    with FakeChat.running() as server:
        yield server


def _llm(server: FakeChat, retries: int = 0, **provider: Any) -> OpenAILLM:
    config = LLMConfig(retries=retries, timeout=provider.pop("timeout", 30.0))
    settings = ProviderConfig(
        kind="openai", base_url=server.base_url + "/v1", local=True, **provider
    )
    return OpenAILLM(config, "", settings, "local", sleep=_no_sleep)


@pytest.fixture
async def local(chat: FakeChat) -> AsyncIterator[OpenAILLM]:
    llm = _llm(chat)
    yield llm
    await llm.close()
    chat.reset()


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_tool_turn_on_the_openai_path(
    chat: FakeChat, local: OpenAILLM, streamed: bool
) -> None:
    seen: list[str] = []

    async def on_text(text: str) -> None:
        seen.append(text)

    on = on_text if streamed else None
    ask = LLMRequest(
        messages=[Message(role="user", content="Weather in Oslo?")],
        tools=[WEATHER],
        system=[],
    )
    chat.enqueue_tool_call("weather", {"city": "Oslo"})
    first = await local.complete(ask, on, model="qwen2.5:7b")
    assert first.stop_reason == "tool_use" and first.provider == "local"
    (use,) = first.tool_uses
    assert (use.name, use.input) == ("weather", {"city": "Oslo"})
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0

    then = ask.model_copy(
        update={
            "messages": [
                *ask.messages,
                Message(role="assistant", content=first.content),
                Message(
                    role="user",
                    content=[ToolResultBlock(tool_use_id=use.id, content="Sunny, 21°C")],
                ),
            ]
        }
    )
    answer = await local.complete(then, on, model="qwen2.5:7b")
    assert answer.text == "echo: tool_result: Sunny, 21°C"
    assert answer.stop_reason == "end_turn"
    sent = chat.requests[-1]["body"]
    assert sent["tools"][0]["function"]["name"] == "weather"
    assert sent["messages"][-2]["tool_calls"][0]["id"] == use.id  # the assistant's call
    assert sent["messages"][-1] == {
        "role": "tool",
        "tool_call_id": use.id,
        "content": "Sunny, 21°C",
    }
    if streamed:
        assert seen[-1] == answer.text


async def test_images_and_the_system_prompt_are_sent(chat: FakeChat, local: OpenAILLM) -> None:
    req = LLMRequest(
        system=[{"text": "You are terse."}],  # type: ignore[list-item]
        messages=[
            Message(
                role="user",
                content=[
                    TextBlock(text="What is this?"),
                    ImageBlock(media_type="image/png", data=PIXEL),
                ],
            )
        ],
    )
    await local.complete(req, model="llava")
    body = chat.requests[-1]["body"]
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    parts = body["messages"][1]["content"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")


async def test_a_model_without_tools_says_so_configured_or_detected(chat: FakeChat) -> None:
    ask = LLMRequest(messages=[Message(role="user", content="hi")], tools=[WEATHER])
    configured = _llm(chat, tools=False)
    with pytest.raises(LLMError, match="cannot take tool calls") as refused:
        await configured.complete(ask, model="gemma")
    assert refused.value.reason == "unsupported" and chat.requests == []  # said before any call
    await configured.close()

    detected = _llm(chat)
    chat.tools = False
    try:
        with pytest.raises(LLMError, match="the server said so"):
            await detected.complete(ask, model="gemma")
        with pytest.raises(LLMError, match="cannot take tool calls"):
            await detected.complete(ask, model="gemma")  # remembered: no second call
        assert len(chat.requests) == 1
        plain = await detected.complete(
            LLMRequest(messages=[Message(role="user", content="hi")]), model="gemma"
        )
        assert plain.text == "echo: hi"
    finally:
        chat.tools = True
        await detected.close()
        chat.reset()


async def test_server_tools_are_reported_not_dropped_silently(local: OpenAILLM) -> None:
    req = LLMRequest(
        messages=[Message(role="user", content="news?")],
        server_tools=[{"type": "web_search_20250305", "name": "web_search"}],
    )
    answer = await local.complete(req, model="qwen")
    assert answer.notes and "web_search" in answer.notes[0]


FAULTS = {
    "rate_limited": (lambda c: c.enqueue_error(429, "slow down", retry_after=0), "rate_limit"),
    "overloaded": (lambda c: c.enqueue_error(529, "overloaded"), "overloaded"),
    "server_error": (lambda c: c.enqueue_error(500), "server_error"),
    "quota": (lambda c: c.enqueue_error(429, "quota", code="insufficient_quota"), "billing"),
    "dropped": (lambda c: c.enqueue(ChatFault("drop")), "unreachable"),
    "malformed": (lambda c: c.enqueue(ChatFault("malformed")), "malformed"),
    "cut_stream": (lambda c: c.enqueue(ChatReply(text="a long answer", cut_after=2)), None),
    "garbled_stream": (lambda c: c.enqueue(ChatReply(text="a long answer", garble_after=1)), None),
}


@pytest.mark.parametrize("case", sorted(set(FAULTS) - {"quota"}))  # a quota waits for a bill
async def test_faults_are_retried_then_answered(chat: FakeChat, case: str) -> None:
    enqueue, _ = FAULTS[case]
    llm = _llm(chat, retries=1)

    async def on_text(_text: str) -> None:
        pass

    try:
        enqueue(chat)
        chat.enqueue_text("Recovered.")
        answer = await llm.complete(
            LLMRequest(messages=[Message(role="user", content="x")]), on_text
        )
    finally:
        await llm.close()
        chat.reset()
    assert answer.text == "Recovered." and answer.attempt == 2


@pytest.mark.parametrize("case", sorted(k for k, v in FAULTS.items() if v[1]))
async def test_faults_are_classified_for_the_fallback_chain(chat: FakeChat, case: str) -> None:
    enqueue, reason = FAULTS[case]
    llm = _llm(chat)
    try:
        enqueue(chat)
        with pytest.raises(LLMError) as failed:
            await llm.complete(LLMRequest(messages=[Message(role="user", content="x")]))
    finally:
        await llm.close()
        chat.reset()
    assert failed.value.reason == reason


async def _broken_stream(
    chat: FakeChat, reply: ChatReply
) -> tuple[list[CutAttempt], dict[str, Any]]:
    """The attempts `cut` gets when `reply`'s stream breaks and the retry answers, and the
    body of the request sent."""
    llm, broken = _llm(chat, retries=1), []

    async def on_text(_text: str) -> None:
        pass

    try:
        chat.enqueue(reply)
        chat.enqueue_text("Recovered.")
        req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
        answer = await llm.complete(req, on_text, model="qwen", cut=broken)
        sent = chat.requests[0]["body"]
    finally:
        await llm.close()
        chat.reset()
    assert answer.text == "Recovered." and answer.attempt == 2
    return broken, sent


async def test_a_stream_broken_before_its_usage_is_billed_as_estimated(chat: FakeChat) -> None:
    """Dropped after four chunks of text (32 characters): no usage came (it comes last), so
    the attempt is billed by estimate, the input from the request's text, and marked so."""
    [cut], _ = await _broken_stream(chat, ChatReply(text="word " * 20, cut_after=5))
    assert (cut.model, cut.attempt, cut.estimated) == ("local/qwen", 1, True)
    assert cut.usage.output_tokens == 8 and cut.usage.input_tokens >= 100


async def test_a_stream_broken_after_its_usage_is_billed_as_it_said(chat: FakeChat) -> None:
    """Dropped after the last chunk, the usage (`include_usage`), before `[DONE]`: billed as
    the server counted."""
    text = "word " * 20
    [cut], sent = await _broken_stream(chat, ChatReply(text=text, cut_before_done=True))
    assert sent["stream_options"] == {"include_usage": True} and not cut.estimated
    reported = (_tokens(sent["messages"]), _tokens({"role": "assistant", "content": text}))
    assert (cut.usage.input_tokens, cut.usage.output_tokens) == reported


async def test_a_stream_from_a_server_that_sends_no_usage_is_billed_as_estimated() -> None:
    """A server that ignores `include_usage` ends the stream with no count: the answer is
    billed by estimate (the input from the request's text, the output from the answer's, one
    token per four characters) and marked so, never as 0 tokens."""
    text = "word " * 20  # 100 characters: 25 tokens
    with FakeChat.running(stream_usage=False) as server:
        llm = _llm(server)

        async def on_text(_text: str) -> None:
            pass

        try:
            server.enqueue_text(text)
            req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
            answer = await llm.complete(req, on_text, model="qwen")
        finally:
            await llm.close()
    assert answer.text == text.strip() and answer.estimated
    assert answer.usage.output_tokens == 25 and answer.usage.input_tokens >= 100


@pytest.mark.parametrize(
    "names", [("reasoning_content",), ("reasoning",), ("reasoning", "reasoning_content")]
)
@pytest.mark.parametrize("stream", [True, False])
async def test_a_reasoning_models_thinking_counts_in_an_estimated_answer(
    names: tuple[str, ...], stream: bool
) -> None:
    """A reasoning model (DeepSeek, vLLM, Ollama's) writes its thinking before the answer, and
    the server bills it as output: a server that counts nothing has the thinking estimated with
    the answer, once, whatever the field's name."""
    thought, text = "hmm " * 50, "word " * 20  # 200 + 100 characters: 75 tokens
    with FakeChat.running(usage=False) as server:
        llm = _llm(server)

        async def on_text(_text: str) -> None:
            pass

        try:
            server.enqueue(ChatReply(text=text, reasoning=thought, reasoning_as=names))
            req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
            answer = await llm.complete(req, on_text if stream else None, model="qwen")
        finally:
            await llm.close()
    assert answer.text == text.strip() and answer.estimated
    assert answer.usage.output_tokens == 75, answer.usage


async def test_a_stream_with_its_usage_is_billed_as_the_server_counted(
    chat: FakeChat, local: OpenAILLM
) -> None:
    async def on_text(_text: str) -> None:
        pass

    chat.enqueue_text("word " * 20)
    req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
    answer = await local.complete(req, on_text, model="qwen")
    sent = chat.requests[0]["body"]
    assert not answer.estimated
    assert answer.usage.input_tokens == _tokens(sent["messages"])


async def test_an_answer_from_a_server_that_sends_no_usage_is_billed_as_estimated() -> None:
    """Not streamed, from a server that counts nothing: the answer is billed by the one
    estimate rule (the input from the request's text, the output from the answer's), marked
    so, never as 0 tokens."""
    text = "word " * 20  # 100 characters: 25 tokens
    with FakeChat.running(usage=False) as server:
        llm = _llm(server)
        try:
            server.enqueue_text(text)
            req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
            answer = await llm.complete(req, model="qwen")
        finally:
            await llm.close()
    assert answer.text == text.strip() and answer.estimated
    assert answer.usage.output_tokens == 25 and answer.usage.input_tokens >= 100


async def test_a_call_not_streamed_that_is_stopped_is_billed_as_estimated(chat: FakeChat) -> None:
    """Stopped (a cancel) while the server works on an answer not streamed: the request was
    taken, so billed; the caller gets the attempt, its input estimated from the request's
    text, nothing of the output guessed, marked so."""
    llm = _llm(chat)
    stopped: list[CutAttempt] = []
    req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
    chat.reset()  # the module's fake: this call's request is the first it counts
    try:
        chat.enqueue(ChatFault("hang"))
        call = asyncio.create_task(llm.complete(req, model="qwen", cut=stopped))
        await asyncio.to_thread(chat.wait_for_requests, 1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await llm.close()
        chat.reset()
    [cut] = stopped
    assert (cut.model, cut.attempt, cut.estimated) == ("local/qwen", 1, True)
    assert 100 <= cut.usage.input_tokens < 110 and cut.usage.output_tokens == 0


async def test_a_hung_server_times_out(chat: FakeChat) -> None:
    llm = _llm(chat, timeout=0.5)
    try:
        chat.enqueue(ChatFault("hang"))
        with pytest.raises(LLMError) as failed:
            await llm.complete(LLMRequest(messages=[Message(role="user", content="x")]))
    finally:
        await llm.close()
        chat.reset()
    assert failed.value.reason == "timeout" and failed.value.retryable


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_answer_that_timed_out_is_billed_as_estimated(
    chat: FakeChat, streamed: bool
) -> None:
    """The server took the request whole and never answered: the read timed out. It bills a
    request it took, so the attempt is in `cut`, its input estimated from the request's text,
    nothing of the output guessed, marked so (a stream that never began too)."""
    llm = _llm(chat, timeout=0.5)
    timed_out: list[CutAttempt] = []

    async def on_text(_text: str) -> None:
        pass

    try:
        chat.enqueue(ChatFault("hang"))
        with pytest.raises(LLMError) as failed:
            await llm.complete(
                LLMRequest(messages=[Message(role="user", content="x" * 400)]),
                on_text if streamed else None,
                cut=timed_out,
            )
        sent = chat.requests[-1]["body"]
    finally:
        await llm.close()
        chat.reset()
    assert failed.value.reason == "timeout"
    [cut] = timed_out
    assert (cut.attempt, cut.estimated, cut.usage.output_tokens) == (1, True, 0)
    assert cut.usage.input_tokens == tokens_in(prompt_chars(sent)) > 100


async def test_a_connect_timeout_is_not_billed() -> None:
    """The connection never opened: nothing reached the server, so nothing is in `cut`."""
    unsent: list[CutAttempt] = []
    with full_listener() as url:
        config = LLMConfig(retries=0, timeout=0.5)
        provider = ProviderConfig(kind="openai", base_url=url + "/v1", local=True)
        llm = OpenAILLM(config, "", provider, "local", sleep=_no_sleep)
        try:
            with pytest.raises(LLMError) as failed:
                await llm.complete(
                    LLMRequest(messages=[Message(role="user", content="x")]), cut=unsent
                )
        finally:
            await llm.close()
    assert failed.value.reason == "timeout" and unsent == []


async def test_a_structured_answer_from_a_model_without_tools_comes_as_json(
    chat: FakeChat,
) -> None:
    from pydantic import BaseModel

    from agentd.llm.structured import complete_structured

    class Summary(BaseModel):
        summary: str

    llm = _llm(chat, tools=False)
    try:
        chat.enqueue_text('{"summary": "They talked about the week."}')
        result, response = await complete_structured(
            llm,  # type: ignore[arg-type]
            LLMRequest(purpose="summary", messages=[Message(role="user", content="...")]),
            Summary,
            name="record_summary",
            description="Record the summary",
        )
        sent = chat.requests[-1]["body"]
    finally:
        await llm.close()
        chat.reset()
    assert result == Summary(summary="They talked about the week.")
    assert "tools" not in sent and sent["response_format"]["type"] == "json_schema"
    assert response.usage.input_tokens > 0


async def _on_text(_text: str) -> None:
    pass


async def test_a_stream_stopped_before_its_first_chunk_is_billed_as_estimated(
    chat: FakeChat,
) -> None:
    """Stopped (a cancel) while the server works on a streamed answer, before any chunk came:
    the request was taken, so billed, as a call not streamed is: its input estimated from
    the request's text, nothing of the output guessed, marked so."""
    llm = _llm(chat)
    stopped: list[CutAttempt] = []
    req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
    chat.reset()
    try:
        chat.enqueue(ChatFault("hang"))
        call = asyncio.create_task(llm.complete(req, _on_text, model="qwen", cut=stopped))
        [sent] = await asyncio.to_thread(chat.wait_for_requests, 1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await llm.close()
        chat.reset()
    assert sent["body"]["stream"] is True
    [cut] = stopped
    assert (cut.model, cut.attempt, cut.estimated) == ("local/qwen", 1, True)
    assert cut.usage.input_tokens == tokens_in(prompt_chars(sent["body"])) > 100
    assert cut.usage.output_tokens == 0


@pytest.mark.parametrize(
    ("fault", "billed"),
    [
        (ChatFault("answered_drop"), True),  # a 200, then the connection cut: it had begun
        (ChatFault("error_chunk"), False),  # the server said it failed: nothing billed
        (ChatFault("drop"), False),  # cut before any answer
        (ChatError(503, "overloaded"), False),
    ],
)
async def test_a_stream_that_ends_before_its_first_chunk_is_billed_when_the_server_took_it(
    chat: FakeChat, fault: Any, billed: bool
) -> None:
    """A streamed answer that came (200) and broke before its first chunk: the server took
    the request, so the attempt is in `cut` by estimate; an error the server sent in place
    of the answer, or no answer at all, is not."""
    llm = _llm(chat)
    broken: list[CutAttempt] = []
    req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
    chat.reset()
    try:
        chat.enqueue(fault)
        with pytest.raises(LLMError):
            await llm.complete(req, _on_text, model="qwen", cut=broken)
        [sent] = chat.requests
    finally:
        await llm.close()
        chat.reset()
    if not billed:
        assert broken == []
        return
    [cut] = broken
    assert (cut.attempt, cut.estimated, cut.usage.output_tokens) == (1, True, 0)
    assert cut.usage.input_tokens == tokens_in(prompt_chars(sent["body"]))
