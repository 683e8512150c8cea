"""The step journal's SQL as plain functions of a connection (daemon and CLI share them)."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel

from agentd.durable.errors import CancelRequested, InstanceNotFound

OPEN_STATUSES = ("queued", "running", "waiting", "sleeping")
FINAL_STATUSES = ("complete", "errored", "cancelled")
_OPEN_SQL = "('queued', 'running', 'waiting', 'sleeping')"


class StepRecord(BaseModel):
    ordinal: int
    name: str
    kind: str
    status: str
    delivery: str
    result: str | None
    error: str | None
    started_at: float
    finished_at: float | None
    wake_at: float | None


class AttemptRecord(BaseModel):
    ordinal: int
    attempt: int
    started_at: float
    finished_at: float | None
    outcome: str
    error: str | None


class InstanceRecord(BaseModel):
    seq: int
    id: str
    workflow: str
    key: str
    status: str
    input: str
    output: str | None
    error: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    wake_at: float | None
    waiting_for: str | None
    runs: int
    cancel_requested: bool
    retries: int = 0  # the owner's retries of it: each begins a new run (reset_for_retry)


def _row(model: type[BaseModel], row: Any) -> Any:
    return model.model_validate(dict(zip(row.keys(), row, strict=True)))


def insert_instance(
    conn: Any, *, instance_id: str, workflow: str, key: str, input_json: str, now: float
) -> bool:
    """Create a queued instance; False if one with this id exists already (idempotent start)."""
    cursor = conn.execute(
        "INSERT OR IGNORE INTO workflow_instances "
        "(id, workflow, key, status, input, created_at, updated_at) "
        "VALUES (?, ?, ?, 'queued', ?, ?, ?)",
        (instance_id, workflow, key, input_json, now, now),
    )
    return cursor.rowcount == 1


def get_instance(conn: Any, instance_id: str) -> InstanceRecord:
    row = conn.execute("SELECT * FROM workflow_instances WHERE id = ?", (instance_id,)).fetchone()
    if row is None:
        raise InstanceNotFound(f"no workflow instance {instance_id!r}; see `agentd workflows ls`")
    return _row(InstanceRecord, row)


def find_instance(conn: Any, instance_id: str) -> InstanceRecord | None:
    try:
        return get_instance(conn, instance_id)
    except InstanceNotFound:
        return None


def next_open_for_key(conn: Any, key: str, skip: Collection[str] = ()) -> InstanceRecord | None:
    """The key's oldest open instance, leaving out `skip` (those already under way here)."""
    marks = f"AND id NOT IN ({', '.join('?' * len(skip))}) " if skip else ""
    row = conn.execute(
        f"SELECT * FROM workflow_instances WHERE key = ? AND status IN {_OPEN_SQL} {marks}"
        "ORDER BY seq LIMIT 1",
        (key, *skip),
    ).fetchone()
    return _row(InstanceRecord, row) if row else None


def open_ids_like(conn: Any, prefix: str) -> list[str]:
    """The ids of the open instances whose id starts with `prefix`."""
    rows = conn.execute(
        f"SELECT id FROM workflow_instances WHERE status IN {_OPEN_SQL} "
        "AND substr(id, 1, length(?)) = ?",
        (prefix, prefix),
    ).fetchall()
    return [r[0] for r in rows]


def open_keys(conn: Any) -> list[str]:
    rows = conn.execute(
        f"SELECT DISTINCT key FROM workflow_instances WHERE status IN {_OPEN_SQL}"
    ).fetchall()
    return [r[0] for r in rows]


def list_instances(
    conn: Any, *, status: str | None = None, workflow: str | None = None, limit: int = 50
) -> list[InstanceRecord]:
    where, params = [], []
    if status:
        where.append("status = ?")
        params.append(status)
    if workflow:
        where.append("workflow = ?")
        params.append(workflow)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        f"SELECT * FROM workflow_instances {clause} ORDER BY seq DESC LIMIT ?", (*params, limit)
    ).fetchall()
    return [_row(InstanceRecord, r) for r in rows]


def set_status(
    conn: Any,
    instance_id: str,
    status: str,
    now: float,
    *,
    output: str | None = None,
    error: str | None = None,
    wake_at: float | None = None,
    waiting_for: str | None = None,
) -> None:
    finished = now if status in FINAL_STATUSES else None
    conn.execute(
        "UPDATE workflow_instances SET status = ?, output = COALESCE(?, output), error = ?, "
        "wake_at = ?, waiting_for = ?, updated_at = ?, finished_at = ? WHERE id = ?",
        (status, output, error, wake_at, waiting_for, now, finished, instance_id),
    )


