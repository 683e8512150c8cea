"""Watches and their checks as plain SQL functions of a connection (daemon and CLI share them).

A watch's occurrences are instances `sched-<id>-<due>` on key `watch-<id>`: the schedule's
naming, so `agentd usage --schedule <id>` and the dashboard's cost page count their calls.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from agentd.chat.inputs import ChatKind
from agentd.durable import store as durable
from agentd.ledger import audit
from agentd.schedule import Recurrence
from agentd.watch.model import Seen, Source

WATCH_WORKFLOW = "watch"
# A message waits for /mute as an event wait, so `/mute off` lets it go at once. Instances
# journaled before that, asleep until the mute's end, finish by the flow they began with.
TELL_WORKFLOW = "watch_tell_v2"
LEGACY_TELL_WORKFLOW = "watch_tell"
UNMUTE_EVENT = "unmute"
State = Literal["active", "paused", "removed"]
CatchUp = Literal["skip", "once", "all"]
Outcome = Literal["baseline", "unchanged", "quiet", "told", "failed", "capped", "missed"]
_COLUMNS = (
    "id, user_id, chat_id, chat_kind, label, source, condition, recurrence, catch_up, "
    "daily_tokens, state, next_run, seen, fail_streak, failing_told, capped_day, "
    "cap_lifted_day, created_at, updated_at, created_by"
)
_NAMES = _COLUMNS.split(", ")


class Watch(BaseModel):
    id: str
    user_id: int
    chat_id: int
    chat_kind: ChatKind  # where it tells: what it reads of the owner's goes only to a private chat
    label: str
    source: Source
    condition: str
    recurrence: Recurrence
    catch_up: CatchUp
    daily_tokens: int | None
    state: State
    next_run: float | None
    seen: Seen | None
    fail_streak: int
    failing_told: bool
    capped_day: str | None
    # The day the owner resumed it over a cap: its own caps (and all watches') let it go on.
    cap_lifted_day: str | None = None
    created_at: float
    updated_at: float
    created_by: str


class OccurrenceInput(BaseModel):
    watch_id: str
    due: int


class NotFound(LookupError):
    """No watch with this id (for this user)."""


def instance_prefix(watch_id: str) -> str:
    """What every instance id of this watch's checks starts with (its usage is found by it)."""
    return f"sched-{watch_id}-"


def occurrence_id(watch_id: str, due: int) -> str:
    return f"{instance_prefix(watch_id)}{due}"


def watch_key(watch_id: str) -> str:
    return f"watch-{watch_id}"


def utc_day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _row(row: Any) -> Watch:
    data = dict(zip(_NAMES, row, strict=True))
    for key in ("source", "recurrence", "seen"):
        data[key] = json.loads(data[key]) if data[key] else None
    return Watch.model_validate(data)


def insert(conn: Any, w: Watch) -> bool:
    values = w.model_dump()
    values["source"] = w.source.model_dump_json()
    values["recurrence"] = w.recurrence.model_dump_json()
    values["seen"] = w.seen.model_dump_json() if w.seen else None
    cursor = conn.execute(
        f"INSERT OR IGNORE INTO watches ({_COLUMNS}) VALUES ({', '.join('?' * len(_NAMES))})",
        tuple(values[c] for c in _NAMES),
    )
    return cursor.rowcount == 1


def get(conn: Any, watch_id: str, *, user_id: int | None = None) -> Watch:
    row = conn.execute(f"SELECT {_COLUMNS} FROM watches WHERE id = ?", (watch_id,)).fetchone()
    if row is None or (user_id is not None and row[1] != user_id) or row[10] == "removed":
        raise NotFound(f"no watch {watch_id!r}; list them with /watches or `agentd watch ls`")
    return _row(row)


