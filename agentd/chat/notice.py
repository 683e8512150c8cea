"""A notice that no workflow of its own sends: a durable instance of its own, so it leaves by
the one send path (chat/delivery.py) like every other message.

What starts one (a mail watcher, the engine telling of a parked or failed instance) runs
outside any workflow; it only starts the instance, whose id it derives from what it tells, so
telling again starts nothing new. The send is a marked step: a notice the process died while
sending is re-sent at most once, and counted (`send_uncertain`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, model_validator

from agentd.chat import reach
from agentd.chat.delivery import deliver_text
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import Step, Workflow, workflow

NOTICE_WORKFLOW = "notice"
log = logging.getLogger("agentd")


class NoticeInput(BaseModel):
    """To a chat, or to a user's private chat wherever they are reached (chat/reach.py)."""

    chat_id: int | None = None
    user_id: int | None = None
    text: str

    @model_validator(mode="after")
    def _somewhere(self) -> NoticeInput:
        if (self.chat_id is None) == (self.user_id is None):
            raise ValueError("a notice goes to a chat or to a user, one of the two")
        return self


class NoticeOutput(BaseModel):
    message_id: int | None  # None: the user has no private chat any channel knows


def make_notice_workflow(
    db: Database, outbox: Outbox, name: str = NOTICE_WORKFLOW, prefer: str = ""
) -> Workflow[NoticeInput, NoticeOutput]:
    """The notice workflow, registered under `name` (mail's notices keep their own name);
    a notice to a user goes to their private chat on channel `prefer` ([access] notices), else
    where they last wrote, chosen once in its own step so the send goes to one place."""

    @workflow(name)
    async def notice(step: Step, inp: NoticeInput) -> NoticeOutput:
        chat = inp.chat_id
        if chat is None:
            chat = await step.local(
                "where", reach.private_chat, inp.user_id, prefer, result_type=int | None
            )
            if chat is None:
                log.warning("notice not sent: no private chat known", extra={"user": inp.user_id})
                return NoticeOutput(message_id=None)
        sent = await deliver_text(step, db, "send", outbox, chat, inp.text, notice=True)
        return NoticeOutput(message_id=sent)

    return notice


async def post_notice(
    start: Callable[..., Awaitable[Any]],
    instance_id: str,
    chat_id: int | None,
    text: str,
    *,
    user_id: int | None = None,
) -> None:
    """Start the notice `instance_id` (the engine's `start`) to `chat_id`, or to `user_id`'s
    private chat; once per id, whoever asks."""
    inp = NoticeInput(chat_id=chat_id, user_id=user_id, text=text)
    await start(NOTICE_WORKFLOW, inp, instance_id=instance_id, key=instance_id)