def mark_running(conn: Any, instance_id: str, now: float) -> bool:
    """Take an open, uncancelled instance into running; False if it was cancelled or finished
    meanwhile (a cancel may land while the instance waits for a concurrency slot)."""
    cursor = conn.execute(
        "UPDATE workflow_instances SET status = 'running', runs = runs + 1, wake_at = NULL, "
        f"waiting_for = NULL, updated_at = ? WHERE id = ? AND status IN {_OPEN_SQL} "
        "AND cancel_requested = 0",
        (now, instance_id),
    )
    return cursor.rowcount == 1


def load_steps(conn: Any, instance_id: str) -> dict[int, StepRecord]:
    rows = conn.execute(
        "SELECT ordinal, name, kind, status, delivery, result, error, started_at, finished_at, "
        "wake_at FROM workflow_steps WHERE instance_id = ? ORDER BY ordinal",
        (instance_id,),
    ).fetchall()
    return {r[0]: _row(StepRecord, r) for r in rows}


def load_attempts(conn: Any, instance_id: str) -> list[AttemptRecord]:
    rows = conn.execute(
        "SELECT ordinal, attempt, started_at, finished_at, outcome, error FROM workflow_attempts "
        "WHERE instance_id = ? ORDER BY ordinal, attempt",
        (instance_id,),
    ).fetchall()
    return [_row(AttemptRecord, r) for r in rows]


def begin_step(
    conn: Any,
    instance_id: str,
    ordinal: int,
    name: str,
    kind: str,
    now: float,
    *,
    delivery: str = "at_least_once",
    wake_at: float | None = None,
    attempt: int | None = None,
) -> None:
    """Record a step as started (and its first attempt), before any effect happens."""
    conn.execute(
        "INSERT INTO workflow_steps (instance_id, ordinal, name, kind, status, delivery, "
        "started_at, wake_at) VALUES (?, ?, ?, ?, 'running', ?, ?, ?) "
        "ON CONFLICT (instance_id, ordinal) DO NOTHING",
        (instance_id, ordinal, name, kind, delivery, now, wake_at),
    )
    if attempt is not None:
        begin_attempt(conn, instance_id, ordinal, attempt, now)


def record_step(
    conn: Any,
    instance_id: str,
    ordinal: int,
    name: str,
    *,
    delivery: str,
    attempt: int,
    started_at: float,
    now: float,
    status: str = "complete",
    outcome: str = "complete",
    result: str | None = None,
    error: str | None = None,
) -> None:
    """Record a `do` step and one attempt whole, after the fact (no row was written before its
    effect). Upserts: a row left 'running' by an older journal, or written twice, is fine."""
    conn.execute(
        "INSERT INTO workflow_steps (instance_id, ordinal, name, kind, status, delivery, result, "
        "error, started_at, finished_at) VALUES (?, ?, ?, 'do', ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (instance_id, ordinal) DO UPDATE SET status = excluded.status, "
        "delivery = excluded.delivery, result = excluded.result, error = excluded.error, "
        "finished_at = excluded.finished_at",
        (
            instance_id,
            ordinal,
            name,
            status,
            delivery,
            result,
            error,
            started_at,
            None if status == "running" else now,
        ),
    )
    conn.execute(
        "INSERT INTO workflow_attempts (instance_id, ordinal, attempt, started_at, finished_at, "
        "outcome, error) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (instance_id, ordinal, attempt) DO UPDATE SET "
        "finished_at = excluded.finished_at, outcome = excluded.outcome, error = excluded.error",
        (instance_id, ordinal, attempt, started_at, now, outcome, error),
    )


def refuse_if_cancelled(conn: Any, instance_id: str) -> None:
    """Raise CancelRequested if the instance is flagged: called in the transaction that
    journals an effect's start, so a cancel committed first always stops the effect, and one
    committed after sees the started row (the single writer orders the two)."""
    row = conn.execute(
        "SELECT cancel_requested FROM workflow_instances WHERE id = ?", (instance_id,)
    ).fetchone()
    if row is not None and row[0]:
        raise CancelRequested(f"instance {instance_id} was asked to cancel")


def begin_attempt(conn: Any, instance_id: str, ordinal: int, attempt: int, now: float) -> None:
    conn.execute(
        "INSERT INTO workflow_attempts (instance_id, ordinal, attempt, started_at) "
        "VALUES (?, ?, ?, ?)",
        (instance_id, ordinal, attempt, now),
    )


# In `kv` while an engine runs; still there at start: the last process died without stopping.
_RUNNING_KEY = "engine.running"


def note_engine_start(conn: Any, now: float) -> bool:
    """Record that an engine runs now; True if the previous one died without stopping."""
    died = conn.execute("SELECT 1 FROM kv WHERE key = ?", (_RUNNING_KEY,)).fetchone() is not None
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (_RUNNING_KEY, repr(now)),
    )
    return died


