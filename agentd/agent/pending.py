"""What a chat is still owed while a new message is answered.

A turn that waits for an approval (or, later, a background task) lets the chat go on
(durable/engine.py, `release_key`), so the next turn's model must know what is already under
way: otherwise it reads the waiting request in the history as unanswered and asks for it
again. This reads the approvals table; the answer itself comes from the waiting turn, as a
reply to the message that asked.
"""

from __future__ import annotations

from typing import Any

from agentd.access.approvals import Approval, pending
from agentd.chat.data import as_data
from agentd.tools.policy import OUTSIDE_REASON

PENDING_RULE = (
    "These are handled on their own: each answer will come as a separate message replying "
    "to the message that asked, once decided. Do not ask for them or run them again; if the "
    "user asks about one, say it is still waiting."
)


def _whose(approval: Approval) -> str:
    if approval.self_approved:
        return "your approval"
    return "the owner's approval"


def _line(approval: Approval) -> str:
    shown = " ".join(approval.args_preview.split())
    shown = shown if len(shown) <= 120 else shown[:119] + "…"
    asked = f", asked for in “{approval.request}”" if approval.request else ""
    return f"- A request to run {approval.tool} ({shown}) is waiting for {_whose(approval)}{asked}."


PENDING_SOURCE = "a request still waiting in this chat, written after outside content"


def pending_from_outside(conn: Any, chat_id: int, instance_id: str, now: float) -> bool:
    """Whether a waiting request the prompt lists was written with outside content in view:
    its arguments (a URL, a command) may carry that content's words into this turn."""
    return any(
        a.chat_id == chat_id
        and a.instance_id != instance_id
        and (a.why or "").startswith(OUTSIDE_REASON)
        for a in pending(conn, now)
    )


def pending_in_chat(conn: Any, chat_id: int, instance_id: str, now: float) -> str:
    """The chat's other turns' requests still waiting for a decision, for the prompt ("" if
    none)."""
    waiting = [a for a in pending(conn, now) if a.chat_id == chat_id]
    lines = [_line(a) for a in waiting if a.instance_id != instance_id]
    if not lines:
        return ""
    return as_data("\n".join(lines))
