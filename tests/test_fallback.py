"""Fallbacks and the circuit breaker, through the official SDKs against both fakes: Claude on the
fake Messages API first, a local model on the fake Chat Completions server behind it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from agentd.config import Config, LLMConfig
from agentd.config.models import BreakerPolicy, ModelSettings, ProviderConfig
from agentd.llm import create_llm
from agentd.llm.factory import build
from agentd.llm.fallback import FallbackLLM
from agentd.llm.types import LLMError, LLMRequest, Message, ToolSpec
from tests.fakes import FakeAnthropic
from tests.fakes.anthropic import ErrorReply
from tests.fakes.openai_chat import FakeChat

ASK = LLMRequest(messages=[Message(role="user", content="hello")])
TOOL = ToolSpec(name="weather", description="Weather", input_schema={"type": "object"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def claude() -> Iterator[FakeAnthropic]:
    with FakeAnthropic.running() as server:
        yield server


@pytest.fixture(scope="module")
def chat() -> Iterator[FakeChat]:
    with FakeChat.running() as server:
        yield server


def _config(claude: FakeAnthropic, **llm: Any) -> Config:
    config = Config(llm=LLMConfig(base_url=claude.base_url, retry_base_delay=0.01, **llm))
    config.secrets.anthropic_api_key = SecretStr("sk-ant-test")
    return config


def _settings(chat: FakeChat, fallbacks: list[str], **extra: Any) -> ModelSettings:
    local = ProviderConfig(kind="openai", base_url=chat.base_url + "/v1", local=True)
    providers = {"local": local.model_copy(update=extra.pop("local", {}))}
    return ModelSettings(
        fallbacks=fallbacks,
        providers=providers,
        breaker=BreakerPolicy(failures=2, interval=60, retries_before_fallback=1),
        **extra,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def chain(claude: FakeAnthropic, chat: FakeChat, clock: Clock) -> AsyncIterator[FallbackLLM]:
    llm = build(_config(claude), _settings(chat, ["local/qwen2.5:7b"]), clock=clock)
    yield llm
    await llm.close()
    claude.reset()
    chat.reset()


def _overloaded(_body: dict[str, Any]) -> ErrorReply:
    return ErrorReply(529, "overloaded_error", "Overloaded")


async def test_an_overload_storm_costs_a_few_calls_not_one_per_turn(
    claude: FakeAnthropic, chat: FakeChat, chain: FallbackLLM
) -> None:
    claude.set_responder(_overloaded)
    answers = [await chain.complete(ASK) for _ in range(10)]
    assert {a.label for a in answers} == {"local/qwen2.5:7b"}
    assert [a.text for a in answers] == ["echo: hello"] * 10
    assert answers[0].fallback_reason == "overloaded"
    assert answers[-1].fallback_reason == "breaker_open:overloaded"
    # Two failed calls open the breaker, each tried twice (retries_before_fallback = 1).
    assert len(claude.requests) == 4
    assert len(chat.requests) == 10
    assert chain.status()[0]["state"] == "open"


async def test_the_breaker_half_opens_after_its_interval_and_closes_on_success(
    claude: FakeAnthropic, chat: FakeChat, chain: FallbackLLM, clock: Clock
) -> None:
    claude.set_responder(_overloaded)
    for _ in range(3):
        await chain.complete(ASK)
    assert len(claude.requests) == 4
    clock.now += 61  # half-open: one probe, which fails, and the wait doubles
    probe = await chain.complete(ASK)
    assert probe.label == "local/qwen2.5:7b" and len(claude.requests) == 6
    clock.now += 61
    assert chain.status()[0]["state"] == "open"  # 120 s now, not 60
    claude.set_responder(None)  # the primary is back
    clock.now += 60
    back = await chain.complete(ASK)
    assert back.label == "claude-haiku-4-5" and back.fallback_reason is None
    assert chain.status()[0]["state"] == "closed"


async def test_limits_and_unreachable_servers_fall_back_too(
    claude: FakeAnthropic, chat: FakeChat, chain: FallbackLLM
) -> None:
    claude.enqueue_error(429, "enforced_spend_limit_reached_error", "Spend limit")
    assert (await chain.complete(ASK)).fallback_reason == "billing"  # not retried: no wait helps
    assert len(claude.requests) == 1
    claude.enqueue_drop()
    claude.enqueue_drop()
    assert (await chain.complete(ASK)).fallback_reason == "unreachable"


async def test_a_bad_request_is_not_hidden_by_a_fallback(
    claude: FakeAnthropic, chat: FakeChat, chain: FallbackLLM
) -> None:
    claude.enqueue_error(400, message="messages: too long")
    with pytest.raises(LLMError) as failed:
        await chain.complete(ASK)
    assert failed.value.reason == "bad_request" and chat.requests == []


async def test_a_pinned_model_is_asked_first(claude: FakeAnthropic, chain: FallbackLLM) -> None:
    answer = await chain.complete(ASK.model_copy(update={"model": "local/qwen2.5:7b"}))
    assert answer.label == "local/qwen2.5:7b" and answer.fallback_reason is None
    assert claude.requests == []
    with pytest.raises(LLMError, match="not configured any more"):
        await chain.complete(ASK.model_copy(update={"model": "gone/model"}))


async def test_a_model_without_tools_is_passed_for_one_that_has_them(
    claude: FakeAnthropic, chat: FakeChat, clock: Clock
) -> None:
    settings = _settings(
        chat, ["claude-haiku-4-5"], local={"tools": False}, models={"turn": "local/gemma"}
    )
    llm = build(_config(claude), settings, clock=clock)
    try:
        answer = await llm.complete(ASK.model_copy(update={"tools": [TOOL]}))
        plain = await llm.complete(ASK)
        sent = chat.requests
    finally:
        await llm.close()
        claude.reset()
        chat.reset()
    assert answer.label == "claude-haiku-4-5" and answer.fallback_reason == "unsupported"
    assert plain.label == "local/gemma" and plain.fallback_reason is None
    assert [r["body"].get("tools") for r in sent] == [None]  # the tool request never reached it


async def test_each_purpose_has_its_chain(claude: FakeAnthropic, chat: FakeChat) -> None:
    settings = _settings(chat, [], models={"summary": "local/qwen2.5:7b"})
    llm = create_llm(_config(claude), settings)
    try:
        turn = await llm.complete(ASK)
        summary = await llm.complete(ASK.model_copy(update={"purpose": "summary"}))
    finally:
        await llm.close()
        claude.reset()
        chat.reset()
    assert (turn.provider, turn.model) == ("anthropic", "claude-haiku-4-5")
    assert (summary.provider, summary.model) == ("local", "qwen2.5:7b")


def test_settings_name_models_by_provider() -> None:
    settings = ModelSettings(providers={"ollama": ProviderConfig(base_url="http://x/v1")})
    assert settings.ref("ollama/llama3.2:3b").label == "ollama/llama3.2:3b"
    assert settings.ref("ollama/llama3.2:3b").model == "llama3.2:3b"
    assert settings.ref("claude-sonnet-4-5").provider == "anthropic"
    with pytest.raises(ValueError, match="unknown purpose"):
        ModelSettings(models={"chat": "x"})
    with pytest.raises(ValueError, match="names no provider 'olama'"):
        ModelSettings(fallbacks=["olama/llama3.2"])


def test_a_local_model_costs_nothing_and_says_so() -> None:
    from agentd.ledger.pricing import Tokens, cost, price_for
    from agentd.llm.pricing import price_note, provider_prices

    settings = ModelSettings(
        providers={
            "local": ProviderConfig(base_url="http://127.0.0.1:11434/v1", local=True),
            "hosted": ProviderConfig(base_url="https://example.org/v1"),
        }
    )
    overrides = provider_prices(settings)
    spent = Tokens(input_tokens=10_000, output_tokens=2_000)
    assert cost(spent, price_for("local/qwen2.5:7b", overrides)) == 0
    assert cost(spent, price_for("claude-haiku-4-5", overrides)) > 0
    assert price_note("local/qwen2.5:7b", settings) == "local: costs 0"
    assert price_note("hosted/gpt-x", settings).startswith("price unknown")
    assert price_note("claude-haiku-4-5", settings) == "list price"


async def test_every_model_is_described_and_tried_once(
    claude: FakeAnthropic, chat: FakeChat
) -> None:
    from agentd.llm.probe import probe

    local = ProviderConfig(kind="openai", base_url=chat.base_url + "/v1", local=True)
    settings = ModelSettings(
        fallbacks=["local/qwen2.5:7b", "broken/x"],
        models={"summary": "local/qwen2.5:7b"},
        providers={"local": local, "broken": ProviderConfig(base_url="http://127.0.0.1:9/v1")},
    )
    llm = build(_config(claude), settings)
    try:
        checks = {c.model: c for c in await probe(llm, settings, timeout=10)}
    finally:
        await llm.close()
        claude.reset()
        chat.reset()
    assert checks["claude-haiku-4-5"].ok and checks["claude-haiku-4-5"].price == "list price"
    local = checks["local/qwen2.5:7b"]
    assert local.ok and local.price == "local: costs 0" and "summary" in local.purposes
    broken = checks["broken/x"]
    assert broken.ok is False and "unreachable" in (broken.problem or "")