def note_engine_stop(conn: Any) -> None:
    conn.execute("DELETE FROM kv WHERE key = ?", (_RUNNING_KEY,))


def _frontier(conn: Any, instance_id: str) -> tuple[int, str]:
    """(settled steps, the step it was in or after): how far an instance's journal got."""
    settled = conn.execute(
        "SELECT COUNT(*) FROM workflow_steps WHERE instance_id = ? "
        "AND status IN ('complete', 'failed', 'unknown')",
        (instance_id,),
    ).fetchone()[0]
    row = conn.execute(
        "SELECT name, status FROM workflow_steps WHERE instance_id = ? "
        "ORDER BY (status = 'running') DESC, ordinal DESC LIMIT 1",
        (instance_id,),
    ).fetchone()
    if row is None:
        return int(settled), "its first step"
    return int(settled), (f"step {row[0]}" if row[1] == "running" else f"the step after {row[0]}")


def count_crashes(conn: Any, now: float, limit: int) -> tuple[list[str], list[str]]:
    """After a process death: count it against every instance that was running, and park
    (errored) each one found at the same point of its journal `limit` deaths in a row.

    Returns (parked ids, suspects: the others that were running). An instance that got
    further since its last death starts counting again, so only a step that dies every time
    is parked. Suspects go back to 'queued': none of them is running now, and the engine
    resumes them one at a time, so the next death is counted against the one that caused it
    and not against a bystander that happened to be mid-step beside it.
    """
    parked: list[str] = []
    suspects: list[str] = []
    running = conn.execute("SELECT id FROM workflow_instances WHERE status = 'running'")
    for (instance_id,) in running.fetchall():
        frontier, step = _frontier(conn, instance_id)
        row = conn.execute(
            "SELECT frontier, crashes FROM workflow_crashes WHERE instance_id = ?", (instance_id,)
        ).fetchone()
        crashes = row[1] + 1 if row is not None and row[0] == frontier else 1
        conn.execute(
            "INSERT INTO workflow_crashes (instance_id, frontier, crashes, step, last_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (instance_id) DO UPDATE SET "
            "frontier = excluded.frontier, crashes = excluded.crashes, step = excluded.step, "
            "last_at = excluded.last_at",
            (instance_id, frontier, crashes, step, now),
        )
        if crashes >= limit:
            error = (
                f"stopped after {crashes} crashes: {step} was running each time the process died"
            )
            set_status(conn, instance_id, "errored", now, error=error)
            parked.append(instance_id)
        else:
            conn.execute(
                "UPDATE workflow_instances SET status = 'queued', updated_at = ? WHERE id = ?",
                (now, instance_id),
            )
            suspects.append(instance_id)
    return parked, suspects


def interrupted_attempts(conn: Any, instance_id: str, step: str) -> int:
    """Earlier attempts of a step that started and never ended: the process died in them."""
    row = conn.execute(
        "SELECT COUNT(*) FROM workflow_attempts a JOIN workflow_steps s "
        "ON s.instance_id = a.instance_id AND s.ordinal = a.ordinal "
        "WHERE a.instance_id = ? AND s.name = ? AND a.outcome = 'running'",
        (instance_id, step),
    ).fetchone()
    return max(0, int(row[0]) - 1)  # the attempt running now is open too


def max_attempt(conn: Any, instance_id: str, ordinal: int) -> int:
    row = conn.execute(
        "SELECT COALESCE(MAX(attempt), 0) FROM workflow_attempts "
        "WHERE instance_id = ? AND ordinal = ?",
        (instance_id, ordinal),
    ).fetchone()
    return int(row[0])


def end_attempt(
    conn: Any,
    instance_id: str,
    ordinal: int,
    attempt: int,
    now: float,
    outcome: str,
    error: str | None = None,
) -> None:
    conn.execute(
        "UPDATE workflow_attempts SET finished_at = ?, outcome = ?, error = ? "
        "WHERE instance_id = ? AND ordinal = ? AND attempt = ?",
        (now, outcome, error, instance_id, ordinal, attempt),
    )


def finish_step(
    conn: Any,
    instance_id: str,
    ordinal: int,
    now: float,
    *,
    status: str,
    result: str | None = None,
    error: str | None = None,
) -> None:
    conn.execute(
        "UPDATE workflow_steps SET status = ?, result = ?, error = ?, finished_at = ? "
        "WHERE instance_id = ? AND ordinal = ?",
        (status, result, error, now, instance_id, ordinal),
    )


