"""The command router: which messages are commands, callback dispatch by prefix, intake routing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentd.agent.inputs import CallbackPress, TurnInput
from agentd.db import Database, open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations
from agentd.durable import Engine
from agentd.telegram.classify import Identity
from agentd.telegram.commands import COMMAND_WORKFLOW, CommandInput, CommandReply, CommandRouter
from agentd.telegram.intake import persist_updates


async def _reply(inp: CommandInput) -> CommandReply:
    return CommandReply(text=f"{inp.name}:{inp.args}")


def router() -> CommandRouter:
    r = CommandRouter(bot_username="agentd_bot")
    r.command("reminders", _reply)
    r.callback("ap", lambda conn, press: "approval")
    r.callback("sc", lambda conn, press: "schedule")
    return r


def turn(text: str, **kw: Any) -> TurnInput:
    return TurnInput(update_id=1, chat_id=5, user_id=5, message_id=9, date=0.0, kind="text",
                     text=text, **kw)  # fmt: skip


def test_only_registered_commands_addressed_to_us_are_commands() -> None:
    r = router()
    assert r.parse(turn("/reminders")) == CommandInput(
        name="reminders", chat_id=5, user_id=5, message_id=9)  # fmt: skip
    assert r.parse(turn("/reminders@AgentD_bot all")).args == "all"  # type: ignore[union-attr]
    assert r.parse(turn("/reminders@other_bot")) is None
    assert r.parse(turn("/help")) is None  # not registered: the model answers it
    assert r.parse(turn("please /reminders")) is None
    assert r.parse(turn("/reminders", edited=True)) is None


def test_callbacks_dispatch_by_prefix() -> None:
    r = router()
    press = CallbackPress(update_id=1, callback_id="c", user_id=5, chat_id=5, data="sc:abc:x")
    assert r.on_callback(None, press) == "schedule"
    assert r.on_callback(None, press.model_copy(update={"data": "ap:xyz:y"})) == "approval"


async def test_intake_starts_the_command_workflow_not_a_turn(db: Database) -> None:
    r = router()
    engine = Engine(db)
    engine.register(r.workflow(outbox=None))  # type: ignore[arg-type]
    update = {"update_id": 7, "message": {"message_id": 3, "date": 0, "text": "/reminders",
              "chat": {"id": 5, "type": "private"}, "from": {"id": 5, "is_bot": False,
                                                              "first_name": "A"}}}  # fmt: skip
    me = Identity(bot_id=1, bot_username="agentd_bot", allowed_user_ids=frozenset({5}))
    await db.write(persist_updates, [update], me, engine, r.on_callback, r.route)
    rows = await db.read(lambda c: c.execute("SELECT id, workflow FROM workflow_instances")
                         .fetchall())  # fmt: skip
    assert [tuple(x) for x in rows] == [("tg-update-7", COMMAND_WORKFLOW)]


def test_schedules_migration_upgrades_an_older_database(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m007_schedules")])
    assert "m007_schedules" in apply_migrations(conn)
    conn.execute("SELECT id, state, next_run FROM schedules").fetchall()
    conn.execute("SELECT schedule_id, due, outcome FROM schedule_runs").fetchall()
    assert apply_migrations(conn) == []
