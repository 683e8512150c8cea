"""Claude through the official SDK: agentd's adapter gives what the SDK itself reads, and maps
its errors to LLMError with the status, retryability and reason the fallback chain needs.

Each case is played by the local fake (tests/fakes/anthropic.py) twice: once to agentd's
adapter, once to a bare `anthropic` client. Final messages must match; errors must carry the
same status.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import pytest

from agentd.config import LLMConfig
from agentd.llm.anthropic_adapter import AnthropicLLM, build_params
from agentd.llm.cut import prompt_chars
from agentd.llm.estimate import tokens_in
from agentd.llm.types import CutAttempt, LLMError, LLMRequest, Message, ToolSpec
from tests.fakes import FakeAnthropic
from tests.fakes.full_listener import full_listener

REQUEST = LLMRequest(
    messages=[Message(role="user", content="What is the weather?")],
    tools=[ToolSpec(name="weather", description="Weather now", input_schema={"type": "object"})],
)
Enqueue = Callable[[FakeAnthropic], None]
ANSWERS: dict[str, Enqueue] = {
    "text": lambda f: f.enqueue_text("Sunny."),
    "tool_use": lambda f: f.enqueue_tool_use(
        "weather", {"city": "Oslo"}, "toolu_corpus", text_before="Let me see."
    ),
}
# case: (enqueue, retryable, status, reason)
ERRORS: dict[str, tuple[Enqueue, bool, int | None, str]] = {
    "rate_limited": (lambda f: f.enqueue_error(429, retry_after=0), True, 429, "rate_limit"),
    "overloaded": (lambda f: f.enqueue_error(529), True, 529, "overloaded"),
    "server_error": (lambda f: f.enqueue_error(500), True, 500, "server_error"),
    "bad_request": (lambda f: f.enqueue_error(400), False, 400, "bad_request"),
    "unauthorized": (lambda f: f.enqueue_error(401), False, 401, "auth"),
    "spend_limit": (
        lambda f: f.enqueue_error(429, "enforced_spend_limit_reached_error", "Spend limit"),
        False,
        429,
        "billing",
    ),
    "billing": (lambda f: f.enqueue_error(402), False, 402, "billing"),
    "dropped": (lambda f: f.enqueue_drop(), True, None, "unreachable"),
    "malformed": (lambda f: f.enqueue_malformed(), True, None, "malformed"),
}


@pytest.fixture(scope="module")
def fake() -> Any:
    with FakeAnthropic.running() as server:
        yield server


@pytest.fixture
async def ours(fake: FakeAnthropic) -> AsyncIterator[AnthropicLLM]:
    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "sk-ant-test-key")
    yield llm
    await llm.close()
    fake.reset()


@pytest.fixture
async def sdk(fake: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test-key", base_url=fake.base_url, max_retries=0
    )
    yield client
    await client.close()


def _params() -> dict[str, Any]:
    config = LLMConfig()
    params = build_params(REQUEST, config.model, config.max_tokens)
    params["tools"] = [t.model_dump() for t in REQUEST.tools]
    return params


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("case", sorted(ANSWERS))
async def test_answers_match_the_official_client(
    fake: FakeAnthropic,
    ours: AnthropicLLM,
    sdk: anthropic.AsyncAnthropic,
    case: str,
    streamed: bool,
) -> None:
    seen: list[str] = []

    async def on_text(text: str) -> None:
        seen.append(text)

    ANSWERS[case](fake)
    answer = await ours.complete(REQUEST, on_text if streamed else None)
    ANSWERS[case](fake)
    if streamed:
        async with sdk.messages.stream(**_params()) as stream:
            reference = await stream.get_final_message()
    else:
        reference = await sdk.messages.create(**_params())
    want = reference.model_dump(exclude_none=True)
    assert answer.stop_reason == want["stop_reason"]
    assert answer.model == want["model"]
    got = [b.model_dump(exclude_none=True) for b in answer.content]
    assert got == [
        {k: v for k, v in b.items() if k in ("type", "text", "id", "name", "input")}
        for b in want["content"]
    ]
    assert answer.usage.input_tokens == want["usage"]["input_tokens"]
    assert answer.usage.output_tokens == want["usage"]["output_tokens"]
    if streamed and case == "text":
        assert seen[-1] == "Sunny."


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("case", sorted(ERRORS))
async def test_errors_keep_status_and_retryability(
    fake: FakeAnthropic,
    ours: AnthropicLLM,
    sdk: anthropic.AsyncAnthropic,
    case: str,
    streamed: bool,
) -> None:
    enqueue, retryable, status, reason = ERRORS[case]

    async def on_text(_text: str) -> None:
        pass

    enqueue(fake)
    with pytest.raises(LLMError) as ours_failed:
        await ours.complete(REQUEST, on_text if streamed else None)
    failed = ours_failed.value
    assert (failed.retryable, failed.status, failed.reason) == (retryable, status, reason)
    assert "sk-ant-test-key" not in str(ours_failed.value)
    if status is not None:
        enqueue(fake)
        with pytest.raises(anthropic.APIStatusError) as sdk_failed:
            await sdk.messages.create(**_params())
        assert sdk_failed.value.status_code == status


async def test_an_error_event_inside_a_stream_is_retryable(
    fake: FakeAnthropic, ours: AnthropicLLM
) -> None:
    fake.enqueue_stream_error()

    async def on_text(_text: str) -> None:
        pass

    with pytest.raises(LLMError) as failed:
        await ours.complete(REQUEST, on_text)
    assert failed.value.retryable and "overloaded_error" in str(failed.value)


async def test_retries_honour_the_policy_then_answer(fake: FakeAnthropic) -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=2), "k", sleep=sleep)
    try:
        fake.enqueue_error(429, retry_after=7)
        fake.enqueue_error(529)
        fake.enqueue_text("Third time.")
        answer = await llm.complete(REQUEST)
    finally:
        await llm.close()
    assert answer.attempt == 3 and sleeps[0] == 7
    assert [b.text for b in answer.content] == ["Third time."]  # type: ignore[union-attr]


async def test_a_stream_cut_mid_answer_is_retried_like_a_5xx(fake: FakeAnthropic) -> None:
    texts: list[str] = []

    async def on_text(text: str) -> None:
        texts.append(text)

    async def sleep(_seconds: float) -> None:
        pass

    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=1), "k", sleep=sleep)
    try:
        fake.enqueue_stream_error(drop=True, partial_text="Half an answer that is cut")
        fake.enqueue_text("Whole.")
        answer = await llm.complete(REQUEST, on_text)
    finally:
        await llm.close()
    assert answer.attempt == 2 and answer.text == "Whole." and texts[-1] == "Whole."


async def test_a_stream_that_ends_after_its_usage_is_billed_as_it_said(
    fake: FakeAnthropic,
) -> None:
    """A stream that stops after message_delta but before message_stop: the caller gets the
    attempt's tokens as the API reported them (not an estimate)."""
    from tests.fakes.anthropic import RawStream

    start = {
        "id": "msg_cut",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 1, "cache_read_input_tokens": 30},
    }
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 7},
        },
    ]

    async def on_text(_text: str) -> None:
        pass

    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "k")
    broken: list[CutAttempt] = []
    try:
        fake.enqueue(RawStream(events))
        with pytest.raises(LLMError):
            await llm.complete(REQUEST, on_text, cut=broken)
    finally:
        await llm.close()
    [cut] = broken
    assert (cut.model, cut.attempt, cut.estimated) == ("claude-haiku-4-5", 1, False)
    usage = cut.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (120, 30, 7)


