"""A new-mail notice as a durable workflow of its own, so it leaves by the one send path.

The watcher thread only starts the instance; its id is derived from the mail (account, folder,
UID, Message-ID), so a watcher that restarts before it recorded its position starts nothing
new, and the send itself is a marked step: a notice the process died while sending is re-sent
at most once, and counted (`send_uncertain`), like every other message agentd sends.
"""

from __future__ import annotations

import hashlib
from functools import partial

from pydantic import BaseModel

from agentd.chat.delivery import deliver
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import Step, Workflow, workflow

MAIL_NOTICE_WORKFLOW = "mail_notice"


class NoticeInput(BaseModel):
    chat_id: int
    text: str


class NoticeOutput(BaseModel):
    message_id: int


def notice_instance_id(account: str, folder: str, uid: int, message_id: str) -> str:
    """The same mail always maps to the same notice (as a summary rule's turn does)."""
    digest = hashlib.sha256(f"{account}/{folder}/{uid}/{message_id}".encode()).hexdigest()[:20]
    return f"mail-notice-{digest}"


def make_notice_workflow(db: Database, outbox: Outbox) -> Workflow[NoticeInput, NoticeOutput]:
    @workflow(MAIL_NOTICE_WORKFLOW)
    async def mail_notice(step: Step, inp: NoticeInput) -> NoticeOutput:
        sent = await deliver(
            step, db, "send", inp.chat_id, partial(outbox.send_text, inp.chat_id, inp.text)
        )
        return NoticeOutput(message_id=sent)

    return mail_notice
