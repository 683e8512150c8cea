"""What the owner does to memory by hand: add, edit, forget, restore, pin: one library for the
CLI, the chat's /memory command and the dashboard.

Every operation records a version (versions.py), and an owner's edit, forget, pin and restore
an audit entry naming where it was made (`by`: cli, chat, dashboard). Text the owner types,
edits or restores from their own version is `origin="user"`: their words, which never taint a
turn. Embedding happens before the write transaction, as everywhere in memory/.
"""

from __future__ import annotations

import json
import time
from typing import Any

from agentd.db.runner import Runner
from agentd.ledger import audit
from agentd.memory.facts import ExtractedFact, norm_text, normalise_slot, upsert_fact
from agentd.memory.store import (
    FACT_KINDS,
    Memory,
    MemoryKind,
    MemoryStoreError,
    NewMemory,
    Origin,
    add_memory,
    embedding_text,
    get_memory,
    set_vectors,
    update_content,
)
from agentd.memory.versions import Actor, Version, get_version, list_versions, record_version
from agentd.retrieval.embedders import Embedder
from agentd.retrieval.fts import cjk_index_text

Conn = Any


class MemoryNotFound(MemoryStoreError):
    """No such memory (or version) for this user."""


def _audit(conn: Conn, memory: Memory, action: str, by: str, **detail: object) -> None:
    kind = "memory_forgotten" if action == "forget" else "memory_changed"
    info = {"memory": memory.id, "action": action, "by": by, **detail}
    audit.record(conn, kind, user_id=memory.user_id, detail=info)


def owned(conn: Conn, memory_id: int, user_id: int | None) -> Memory:
    memory = get_memory(conn, memory_id)
    if memory is None or (user_id is not None and memory.user_id != user_id):
        raise MemoryNotFound(f"no memory {memory_id}")
    return memory


def add_text(
    conn: Conn,
    memory: NewMemory,
    vector: list[float] | None,
    model_id: str | None,
    *,
    key: str | None = None,
    actor: Actor = "owner",
    now: float | None = None,
) -> tuple[Memory, str]:
    """Store a memory written by hand; (memory, "added" | "superseded" | "merged" |
    "unchanged").

    A fact with a key supersedes the user's fact with that key (the old text stays in its
    history); a memory whose text the user already has (same kind, normalised) merges into it.
    """
    if key is not None and memory.kind in FACT_KINDS:
        change = upsert_fact(
            conn,
            memory.user_id,
            ExtractedFact(kind=memory.kind, key=key, content=memory.content),  # type: ignore[arg-type]
            vector,
            model_id,
            source=memory.source,
            origin=memory.origin,
            origin_ref=memory.origin_ref,
            actor=actor,
            now=now,
        )
        action = {"added": "added", "replaced": "superseded"}.get(change.action, "unchanged")
        stored = owned(conn, int(change.memory_id or 0), None)
        if memory.pinned and action != "unchanged" and not stored.pinned:
            stored = _pin_keyed(conn, stored)
        return stored, action
    same = _same_text(conn, memory)
    if same is not None:
        return same, "merged"
    memory_id = add_memory(conn, memory, vector, model_id, now=now)
    stored = owned(conn, memory_id, None)
    action = "import" if actor == "import" else "add"
    record_version(conn, stored, action, actor, old=None, new=stored.content, now=now)
    return stored, "added"


def _pin_keyed(conn: Conn, memory: Memory) -> Memory:
    """Pin a keyed fact just written: upsert_fact (shared with the model's facts, never
    pinned) takes no pin, yet a pinned keyed fact must come back pinned from its export."""
    conn.execute("UPDATE memories SET pinned = 1 WHERE id = ?", (memory.id,))
    return memory.model_copy(update={"pinned": True})


