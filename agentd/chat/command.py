"""What a chat command is on any channel: its input, its reply, and how a capability declares
one (`ChatCommand`, returned in its `Contribution`; `commands/router` dispatches them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from agentd.chat.inputs import CallbackPress, Place, TurnInput
from agentd.chat.outbox import Button


class CommandInput(Place):
    name: str
    args: str = Field(default="", max_length=4000)
    chat_id: int
    user_id: int
    message_id: int | None = None  # None: the message's id could not be read


class CommandReply(BaseModel):
    text: str
    buttons: list[list[Button]] = Field(default_factory=list)


CommandFn = Callable[[CommandInput], Awaitable[CommandReply]]
# A button press, inside the intake transaction: returns the presser's answer ("": none).
CallbackFn = Callable[[Any, CallbackPress], str]
# A message a command asked for (the new text after an Edit button): given the intake
# transaction and the message, the command to run instead of a turn, or None.
AwaitFn = Callable[[Any, TurnInput], CommandInput | None]
# Completes the reply's text inside the send step itself: what it adds (a one-time login
# link) reaches the chat but never the journal, where the rendered reply is kept.
FinishFn = Callable[[CommandInput, str], Awaitable[str]]


@dataclass(frozen=True)
class ChatCommand:
    """A command a capability offers: `/name`, what runs, and its line in the menu and /help."""

    name: str
    fn: CommandFn
    description: str
    finish: FinishFn | None = None
    # Shown in the owner's /help and menu only; the command still checks who asks.
    owner_only: bool = False
