"""Schedules and their runs as plain SQL functions of a connection (daemon and CLI share them)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from agentd.chat.inputs import ChatKind
from agentd.durable import store
from agentd.ledger import audit
from agentd.schedule.recurrence import Recurrence

OCCURRENCE_WORKFLOW = "schedule"
Action = Literal["message", "prompt"]
CatchUp = Literal["skip", "once", "all"]
State = Literal["active", "paused", "done", "cancelled"]
_COLUMNS = (
    "id, user_id, chat_id, action, text, recurrence, timezone, catch_up, state, next_run, "
    "created_at, updated_at, created_by, chat_kind"
)


class Schedule(BaseModel):
    id: str
    user_id: int
    chat_id: int
    action: Action
    text: str
    recurrence: Recurrence
    timezone: str
    catch_up: CatchUp
    state: State
    next_run: float | None
    created_at: float
    updated_at: float
    created_by: str
    chat_kind: ChatKind  # where it runs: a prompt's turn is as private as its chat


class Run(BaseModel):
    schedule_id: str
    due: float
    outcome: str
    at: float
    instance_id: str | None
    detail: str
    turn_status: str | None = None  # a prompt run's turn: running, waiting, complete, errored…


class OccurrenceInput(BaseModel):
    schedule_id: str
    due: int


class NotFound(LookupError):
    """No schedule with this id (for this user)."""


def occurrence_id(schedule_id: str, due: int) -> str:
    """One instance per (schedule, occurrence): starting it twice starts one (R-DUR-6)."""
    return f"sched-{schedule_id}-{due}"


def schedule_key(schedule_id: str) -> str:
    return f"schedule-{schedule_id}"


def _row(row: Any) -> Schedule:
    data = dict(zip(_COLUMNS.split(", "), row, strict=True))
    data["recurrence"] = json.loads(data["recurrence"])
    return Schedule.model_validate(data)


def insert(conn: Any, sched: Schedule) -> bool:
    """Store a new schedule; False if its id exists (a re-run tool step creates nothing twice)."""
    values = sched.model_dump()
    values["recurrence"] = sched.recurrence.model_dump_json()
    columns = _COLUMNS.split(", ")
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO schedules ({_COLUMNS}) VALUES ({', '.join('?' * len(columns))})",
        tuple(values[c] for c in columns),
    )
    return cursor.rowcount == 1


def get(conn: Any, schedule_id: str, *, user_id: int | None = None) -> Schedule:
    row = conn.execute(f"SELECT {_COLUMNS} FROM schedules WHERE id = ?", (schedule_id,)).fetchone()
    if row is None or (user_id is not None and row[1] != user_id):
        raise NotFound(f"no schedule {schedule_id!r}; list them with `agentd schedule ls`")
    return _row(row)


def find(conn: Any, schedule_id: str) -> Schedule | None:
    try:
        return get(conn, schedule_id)
    except NotFound:
        return None


def list_schedules(
    conn: Any, *, user_id: int | None = None, states: tuple[str, ...] = ("active", "paused")
) -> list[Schedule]:
    where = [f"state IN ({', '.join('?' * len(states))})"]
    params: list[Any] = list(states)
    if user_id is not None:
        where.append("user_id = ?")
        params.append(user_id)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM schedules WHERE {' AND '.join(where)} "
        "ORDER BY next_run IS NULL, next_run, created_at",
        params,
    ).fetchall()
    return [_row(r) for r in rows]


def count_active(conn: Any, user_id: int) -> int:
    return conn.execute(
        "SELECT COUNT(*) FROM schedules WHERE user_id = ? AND state IN ('active', 'paused')",
        (user_id,),
    ).fetchone()[0]


def runs(conn: Any, schedule_id: str, limit: int = 20) -> list[Run]:
    rows = conn.execute(
        "SELECT r.schedule_id, r.due, r.outcome, r.at, r.instance_id, r.detail, i.status "
        "FROM schedule_runs r LEFT JOIN workflow_instances i ON i.id = r.instance_id "
        "WHERE r.schedule_id = ? ORDER BY r.due DESC LIMIT ?",
        (schedule_id, limit),
    ).fetchall()
    return [Run.model_validate(dict(zip(Run.model_fields, r, strict=True))) for r in rows]


def start_occurrence(
    conn: Any, sched: Schedule, due: int, now: float, *, resumed: bool = False
) -> str:
    """Create the (sleeping-to-be) instance for one occurrence and note it as the next run.

    On resume, the occurrence's instance may exist already, cancelled by the pause: a new one
    gets a suffix (the run itself is still recorded once, by schedule and due time)."""
    instance_id = occurrence_id(sched.id, due)
    if resumed and store.find_instance(conn, instance_id) is not None:
        instance_id = f"{instance_id}-r{int(now * 1000)}"
    inp = OccurrenceInput(schedule_id=sched.id, due=due)
    store.insert_instance(
        conn,
        instance_id=instance_id,
        workflow=OCCURRENCE_WORKFLOW,
        key=schedule_key(sched.id),
        input_json=inp.model_dump_json(),
        now=now,
    )
    conn.execute(
        "UPDATE schedules SET next_run = ?, updated_at = ? WHERE id = ?", (due, now, sched.id)
    )
    return instance_id


def _stop_open_occurrences(conn: Any, schedule_id: str, now: float) -> None:
    rows = conn.execute(
        f"SELECT id FROM workflow_instances WHERE key = ? AND status IN {store.OPEN_STATUSES!r}",
        (schedule_key(schedule_id),),
    ).fetchall()
    for (instance_id,) in rows:
        store.request_cancel(conn, instance_id, now)


def set_state(conn: Any, sched: Schedule, state: State, now: float, *, by: str) -> Schedule:
    """Pause, resume or cancel; a sleeping occurrence is cancelled (the daemon sees it at once)."""
    if sched.state in ("done", "cancelled"):
        raise ValueError(f"schedule {sched.id} is {sched.state}; it cannot change any more")
    next_run = sched.next_run
    if state in ("paused", "cancelled"):
        _stop_open_occurrences(conn, sched.id, now)
        next_run = None
    conn.execute(
        "UPDATE schedules SET state = ?, next_run = ?, updated_at = ? WHERE id = ?",
        (state, next_run, now, sched.id),
    )
    updated = sched.model_copy(update={"state": state, "next_run": next_run, "updated_at": now})
    if state == "active" and sched.state == "paused":
        due = sched.recurrence.next_after(now)
        if due is None:
            conn.execute("UPDATE schedules SET state = 'done' WHERE id = ?", (sched.id,))
            updated = updated.model_copy(update={"state": "done"})
        else:
            start_occurrence(conn, updated, due, now, resumed=True)
            updated = updated.model_copy(update={"next_run": float(due)})
    audit.record(
        conn,
        f"schedule_{'resumed' if state == 'active' else state}",
        chat_id=sched.chat_id,
        user_id=sched.user_id,
        detail={"schedule": sched.id, "by": by},
        at=now,
    )
    return updated


def record_run(
    conn: Any,
    sched: Schedule,
    due: int,
    outcome: str,
    now: float,
    *,
    instance_id: str | None = None,
    detail: str = "",
) -> None:
    """Note one occurrence's outcome (once per due time) and put it in the audit log."""
    cursor = conn.execute(
        "INSERT OR IGNORE INTO schedule_runs (schedule_id, due, outcome, at, instance_id, detail) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (sched.id, due, outcome, now, instance_id, detail[:500]),
    )
    if cursor.rowcount:
        audit.record(
            conn,
            f"schedule_{outcome}",
            chat_id=sched.chat_id,
            user_id=sched.user_id,
            instance_id=instance_id,
            detail={"schedule": sched.id, "due": due},
            at=now,
        )
