"""An at-most-once call cut short by a crash, through the real tool loop and durable engine:
a tool with `settle` answers for itself (step settle:<id>), a settle that fails falls back to the
plain "outcome unknown" notice, and a tool without one gets that notice; none is run again."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel

from agentd.agent.calls import UNKNOWN_OUTCOME
from agentd.agent.toolloop import handle_tool_use
from agentd.chat.inputs import TurnInput
from agentd.db import Database
from agentd.durable import Engine, FakeClock, Step, store, workflow
from agentd.llm.types import ToolUseBlock
from agentd.tools import Tool, ToolContext, ToolRegistry, ToolResult


class Args(BaseModel):
    what: str


class Out(BaseModel):
    ok: bool
    content: str


class Outbox:
    """Records what the user was sent; typing does nothing."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: int) -> AsyncIterator[None]:
        yield

    def split(self, markdown: str) -> list[str]:
        return [markdown] if markdown.strip() else []  # no length limit here

    async def send_text(self, chat_id: int, text: str, **_: Any) -> int:
        self.sent.append((chat_id, text))
        return len(self.sent)


async def _interrupted_call(
    db: Database, tmp_path: Path, settle: Any
) -> tuple[Out, Any, list[str]]:
    """Start the call, stop the engine while the tool runs (a crash), restart: what came out."""
    runs: Counter[str] = Counter()
    started = asyncio.Event()

    async def act(ctx: ToolContext, args: Args) -> str:
        runs[args.what] += 1
        started.set()
        await asyncio.Event().wait()  # never finishes: the crash comes first
        return "done"

    tool = Tool.from_model(name="act", description="Does a thing once.", args_model=Args, fn=act)
    tool = replace(tool, at_most_once=True, settle=settle)
    outbox = Outbox()
    deps = SimpleNamespace(
        registry=ToolRegistry([tool]),
        config=SimpleNamespace(agent=SimpleNamespace(timezone="UTC"), outgoing_dir=tmp_path),
        clock=FakeClock(auto_advance=True),
        redact=lambda text: text.replace("s3cret", "[REDACTED]"),
        outbox=outbox,
        db=db,  # the "outcome unknown" notice leaves by the one send path (chat/delivery.py)
    )
    inp = TurnInput(
        update_id=1, chat_id=7, chat_kind="private", user_id=7, message_id=1, date=0.0, kind="text"
    )
    use = ToolUseBlock(id="toolu_1", name="act", input={"what": "x"})

    @workflow("call")
    async def call(step: Step, _: Args) -> Out:
        outcome, _route = await handle_tool_use(step, deps, inp, use)  # type: ignore[arg-type]
        return Out(ok=outcome.ok, content=outcome.content)

    async def engine() -> Engine:
        e = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
        e.register(call)
        await e.run()
        return e

    first = await engine()
    await first.start("call", Args(what="x"), instance_id="i1")
    await asyncio.wait_for(started.wait(), 10)
    await first.shutdown(grace=0)  # like kill -9 in the middle of the call
    second = await engine()
    inst = await second.wait_for("i1")
    await second.shutdown()
    assert runs["x"] == 1  # never run again, whatever settles it
    journal = await db.read(store.load_steps, "i1")
    steps = [journal[n].name for n in sorted(journal)]
    return Out.model_validate_json(inst.output), outbox, steps


async def test_a_tool_that_settles_answers_for_itself(db: Database, tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    async def settle(ctx: ToolContext, args: Args) -> ToolResult:
        seen.append((ctx.tool_use_id, args.what))
        return ToolResult(content="It went before the crash (s3cret); not run again.")

    out, outbox, steps = await _interrupted_call(db, tmp_path, settle)
    assert seen == [("toolu_1", "x")]
    assert out.ok and out.content == "It went before the crash ([REDACTED]); not run again."
    assert "settle:toolu_1" in steps and "unknown:toolu_1" not in steps
    assert outbox.sent == []  # the model tells the user what settle found


async def test_a_settle_that_fails_falls_back_to_outcome_unknown(
    db: Database, tmp_path: Path
) -> None:
    async def settle(ctx: ToolContext, args: Args) -> ToolResult:
        raise OSError("the server is gone")

    out, outbox, steps = await _interrupted_call(db, tmp_path, settle)
    assert not out.ok and out.content.startswith(UNKNOWN_OUTCOME)
    assert steps.index("settle:toolu_1") < steps.index("unknown:toolu_1")
    assert len(outbox.sent) == 1 and "Outcome unknown" in outbox.sent[0][1]


async def test_without_settle_the_owner_is_told_outcome_unknown(
    db: Database, tmp_path: Path
) -> None:
    out, outbox, steps = await _interrupted_call(db, tmp_path, None)
    assert not out.ok and out.content.startswith(UNKNOWN_OUTCOME)
    assert "unknown:toolu_1" in steps and "settle:toolu_1" not in steps
    assert len(outbox.sent) == 1 and "`act` may or may not have run" in outbox.sent[0][1]
