"""A model call's row in the ledger is dated by the engine's clock, the one the [limits]
budgets read: under a clock that is not the wall's (a test rig's), a call's tokens count to
the day the budget asks about, not to today."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.config import Config, LLMConfig
from agentd.db import Database
from agentd.durable import FakeClock
from agentd.llm.anthropic_adapter import AnthropicLLM
from agentd.memory import HashingEmbedder
from agentd.memory.summarise import (
    BlockMessage,
    BudgetSpent,
    SummaryDeps,
    SummaryInput,
    summarise_block,
)
from tests.fakes import FakeAnthropic

# 2100-01-01 UTC, a day after today: a row dated by the wall would be before the day the
# budget counts, so not in it.
AHEAD = 4_102_444_800.0
SUMMARY = {"summary": "The user likes tea.", "facts": [], "retract_keys": []}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic.running() as server:
        yield server


def costly_summary(body: dict[str, Any]) -> Any:
    use = {"type": "tool_use", "id": "toolu_s", "name": "record_summary", "input": SUMMARY}
    return {"content": [use], "usage": {"input_tokens": 4500, "output_tokens": 500}}


async def test_a_summarys_tokens_count_to_the_day_its_clock_reads(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    """The first summary costs 5,000 tokens, past the 1,000-token budget: its row is dated by
    the engine's clock, so the next try, asking the budget on that clock, is refused, not
    made."""
    fake.set_responder(costly_summary)
    config = Config(limits={"daily_tokens": 1000})  # type: ignore[arg-type]
    clock = FakeClock(AHEAD)
    db = await Database.open(tmp_path / "a.db")
    llm = AnthropicLLM(LLMConfig(base_url=fake.base_url, retries=0), "k")
    deps = SummaryDeps(config=config, db=db, llm=llm, embedder=HashingEmbedder(), clock=clock)
    block = [BlockMessage(id=1, role="user", content="I like tea", created_at=AHEAD)]
    inp = SummaryInput(chat_id=5, user_id=5, up_to_id=1)
    try:
        first = await summarise_block(deps, inp, block, "i1")
        assert first.summary == SUMMARY["summary"]
        clock.advance(60)
        with pytest.raises(BudgetSpent):
            await summarise_block(deps, inp, block, "i1")
        rows = await db.read(
            lambda c: c.execute("SELECT at, input_tokens + output_tokens FROM llm_usage").fetchall()
        )
    finally:
        await llm.close()
        await db.close()
    assert [tuple(r) for r in rows] == [(AHEAD, 5000)]
    assert len(fake.requests) == 1
