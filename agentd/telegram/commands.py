"""Slash commands (/reminders, …) and inline-button callbacks, routed without the model.

A command is recognised at intake and runs as a small durable workflow in the chat's key (so it
keeps its place among the chat's turns and its reply is sent exactly once); it never reaches the
model and costs no tokens. Callback data is routed by its prefix (`ap:` approvals, `sc:`
schedules, …); each handler runs inside the intake transaction and returns the presser's answer.
No aiogram here: intake and workflows stay platform-neutral.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from agentd import audit
from agentd.agent.inputs import CallbackPress, TurnInput
from agentd.durable import Step, Workflow, workflow
from agentd.outbox import Button, Outbox, raise_if_refused

COMMAND_WORKFLOW = "command"
_COMMAND = re.compile(r"^/([a-z][a-z0-9_]{0,31})(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)


class CommandInput(BaseModel):
    name: str
    args: str = ""
    chat_id: int
    user_id: int
    message_id: int


class CommandReply(BaseModel):
    text: str
    buttons: list[list[Button]] = Field(default_factory=list)


class CommandOutput(BaseModel):
    message_id: int


CommandFn = Callable[[CommandInput], Awaitable[CommandReply]]
CallbackFn = Callable[[Any, CallbackPress], str]


def _unknown_button(conn: Any, press: CallbackPress) -> str:
    audit.record(conn, "callback_unknown", chat_id=press.chat_id, user_id=press.user_id,
                 detail={"data_length": len(press.data)})  # fmt: skip
    return "This button is not recognised."


@dataclass
class CommandRouter:
    """Commands by name and callback handlers by data prefix; add more with `command`/`callback`."""

    bot_username: str = ""
    commands: dict[str, CommandFn] = field(default_factory=dict)
    callbacks: dict[str, CallbackFn] = field(default_factory=dict)

    def command(self, name: str, fn: CommandFn) -> None:
        self.commands[name] = fn

    def callback(self, prefix: str, fn: CallbackFn) -> None:
        self.callbacks[prefix] = fn

    def parse(self, turn: TurnInput) -> CommandInput | None:
        """The command this message is, if it is one we handle (others go to the model)."""
        if turn.kind != "text" or turn.edited:
            return None
        match = _COMMAND.match(turn.text.strip())
        if match is None or match[1] not in self.commands:
            return None
        if match[2] and match[2].lower() != self.bot_username.lower():
            return None  # "/reminders@other_bot" in a group is not for us
        return CommandInput(name=match[1], args=(match[3] or "").strip(), chat_id=turn.chat_id,
                            user_id=turn.user_id, message_id=turn.message_id)  # fmt: skip

    def route(self, turn: TurnInput) -> tuple[str, BaseModel] | None:
        """For intake: (workflow, input) when the message is a command."""
        parsed = self.parse(turn)
        return (COMMAND_WORKFLOW, parsed) if parsed else None

    def on_callback(self, conn: Any, press: CallbackPress) -> str:
        """Dispatch a button press by the prefix of its data."""
        prefix = press.data.split(":", 1)[0]
        return self.callbacks.get(prefix, _unknown_button)(conn, press)

    def workflow(self, outbox: Outbox) -> Workflow[CommandInput, CommandOutput]:
        async def render(inp: CommandInput) -> CommandReply:
            return await self.commands[inp.name](inp)

        async def send(inp: CommandInput, reply: CommandReply) -> int:
            try:
                return await outbox.send_text(inp.chat_id, reply.text, reply_to=inp.message_id,
                                              buttons=reply.buttons or None)  # fmt: skip
            except Exception as exc:
                raise_if_refused(exc)
                raise

        @workflow(COMMAND_WORKFLOW)
        async def command(step: Step, inp: CommandInput) -> CommandOutput:
            reply = await step.do("render", render, inp)
            return CommandOutput(message_id=await step.do("send", send, inp, reply))

        return command
