"""Slash commands (/help, /stop, …) and inline-button callbacks, routed without the model.

A command is recognised at intake and runs as a small durable workflow (its reply is sent exactly
once); it never reaches the model and costs no tokens. Commands of a chat run in their own key,
not the chat's turn key, so /stop is answered while a turn is still running. Callback data is
routed by its prefix (`ap:` approvals, `mf:` memory, …); each handler runs inside the intake
transaction and returns the presser's answer. No aiogram here: intake stays platform-neutral.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import BaseModel

from agentd.chat.command import (
    AwaitFn,
    CallbackFn,
    ChatCommand,
    CommandFn,
    CommandInput,
    CommandReply,
    FinishFn,
)
from agentd.chat.delivery import deliver_text
from agentd.chat.inputs import CallbackPress, TurnInput
from agentd.chat.names import COMMAND_WORKFLOW, command_key
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import Step, Workflow, workflow
from agentd.ledger import audit

# Telegram's rule for command names: 1–32 of a–z, 0–9 and _. "/etc/hosts" stays ordinary text.
_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)


class CommandOutput(BaseModel):
    message_id: int | None = None  # None: the command chose to say nothing
    known: bool = True


@dataclass(frozen=True)
class Command:
    fn: CommandFn
    description: str  # Telegram's menu and /help
    finish: FinishFn | None = None
    # Shown in the owner's /help and menu only; the command still checks who asks.
    owner_only: bool = False
    # What the command's input keeps of its arguments (None: all): the input is journaled,
    # so a secret given as an argument is reduced here, before anything stores it.
    keep_args: Callable[[str], str] | None = None


def _unknown_button(conn: Any, press: CallbackPress) -> str:
    audit.record(
        conn,
        "callback_unknown",
        chat_id=press.chat_id,
        user_id=press.user_id,
        detail={"data_length": len(press.data)},
    )
    return "This button is not recognised."


@dataclass
class CommandRouter:
    """Commands by name and callback handlers by data prefix; add more with `command`/`callback`."""

    # The agent's names on its channels: "/help@name" is for us only if `name` is one of them.
    bot_usernames: frozenset[str] = frozenset()
    owner_id: int | None = None
    commands: dict[str, Command] = field(default_factory=dict)
    callbacks: dict[str, CallbackFn] = field(default_factory=dict)
    awaiting: list[AwaitFn] = field(default_factory=list)
    # What the agent can do beyond the commands, one line per capability with tools (their
    # Contribution's `about`), for /help.
    abilities: list[str] = field(default_factory=list)

    def add(self, command: ChatCommand) -> None:
        """A command a capability declared (its Contribution's `commands`)."""
        self.command(
            command.name,
            command.fn,
            command.description,
            finish=command.finish,
            owner_only=command.owner_only,
        )

    def command(
        self,
        name: str,
        fn: CommandFn,
        description: str = "",
        *,
        finish: FinishFn | None = None,
        owner_only: bool = False,
        keep_args: Callable[[str], str] | None = None,
    ) -> None:
        if not re.fullmatch(r"[a-z0-9_]{1,32}", name):
            raise ValueError(f"command name {name!r}: use 1–32 of a-z, 0-9 and _")
        if name in self.commands:
            raise ValueError(f"command /{name} is registered twice")
        text = description or next(iter((fn.__doc__ or "").strip().splitlines()), "")
        if not 1 <= len(text) <= 256:
            raise ValueError(f"command /{name}: give a description of 1–256 characters")
        self.commands[name] = Command(
            fn=fn, description=text, finish=finish, owner_only=owner_only, keep_args=keep_args
        )

    def callback(self, prefix: str, fn: CallbackFn) -> None:
        self.callbacks[prefix] = fn

    def awaits(self, fn: AwaitFn) -> None:
        """Let `fn` claim a message as the answer a command asked for (see AwaitFn)."""
        self.awaiting.append(fn)

    def menu(self, *, owner: bool = True) -> list[tuple[str, str]]:
        """(command, description) pairs for setMyCommands, in registration order; without
        the owner's own commands unless `owner`."""
        return [
            (name, c.description) for name, c in self.commands.items() if owner or not c.owner_only
        ]

    def is_owner(self, user_id: int) -> bool:
        return self.owner_id is not None and user_id == self.owner_id

    def parse(self, turn: TurnInput) -> CommandInput | None:
        """The command this message is (known or not); None for text meant for the model."""
        if turn.kind != "text" or turn.edited:
            return None
        match = _COMMAND.match(turn.text.strip())
        if match is None:
            return None
        names = {n.lower() for n in self.bot_usernames}
        if match[2] and names and match[2].lower() not in names:
            return None  # "/help@other_bot" in a group is not for us
        name = match[1].lower()
        args = (match[3] or "").strip()[:4000]
        known = self.commands.get(name)
        if known is not None and known.keep_args is not None:
            args = known.keep_args(args)
        return CommandInput(
            name=name,
            args=args,
            chat_id=turn.chat_id,
            chat_kind=turn.chat_kind,
            user_id=turn.user_id,
            message_id=turn.message_id,
        )

    def route(self, turn: TurnInput, conn: Any = None) -> tuple[str, BaseModel, str] | None:
        """For intake: (workflow, input, key) when the message is a command, or the answer a
        command waits for (checked only with the intake transaction's `conn`)."""
        claimed = None
        if conn is not None and turn.kind == "text" and not turn.edited:
            claimed = next((c for fn in self.awaiting if (c := fn(conn, turn)) is not None), None)
        parsed = claimed or self.parse(turn)
        return (COMMAND_WORKFLOW, parsed, command_key(turn.chat_id)) if parsed else None

    def on_callback(self, conn: Any, press: CallbackPress) -> str:
        """Dispatch a button press by the prefix of its data."""
        prefix = press.data.split(":", 1)[0]
        return self.callbacks.get(prefix, _unknown_button)(conn, press)

    async def reply_to(self, inp: CommandInput) -> CommandReply:
        command = self.commands.get(inp.name)
        if command is None:
            return CommandReply(
                text=f"I don't know /{inp.name}. Send /help for the commands I understand."
            )
        return await command.fn(inp)

    def workflow(self, outbox: Outbox, db: Database) -> Workflow[CommandInput, CommandOutput]:
        async def record(inp: CommandInput, instance_id: str, known: bool) -> None:
            await db.write(
                lambda conn: audit.record(
                    conn,
                    "command",
                    chat_id=inp.chat_id,
                    user_id=inp.user_id,
                    instance_id=instance_id,
                    detail={"command": inp.name if known else "unknown"},
                    source_key=f"{instance_id}:command",
                )
            )

        @workflow(COMMAND_WORKFLOW)
        async def command(step: Step, inp: CommandInput) -> CommandOutput:
            known = inp.name in self.commands
            reply = await step.do("render", self.reply_to, inp)
            fn = self.commands[inp.name].finish if known else None
            finish = partial(fn, inp) if fn else None
            message_id = None
            if reply.text:  # an empty reply: the command answers nothing here (a group)
                message_id = await deliver_text(
                    step,
                    db,
                    "send",
                    outbox,
                    inp.chat_id,
                    reply.text,
                    reply_to=inp.message_id,
                    buttons=reply.buttons,
                    finish=finish,
                )
            await step.do("audit", record, inp, step.instance_id, known)
            return CommandOutput(message_id=message_id, known=known)

        return command