def _same_text(conn: Conn, memory: NewMemory) -> Memory | None:
    target = norm_text(memory.content)
    rows = conn.execute(
        "SELECT id, content FROM memories WHERE user_id = ? AND kind = ?",
        (memory.user_id, memory.kind),
    ).fetchall()
    found = next((int(r[0]) for r in rows if norm_text(r[1]) == target), None)
    return None if found is None else owned(conn, found, None)


def edit_text(
    conn: Conn,
    memory_id: int,
    content: str,
    vector: list[float] | None,
    model_id: str | None,
    *,
    user_id: int | None = None,
    actor: Actor = "owner",
    origin_ref: str = "edit",
    by: str = "cli",
    now: float | None = None,
) -> Memory:
    """Rewrite a memory in the owner's words: it becomes `origin="user"`."""
    old = owned(conn, memory_id, user_id)
    content = " ".join(content.split())
    if not content:
        raise MemoryStoreError("a memory cannot be empty: use forget")
    update_content(
        conn,
        memory_id,
        content,
        vector,
        model_id,
        context=old.context,
        origin="user",
        origin_ref=origin_ref,
        now=now,
    )
    new = owned(conn, memory_id, None)
    record_version(conn, new, "edit", actor, old=old.content, new=content, now=now)
    _audit(conn, new, "edit", by)
    return new


def forget_one(
    conn: Conn,
    memory_id: int,
    *,
    user_id: int | None = None,
    actor: Actor = "owner",
    by: str = "cli",
) -> Memory:
    """Delete a memory (row, index entries, vector), its text kept in its history."""
    memory = owned(conn, memory_id, user_id)
    record_version(conn, memory, "forget", actor, old=memory.content, new=None)
    _audit(conn, memory, "forget", by)
    conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
    return memory


def forget_all(conn: Conn, user_id: int, *, actor: Actor = "owner", by: str = "cli") -> int:
    ids = [int(r[0]) for r in conn.execute("SELECT id FROM memories WHERE user_id = ?", (user_id,))]
    for memory_id in ids:
        forget_one(conn, memory_id, actor=actor, by=by)
    return len(ids)


def set_pinned(
    conn: Conn, memory_id: int, pinned: bool, *, user_id: int | None = None, by: str = "cli"
) -> Memory:
    """Pin (always in the prompt's facts) or unpin a memory."""
    memory = owned(conn, memory_id, user_id)
    conn.execute("UPDATE memories SET pinned = ? WHERE id = ?", (int(pinned), memory_id))
    memory = memory.model_copy(update={"pinned": pinned})
    action = "pin" if pinned else "unpin"
    record_version(conn, memory, action, "owner", old=memory.content, new=memory.content)
    _audit(conn, memory, action, by)
    return memory


def version_text(conn: Conn, memory_id: int, version: int) -> Version:
    """The version to restore, and so its text (what the memory read after that change)."""
    found = get_version(conn, memory_id, version)
    if found is None:
        raise MemoryNotFound(f"memory {memory_id} has no version {version}")
    return found


def _restored_text(version: Version) -> str:
    text = version.new_content if version.new_content is not None else version.old_content
    if not text:
        raise MemoryStoreError(f"version {version.version} holds no text to restore")
    return text


def restore_version(
    conn: Conn,
    memory_id: int,
    version: int,
    vector: list[float] | None,
    model_id: str | None,
    *,
    user_id: int | None = None,
    by: str = "cli",
    now: float | None = None,
) -> Memory:
    """Make a memory read as it did at `version`, with that version's origin; a forgotten
    memory comes back under its old id."""
    target = version_text(conn, memory_id, version)
    if user_id is not None and target.user_id != user_id:
        raise MemoryNotFound(f"no memory {memory_id}")
    text = _restored_text(target)
    current = get_memory(conn, memory_id)
    if current is None:
        _reinsert(conn, target, text, now)
        if vector is not None and model_id is not None:
            set_vectors(conn, model_id, [(memory_id, vector)])
    else:
        update_content(
            conn,
            memory_id,
            text,
            vector,
            model_id,
            context=current.context,
            origin=target.origin,
            origin_ref=target.origin_ref,
            now=now,
        )
    restored = owned(conn, memory_id, None)
    old = current.content if current is not None else None
    record_version(conn, restored, "restore", "owner", old=old, new=text, now=now)
    _audit(conn, restored, "restore", by, version=version)
    return restored


