"""Automations reach the owner where notices do (chat/reach.py: the channel `[access] notices`
names, else where they last wrote), not at their user id taken as a chat (Telegram's
private-chat rule): `step.send`, `step.ask_owner` and a webhook's prompt turn. Each choice is
its own journaled step (`NAME:to`); an instance journaled by the code from before
(tests/data/reach_journal/before.json, made by record.py there) replays the path it took."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentd.automations import runs
from agentd.automations.catalog import Catalog
from agentd.automations.hooks import HookServer
from agentd.automations.runtime import Runtime
from agentd.chat import reach
from agentd.chat.channel import block_start
from agentd.chat.outbox import SendDelayed
from agentd.config import AccessConfig, Config, HookConfig, HooksConfig
from agentd.db import Database
from agentd.durable import Engine, FakeClock, StartResult, store
from tests.reach_flow import reach_flow
from tests.test_hooks import SECRET, post, sign

OWNER = 42  # the owner's Telegram account: its private chat has the same id
MATRIX_CHAT = block_start(1) + 7  # the owner's private room on Matrix
BEFORE = Path(__file__).parent / "data" / "reach_journal" / "before.json"
OLD = "reach-before"


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []
        self.edits: list[tuple[int, int]] = []

    def split(self, markdown: str) -> list[str]:
        return [markdown] if markdown.strip() else []  # no length limit here

    async def send_text(self, chat_id: int, text: str, **_: Any) -> int:
        self.sent.append((chat_id, text.split("\n")[0]))
        return 100 + len(self.sent)

    async def edit_text(self, chat_id: int, message_id: int, text: str, **_: Any) -> None:
        self.edits.append((chat_id, message_id))


class OutageOnce(Outbox):
    """The question meets an outage once (the channel's own retries spent), then goes."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    async def send_text(self, chat_id: int, text: str, **kw: Any) -> int:
        if text.startswith("Go on?") and not self.refused:
            self.refused += 1
            raise SendDelayed("502 Bad Gateway, after the channel's retries")
        return await super().send_text(chat_id, text, **kw)


class Rig:
    def __init__(self, db: Database, notices: str = "", outbox: Outbox | None = None) -> None:
        self.db, self.outbox, self.clock = db, outbox or Outbox(), FakeClock()
        self.engine = Engine(db, clock=self.clock, poll_interval=0.02)
        catalog = Catalog()
        catalog.add(reach_flow)
        access = AccessConfig(owner_id=OWNER, allowed_user_ids=[OWNER], notices=notices)
        self.runtime = Runtime(
            config=Config(access=access),
            db=db,
            clock=self.clock,
            catalog=catalog,
            outbox=self.outbox,  # type: ignore[arg-type]
            llm=None,
            kick=self.engine.kick,
        )
        for wf in self.runtime.workflows():
            self.engine.register(wf)

    async def answer(self, instance_id: str, choice: str) -> None:
        """Answer the question once the instance waits for it (as the owner's button does)."""
        for _ in range(1500):
            if (await self.db.read(store.get_instance, instance_id)).status == "waiting":
                break
            await asyncio.sleep(0.01)
        now = self.clock.now()
        await self.db.write(runs.signal, instance_id, "answer:q", {"choice": choice}, now)
        self.engine.kick(instance_id)

    async def steps(self, instance_id: str) -> list[str]:
        rows = await self.db.read(
            lambda c: c.execute(
                "SELECT name FROM workflow_steps WHERE instance_id = ? ORDER BY ordinal",
                (instance_id,),
            ).fetchall()
        )
        return [r[0] for r in rows]


def _insert(conn: Any, rows: dict[str, list[dict[str, Any]]]) -> None:
    for table, items in rows.items():
        for row in items:
            marks = ", ".join("?" for _ in row)
            conn.execute(
                f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", tuple(row.values())
            )


async def _owner_on_both(db: Database) -> None:
    """Known on Telegram (as the channel notes a configured user), last written on Matrix."""
    await db.write(reach.know_private_chat, OWNER, "telegram", OWNER)
    await db.write(reach.note_private_chat, OWNER, "matrix", MATRIX_CHAT, 1.0)


async def test_an_instance_journaled_before_goes_on_as_it_began(db: Database) -> None:
    before = json.loads(BEFORE.read_text())
    # What the old code did: both sends to the owner's user id, as a chat.
    assert tuple(before["sent"][0]) == (OWNER, "hello")
    assert before["sent"][1][0] == OWNER
    await db.write(_insert, before["rows"])
    await _owner_on_both(db)
    rig = Rig(db)
    await rig.engine.run()
    await rig.answer(OLD, "Yes")
    inst = await rig.engine.wait_for(OLD, timeout=30)
    await rig.engine.shutdown()
    assert inst.status == "complete", inst.error
    assert json.loads(inst.output or "{}") == {"choice": "Yes"}
    # The journaled steps replayed (nothing re-sent, no step inserted before them); the
    # question's outcome shows on the question, where it was asked; the send the old code
    # never reached takes the new path, to where the owner last wrote.
    assert await rig.steps(OLD) == [
        "greet",
        "q:question",
        "q:send",
        "q:wait",
        "q:show",
        "done:to",
        "done",
    ]
    assert rig.outbox.sent == [(MATRIX_CHAT, "chose Yes")]
    assert rig.outbox.edits == [(OWNER, 2)]


@pytest.mark.parametrize(("notices", "chat"), [("", MATRIX_CHAT), ("telegram", OWNER)])
async def test_a_new_instance_reaches_the_owner_where_notices_do(
    db: Database, notices: str, chat: int
) -> None:
    await _owner_on_both(db)
    rig = Rig(db, notices=notices)
    await rig.engine.run()
    await rig.runtime.start("reach_flow", {}, instance_id="reach-new", source="test")
    await rig.answer("reach-new", "No")
    inst = await rig.engine.wait_for("reach-new", timeout=30)
    await rig.engine.shutdown()
    assert inst.status == "complete", inst.error
    assert await rig.steps("reach-new") == [
        "greet:to",
        "greet",
        "q:to",
        "q:question",
        "q:send",
        "q:wait",
        "q:show",
        "done:to",
        "done",
    ]
    assert [c for c, _ in rig.outbox.sent] == [chat, chat, chat]
    assert [t for _, t in rig.outbox.sent] == ["hello", "Go on?", "chose No"]
    assert rig.outbox.edits == [(chat, 102)]


async def test_a_question_that_meets_an_outage_is_asked_once_it_ends(db: Database) -> None:
    """`step.ask_owner`'s question is tried again after an outage, as a reply is (it used to
    be given up: the owner never saw it and the run took the default when it timed out)."""
    await _owner_on_both(db)
    outbox = OutageOnce()
    rig = Rig(db, outbox=outbox)
    await rig.engine.run()
    await rig.runtime.start("reach_flow", {}, instance_id="reach-outage", source="test")
    for _ in range(1500):  # the first try refused: its retry waits 5 s of the rig's clock
        if outbox.refused:
            break
        await asyncio.sleep(0.01)
    rig.clock.advance(5.0)
    await rig.answer("reach-outage", "No")
    inst = await rig.engine.wait_for("reach-outage", timeout=30)
    await rig.engine.shutdown()
    assert inst.status == "complete", inst.error
    assert [t for _, t in outbox.sent] == ["hello", "Go on?", "chose No"]
    assert outbox.refused == 1


async def test_an_owner_no_channel_can_reach_is_told_in_the_error(db: Database) -> None:
    rig = Rig(db)
    await rig.engine.run()
    await rig.runtime.start("reach_flow", {}, instance_id="reach-nowhere", source="test")
    inst = await rig.engine.wait_for("reach-nowhere", timeout=30)
    await rig.engine.shutdown()
    assert inst.status == "errored" and "no private chat" in (inst.error or "")
    assert rig.outbox.sent == []


async def test_a_prompt_hook_s_turn_is_in_the_owner_s_reached_chat(
    db: Database, tmp_path: Path
) -> None:
    """The listener, over its socket, starts the turn where the owner last wrote (the turn
    itself is the engine's: here only what it is started with is kept)."""
    sock = tmp_path / "hooks.sock"
    route = HookConfig(prompt="A note:", secret_env="UNIT_SECRET")
    config = Config(
        access=AccessConfig(allowed_user_ids=[OWNER]),
        automations={
            "hooks": HooksConfig(enabled=True, listen=f"unix:{sock}", routes={"n": route})
        },  # type: ignore[arg-type]
    )
    started: list[tuple[str, Any]] = []

    async def start(workflow: str, inp: Any, *, instance_id: str, key: str) -> Any:
        started.append((workflow, inp))
        return StartResult(instance_id=instance_id, created=True)

    rig = Rig(db)
    server = HookServer(
        config, rig.runtime, start, rig.engine.poll_once, env={"UNIT_SECRET": SECRET}
    )
    await server.start()
    try:
        body = json.dumps({"note": "milk"}).encode()
        status, answer = await post(str(sock), "/hooks/n", body, {"X-Signature-256": sign(body)})
        assert status == 503 and "no private chat" in answer["error"]  # nowhere to reach yet
        await _owner_on_both(db)
        status, answer = await post(str(sock), "/hooks/n", body, {"X-Signature-256": sign(body)})
        assert status == 202, answer
    finally:
        await server.close()
    [(workflow, turn)] = started
    assert workflow == "turn"
    assert (turn.chat_id, turn.user_id, turn.chat_kind) == (MATRIX_CHAT, OWNER, "private")
