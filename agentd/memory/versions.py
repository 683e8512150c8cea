"""Every change to a memory, kept: who made it, when, the text before and after, whose words.

`memory_versions` (migration m031) gets one row per change, numbered per memory from 1. A
superseded fact's old text lives on here (not in `memories`, so it is never recalled); a
forgotten memory keeps its rows, so `restore` can bring it back under its old id. Plain
functions of a connection, run inside the caller's write transaction.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel

from agentd.memory.store import Memory, Origin

Conn = Any
Action = Literal["add", "edit", "supersede", "merge", "forget", "restore", "import", "pin", "unpin"]
Actor = Literal["owner", "model", "import"]


class Version(BaseModel):
    """One recorded change of a memory."""

    memory_id: int
    version: int
    user_id: int
    action: Action
    actor: Actor
    kind: str
    slot: str | None
    old_content: str | None
    new_content: str | None
    origin: Origin
    origin_ref: str | None
    created_at: float


def record_version(
    conn: Conn,
    memory: Memory,
    action: Action,
    actor: Actor,
    *,
    old: str | None,
    new: str | None,
    now: float | None = None,
) -> int:
    """Append a change of `memory` (its state after the change, or before a forget); return
    the version number."""
    row = conn.execute(
        "SELECT coalesce(max(version), 0) + 1 FROM memory_versions WHERE memory_id = ?",
        (memory.id,),
    ).fetchone()
    version = int(row[0])
    conn.execute(
        "INSERT INTO memory_versions (memory_id, version, user_id, action, actor, kind, slot,"
        " old_content, new_content, origin, origin_ref, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            memory.id,
            version,
            memory.user_id,
            action,
            actor,
            memory.kind,
            memory.slot,
            old,
            new,
            memory.origin,
            memory.origin_ref,
            time.time() if now is None else now,
        ),
    )
    return version


_COLUMNS = (
    "memory_id, version, user_id, action, actor, kind, slot, old_content, new_content, origin,"
    " origin_ref, created_at"
)


def _version(row: Any) -> Version:
    return Version(**dict(zip([c.strip() for c in _COLUMNS.split(",")], row, strict=True)))


def list_versions(conn: Conn, memory_id: int) -> list[Version]:
    """A memory's changes, oldest first."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_versions WHERE memory_id = ? ORDER BY version",
        (memory_id,),
    ).fetchall()
    return [_version(r) for r in rows]


def get_version(conn: Conn, memory_id: int, version: int) -> Version | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_versions WHERE memory_id = ? AND version = ?",
        (memory_id, version),
    ).fetchone()
    return None if row is None else _version(row)


def recent_changes(conn: Conn, user_id: int | None = None, *, limit: int = 50) -> list[Version]:
    """The newest changes across memories (one user's, or everyone's for the owner's CLI)."""
    clause, params = ("WHERE user_id = ?", [user_id]) if user_id is not None else ("", [])
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_versions {clause} ORDER BY created_at DESC, id DESC"
        " LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [_version(r) for r in rows]
