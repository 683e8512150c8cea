"""What a message does when it arrives while a turn of its chat is working.

`[chat] busy` chooses (docs/messages.md, "A message while a turn works"):

- "steer" (the default): the message is added to the working turn at its next model call
  ("the user added: …"), so a follow-up like "and in Celsius, please" shapes the answer being
  written instead of waiting for it and then getting an answer of its own. A turn that has no
  model call left (it is already answering) never takes it: then the message is answered as
  its own turn, as with "queue".
- "queue": the message waits for the working turn to end, then is answered on its own.
- "interrupt": the working turn is cancelled (before it has sent any answer) and the new
  message is answered instead, as an edit replaces a message.

The decision is made in intake's transaction and journaled (a mailbox event for "steer", a
cancel request for "interrupt"), so a kill -9 in between replays the same one.
"""

from __future__ import annotations

from typing import Literal

BusyMode = Literal["steer", "queue", "interrupt"]  # config.ChatConfig.busy
STEER_EVENT = "steer"


def steer_event_id(instance_id: str) -> str:
    """The event a steered message puts in the working turn's mailbox, by its own turn."""
    return f"steer:{instance_id}"
