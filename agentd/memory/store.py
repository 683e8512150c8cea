"""Memory storage: rows, FTS entries and vectors kept in step, strictly per user.

Layout (migration m002_memory):
- `memories` is the source of truth; `memory_fts` (external-content FTS5) follows it by triggers.
- `memory_vectors` holds the exact float32 vector of each memory and the space (model, dim) it
  belongs to; a memory has at most one vector, so re-embedding replaces it.
- Per space, a vec0 table `memory_bq_<space>` holds the sign bits of each vector
  (`bit[dim]`, hamming distance), partitioned by user (and a shard, see VEC_SHARDS): KNN only
  ever reads the asking user's chunks, and 1-bit vectors make a 100k scan cost milliseconds.
  Search rescores the prefilter's candidates exactly (search.py). Triggers on `memory_vectors`
  keep it in step, so deleting a `memories` row removes its FTS entry, its vector and its bit
  vector, whoever deletes.

The vector tables are the generic ones of `agentd.retrieval.vectors` (shared with documents), bound
here as MEMORY_VECTORS. The vec0 table is created at run time (`ensure_space`), not in the
migration, because its dimension is whatever the configured embedder produces, and a model
change adds a new space instead of altering one. Vectors of other spaces are never searched;
`reindex` re-embeds.

Everything here is a plain function of a connection, so the daemon runs it through
`Database.write/read` and the CLI and benchmarks through `open_sync` (or `ConnRunner`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from agentd.db.runner import Runner
from agentd.retrieval.embedders import Embedder
from agentd.retrieval.fts import cjk_index_text
from agentd.retrieval.vectors import VectorIndex, VectorStoreError

if TYPE_CHECKING:
    from agentd.retrieval.reembed import ReindexReport

Conn = Any  # sqlite3.Connection or sqlean's equivalent

MemoryKind = Literal["summary", "fact", "preference", "task", "note", "turn"]
FACT_KINDS: tuple[str, ...] = ("fact", "preference", "task")
# Whose words a memory is (migration m031): the owner's own (typed, edited, imported), the
# model's (summaries, extracted facts), or derived from outside content (forwarded messages,
# documents, web pages, mail), which is what taints a turn that recalls it.
Origin = Literal["user", "model", "outside"]

# The vector tables of memories: memory_spaces, memory_vectors and memory_bq_<space>, whose
# partition is the memory's user, so a KNN only ever reads the asking user's bit vectors.
MEMORY_VECTORS = VectorIndex(
    prefix="memory",
    key="memory_id",
    partition="SELECT user_id FROM memories WHERE id = new.memory_id",
)


class MemoryStoreError(VectorStoreError):
    """A memory operation cannot be done; the message says why."""


class NewMemory(BaseModel):
    """A memory to store."""

    user_id: int
    kind: MemoryKind
    content: str = Field(min_length=1)
    source: str = ""
    source_key: str | None = None
    chat_id: int | None = None
    slot: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    # What the memory answers or where it sits (the message a turn replied to, a date): indexed
    # and embedded with the content, weighted below it, never shown as the memory.
    context: str | None = None
    origin: Origin = "model"
    origin_ref: str | None = None  # the turn or source it came from ("chat:1:msg:42", a file)
    pinned: bool = False


class Memory(BaseModel):
    """A stored memory, as listed and searched."""

    id: int
    user_id: int
    kind: MemoryKind
    content: str
    source: str
    source_key: str | None
    chat_id: int | None
    slot: str | None
    created_at: float
    updated_at: float
    meta: dict[str, Any]
    context: str | None = None
    model_id: str | None = None  # the space its vector is in; None when it has no vector
    dim: int | None = None
    origin: Origin = "model"
    origin_ref: str | None = None
    pinned: bool = False


class VectorStatus(BaseModel):
    """How many memories have a vector of the current model, of another one, or none."""

    total: int
    current: int
    other_model: int
    missing: int


# --------------------------------------------------------------------------------------------
# Vector spaces


def find_space(conn: Conn, model_id: str, dim: int) -> int | None:
    return MEMORY_VECTORS.find_space(conn, model_id, dim)


def bq_table(space_id: int) -> str:
    return MEMORY_VECTORS.bq_table(space_id)


def ensure_space(conn: Conn, model_id: str, dim: int, *, now: float | None = None) -> int:
    """The id of the space (model, dim), creating it and its vec0 table and triggers if needed."""
    return MEMORY_VECTORS.ensure_space(conn, model_id, dim, now=now)


def drop_other_spaces(conn: Conn, model_id: str, dim: int) -> list[str]:
    """Delete every vector not of (model_id, dim) and its vec0 table; return the spaces dropped."""
    return MEMORY_VECTORS.drop_other_spaces(conn, model_id, dim)


def set_vectors(conn: Conn, model_id: str, items: Sequence[tuple[int, Sequence[float]]]) -> int:
    """Store (memory_id, vector) pairs in the space of model_id, replacing any older vector."""
    return MEMORY_VECTORS.set_vectors(conn, model_id, items)


# --------------------------------------------------------------------------------------------
# Rows


def embedding_text(content: str, context: str | None) -> str:
    """What a memory is embedded as: its context, then the memory (as the FTS row holds both)."""
    return f"{context}\n{content}" if context else content


def add_memory(
    conn: Conn,
    memory: NewMemory,
    vector: Sequence[float] | None = None,
    model_id: str | None = None,
    *,
    now: float | None = None,
) -> int:
    """Insert one memory (and its vector); with a known source_key, return the existing id."""
    return add_memories(conn, [(memory, vector)], model_id, now=now)[0]


def add_memories(
    conn: Conn,
    items: Sequence[tuple[NewMemory, Sequence[float] | None]],
    model_id: str | None = None,
    *,
    now: float | None = None,
) -> list[int]:
    """Insert memories with optional vectors (run inside one write transaction for speed).

    Idempotent on `source_key`: a resumed workflow that stores the same summary again gets the
    first row's id back and nothing is duplicated.
    """
    now = time.time() if now is None else now
    ids: list[int] = []
    vectors: list[tuple[int, Sequence[float]]] = []
    for memory, vector in items:
        if memory.source_key is not None:
            row = conn.execute(
                "SELECT id FROM memories WHERE source_key = ?", (memory.source_key,)
            ).fetchone()
            if row is not None:
                ids.append(int(row[0]))
                continue
        cur = conn.execute(
            "INSERT INTO memories (user_id, kind, content, slot, source, source_key, chat_id,"
            " created_at, updated_at, meta, fts_cjk, context, origin, origin_ref, pinned)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                memory.user_id,
                memory.kind,
                memory.content,
                memory.slot,
                memory.source,
                memory.source_key,
                memory.chat_id,
                now,
                now,
                json.dumps(memory.meta, ensure_ascii=False),
                cjk_index_text(memory.content),
                memory.context or None,
                memory.origin,
                memory.origin_ref,
                int(memory.pinned),
            ),
        )
        memory_id = int(cur.lastrowid)
        ids.append(memory_id)
        if vector is not None:
            vectors.append((memory_id, vector))
    if vectors:
        if model_id is None:
            raise MemoryStoreError("vectors given without the model_id of their embedder")
        set_vectors(conn, model_id, vectors)
    return ids


def update_content(
    conn: Conn,
    memory_id: int,
    content: str,
    vector: Sequence[float] | None,
    model_id: str | None,
    *,
    kind: str | None = None,
    source: str | None = None,
    context: str | None = None,
    origin: Origin | None = None,
    origin_ref: str | None = None,
    now: float | None = None,
) -> None:
    """Rewrite a memory's text and context (FTS follows by trigger) and replace its vector;
    `origin`/`origin_ref`, when given, say whose the new text is."""
    conn.execute(
        "UPDATE memories SET content = ?, fts_cjk = ?, context = ?, kind = coalesce(?, kind),"
        " source = coalesce(?, source), origin = coalesce(?, origin),"
        " origin_ref = coalesce(?, origin_ref), updated_at = ? WHERE id = ?",
        (
            content,
            cjk_index_text(content),
            context or None,
            kind,
            source,
            origin,
            origin_ref,
            time.time() if now is None else now,
            memory_id,
        ),
    )
    conn.execute("DELETE FROM memory_vectors WHERE memory_id = ?", (memory_id,))
    if vector is not None:
        if model_id is None:
            raise MemoryStoreError("a vector given without the model_id of its embedder")
        set_vectors(conn, model_id, [(memory_id, vector)])


_SELECT = (
    "SELECT m.id, m.user_id, m.kind, m.content, m.source, m.source_key, m.chat_id, m.slot,"
    " m.created_at, m.updated_at, m.meta, m.context, s.model_id, s.dim, m.origin,"
    " m.origin_ref, m.pinned FROM memories m"
    " LEFT JOIN memory_vectors v ON v.memory_id = m.id"
    " LEFT JOIN memory_spaces s ON s.id = v.space_id"
)


def _row_to_memory(row: Any) -> Memory:
    return Memory(
        id=row[0],
        user_id=row[1],
        kind=row[2],
        content=row[3],
        source=row[4],
        source_key=row[5],
        chat_id=row[6],
        slot=row[7],
        created_at=row[8],
        updated_at=row[9],
        meta=json.loads(row[10] or "{}"),
        context=row[11],
        model_id=row[12],
        dim=row[13],
        origin=row[14],
        origin_ref=row[15],
        pinned=bool(row[16]),
    )


def get_memories(conn: Conn, ids: Sequence[int]) -> dict[int, Memory]:
    """Memories by id (missing ids are simply absent)."""
    if not ids:
        return {}
    rows = conn.execute(
        f"{_SELECT} WHERE m.id IN (SELECT value FROM json_each(?))", (json.dumps(list(ids)),)
    ).fetchall()
    return {int(r[0]): _row_to_memory(r) for r in rows}


def get_memory(conn: Conn, memory_id: int) -> Memory | None:
    return get_memories(conn, [memory_id]).get(memory_id)


def list_memories(
    conn: Conn,
    user_id: int | None = None,
    *,
    kinds: Sequence[str] | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[Memory]:
    """Newest first; one user's or (user_id None, for the owner's CLI) everyone's."""
    where, params = [], []
    if user_id is not None:
        where.append("m.user_id = ?")
        params.append(user_id)
    if kinds:
        where.append("m.kind IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(list(kinds)))
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(
        f"{_SELECT}{clause} ORDER BY m.id DESC LIMIT ? OFFSET ?", (*params, limit, offset)
    ).fetchall()
    return [_row_to_memory(r) for r in rows]


def count_memories(conn: Conn, user_id: int | None = None) -> int:
    if user_id is None:
        return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
    return int(
        conn.execute("SELECT count(*) FROM memories WHERE user_id = ?", (user_id,)).fetchone()[0]
    )


def forget(conn: Conn, memory_id: int, *, user_id: int | None = None) -> bool:
    """Delete one memory: row, FTS entry, vector and bit vector. With user_id, only if theirs."""
    if user_id is None:
        cur = conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
    else:
        cur = conn.execute(
            "DELETE FROM memories WHERE id = ? AND user_id = ?", (memory_id, user_id)
        )
    return cur.rowcount > 0


def forget_user(conn: Conn, user_id: int) -> int:
    """Delete every memory of a user; return how many."""
    return conn.execute("DELETE FROM memories WHERE user_id = ?", (user_id,)).rowcount


def vector_status(conn: Conn, model_id: str, dim: int) -> VectorStatus:
    """For warnings like "312 memories are embedded with another model; run memory reindex"."""
    space = find_space(conn, model_id, dim)
    row = conn.execute(
        "SELECT count(*), sum(v.space_id = ?), sum(v.space_id IS NOT NULL AND v.space_id != ?)"
        " FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id",
        (space or -1, space or -1),
    ).fetchone()
    total, current, other = int(row[0]), int(row[1] or 0), int(row[2] or 0)
    return VectorStatus(
        total=total, current=current, other_model=other, missing=total - current - other
    )


def memories_to_embed(
    conn: Conn, model_id: str, dim: int, *, after_id: int = 0, limit: int = 64, force: bool = False
) -> list[tuple[int, str]]:
    """(id, text to embed) of memories past after_id without a (model_id, dim) vector (all if
    force); the text is `embedding_text` of the row."""
    space = find_space(conn, model_id, dim) or -1
    extra = (
        ""
        if force
        else " AND NOT EXISTS (SELECT 1 FROM memory_vectors v"
        " WHERE v.memory_id = m.id AND v.space_id = ?)"
    )
    params: tuple[Any, ...] = (after_id, limit) if force else (after_id, space, limit)
    rows = conn.execute(
        f"SELECT m.id, m.content, m.context FROM memories m WHERE m.id > ?{extra}"
        " ORDER BY m.id LIMIT ?",
        params,
    ).fetchall()
    return [(int(r[0]), embedding_text(str(r[1]), r[2])) for r in rows]


# --------------------------------------------------------------------------------------------
# Async helpers: embed outside any transaction, then write in one


async def remember(db: Runner, embedder: Embedder, memory: NewMemory) -> int:
    """Embed and store one memory; returns its id (the existing one for a known source_key)."""
    vector = (await embedder.embed_documents([embedding_text(memory.content, memory.context)]))[0]
    return await db.write(lambda c: add_memory(c, memory, vector, embedder.model_id))


async def reindex(
    db: Runner,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    force: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ReindexReport:
    """Give every memory a vector of `embedder`, then drop the vectors of other models.

    Safe to interrupt and re-run (see reembed.py); `force` re-embeds all, walking ids in order.
    Searches during a reindex see the re-embedded part through the vector arm and everything
    through the keyword arm. `progress` gets the size of each batch done.
    """
    from agentd.retrieval.reembed import reembed

    model_id, dim = embedder.model_id, embedder.dim
    return await reembed(
        db,
        embedder,
        fetch=lambda c, after, limit: memories_to_embed(
            c, model_id, dim, after_id=after, limit=limit, force=force
        ),
        save=lambda c, pairs: set_vectors(c, model_id, _existing(c, pairs)),
        drop_other_spaces=drop_other_spaces,
        batch_size=batch_size,
        progress=progress,
    )


def _existing(
    conn: Conn, pairs: list[tuple[int, Sequence[float]]]
) -> list[tuple[int, Sequence[float]]]:
    rows = conn.execute(
        "SELECT id FROM memories WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps([mid for mid, _ in pairs]),),
    ).fetchall()
    alive = {int(r[0]) for r in rows}
    return [(mid, vec) for mid, vec in pairs if mid in alive]


def taints(memories: Sequence[Memory]) -> bool:
    """Whether recalling these memories brings outside content into a turn: only memories
    derived from outside content do; the owner's words (typed, edited, imported) and the
    model's own notes of the chat do not."""
    return any(m.origin == "outside" for m in memories)
