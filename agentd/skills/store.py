"""The owner's decisions about skills, in the `skills` table: which are enabled, at which hash.

A skill is offered to the model only while its record is `enabled` and its files still hash to
what the owner confirmed. A mismatch (checked at daemon start and before each use) turns the
record to `changed`: held back until `agentd skills enable NAME` confirms the new content.
Every function takes a connection (sync); the daemon runs them through its Database.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

from agentd.ledger import audit
from agentd.skills.catalog import Catalog
from agentd.skills.folder import SkillFolder

Status = Literal["enabled", "disabled", "changed"]


class SkillRecord(BaseModel):
    name: str
    path: str
    description: str
    content_hash: str
    status: Status
    source: str
    scripts: int
    allowed_tools: list[str]
    confirmed_at: float
    changed_at: float | None = None
    change_note: str | None = None


def _record(row: Any) -> SkillRecord:
    data = dict(row)
    data["allowed_tools"] = json.loads(data["allowed_tools"])
    return SkillRecord.model_validate(data)


def records(conn: Any) -> dict[str, SkillRecord]:
    rows = conn.execute("SELECT * FROM skills ORDER BY name").fetchall()
    return {row["name"]: _record(row) for row in rows}


def get(conn: Any, name: str) -> SkillRecord | None:
    row = conn.execute("SELECT * FROM skills WHERE name = ?", (name,)).fetchone()
    return _record(row) if row else None


def listing(conn: Any) -> tuple[tuple[str, str], ...]:
    """(name, description) of every enabled skill, by name: what the prompt lists."""
    rows = conn.execute(
        "SELECT name, description FROM skills WHERE status = 'enabled' ORDER BY name"
    ).fetchall()
    return tuple((r[0], r[1]) for r in rows)


def any_enabled(conn: Any, chat_id: int) -> bool:
    """Some skill is enabled: the skill tools' `offered` read (with none they would only cost
    tokens; a skill is the owner's in every chat, so the chat does not matter)."""
    return (
        conn.execute("SELECT 1 FROM skills WHERE status = 'enabled' LIMIT 1").fetchone() is not None
    )


def confirm(conn: Any, skill: SkillFolder, source: str, now: float, by: str = "cli") -> None:
    """The owner saw this content and enabled it: pin its hash."""
    conn.execute(
        "INSERT INTO skills (name, path, description, content_hash, status, source, scripts, "
        "allowed_tools, confirmed_at) VALUES (?, ?, ?, ?, 'enabled', ?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET path = excluded.path, "
        "description = excluded.description, content_hash = excluded.content_hash, "
        "status = 'enabled', source = excluded.source, scripts = excluded.scripts, "
        "allowed_tools = excluded.allowed_tools, confirmed_at = excluded.confirmed_at, "
        "changed_at = NULL, change_note = NULL",
        (
            skill.name,
            str(skill.path),
            skill.manifest.description,
            skill.content_hash,
            source,
            len(skill.scripts),
            json.dumps(skill.manifest.allowed_tools),
            now,
        ),
    )
    audit.record(
        conn,
        "skill_enabled",
        at=now,
        detail={
            "skill": skill.name,
            "hash": skill.content_hash,
            "source": source,
            "by": by,
            "scripts": len(skill.scripts),
        },
    )


def set_status(conn: Any, name: str, status: Status, now: float, note: str = "") -> bool:
    """Disable or mark changed; False when there is no such record."""
    cursor = conn.execute(
        "UPDATE skills SET status = ?, changed_at = ?, change_note = ? WHERE name = ?",
        (status, now, note or None, name),
    )
    if cursor.rowcount:
        audit.record(conn, f"skill_{status}", at=now, detail={"skill": name, "note": note})
    return bool(cursor.rowcount)


def forget(conn: Any, name: str, now: float) -> bool:
    cursor = conn.execute("DELETE FROM skills WHERE name = ?", (name,))
    if cursor.rowcount:
        audit.record(conn, "skill_removed", at=now, detail={"skill": name})
    return bool(cursor.rowcount)


def drift(record: SkillRecord, catalog: Catalog) -> str:
    """Why an enabled skill no longer matches what the owner confirmed ("" when it does)."""
    found = catalog.skills.get(record.name)
    if found is None:
        bad = next((i for i in catalog.invalid if str(i.path) == record.path), None)
        return f"it is no longer valid: {bad.reason}" if bad else "its folder is gone"
    if str(found.path) != record.path:
        return f"it moved from {record.path} to {found.path}"
    if found.content_hash != record.content_hash:
        return "its files changed since you enabled it"
    return ""


def reconcile(conn: Any, catalog: Catalog, now: float) -> list[tuple[str, str]]:
    """Mark every enabled skill whose files drifted as changed; [(name, why)]."""
    held = []
    for record in records(conn).values():
        if record.status != "enabled":
            continue
        why = drift(record, catalog)
        if why:
            set_status(conn, record.name, "changed", now, why)
            held.append((record.name, why))
    return held