async def test_a_call_not_streamed_that_is_stopped_is_billed_as_estimated(
    fake: FakeAnthropic,
) -> None:
    """Stopped (a cancel) while the API works on an answer not streamed: the request was
    taken, so billed; the caller gets the attempt, its input estimated from the request's
    text (one token per four characters), nothing of the output guessed, marked so."""
    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "k")
    stopped: list[CutAttempt] = []
    req = LLMRequest(messages=[Message(role="user", content="x" * 400)])
    fake.reset()  # the module's fake: this call's request is the first it counts
    try:
        fake.enqueue_hang()
        call = asyncio.create_task(llm.complete(req, cut=stopped))
        await fake.wait_for_requests_async(1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await llm.close()
        fake.reset()
    [cut] = stopped
    assert (cut.model, cut.attempt, cut.estimated) == ("claude-haiku-4-5", 1, True)
    assert 100 <= cut.usage.input_tokens < 110 and cut.usage.output_tokens == 0


async def test_a_hung_server_is_a_retryable_timeout(fake: FakeAnthropic) -> None:
    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0, timeout=0.5), "k")
    try:
        fake.enqueue_hang()
        with pytest.raises(LLMError) as failed:
            await llm.complete(REQUEST)
    finally:
        await llm.close()
        fake.reset()
    assert failed.value.retryable and failed.value.reason == "timeout"


async def _no_sleep(_seconds: float) -> None:
    pass


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_answer_that_timed_out_is_billed_as_estimated(
    fake: FakeAnthropic, streamed: bool
) -> None:
    """The server took the request whole and never answered: the read timed out, each of the
    two attempts. The API bills a request it took, so each is in `cut`, its input estimated
    from the request's text by the one estimate rule, nothing of the output guessed, marked
    so (a stream that never began too)."""
    config = LLMConfig(base_url=fake.base_url, retries=1, timeout=0.5)
    llm = AnthropicLLM(config, "k", sleep=_no_sleep)
    timed_out: list[CutAttempt] = []

    async def on_text(_text: str) -> None:
        pass

    fake.reset()
    try:
        fake.enqueue_hang()
        fake.enqueue_hang()
        with pytest.raises(LLMError) as failed:
            await llm.complete(REQUEST, on_text if streamed else None, cut=timed_out)
        sent = [r["body"] for r in fake.requests]
    finally:
        await llm.close()
        fake.reset()
    assert failed.value.reason == "timeout" and len(sent) == 2
    assert [(c.attempt, c.estimated, c.usage.output_tokens) for c in timed_out] == [
        (1, True, 0),
        (2, True, 0),
    ]
    assert [c.usage.input_tokens for c in timed_out] == [tokens_in(prompt_chars(sent[0]))] * 2


