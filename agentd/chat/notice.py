"""A notice that no workflow of its own sends: a durable instance of its own, so it leaves by
the one send path (chat/delivery.py) like every other message.

What starts one (a mail watcher, the engine telling of a parked or failed instance) runs
outside any workflow; it only starts the instance, whose id it derives from what it tells, so
telling again starts nothing new. The send is a marked step: a notice the process died while
sending is re-sent at most once, and counted (`send_uncertain`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from pydantic import BaseModel

from agentd.chat.delivery import deliver
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import Step, Workflow, workflow

NOTICE_WORKFLOW = "notice"


class NoticeInput(BaseModel):
    chat_id: int
    text: str


class NoticeOutput(BaseModel):
    message_id: int


def make_notice_workflow(
    db: Database, outbox: Outbox, name: str = NOTICE_WORKFLOW
) -> Workflow[NoticeInput, NoticeOutput]:
    """The notice workflow, registered under `name` (mail's notices keep their own name)."""

    @workflow(name)
    async def notice(step: Step, inp: NoticeInput) -> NoticeOutput:
        send = partial(outbox.send_text, inp.chat_id, inp.text)
        return NoticeOutput(message_id=await deliver(step, db, "send", inp.chat_id, send))

    return notice


async def post_notice(
    start: Callable[..., Awaitable[Any]], instance_id: str, chat_id: int, text: str
) -> None:
    """Start the notice `instance_id` (the engine's `start`); once per id, whoever asks."""
    inp = NoticeInput(chat_id=chat_id, text=text)
    await start(NOTICE_WORKFLOW, inp, instance_id=instance_id, key=instance_id)
