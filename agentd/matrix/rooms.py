"""Joining and leaving rooms: one small durable workflow per decision.

Intake decides (an invite from someone served: join; an encrypted room, or a group while
groups are off: leave, saying why) and starts it in the transaction that records the sync, so
a kill -9 between the decision and the request neither loses nor repeats it.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel

from agentd.db import Database
from agentd.durable import NonRetryable, Step, StepFailed, Workflow, store, workflow
from agentd.ledger import audit

ROOM_WORKFLOW = "matrix-room"
log = logging.getLogger("agentd.matrix")

ENCRYPTED_REASON = (
    "agentd does not speak end-to-end encryption yet, and it never answers an encrypted room "
    "in clear text: invite it to a room with encryption off"
)
GROUPS_OFF_REASON = "groups are off for this agent (access.allow_groups = false)"


class RoomInput(BaseModel):
    room_id: str
    action: Literal["join", "leave"]
    reason: str = ""
    by: str = ""  # who invited the bot, or wrote there


class RoomOutput(BaseModel):
    done: bool


def room_key(room_id: str) -> str:
    return f"matrix-room-{room_id}"


def under_way(conn: Any, room_id: str) -> bool:
    """Whether a join or leave of this room is already open (a burst of events starts one)."""
    row = conn.execute(
        f"SELECT 1 FROM workflow_instances WHERE key = ? AND status IN {store.OPEN_STATUSES!r}",
        (room_key(room_id),),
    ).fetchone()
    return row is not None


def make_room_workflow(client: Any, db: Database) -> Workflow[RoomInput, RoomOutput]:
    from agentd.matrix.client import MatrixError

    async def act(inp: RoomInput) -> bool:
        try:
            if inp.action == "join":
                await client.join(inp.room_id)
            else:
                await client.leave(inp.room_id, inp.reason)
        except MatrixError as exc:
            if exc.fault.kind == "transient":
                raise
            raise NonRetryable(f"{inp.action} refused: {exc}") from None
        return True

    async def record(inp: RoomInput, done: bool, instance_id: str) -> None:
        kind = f"matrix_room_{inp.action}" + ("" if done else "_failed")
        await db.write(
            lambda conn: audit.record(
                conn,
                kind,
                instance_id=instance_id,
                detail={"room": inp.room_id, "reason": inp.reason, "by": inp.by},
                source_key=f"{instance_id}:done",
            )
        )

    @workflow(ROOM_WORKFLOW)
    async def matrix_room(step: Step, inp: RoomInput) -> RoomOutput:
        try:
            done = await step.do(inp.action, act, inp)
        except StepFailed:
            done = False
        log.info(
            "matrix room",
            extra={"room": inp.room_id, "action": inp.action, "reason": inp.reason, "done": done},
        )
        await step.do("audit", record, inp, done, step.instance_id)
        return RoomOutput(done=done)

    return matrix_room
