"""Text longer than one message leaves in parts, each part its own journaled send step: the
channel refuses one message over its limit for good, and the user would see nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from agentd.chat.delivery import deliver_text
from agentd.chat.notice import NoticeInput, make_notice_workflow
from agentd.chat.outbox import Button
from agentd.db import Database
from agentd.durable import Engine, FakeClock, Step, Workflow, store, workflow
from tests.outboxes import LimitedOutbox

LINES = [f"• line number {n}, with enough words to make the whole text long" for n in range(12)]
LONG = "\n\n".join(LINES)


class Out(BaseModel):
    message_id: int


def saying(outbox: Any, db: Database, text: str) -> Workflow[Out, Out]:
    async def finish(chunk: str) -> str:
        return chunk.replace("line", "LINE")

    @workflow("say")
    async def say(step: Step, inp: Out) -> Out:
        buttons = [[Button(text="Cancel", data="x")]]
        first = await deliver_text(
            step, db, "send", outbox, 7, text, reply_to=3, buttons=buttons, finish=finish
        )
        return Out(message_id=first)

    return say


async def run_one(db: Database, wf: Workflow[Any, Any], inp: BaseModel, iid: str) -> Any:
    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    engine.register(wf)
    await engine.run()
    try:
        await engine.start(wf.name, inp, instance_id=iid)
        return await engine.wait_for(iid)
    finally:
        await engine.shutdown(2)


async def test_each_part_is_a_send_step_answering_first_with_the_buttons_last(
    db: Database,
) -> None:
    outbox = LimitedOutbox()
    done = await run_one(db, saying(outbox, db, LONG), Out(message_id=0), "say-1")
    assert done.status == "complete", done.error
    n = len(outbox.sent)
    assert n > 1
    assert "\n".join(m["text"] for m in outbox.sent).count("LINE number") == len(LINES)
    assert [m["reply_to"] for m in outbox.sent] == [3] + [None] * (n - 1)
    assert [bool(m["buttons"]) for m in outbox.sent] == [False] * (n - 1) + [True]
    journal = await db.read(store.load_steps, "say-1")
    assert [s.name for s in journal.values()] == ["send"] + [f"send#{i}" for i in range(2, n + 1)]
    assert Out.model_validate_json(done.output).message_id == 1


async def test_a_crash_during_a_part_resends_that_part_alone(db: Database) -> None:
    """Each part is its own marked step: after a crash in the middle of the second, the
    restart sends the second again (counted as a possible duplicate) and not the first."""

    class Stuck(LimitedOutbox):
        def __init__(self) -> None:
            super().__init__()
            self.reached = asyncio.Event()

        async def send_text(self, chat_id: int, markdown: str, **kw: Any) -> int:
            if len(self.sent) == 1:
                self.reached.set()
                await asyncio.Event().wait()  # the process dies here
            return await super().send_text(chat_id, markdown, **kw)

    stuck = Stuck()
    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    engine.register(saying(stuck, db, LONG))
    await engine.run()
    await engine.start("say", Out(message_id=0), instance_id="say-2")
    await stuck.reached.wait()
    await engine.shutdown(grace=0)  # like a crash in the middle of the second part
    assert len(stuck.sent) == 1

    outbox = LimitedOutbox()
    engine2 = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    engine2.register(saying(outbox, db, LONG))
    await engine2.run()
    try:
        done = await engine2.wait_for("say-2")
    finally:
        await engine2.shutdown(2)
    assert done.status == "complete", done.error
    parts = [m["text"] for m in stuck.sent + outbox.sent]
    assert len(parts) == len(set(parts))  # no part twice
    assert "\n".join(parts).count("LINE number") == len(LINES)
    counted = await db.read(
        lambda c: c.execute("SELECT detail FROM audit WHERE kind = 'send_uncertain'").fetchall()
    )
    assert len(counted) == 1 and "send#2" in counted[0][0]


async def test_a_long_notice_arrives_whole(db: Database) -> None:
    outbox = LimitedOutbox()
    wf = make_notice_workflow(db, outbox)  # type: ignore[arg-type]
    done = await run_one(db, wf, NoticeInput(chat_id=7, text=LONG), "notice-long")
    assert done.status == "complete", done.error
    assert len(outbox.sent) > 1
    assert all(line in "\n".join(m["text"] for m in outbox.sent) for line in LINES)
