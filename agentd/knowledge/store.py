"""Document storage: documents, their chunks, FTS entries and vectors kept in step.

Layout (migration m004_docs): `doc_documents` (one file or URL each), `doc_chunks` (its pieces,
in order, with section and hash), `doc_chunks_fts` (external-content FTS5 over section and
text, kept by triggers) and the shared vector tables (`agentd.retrieval.vectors`) bound here as
DOC_VECTORS: `doc_spaces`, `doc_vectors` and `doc_bq_<space>`, one partition for everything.
Deleting a document cascades to its chunks, their FTS entries, vectors and bit vectors.
Migration m029_docs_status added each document's status (ingested, stale, failed) with its
error, its parsed text (bounded) and each chunk's token estimate.

Plain functions of a connection, run through `Database.write/read` or `ConnRunner`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel

from agentd.knowledge.chunking import Chunk
from agentd.knowledge.tokens import estimate_tokens
from agentd.retrieval.fts import cjk_index_text
from agentd.retrieval.vectors import VectorIndex

Conn = Any
DocKind = Literal["file", "url"]
DocStatus = Literal["ingested", "failed", "stale"]

DOC_VECTORS = VectorIndex(prefix="doc", key="chunk_id")


class NewDocument(BaseModel):
    """A document as ingestion saves it."""

    source: str
    kind: DocKind
    root: str
    title: str
    format: str
    content_hash: str
    size: int
    raw_text: str | None = None  # the parsed text, cut at docs.keep_text_chars
    text_chars: int | None = None  # the whole parsed text's length


class Document(NewDocument):
    id: int
    chunks: int
    created_at: float
    updated_at: float
    status: DocStatus = "ingested"
    error: str | None = None
    tokens: int = 0  # the chunks' token estimates, summed
    kept_chars: int = 0  # how much of the parsed text is kept (raw_text is not loaded)


class ChunkState(BaseModel):
    """A stored chunk as re-ingestion sees it: does its hash still occur, has it a vector?"""

    id: int
    hash: str
    has_vector: bool


class SavedDocument(BaseModel):
    id: int
    inserted: int
    kept: int
    deleted: int


_SELECT = (
    "SELECT d.id, d.source, d.kind, d.root, d.title, d.format, d.content_hash, d.size,"
    " d.created_at, d.updated_at,"
    " (SELECT count(*) FROM doc_chunks c WHERE c.doc_id = d.id),"
    " d.status, d.error, d.text_chars, coalesce(length(d.raw_text), 0),"
    " (SELECT coalesce(sum(c.tokens), 0) FROM doc_chunks c WHERE c.doc_id = d.id)"
    " FROM doc_documents d"
)


def _row_to_document(row: Any) -> Document:
    return Document(
        id=row[0],
        source=row[1],
        kind=row[2],
        root=row[3],
        title=row[4],
        format=row[5],
        content_hash=row[6],
        size=row[7],
        created_at=row[8],
        updated_at=row[9],
        chunks=row[10],
        status=row[11],
        error=row[12],
        text_chars=row[13],
        kept_chars=row[14],
        tokens=row[15],
    )


def get_document(conn: Conn, source: str) -> Document | None:
    row = conn.execute(f"{_SELECT} WHERE d.source = ?", (source,)).fetchone()
    return None if row is None else _row_to_document(row)


def get_document_by_id(conn: Conn, doc_id: int) -> Document | None:
    row = conn.execute(f"{_SELECT} WHERE d.id = ?", (doc_id,)).fetchone()
    return None if row is None else _row_to_document(row)


def list_documents(conn: Conn, *, limit: int = 1000, offset: int = 0) -> list[Document]:
    """By source, for `agentd docs ls`."""
    rows = conn.execute(f"{_SELECT} ORDER BY d.source LIMIT ? OFFSET ?", (limit, offset))
    return [_row_to_document(r) for r in rows.fetchall()]


def count_documents(conn: Conn) -> tuple[int, int]:
    """(documents, chunks)."""
    docs = conn.execute("SELECT count(*) FROM doc_documents").fetchone()[0]
    chunks = conn.execute("SELECT count(*) FROM doc_chunks").fetchone()[0]
    return int(docs), int(chunks)


def chunk_states(conn: Conn, doc_id: int, model_id: str, dim: int) -> list[ChunkState]:
    """Each chunk of a document, and whether it has a vector of the current model."""
    space = DOC_VECTORS.find_space(conn, model_id, dim) or -1
    rows = conn.execute(
        "SELECT c.id, c.hash, v.chunk_id IS NOT NULL FROM doc_chunks c"
        " LEFT JOIN doc_vectors v ON v.chunk_id = c.id AND v.space_id = ?"
        " WHERE c.doc_id = ? ORDER BY c.ordinal",
        (space, doc_id),
    ).fetchall()
    return [ChunkState(id=r[0], hash=r[1], has_vector=bool(r[2])) for r in rows]


def chunks_without_vector(
    conn: Conn, doc_id: int, model_id: str, dim: int
) -> list[tuple[int, str, str]]:
    """(id, section, text) of a document's chunks lacking a vector of the current model."""
    space = DOC_VECTORS.find_space(conn, model_id, dim) or -1
    rows = conn.execute(
        "SELECT c.id, c.section, c.text FROM doc_chunks c"
        " LEFT JOIN doc_vectors v ON v.chunk_id = c.id AND v.space_id = ?"
        " WHERE c.doc_id = ? AND v.chunk_id IS NULL ORDER BY c.ordinal",
        (space, doc_id),
    ).fetchall()
    return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]