def _reinsert(conn: Conn, target: Version, text: str, now: float | None) -> None:
    now = time.time() if now is None else now
    slot = target.slot
    if (
        slot is not None
        and conn.execute(
            "SELECT 1 FROM memories WHERE user_id = ? AND slot = ?", (target.user_id, slot)
        ).fetchone()
    ):
        slot = None  # a newer fact holds the key now; the restored one stands beside it
    conn.execute(
        "INSERT INTO memories (id, user_id, kind, content, slot, source, created_at, updated_at,"
        " meta, fts_cjk, origin, origin_ref) VALUES (?, ?, ?, ?, ?, 'restore', ?, ?, ?, ?, ?, ?)",
        (
            target.memory_id,
            target.user_id,
            target.kind,
            text,
            slot,
            now,
            now,
            json.dumps({}),
            cjk_index_text(text),
            target.origin,
            target.origin_ref,
        ),
    )


def history(conn: Conn, memory_id: int, *, user_id: int | None = None) -> list[Version]:
    """A memory's versions, oldest first (also of a forgotten memory)."""
    versions = list_versions(conn, memory_id)
    if not versions or (user_id is not None and versions[0].user_id != user_id):
        memory = get_memory(conn, memory_id)
        if memory is None or (user_id is not None and memory.user_id != user_id):
            raise MemoryNotFound(f"no memory {memory_id}")
    return versions


# --------------------------------------------------------------------------------------------
# Async: embed first, then one write


async def _embed(embedder: Embedder | None, text: str, context: str | None) -> list[float] | None:
    if embedder is None:
        return None
    return list((await embedder.embed_documents([embedding_text(text, context)]))[0])


async def add(
    db: Runner,
    embedder: Embedder | None,
    user_id: int,
    content: str,
    *,
    kind: MemoryKind = "note",
    key: str | None = None,
    origin: Origin = "user",
    origin_ref: str | None = "cli",
    pinned: bool = False,
) -> tuple[Memory, str]:
    """The owner adds a memory in their own words (see add_text)."""
    content = " ".join(content.split())
    memory = NewMemory(
        user_id=user_id,
        kind=kind,
        content=content,
        source="owner",
        slot=normalise_slot(key),
        origin=origin,
        origin_ref=origin_ref,
        pinned=pinned,
    )
    vector = await _embed(embedder, content, None)
    model_id = embedder.model_id if embedder is not None else None
    return await db.write(lambda c: add_text(c, memory, vector, model_id, key=key))


async def edit(
    db: Runner,
    embedder: Embedder | None,
    memory_id: int,
    content: str,
    *,
    user_id: int | None,
    by: str = "cli",
) -> Memory:
    """The owner rewrites a memory (see edit_text)."""
    current = await db.read(lambda c: owned(c, memory_id, user_id))
    vector = await _embed(embedder, " ".join(content.split()), current.context)
    model_id = embedder.model_id if embedder is not None else None
    return await db.write(
        lambda c: edit_text(c, memory_id, content, vector, model_id, user_id=user_id, by=by)
    )


async def restore(
    db: Runner,
    embedder: Embedder | None,
    memory_id: int,
    version: int,
    *,
    user_id: int | None,
    by: str = "cli",
) -> Memory:
    """Roll a memory back to one of its versions (see restore_version)."""
    target = await db.read(lambda c: version_text(c, memory_id, version))
    vector = await _embed(embedder, _restored_text(target), None)
    model_id = embedder.model_id if embedder is not None else None
    return await db.write(
        lambda c: restore_version(c, memory_id, version, vector, model_id, user_id=user_id, by=by)
    )
