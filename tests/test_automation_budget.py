"""An automation's `step.llm` and the [limits] daily budgets when no owner is configured: the
per-user budget holds what the automations spent, not everyone's tokens (another user's turns
must not stop them, nor theirs go uncounted), through the real engine and runtime."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentd.automations.api import AutoStep, workflow
from agentd.automations.catalog import Catalog
from agentd.automations.runtime import Runtime
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Engine, FakeClock
from agentd.llm.types import CutAttempt, LLMRequest, LLMResponse, ToolUseBlock, Usage

PAIRED = 43  # a user who paired: served, but not the owner (there is none)


class Text(BaseModel):
    text: str = ""


class Verdict(BaseModel):
    verdict: str


class AnsweringLLM:
    """Answers every structured call at once, 100 tokens each."""

    model = "claude-haiku-4-5"

    def __init__(self) -> None:
        self.asked = 0

    async def complete(
        self, req: LLMRequest, on_text: Any = None, *, cut: list[CutAttempt] | None = None
    ) -> LLMResponse:
        self.asked += 1
        use = ToolUseBlock(id="toolu_a", name=req.tool_choice or "", input={"verdict": "ok"})
        return LLMResponse(
            model=self.model, content=[use], usage=Usage(input_tokens=90, output_tokens=10)
        )

    async def close(self) -> None:
        pass


@workflow("judge", input=Text, output=Verdict, version="1")
async def judge(step: AutoStep, inp: Text) -> Verdict:
    return await step.llm("judge", inp.text, output=Verdict)


class Rig:
    def __init__(self, db: Database, engine: Engine, runtime: Runtime, llm: AnsweringLLM) -> None:
        self.db, self.engine, self.runtime, self.llm = db, engine, runtime, llm
        self.runs = 0

    async def spent(self, tokens: int, *, user_id: int | None, purpose: str) -> None:
        """Today's tokens in the ledger, as earlier calls would have left them."""
        await self.db.write(
            lambda c: c.execute(
                "INSERT INTO llm_usage (at, chat_id, user_id, purpose, model, input_tokens, "
                "output_tokens) VALUES (?, ?, ?, ?, 'm', ?, 0)",
                (time.time(), user_id, user_id, purpose, tokens),
            )
        )

    async def run(self) -> Any:
        self.runs += 1
        iid = f"judge-{self.runs}"
        await self.runtime.start("judge", {"text": "judge this"}, instance_id=iid, source="test")
        return await self.engine.wait_for(iid, timeout=30)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    config = Config(
        storage={"path": str(tmp_path / "agentd.db")},  # type: ignore[arg-type]
        limits={"daily_tokens": 1000, "daily_tokens_total": 100_000},  # type: ignore[arg-type]
    )
    assert config.access.owner_id is None and not config.access.allowed_user_ids
    db = await Database.open(tmp_path / "agentd.db")
    clock = FakeClock(start=time.time())
    catalog = Catalog()
    catalog.add(judge)
    llm = AnsweringLLM()
    runtime = Runtime(
        config=config,
        db=db,
        clock=clock,
        catalog=catalog,
        outbox=None,  # type: ignore[arg-type]
        llm=llm,
        kick=lambda _: None,
    )
    engine = Engine(db, clock=clock, poll_interval=0.02)
    for wf in runtime.workflows():
        engine.register(wf)
    runtime.kick = engine.kick
    await engine.run()
    try:
        yield Rig(db, engine, runtime, llm)
    finally:
        await engine.shutdown()
        await db.close()


async def test_another_users_turns_do_not_spend_an_ownerless_automations_budget(
    rig: Rig,
) -> None:
    """A paired user's turns spent 5,000 tokens today, past the 1,000 per user: theirs, not
    the automation's. Its call is made, and counted as nobody's."""
    await rig.spent(5000, user_id=PAIRED, purpose="turn")
    inst = await rig.run()
    assert inst.status == "complete", inst.error
    assert rig.llm.asked == 1
    rows = await rig.db.fetchall(
        "SELECT purpose, user_id, chat_id, input_tokens + output_tokens FROM llm_usage "
        "WHERE purpose = 'automation'"
    )
    assert [tuple(r) for r in rows] == [("automation", None, None, 100)]


async def test_an_ownerless_automation_stops_at_the_budget_its_own_calls_spent(
    rig: Rig,
) -> None:
    """The automations' own calls spent the 1,000 tokens a user may spend today: the next
    call is not made, and the run fails saying which budget."""
    await rig.spent(1000, user_id=None, purpose="automation")
    inst = await rig.run()
    assert inst.status == "errored"
    assert "daily token budget ([limits] daily_tokens) is spent" in (inst.error or "")
    assert rig.llm.asked == 0