def _upsert_document(conn: Conn, doc: NewDocument, now: float) -> int:
    """The id of the document stored under `doc.source`, inserted or updated to `doc`."""
    row = conn.execute("SELECT id FROM doc_documents WHERE source = ?", (doc.source,)).fetchone()
    fields = (doc.kind, doc.root, doc.title, doc.format, doc.content_hash, doc.size)
    text = (doc.raw_text, doc.text_chars)
    if row is None:
        cur = conn.execute(
            "INSERT INTO doc_documents (source, kind, root, title, format, content_hash, size,"
            " raw_text, text_chars, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (doc.source, *fields, *text, now, now),
        )
        return int(cur.lastrowid)
    doc_id = int(row[0])
    conn.execute(
        "UPDATE doc_documents SET kind = ?, root = ?, title = ?, format = ?, content_hash = ?,"
        " size = ?, raw_text = ?, text_chars = ?, status = 'ingested', error = NULL,"
        " updated_at = ? WHERE id = ?",
        (*fields, *text, now, doc_id),
    )
    return doc_id


def save_document(
    conn: Conn,
    doc: NewDocument,
    chunks: Sequence[Chunk],
    vectors: Mapping[str, Sequence[float]],
    model_id: str,
    *,
    now: float | None = None,
) -> SavedDocument:
    """Insert or update a document and make its chunks exactly `chunks` (in one transaction).

    A stored chunk whose hash is still wanted is kept (only its ordinal moves), so its vector
    is not recomputed; the rest are deleted and the new ones inserted. `vectors` maps chunk
    hashes to freshly computed vectors, for new chunks and kept ones that lacked one.
    """
    now = time.time() if now is None else now
    doc_id = _upsert_document(conn, doc, now)
    pool: dict[str, list[int]] = {}
    for chunk_id, chunk_hash in conn.execute(
        "SELECT id, hash FROM doc_chunks WHERE doc_id = ? ORDER BY ordinal", (doc_id,)
    ).fetchall():
        pool.setdefault(chunk_hash, []).append(int(chunk_id))
    new_vectors: list[tuple[int, Sequence[float]]] = []
    inserted = kept = 0
    for chunk in chunks:
        reusable = pool.get(chunk.hash)
        if reusable:
            chunk_id = reusable.pop(0)
            conn.execute(
                "UPDATE doc_chunks SET ordinal = ? WHERE id = ?", (chunk.ordinal, chunk_id)
            )
            kept += 1
        else:
            cur = conn.execute(
                "INSERT INTO doc_chunks (doc_id, ordinal, section, text, hash, fts_cjk, tokens)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    doc_id,
                    chunk.ordinal,
                    chunk.section,
                    chunk.text,
                    chunk.hash,
                    cjk_index_text(f"{chunk.section}\n{chunk.text}"),
                    estimate_tokens(chunk.embed_text),
                ),
            )
            chunk_id = int(cur.lastrowid)
            inserted += 1
        if chunk.hash in vectors:
            new_vectors.append((chunk_id, vectors[chunk.hash]))
    stale = [chunk_id for ids in pool.values() for chunk_id in ids]
    if stale:
        conn.execute(
            "DELETE FROM doc_chunks WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(stale),),
        )
    DOC_VECTORS.set_vectors(conn, model_id, new_vectors)
    return SavedDocument(id=doc_id, inserted=inserted, kept=kept, deleted=len(stale))


