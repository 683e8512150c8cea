"""A document's status, kept text and chunk tokens; and the migration that added them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentd.config import DocsConfig
from agentd.db.connect import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations
from agentd.db.runner import ConnRunner
from agentd.knowledge.ingest import IngestReport, ingest
from agentd.knowledge.store import get_document
from agentd.knowledge.tokens import estimate_tokens
from tests.docs_support import CountingEmbedder, open_store

TEXT = "The boiler is serviced every October by Hoffmann & Sons."


async def _ingest(conn: Any, *paths: Path, **config: Any) -> IngestReport:
    embedder = CountingEmbedder()
    return await ingest(ConnRunner(conn), embedder, DocsConfig(**config), paths=list(paths))


async def test_a_failed_read_keeps_the_old_copy_as_stale_until_it_reads_again(
    tmp_path: Path,
) -> None:
    conn = open_store(tmp_path / "docs.db")
    note = tmp_path / "boiler.txt"
    note.write_text(TEXT)
    await _ingest(conn, note)
    doc = get_document(conn, str(note))
    assert doc is not None and (doc.status, doc.error, doc.chunks) == ("ingested", None, 1)
    assert doc.tokens == estimate_tokens(TEXT) and doc.text_chars == doc.kept_chars == len(TEXT)

    note.write_bytes(b"\xff\xfe broken")  # changed, and no longer readable
    report = await _ingest(conn, note)
    assert report.failed and not report.changed
    doc = get_document(conn, str(note))
    assert doc is not None and doc.status == "stale" and doc.error is not None
    assert "not valid UTF-8" in doc.error and doc.chunks == 1  # the old copy still answers

    note.write_text(TEXT)  # readable again, and as it was: nothing to re-embed
    report = await _ingest(conn, note)
    assert report.unchanged == [str(note)]
    doc = get_document(conn, str(note))
    assert doc is not None and (doc.status, doc.error) == ("ingested", None)
    conn.close()


async def test_a_document_never_read_is_failed_then_added_once_readable(tmp_path: Path) -> None:
    conn = open_store(tmp_path / "docs.db")
    note = tmp_path / "new.txt"
    note.write_bytes(b"\xff")
    await _ingest(conn, note)
    doc = get_document(conn, str(note))
    assert doc is not None and (doc.status, doc.chunks) == ("failed", 0)
    note.write_text(TEXT)
    report = await _ingest(conn, note)
    assert report.added == [str(note)]
    doc = get_document(conn, str(note))
    assert doc is not None and (doc.status, doc.error, doc.chunks) == ("ingested", None, 1)
    conn.close()


async def test_the_kept_text_is_bounded(tmp_path: Path) -> None:
    conn = open_store(tmp_path / "docs.db")
    note = tmp_path / "long.txt"
    note.write_text("word " * 2000)
    await _ingest(conn, note, keep_text_chars=1000)
    doc = get_document(conn, str(note))
    assert doc is not None and doc.kept_chars == 1000 and (doc.text_chars or 0) > 9000
    await _ingest(tmp_conn := open_store(tmp_path / "none.db"), note, keep_text_chars=0)
    kept = tmp_conn.execute("SELECT raw_text FROM doc_documents").fetchone()[0]
    assert kept is None
    conn.close()
    tmp_conn.close()


def test_the_migration_fills_what_it_can_for_documents_stored_before(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    before = [m for m in MIGRATIONS if m[0] != "m029_docs_status"]
    apply_migrations(conn, before)
    conn.execute(
        "INSERT INTO doc_documents (id, source, kind, root, title, format, content_hash, size,"
        " created_at, updated_at) VALUES (1, '/n.txt', 'file', '/n.txt', 'n', 'text', 'h', 5,"
        " 0, 0)"
    )
    conn.execute(
        "INSERT INTO doc_chunks (doc_id, ordinal, section, text, hash) VALUES (1, 0, '', ?, 'x')",
        (TEXT,),
    )
    conn.commit()
    assert apply_migrations(conn) == ["m029_docs_status"]
    doc = get_document(conn, "/n.txt")
    assert doc is not None and (doc.status, doc.error) == ("ingested", None)
    assert doc.tokens == estimate_tokens(TEXT)  # the same estimate new chunks get
    assert (doc.text_chars, doc.kept_chars) == (None, 0)  # not kept then: not invented now
    conn.close()
