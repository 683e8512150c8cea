"""Joining and leaving rooms: one small durable workflow per decision.

Intake decides (an invite from someone served: join; an encrypted room, or a group while
groups are off: leave, saying why) and starts it in the transaction that records the sync, so
a kill -9 between the decision and the request neither loses nor repeats it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from agentd.chat.channel import Refusal
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


def note_pairing_room(conn: Any, room_id: str, stranger: str, now: float) -> None:
    """The bot joins this room only for a pairing code its inviter may send there."""
    conn.execute(
        "INSERT INTO matrix_pairing_rooms (room_id, stranger, joined_at) VALUES (?, ?, ?) "
        "ON CONFLICT (room_id) DO UPDATE SET stranger = excluded.stranger, leave = 0",
        (room_id, stranger, now),
    )


def pairing_settled(conn: Any, room_id: str, ok: bool) -> None:
    """A code was sent there: paired (the room is the new user's, kept) or not (left)."""
    if ok:
        conn.execute("DELETE FROM matrix_pairing_rooms WHERE room_id = ?", (room_id,))
    else:
        conn.execute("UPDATE matrix_pairing_rooms SET leave = 1 WHERE room_id = ?", (room_id,))


def pairing_rooms_to_leave(conn: Any, code_waits: bool, served: Callable[[str], bool]) -> list[str]:
    """Pairing rooms to leave now: after a failed code, or, once no code waits, every one whose
    stranger is still not served. A served stranger's room is theirs from now on."""
    leave = []
    for room_id, stranger, failed in conn.execute(
        "SELECT room_id, stranger, leave FROM matrix_pairing_rooms"
    ).fetchall():
        if served(stranger) and not failed:
            conn.execute("DELETE FROM matrix_pairing_rooms WHERE room_id = ?", (room_id,))
        elif failed or not code_waits:
            leave.append(str(room_id))
    return leave


def forget_pairing_room(conn: Any, room_id: str) -> None:
    conn.execute("DELETE FROM matrix_pairing_rooms WHERE room_id = ?", (room_id,))


def make_room_workflow(
    client: Any, db: Database, refusal: Refusal | None = None
) -> Workflow[RoomInput, RoomOutput]:
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
            if exc.fault.kind == "auth" and refusal is not None:
                raise refusal.refuse() from None  # done after the login is fixed
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
