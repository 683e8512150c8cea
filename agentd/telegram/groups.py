"""Leaving groups nobody allowed: one small durable workflow per group left.

Intake decides (classify_update: groups off, or added by someone not served) and starts it in
the same transaction that records the update; the workflow calls leaveChat once and audits it.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

from agentd.chat.channel import Refusal
from agentd.db import Database
from agentd.durable import NonRetryable, Step, StepFailed, Workflow, store, workflow
from agentd.ledger import audit

LEAVE_WORKFLOW = "leave-group"
log = logging.getLogger("agentd.telegram")


class LeaveInput(BaseModel):
    chat_id: int
    reason: str
    by: int | None = None  # who added the bot, or who wrote there


class LeaveOutput(BaseModel):
    left: bool


def leave_key(chat_id: int) -> str:
    return f"leave-{chat_id}"


def leaving(conn: Any, chat_id: int) -> bool:
    """Whether a leave of this group is already under way (a burst of updates starts one)."""
    row = conn.execute(
        f"SELECT 1 FROM workflow_instances WHERE key = ? AND status IN {store.OPEN_STATUSES!r}",
        (leave_key(chat_id),),
    ).fetchone()
    return row is not None


def make_leave_workflow(
    bot: Any, db: Database, refusal: Refusal | None = None
) -> Workflow[LeaveInput, LeaveOutput]:
    async def leave(inp: LeaveInput) -> bool:
        from aiogram.exceptions import (
            TelegramBadRequest,
            TelegramForbiddenError,
            TelegramUnauthorizedError,
        )

        try:
            return bool(await bot.leave_chat(inp.chat_id))
        except (TelegramBadRequest, TelegramForbiddenError) as exc:
            # Already gone (kicked, or left by an earlier run): nothing left to do.
            raise NonRetryable(f"leaveChat refused: {exc.message}") from None
        except TelegramUnauthorizedError:
            if refusal is None:
                raise
            raise refusal.refuse() from None  # left after the token is fixed, not given up

    async def record(inp: LeaveInput, left: bool, instance_id: str) -> None:
        await db.write(
            lambda conn: audit.record(
                conn,
                "group_left" if left else "group_leave_failed",
                chat_id=inp.chat_id,
                user_id=inp.by,
                instance_id=instance_id,
                detail={"reason": inp.reason},
                source_key=f"{instance_id}:left",
            )
        )

    @workflow(LEAVE_WORKFLOW)
    async def leave_group(step: Step, inp: LeaveInput) -> LeaveOutput:
        try:
            left = await step.do("leave", leave, inp)
        except StepFailed:
            left = False
        log.info("left a group", extra={"chat": inp.chat_id, "reason": inp.reason, "left": left})
        await step.do("audit", record, inp, left, step.instance_id)
        return LeaveOutput(left=left)

    return leave_group