def insert_event(
    conn: Any,
    instance_id: str,
    event_type: str,
    payload: dict[str, Any],
    now: float,
    event_id: str | None = None,
) -> bool:
    """Put an event in the instance's mailbox; False if event_id was delivered before."""
    cursor = conn.execute(
        "INSERT OR IGNORE INTO workflow_events (instance_id, type, payload, event_id, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (instance_id, event_type, json.dumps(payload), event_id, now),
    )
    return cursor.rowcount == 1


def consume_event(
    conn: Any, instance_id: str, event_type: str, ordinal: int, now: float
) -> dict[str, Any] | None:
    """Take the oldest unconsumed event of this type and complete the waiting step with it."""
    row = conn.execute(
        "SELECT id, payload, event_id, created_at FROM workflow_events "
        "WHERE instance_id = ? AND type = ? AND consumed_at IS NULL ORDER BY id LIMIT 1",
        (instance_id, event_type),
    ).fetchone()
    if row is None:
        return None
    conn.execute(
        "UPDATE workflow_events SET consumed_at = ?, consumed_by = ? WHERE id = ?",
        (now, ordinal, row[0]),
    )
    event = {
        "type": event_type,
        "payload": json.loads(row[1]),
        "event_id": row[2],
        "created_at": row[3],
    }
    finish_step(
        conn, instance_id, ordinal, now, status="complete", result=json.dumps({"event": event})
    )
    return event


def instances_with_pending_events(conn: Any) -> set[str]:
    rows = conn.execute(
        "SELECT DISTINCT instance_id FROM workflow_events WHERE consumed_at IS NULL"
    ).fetchall()
    return {r[0] for r in rows}


def cancel_requested_ids(conn: Any) -> set[str]:
    rows = conn.execute(
        f"SELECT id FROM workflow_instances WHERE cancel_requested = 1 AND status IN {_OPEN_SQL}"
    ).fetchall()
    return {r[0] for r in rows}


def request_cancel(conn: Any, instance_id: str, now: float) -> str:
    """Cancel a queued instance at once, or flag a started one for its runner; return the status."""
    inst = get_instance(conn, instance_id)
    if inst.status in FINAL_STATUSES:
        return inst.status
    if inst.status == "queued" and inst.runs == 0:
        set_status(conn, instance_id, "cancelled", now, error="cancelled before it started")
        return "cancelled"
    conn.execute(
        "UPDATE workflow_instances SET cancel_requested = 1, updated_at = ? WHERE id = ?",
        (now, instance_id),
    )
    return "cancel_requested"


def reset_for_retry(conn: Any, instance_id: str, now: float) -> None:
    """Requeue an errored or cancelled instance: completed steps stay memoized, the failed
    step runs again, and whatever the workflow did after that failure is forgotten."""
    inst = get_instance(conn, instance_id)
    if inst.status not in ("errored", "cancelled"):
        raise ValueError(
            f"instance {instance_id} is {inst.status}; only errored or cancelled can be retried"
        )
    # A parked crash loop starts counting again: the owner chose to try it once more.
    conn.execute("DELETE FROM workflow_crashes WHERE instance_id = ?", (instance_id,))
    failed = conn.execute(
        "SELECT MIN(ordinal) FROM workflow_steps WHERE instance_id = ? "
        "AND status IN ('failed', 'unknown', 'running')",
        (instance_id,),
    ).fetchone()[0]
    if failed is not None:
        conn.execute(
            "DELETE FROM workflow_steps WHERE instance_id = ? AND ordinal > ?",
            (instance_id, failed),
        )
        # An interrupted at-most-once attempt was marked 'unknown', so the owner's retry runs
        # the step afresh rather than reporting the unknown outcome again.
        conn.execute(
            "UPDATE workflow_attempts SET outcome = 'unknown' "
            "WHERE instance_id = ? AND ordinal = ? AND outcome = 'running'",
            (instance_id, failed),
        )
        # A new started_at begins a new retry sequence: the step gets its full attempts again.
        conn.execute(
            "UPDATE workflow_steps SET status = 'running', error = NULL, result = NULL, "
            "finished_at = NULL, started_at = ? WHERE instance_id = ? AND ordinal = ?",
            (now, instance_id, failed),
        )
    requeue_retried(conn, instance_id, now)


def requeue_retried(conn: Any, instance_id: str, now: float) -> None:
    """Queue an instance the owner retried, counting the retry: what the run sends outside
    the journal under ids of its own (a turn's drafts) must not be the earlier run's."""
    conn.execute(
        "UPDATE workflow_instances SET status = 'queued', error = NULL, output = NULL, "
        "cancel_requested = 0, finished_at = NULL, retries = retries + 1, updated_at = ? "
        "WHERE id = ?",
        (now, instance_id),
    )
