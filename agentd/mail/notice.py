"""A new-mail notice as a durable workflow of its own, so it leaves by the one send path.

The watcher thread only starts the instance; its id is derived from the mail (account, folder,
UID, Message-ID), so a watcher that restarts before it recorded its position starts nothing
new, and the send itself is a marked step: a notice the process died while sending is re-sent
at most once, and counted (`send_uncertain`), like every other message agentd sends.
"""

from __future__ import annotations

import hashlib

from agentd.chat.notice import NoticeInput, NoticeOutput
from agentd.chat.notice import make_notice_workflow as _notice_workflow
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import Workflow

MAIL_NOTICE_WORKFLOW = "mail_notice"
__all__ = ["MAIL_NOTICE_WORKFLOW", "NoticeInput", "make_notice_workflow", "notice_instance_id"]


def notice_instance_id(account: str, folder: str, uid: int, message_id: str) -> str:
    """The same mail always maps to the same notice (as a summary rule's turn does)."""
    digest = hashlib.sha256(f"{account}/{folder}/{uid}/{message_id}".encode()).hexdigest()[:20]
    return f"mail-notice-{digest}"


def make_notice_workflow(
    db: Database, outbox: Outbox, prefer: str = ""
) -> Workflow[NoticeInput, NoticeOutput]:
    return _notice_workflow(db, outbox, MAIL_NOTICE_WORKFLOW, prefer)
