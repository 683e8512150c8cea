"""/memory in chat: a page of the user's memories with Edit, Pin and Forget buttons, the text
an Edit button waits for, and the Forget buttons of older cards. Owned by the memory
capability and returned in its Contribution."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentd.chat.command import ChatCommand, CommandInput, CommandReply
from agentd.chat.inputs import CallbackPress
from agentd.chat.names import COMMAND_WORKFLOW, command_key
from agentd.chat.outbox import Button
from agentd.db import Database
from agentd.durable import Clock
from agentd.memory import chat_view

FORGET_PREFIX = "mf:"  # the Forget buttons of /memory cards sent before Edit and Pin


def _reply(view: chat_view.ChatView) -> CommandReply:
    buttons = [[Button(text=b.label, data=b.data) for b in row] for row in view.buttons]
    return CommandReply(text=view.text, buttons=buttons)


def _as_memory_command(press_or_turn: Any, args: str) -> CommandInput:
    return CommandInput(
        name="memory",
        args=args[:4000],
        chat_id=press_or_turn.chat_id,
        chat_kind=press_or_turn.chat_kind,
        user_id=press_or_turn.user_id,
        message_id=press_or_turn.message_id,
    )


@dataclass(frozen=True)
class MemoryCommand:
    db: Database
    embedder: Any  # None: an edit is stored without a vector
    clock: Clock
    # The engine's prepare_start: a button press starts /memory's workflow in the intake
    # transaction.
    start: Callable[..., bool]

    async def run(self, inp: CommandInput) -> CommandReply:
        """/memory: a page of the user's memories; also what its buttons and an edit's text do
        (they come here as `mem:...` arguments, see `button` and `edit_text`)."""
        if not inp.private:  # a group: the list (and its buttons) would be everyone's to see
            return CommandReply(
                text="Your memories are private: ask me /memory in our private chat."
            )
        data, db = inp.args, self.db
        if data.startswith(f"{chat_view.PREFIX}:apply:"):
            memory_id, _, text = data.removeprefix(f"{chat_view.PREFIX}:apply:").partition(" ")
            if not memory_id.isdecimal():
                return CommandReply(text="That edit is no longer valid.")
            view = await chat_view.apply_edit(db, self.embedder, inp.user_id, int(memory_id), text)
        elif data.startswith(f"{chat_view.PREFIX}:"):
            view = await chat_view.on_button(db, self.embedder, inp.user_id, data)
            if view.awaiting_edit is not None:
                memory_id, now = view.awaiting_edit, self.clock.now()
                await db.write(
                    lambda c: chat_view.await_edit(c, inp.chat_id, inp.user_id, memory_id, now)
                )
        else:
            view = await db.read(lambda c: chat_view.memory_page(c, inp.user_id))
            if not view.buttons:
                return CommandReply(text="I don't remember anything particular about you yet.")
            view.text = "What I remember about you:\n\n" + view.text
        return _reply(view)

    def button(self, conn: Any, press: CallbackPress) -> str:
        """A /memory button, inside the intake transaction: runs as /memory's workflow (one per
        press, so a redelivered press acts once), which answers in the chat."""
        if press.chat_id is None or not press.private:
            return "This button works in our private chat."
        self.start(
            conn,
            COMMAND_WORKFLOW,
            _as_memory_command(press, press.data),
            instance_id=f"mem-{press.callback_id}",
            key=command_key(press.chat_id),
        )
        return ""  # no toast: the answer comes as a message in the chat

    def edit_text(self, conn: Any, turn: Any) -> CommandInput | None:
        """The message after an Edit button: the memory's new text, never sent to the model."""
        if not turn.private:
            return None
        now = self.clock.now()
        memory_id = chat_view.take_edit(conn, turn.chat_id, turn.user_id, turn.text, now)
        if memory_id is None:
            return None
        return _as_memory_command(turn, f"{chat_view.PREFIX}:apply:{memory_id} {turn.text}")

    def command(self) -> ChatCommand:
        return ChatCommand("memory", self.run, "What I remember about you, to correct")


def forget_by_button(conn: Any, press: CallbackPress) -> str:
    """A Forget button of an older /memory card, inside the intake transaction: only the
    user's own, versioned (restorable) and audited as any forget."""
    from agentd.memory.manage import MemoryNotFound, forget_one

    raw = press.data.removeprefix(FORGET_PREFIX)
    if not raw.isdecimal():
        return "This button is not recognised."
    try:
        forget_one(conn, int(raw), user_id=press.user_id, by=chat_view.BY)
    except MemoryNotFound:
        return "Already forgotten."
    return "Forgotten."
