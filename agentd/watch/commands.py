"""`/watches` (each watch with its counts and cost, and Pause / Resume / Remove buttons) and
`/mute` (watch messages to this chat wait): chat commands, no model call."""

from __future__ import annotations

import re
import time
from typing import Any

from agentd.access import owners
from agentd.chat.command import CallbackFn, ChatCommand, CommandInput, CommandReply
from agentd.chat.inputs import CallbackPress
from agentd.chat.names import chat_actor
from agentd.chat.outbox import Button
from agentd.config import Config
from agentd.db import Database
from agentd.schedule.create import local_iso
from agentd.schedule.recurrence import ScheduleError, parse_duration
from agentd.watch import store
from agentd.watch.create import report

CALLBACK_PREFIX = "wa"
MAX_BUTTONS = 20
_PRESS = re.compile(r"^wa:([a-z0-9]{1,40}):([pra])$")
_OPS = {"p": "paused", "r": "active", "a": "removed"}
NOT_YOURS = "Watches are the owner's; ask them."
NOT_HERE = "Watches are listed in your private chat with me, not in a group."
# A mute longer than this is refused: one for months is more likely a typo than a wish, and
# the messages it holds would wait that long.
MAX_MUTE_DAYS = 30
MUTE_FORMS = f"`/mute 2h` (up to `/mute {MAX_MUTE_DAYS}d`), or `/mute off`"


def press_data(watch_id: str, op: str) -> str:
    return f"{CALLBACK_PREFIX}:{watch_id}:{op}"


def _buttons(w: store.Watch) -> list[Button]:
    toggle = ("Resume", "r") if w.state == "paused" or w.capped_day else ("Pause", "p")
    return [
        Button(text=f"{toggle[0]} {w.id}", data=press_data(w.id, toggle[1])),
        Button(text=f"Remove {w.id}", data=press_data(w.id, "a")),
    ]


async def list_watches(db: Database, config: Config, inp: CommandInput) -> CommandReply:
    now = time.time()

    def read(conn: Any) -> list[tuple[store.Watch, str]]:
        return [(w, report(conn, config, w, now)) for w in store.list_watches(conn)]

    found = await db.read(read)
    if not found:
        return CommandReply(
            text="No watches. Ask me to keep an eye on something, e.g. “check this page every "
            "hour and tell me only if the price drops under 200”."
        )
    lines = ["Your watches (an unchanged check costs nothing):", *(f"• {r}" for _, r in found)]
    buttons = [_buttons(w) for w, _ in found[:MAX_BUTTONS]]
    return CommandReply(text="\n".join(lines), buttons=buttons)


def press(owner_id: int | None) -> CallbackFn:
    def handle(conn: Any, p: CallbackPress) -> str:
        """A button of /watches: the owner's only, each change once."""
        match = _PRESS.match(p.data)
        if match is None:
            return "This button is not recognised."
        if owner_id is None or p.user_id != owner_id:
            return NOT_YOURS
        try:
            w = store.get(conn, match[1])
        except store.NotFound:
            return "That watch does not exist any more."
        state = _OPS[match[2]]
        if state == w.state and not (state == "active" and w.capped_day):
            return f"Watch {w.id} is already {state}."
        store.set_state(conn, w, state, time.time(), by=chat_actor(p.user_id))  # type: ignore[arg-type]
        return f"Watch {w.id}: {'removed' if state == 'removed' else state}."

    return handle


async def mute(db: Database, config: Config, inp: CommandInput) -> CommandReply:
    """`/mute 2h`, `/mute off`, `/mute` (how long): watch messages to this chat wait."""
    arg = inp.args.strip().lower()
    now = time.time()
    if arg in ("off", "0", "no"):
        held = await db.write(store.unmute, inp.chat_id, now)
        sent = (
            f" The {held} held go now." if held > 1 else " The one held goes now." if held else ""
        )
        return CommandReply(text="Watch messages come through again." + sent)
    if not arg:
        until = await db.read(store.muted_until, inp.chat_id)
        if until <= now:
            return CommandReply(text="Not muted. `/mute 2h` holds watch messages for two hours.")
        return CommandReply(text=f"Muted until {local_iso(until, config.agent.timezone)}.")
    try:
        seconds = parse_duration(arg)
    except ScheduleError as exc:
        return CommandReply(text=f"{exc}; e.g. {MUTE_FORMS}.")
    if refused := _refused_length(arg, seconds):
        return refused
    until = now + seconds
    await db.write(store.set_mute, inp.chat_id, until)
    return CommandReply(
        text=f"Watch messages wait until {local_iso(until, config.agent.timezone)}; they are "
        "delivered then, none is lost. `/mute off` ends it."
    )


def _refused_length(arg: str, seconds: int) -> CommandReply | None:
    """None for a mute of a usable length; else the answer saying what works."""
    asked = f"`/mute {arg[:40]}`"
    if seconds <= 0:
        return CommandReply(text=f"Nothing changed: {asked} would hold nothing. Try {MUTE_FORMS}.")
    if seconds > MAX_MUTE_DAYS * 86400:
        return CommandReply(
            text=f"Nothing changed: {asked} is longer than {MAX_MUTE_DAYS} days, the most a mute "
            f"lasts. Try {MUTE_FORMS}."
        )
    return None


def commands(db: Database, config: Config) -> list[ChatCommand]:
    """/watches (the owner's, in private) and /mute (the owner's, in any chat a watch tells)."""
    owner = owners.resolve(config.access).owner_id

    def refusal(inp: CommandInput) -> CommandReply | None:
        if owner is None or inp.user_id != owner:
            return CommandReply(text=NOT_YOURS)
        return None if inp.private else CommandReply(text=NOT_HERE)

    async def watches(inp: CommandInput) -> CommandReply:
        return refusal(inp) or await list_watches(db, config, inp)

    async def mute_command(inp: CommandInput) -> CommandReply:
        # A group a page watch tells may be muted there too: a mute shows nothing private.
        if owner is None or inp.user_id != owner:
            return CommandReply(text=NOT_YOURS)
        return await mute(db, config, inp)

    return [
        ChatCommand(
            "watches", watches, "Your watches: checks, silences, messages, cost", owner_only=True
        ),
        ChatCommand(
            "mute", mute_command, "Hold watch messages: /mute 2h, /mute off", owner_only=True
        ),
    ]


def callbacks(config: Config) -> dict[str, CallbackFn]:
    """The buttons of /watches: Pause, Resume, Remove."""
    return {CALLBACK_PREFIX: press(owners.resolve(config.access).owner_id)}