def chunks_to_embed(
    conn: Conn, model_id: str, dim: int, *, after_id: int = 0, limit: int = 64, force: bool = False
) -> list[tuple[int, str]]:
    """(id, text the embedder sees) of chunks past after_id lacking a current vector (all if
    force), ids ascending: what `docs reindex` works through."""
    space = DOC_VECTORS.find_space(conn, model_id, dim) or -1
    missing = "" if force else " AND NOT EXISTS (SELECT 1 FROM doc_vectors v WHERE"
    missing += "" if force else " v.chunk_id = c.id AND v.space_id = :space)"
    rows = conn.execute(
        f"SELECT c.id, c.section, c.text FROM doc_chunks c WHERE c.id > :after{missing}"
        " ORDER BY c.id LIMIT :limit",
        {"after": after_id, "space": space, "limit": limit},
    ).fetchall()
    return [(int(r[0]), Chunk(0, str(r[1]), str(r[2])).embed_text) for r in rows]


def chunk_vector_counts(conn: Conn, model_id: str, dim: int) -> tuple[int, int]:
    """(chunks, chunks with a vector of the current model)."""
    space = DOC_VECTORS.find_space(conn, model_id, dim) or -1
    row = conn.execute(
        "SELECT count(*), count(v.chunk_id) FROM doc_chunks c"
        " LEFT JOIN doc_vectors v ON v.chunk_id = c.id AND v.space_id = ?",
        (space,),
    ).fetchone()
    return int(row[0]), int(row[1])


def set_chunk_vectors(
    conn: Conn, model_id: str, items: Sequence[tuple[int, Sequence[float]]]
) -> int:
    """Vectors for existing chunks (after a model change); chunks deleted meanwhile are skipped."""
    if not items:
        return 0
    alive = {
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM doc_chunks WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([chunk_id for chunk_id, _ in items]),),
        ).fetchall()
    }
    return DOC_VECTORS.set_vectors(conn, model_id, [i for i in items if i[0] in alive])


def touch_document(conn: Conn, doc_id: int, root: str) -> None:
    """An unchanged document seen again, maybe through another folder or list: what is stored
    is the source as it is, whatever a failed read in between had marked."""
    conn.execute(
        "UPDATE doc_documents SET root = ?, status = 'ingested', error = NULL WHERE id = ?",
        (root, doc_id),
    )


def record_failure(
    conn: Conn, source: str, kind: DocKind, root: str, reason: str, *, now: float | None = None
) -> DocStatus:
    """A document that could not be read: `stale` when an older copy is still stored (search
    keeps serving it), `failed` when nothing is (a row with no chunks, so `docs ls` shows it)."""
    now = time.time() if now is None else now
    row = conn.execute(
        "SELECT id, (SELECT count(*) FROM doc_chunks c WHERE c.doc_id = d.id)"
        " FROM doc_documents d WHERE source = ?",
        (source,),
    ).fetchone()
    if row is None:
        conn.execute(
            "INSERT INTO doc_documents (source, kind, root, title, format, content_hash, size,"
            " status, error, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, '', '', 0, 'failed', ?, ?, ?)",
            (source, kind, root, source.rstrip("/").rsplit("/", 1)[-1][:500], reason, now, now),
        )
        return "failed"
    status: DocStatus = "stale" if row[1] else "failed"
    conn.execute(
        "UPDATE doc_documents SET status = ?, error = ? WHERE id = ?", (status, reason, row[0])
    )
    return status


def remove_document(conn: Conn, doc_id: int) -> bool:
    """Delete a document with its chunks, FTS entries and vectors."""
    return conn.execute("DELETE FROM doc_documents WHERE id = ?", (doc_id,)).rowcount > 0


def sources_under(conn: Conn, folder: str) -> list[str]:
    """Sources of the files stored from inside `folder` (an absolute path, no trailing /)."""
    prefix = folder.rstrip("/") + "/"
    rows = conn.execute(
        "SELECT source FROM doc_documents WHERE kind = 'file' AND substr(source, 1, ?) = ?",
        (len(prefix), prefix),
    ).fetchall()
    return [str(r[0]) for r in rows]


def sources_of_root(conn: Conn, root: str) -> list[str]:
    """Sources last ingested through `root` (a URL list or sitemap)."""
    rows = conn.execute("SELECT source FROM doc_documents WHERE root = ?", (root,)).fetchall()
    return [str(r[0]) for r in rows]


def mark_stale(conn: Conn, sources: Sequence[str], reason: str) -> int:
    """Stored documents whose source may be gone but could not be checked: kept, marked."""
    if not sources:
        return 0
    return conn.execute(
        "UPDATE doc_documents SET status = 'stale', error = ? WHERE status != 'failed'"
        " AND source IN (SELECT value FROM json_each(?))",
        (reason, json.dumps(list(sources))),
    ).rowcount


def remove_sources(conn: Conn, sources: Sequence[str]) -> int:
    if not sources:
        return 0
    return conn.execute(
        "DELETE FROM doc_documents WHERE source IN (SELECT value FROM json_each(?))",
        (json.dumps(list(sources)),),
    ).rowcount