async def test_a_connect_timeout_is_not_billed() -> None:
    """The connection never opened: nothing reached the server, so nothing is in `cut`."""
    unsent: list[CutAttempt] = []
    with full_listener() as url:
        llm = AnthropicLLM(LLMConfig(base_url=url, retries=0, timeout=0.5), "k")
        try:
            with pytest.raises(LLMError) as failed:
                await llm.complete(REQUEST, cut=unsent)
        finally:
            await llm.close()
    assert failed.value.reason == "timeout" and unsent == []


async def test_bedrock_without_its_extra_names_the_extra() -> None:
    import importlib.util

    from agentd.config.models import ProviderConfig

    if importlib.util.find_spec("botocore") is not None:
        pytest.skip("botocore is installed here")
    with pytest.raises(LLMError, match=r"agentd\[bedrock\]"):
        AnthropicLLM(LLMConfig(), None, provider=ProviderConfig(kind="bedrock", region="us-east-1"))


async def test_a_stream_stopped_before_its_first_event_is_billed_as_estimated(
    fake: FakeAnthropic,
) -> None:
    """Stopped (a cancel) while the API works on a streamed answer, before any of it came: the
    request was taken, so billed, as a call not streamed is; the caller gets the attempt, its
    input estimated from the request's text, nothing of the output guessed, marked so."""
    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "k")
    stopped: list[CutAttempt] = []

    async def on_text(_text: str) -> None:
        pass

    fake.reset()
    try:
        fake.enqueue_hang()
        call = asyncio.create_task(llm.complete(REQUEST, on_text, cut=stopped))
        [sent] = await fake.wait_for_requests_async(1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        await llm.close()
        fake.reset()
    assert sent["body"]["stream"] is True
    [cut] = stopped
    assert (cut.model, cut.attempt, cut.estimated) == ("claude-haiku-4-5", 1, True)
    assert cut.usage.input_tokens == tokens_in(prompt_chars(sent["body"])) > 10
    assert cut.usage.output_tokens == 0


ERROR_EVENT = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


@pytest.mark.parametrize(
    ("answer", "billed"),
    [
        ({"events": []}, True),  # a 200, then the body ended: the API had begun
        ({"events": [], "drop": True}, True),  # a 200, then the connection cut
        ({"events": [{"type": "ping"}], "drop": True}, True),
        ({"events": [ERROR_EVENT]}, False),  # the API said it failed: nothing billed
    ],
)
async def test_a_stream_that_ends_before_its_first_event_is_billed_when_the_api_took_it(
    fake: FakeAnthropic, answer: dict[str, Any], billed: bool
) -> None:
    """A streamed answer that came (200) and ended before message_start, broken or cut: the
    API took the request, so the attempt is in `cut` by estimate; one whose first event was
    the API's error is not (nor an HTTP error, test_errors_keep_status_and_retryability)."""
    from tests.fakes.anthropic import RawStream

    async def on_text(_text: str) -> None:
        pass

    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "k")
    broken: list[CutAttempt] = []
    fake.reset()
    try:
        fake.enqueue(RawStream(**answer))
        with pytest.raises(LLMError):
            await llm.complete(REQUEST, on_text, cut=broken)
        [sent] = fake.requests
    finally:
        await llm.close()
        fake.reset()
    if not billed:
        assert broken == []
        return
    [cut] = broken
    assert (cut.attempt, cut.estimated, cut.usage.output_tokens) == (1, True, 0)
    assert cut.usage.input_tokens == tokens_in(prompt_chars(sent["body"]))


@pytest.mark.parametrize("case", ["rate_limited", "overloaded", "dropped"])
async def test_a_stream_the_api_refused_is_not_billed(fake: FakeAnthropic, case: str) -> None:
    """An HTTP error in place of a streamed answer, or a connection cut before any answer: the
    API began nothing, so nothing is in `cut`."""
    enqueue = ERRORS[case][0]

    async def on_text(_text: str) -> None:
        pass

    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "k")
    refused: list[CutAttempt] = []
    try:
        enqueue(fake)
        with pytest.raises(LLMError):
            await llm.complete(REQUEST, on_text, cut=refused)
    finally:
        await llm.close()
        fake.reset()
    assert refused == []
