"""`/reminders` in a chat: the user's schedules with a Cancel button each (no model call)."""

from __future__ import annotations

import re
import time
from typing import Any

from agentd.chat.command import ChatCommand, CommandInput, CommandReply
from agentd.chat.inputs import CallbackPress
from agentd.chat.names import chat_actor
from agentd.chat.outbox import Button
from agentd.db import Database
from agentd.schedule import store
from agentd.schedule.create import summary

CALLBACK_PREFIX = "sc"
MAX_BUTTONS = 20
_CANCEL = re.compile(r"^sc:([a-z0-9]{1,40}):x$")


def cancel_data(schedule_id: str) -> str:
    return f"{CALLBACK_PREFIX}:{schedule_id}:x"


async def list_reminders(db: Database, inp: CommandInput) -> CommandReply:
    found = await db.read(store.list_schedules, user_id=inp.user_id)
    if not inp.private:  # every member reads the list: only what was set up here (as the tool)
        found = [s for s in found if s.chat_id == inp.chat_id]
        if not found:
            return CommandReply(
                text="No reminders were set up in this group. Ask me /reminders in our "
                "private chat for yours."
            )
    if not found:
        return CommandReply(
            text="You have no reminders or recurring tasks. Ask me to set one up, "
            "e.g. “remind me at 9 to call Anna”."
        )
    lines = ["Your reminders and recurring tasks:", *(f"• {summary(s)}" for s in found)]
    buttons = [[Button(text=f"Cancel {s.id}", data=cancel_data(s.id))] for s in found[:MAX_BUTTONS]]
    return CommandReply(text="\n".join(lines), buttons=buttons)


def press_cancel(conn: Any, press: CallbackPress) -> str:
    """A Cancel button: only the schedule's owner can use it, and only once."""
    match = _CANCEL.match(press.data)
    if match is None:
        return "This button is not recognised."
    try:
        sched = store.get(conn, match[1], user_id=press.user_id)
    except store.NotFound:
        return "That reminder does not exist (or is not yours)."
    if sched.state in ("done", "cancelled"):
        return f"That reminder is already {sched.state}."
    store.set_state(conn, sched, "cancelled", time.time(), by=chat_actor(press.user_id))
    return f"Cancelled {sched.id}."


def command(db: Database) -> ChatCommand:
    """/reminders, listing the user's schedules with Cancel buttons (`press_cancel`)."""

    async def reminders(inp: CommandInput) -> CommandReply:
        return await list_reminders(db, inp)

    return ChatCommand(
        "reminders", reminders, "your reminders and recurring tasks, with Cancel buttons"
    )