def get_any(conn: Any, watch_id: str) -> Watch | None:
    """The watch whatever its state (a removed one too), or None."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM watches WHERE id = ?", (watch_id,)).fetchone()
    return None if row is None else _row(row)


def list_watches(
    conn: Any, *, user_id: int | None = None, states: tuple[str, ...] = ("active", "paused")
) -> list[Watch]:
    where, params = [f"state IN ({', '.join('?' * len(states))})"], list(states)
    if user_id is not None:
        where.append("user_id = ?")
        params.append(user_id)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM watches WHERE {' AND '.join(where)} ORDER BY created_at",
        params,
    ).fetchall()
    return [_row(r) for r in rows]


def count_active(conn: Any, user_id: int) -> int:
    sql = "SELECT COUNT(*) FROM watches WHERE user_id = ? AND state IN ('active', 'paused')"
    return int(conn.execute(sql, (user_id,)).fetchone()[0])


def start_occurrence(conn: Any, w: Watch, due: int, now: float, *, resumed: bool = False) -> str:
    """The sleeping instance of one check, noted as the next run (a resume after a pause may
    meet its cancelled instance: the new one gets a suffix; the check is still one per due)."""
    instance_id = occurrence_id(w.id, due)
    if resumed and durable.find_instance(conn, instance_id) is not None:
        instance_id = f"{instance_id}-r{int(now * 1000)}"
    durable.insert_instance(
        conn,
        instance_id=instance_id,
        workflow=WATCH_WORKFLOW,
        key=watch_key(w.id),
        input_json=OccurrenceInput(watch_id=w.id, due=due).model_dump_json(),
        now=now,
    )
    conn.execute("UPDATE watches SET next_run = ?, updated_at = ? WHERE id = ?", (due, now, w.id))
    return instance_id


def set_state(conn: Any, w: Watch, state: State, now: float, *, by: str) -> Watch:
    """Pause, resume or remove; the sleeping check is cancelled (the daemon sees it at once).
    A resume also lifts a cap reached today (the owner chose to spend more)."""
    next_run = w.next_run
    if state in ("paused", "removed"):
        for (instance_id,) in conn.execute(
            f"SELECT id FROM workflow_instances WHERE key = ? AND status IN "
            f"{durable.OPEN_STATUSES!r}",
            (watch_key(w.id),),
        ).fetchall():
            durable.request_cancel(conn, instance_id, now)
        next_run = None
    lifted = utc_day(now) if state == "active" and w.capped_day else w.cap_lifted_day
    conn.execute(
        "UPDATE watches SET state = ?, next_run = ?, capped_day = CASE WHEN ? = 'active' "
        "THEN NULL ELSE capped_day END, cap_lifted_day = ?, updated_at = ? WHERE id = ?",
        (state, next_run, state, lifted, now, w.id),
    )
    changed = {"state": state, "next_run": next_run, "updated_at": now, "cap_lifted_day": lifted}
    updated = w.model_copy(update=changed)
    if state == "active" and w.state == "paused":
        due = w.recurrence.next_after(now)
        if due is not None:
            start_occurrence(conn, updated, due, now, resumed=True)
            updated = updated.model_copy(update={"next_run": float(due), "capped_day": None})
    audit.record(
        conn,
        f"watch_{'resumed' if state == 'active' else state}",
        chat_id=w.chat_id,
        user_id=w.user_id,
        detail={"watch": w.id, "by": by},
        at=now,
    )
    return updated


def record_check(
    conn: Any,
    w: Watch,
    due: int,
    outcome: Outcome,
    now: float,
    *,
    tokens: int = 0,
    detail: str = "",
) -> bool:
    """One check's outcome, once per due time; False when it was recorded already."""
    cursor = conn.execute(
        "INSERT OR IGNORE INTO watch_checks (watch_id, due, outcome, tokens, at, detail) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (w.id, due, outcome, tokens, now, detail[:500]),
    )
    return cursor.rowcount == 1


def save_seen(conn: Any, watch_id: str, seen: Seen, now: float) -> None:
    conn.execute(
        "UPDATE watches SET seen = ?, updated_at = ? WHERE id = ?",
        (seen.model_dump_json(), now, watch_id),
    )


class Stats(BaseModel):
    checks: int = 0
    unchanged: int = 0
    quiet: int = 0
    told: int = 0
    failed: int = 0
    capped: int = 0
    missed: int = 0
    tokens: int = 0


def stats(conn: Any, watch_id: str, since: float = 0.0) -> Stats:
    rows = conn.execute(
        "SELECT outcome, COUNT(*), SUM(tokens) FROM watch_checks WHERE watch_id = ? AND at >= ? "
        "GROUP BY outcome",
        (watch_id, since),
    ).fetchall()
    out = Stats()
    for outcome, n, tokens in rows:
        key = "unchanged" if outcome in ("baseline", "unchanged") else outcome
        if hasattr(out, key):
            setattr(out, key, getattr(out, key) + int(n))
        out.tokens += int(tokens or 0)
        if outcome != "missed":
            out.checks += int(n)
    return out


class Check(BaseModel):
    due: float
    outcome: str
    tokens: int
    at: float
    detail: str


def checks(conn: Any, watch_id: str, limit: int = 20) -> list[Check]:
    rows = conn.execute(
        "SELECT due, outcome, tokens, at, detail FROM watch_checks WHERE watch_id = ? "
        "ORDER BY due DESC LIMIT ?",
        (watch_id, limit),
    ).fetchall()
    return [Check.model_validate(dict(zip(Check.model_fields, r, strict=True))) for r in rows]


def muted_until(conn: Any, chat_id: int) -> float:
    row = conn.execute("SELECT until FROM watch_mutes WHERE chat_id = ?", (chat_id,)).fetchone()
    return float(row[0]) if row else 0.0


def unmute(conn: Any, chat_id: int, now: float) -> int:
    """`/mute off`: the mute ends, and each message it holds goes now (quiet hours, which no
    command lifts, still hold it); how many were let go."""
    set_mute(conn, chat_id, 0.0)
    held = conn.execute(
        "SELECT id FROM workflow_instances WHERE workflow = ? AND status = 'waiting' "
        "AND waiting_for = ? AND json_extract(input, '$.chat_id') = ?",
        (TELL_WORKFLOW, UNMUTE_EVENT, chat_id),
    ).fetchall()
    for (iid,) in held:
        durable.insert_event(conn, iid, UNMUTE_EVENT, {}, now, event_id=f"{iid}:{UNMUTE_EVENT}")
    return len(held)


def set_mute(conn: Any, chat_id: int, until: float) -> None:
    if until <= 0:
        conn.execute("DELETE FROM watch_mutes WHERE chat_id = ?", (chat_id,))
        return
    conn.execute(
        "INSERT INTO watch_mutes (chat_id, until) VALUES (?, ?) "
        "ON CONFLICT (chat_id) DO UPDATE SET until = excluded.until",
        (chat_id, until),
    )
