"""A call not streamed whose server closed the connection without an answer, its request sent
whole, is in the ledger as a read timeout is: the server had the request and may bill it, so
each attempt has its row, its input estimated from the request's text, marked so. A connection
refused reached no server and has none. Through the real SDK clients, against the fakes, the
rows as agentd writes them (llm/billing.py)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agentd.config import LLMConfig
from agentd.config.models import ProviderConfig
from agentd.db import Database
from agentd.ledger import usage
from agentd.llm.anthropic_adapter import AnthropicLLM
from agentd.llm.billing import Billed
from agentd.llm.cut import prompt_chars
from agentd.llm.estimate import tokens_in
from agentd.llm.openai_adapter import OpenAILLM
from agentd.llm.types import LLMError, LLMRequest, Message
from tests.fakes import FakeAnthropic
from tests.fakes.anthropic import Drop
from tests.fakes.openai_chat import ChatFault, FakeChat

REQUEST = LLMRequest(messages=[Message(role="user", content="x" * 400)], purpose="summary")
ROWS = "SELECT attempt, model, input_tokens, output_tokens, estimated FROM llm_usage ORDER BY id"


async def _no_sleep(_seconds: float) -> None:
    pass


@contextmanager
def closed_port() -> Iterator[str]:
    """A base URL whose port is bound and not listening: a connection to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


def _anthropic(base_url: str) -> AnthropicLLM:
    return AnthropicLLM(LLMConfig(base_url=base_url, retries=1), "k", sleep=_no_sleep)


def _openai(base_url: str) -> OpenAILLM:
    settings = ProviderConfig(kind="openai", base_url=base_url + "/v1", local=True)
    return OpenAILLM(LLMConfig(retries=1, model="m"), "", settings, "local", sleep=_no_sleep)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "a.db")
    yield database
    await database.close()


async def _ask(db: Database, llm: Any) -> LLMError:
    """The call through `Billed`, as a structured call makes it; the error it ended with."""
    row = partial(usage.record, purpose="summary", user_id=5)
    try:
        with pytest.raises(LLMError) as failed:
            await Billed(llm, db, row).complete(REQUEST)
    finally:
        await llm.close()
    return failed.value


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_an_answer_whose_connection_closed_is_in_the_ledger_each_attempt(
    db: Database, provider: str, reset: bool
) -> None:
    """The server read each of the two attempts' requests whole, then closed the connection
    without answering (or reset it): each attempt has its row, its input estimated from the
    text it sent, no output guessed, marked so."""
    if provider == "anthropic":
        with FakeAnthropic.running() as fake:
            fake.enqueue(Drop(reset=reset), Drop(reset=reset))
            failed = await _ask(db, _anthropic(fake.base_url))
            sent = [r["body"] for r in fake.requests]
        model = "claude-haiku-4-5"
    else:
        with FakeChat.running() as chat:
            fault = ChatFault("reset" if reset else "drop")
            chat.enqueue(fault, fault)
            failed = await _ask(db, _openai(chat.base_url))
            sent = [r["body"] for r in chat.requests]
        model = "local/m"
    assert failed.reason == "unreachable" and len(sent) == 2
    estimate = tokens_in(prompt_chars(sent[0]))
    assert estimate > 100
    rows = [tuple(r) for r in await db.fetchall(ROWS)]
    assert rows == [(1, model, estimate, 0, 1), (2, model, estimate, 0, 1)]


@pytest.mark.parametrize("make", [_anthropic, _openai], ids=["anthropic", "openai"])
async def test_a_refused_connection_is_not_in_the_ledger(db: Database, make: Any) -> None:
    """Nothing listens on the port: no request reached a server, so no attempt has a row."""
    with closed_port() as url:
        failed = await _ask(db, make(url))
    assert failed.reason == "unreachable"
    assert await db.fetchall(ROWS) == []
