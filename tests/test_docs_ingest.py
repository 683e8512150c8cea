"""Ingestion: folder → search with sections, incremental re-ingest, removal, bad inputs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentd.config import DocsConfig
from agentd.db.runner import ConnRunner
from agentd.knowledge.ingest import IngestReport, ingest
from agentd.knowledge.search import search, search_documents
from agentd.knowledge.store import DOC_VECTORS, list_documents
from tests.docs_support import BrokenEmbedder, CountingEmbedder, OtherModel, make_pdf, open_store

INSTALL = """\
# Zebra handbook

Zebra is a tool for striped data.

## Install

### Linux

Install it with apt: `sudo apt install zebra-cli`. The package lives in Debian main.

### macOS

Install it with Homebrew: `brew install zebra`.

## Configuration

The configuration file is ~/.zebra.toml; set stripes = 12 for the classic look.
"""
FAQ = """\
# FAQ

## Licence

Zebra is released under the MIT licence.

## Support

Questions go to the mailing list; answers usually arrive within two days.
"""


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    c = open_store(tmp_path / "docs.db")
    yield c
    c.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "install.md").write_text(INSTALL)
    (docs / "sub" / "faq.md").write_text(FAQ)
    (docs / "notes.txt").write_text("Grocery list: oat milk, lemons.\n\nCall the plumber.")
    (docs / "page.html").write_text(
        "<html><head><title>Stripes</title></head><body><h1>Stripes</h1>"
        "<h2>Width</h2><p>Each stripe is 2.5 cm wide on average.</p></body></html>"
    )
    (docs / ".hidden.md").write_text("# secret\n\nnot ingested")
    (docs / "image.png").write_bytes(b"\x89PNG\r\n")
    return docs


async def _ingest(conn: Any, embedder: Any, *paths: Path, **config: Any) -> IngestReport:
    return await ingest(ConnRunner(conn), embedder, DocsConfig(**config), paths=list(paths))


def _counts(conn: Any) -> tuple[int, int, int, int]:
    space = conn.execute("SELECT id FROM doc_spaces").fetchone()[0]
    return (
        conn.execute("SELECT count(*) FROM doc_chunks").fetchone()[0],
        conn.execute("SELECT count(*) FROM doc_chunks_fts").fetchone()[0],
        conn.execute("SELECT count(*) FROM doc_vectors").fetchone()[0],
        conn.execute(f"SELECT count(*) FROM {DOC_VECTORS.bq_table(space)}").fetchone()[0],
    )


async def test_ingest_a_folder_then_search_finds_the_right_section(conn: Any, folder: Path) -> None:
    embedder = CountingEmbedder()
    report = await _ingest(conn, embedder, folder)
    assert sorted(Path(s).name for s in report.added) == [
        "faq.md",
        "install.md",
        "notes.txt",
        "page.html",
    ]
    assert report.failed == [] and report.ignored == 1  # image.png; .hidden.md is not entered
    total = conn.execute("SELECT count(*) FROM doc_chunks").fetchone()[0]
    assert report.chunks_embedded == embedder.embedded == total
    assert _counts(conn) == (total, total, total, total)

    hits = await search_documents(ConnRunner(conn), embedder, "how do I install zebra on Linux?")
    assert hits[0].title == "Zebra handbook" and hits[0].section == "Install > Linux"
    assert hits[0].source == str(folder / "install.md") and "apt install" in hits[0].text
    hits = await search_documents(ConnRunner(conn), embedder, "stripe width in cm", k=1)
    assert (hits[0].title, hits[0].section) == ("Stripes", "Width")
    for mode in ("keyword", "vector"):
        hits = await search_documents(ConnRunner(conn), embedder, "licence", mode=mode, k=3)
        assert hits[0].section == "Licence", mode


async def test_reingest_embeds_only_the_changed_chunks(conn: Any, folder: Path) -> None:
    embedder = CountingEmbedder()
    first = await _ingest(conn, embedder, folder)
    before = {r[0]: r[1] for r in conn.execute("SELECT id, hash FROM doc_chunks")}

    embedder.calls.clear()
    again = await _ingest(conn, embedder, folder)
    assert again.counts() == {"added": 0, "changed": 0, "unchanged": 4, "removed": 0, "failed": 0}
    assert embedder.calls == [] and again.chunks_embedded == 0

    text = (folder / "install.md").read_text()
    (folder / "install.md").write_text(text.replace("brew install zebra", "brew install zebra@2"))
    edited = await _ingest(conn, embedder, folder)
    assert edited.changed == [str(folder / "install.md")] and len(edited.unchanged) == 3
    assert edited.chunks_embedded == embedder.embedded == 1  # one chunk of one file
    assert "zebra@2" in embedder.calls[0][0]
    after = {r[0]: r[1] for r in conn.execute("SELECT id, hash FROM doc_chunks")}
    assert len(set(before) - set(after)) == 1 and len(set(after) - set(before)) == 1  # one swap
    assert len(after) == len(before) == first.chunks_embedded
    hits = search(conn, "zebra@2 Homebrew", k=1, mode="keyword")
    assert hits[0].section == "Install > macOS"


async def test_moving_a_paragraph_reuses_vectors(conn: Any, tmp_path: Path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("# T\n\n## A\n\nAlpha text.\n\n## B\n\nBeta text.\n")
    embedder = CountingEmbedder()
    await _ingest(conn, embedder, doc)
    embedder.calls.clear()
    doc.write_text("# T\n\n## B\n\nBeta text.\n\n## A\n\nAlpha text.\n")  # sections swapped
    report = await _ingest(conn, embedder, doc)
    assert report.changed == [str(doc)] and embedder.calls == []
    rows = conn.execute("SELECT section FROM doc_chunks ORDER BY ordinal").fetchall()
    assert [r[0] for r in rows] == ["B", "A"]


async def test_a_deleted_file_is_removed_with_its_chunks_and_vectors(
    conn: Any, folder: Path
) -> None:
    embedder = CountingEmbedder()
    await _ingest(conn, embedder, folder)
    faq_chunks = conn.execute(
        "SELECT count(*) FROM doc_chunks c JOIN doc_documents d ON d.id = c.doc_id"
        " WHERE d.source LIKE '%faq.md'"
    ).fetchone()[0]
    total = _counts(conn)[0]
    (folder / "sub" / "faq.md").unlink()
    report = await _ingest(conn, embedder, folder)
    assert report.removed == [str(folder / "sub" / "faq.md")]
    assert _counts(conn) == (total - faq_chunks,) * 4
    assert search(conn, "mailing licence", mode="keyword") == []

    # A folder that disappeared as a whole takes its documents with it.
    shutil.rmtree(folder)
    report = await _ingest(conn, embedder, folder)
    assert len(report.removed) == 3 and report.failed == []
    assert list_documents(conn) == []


async def test_bad_inputs_are_reported_and_the_run_goes_on(conn: Any, tmp_path: Path) -> None:
    docs = tmp_path / "bad"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nThis one is fine.")
    (docs / "latin1.txt").write_bytes("café au lait".encode("latin-1"))
    (docs / "huge.txt").write_text("big " * 5000)
    (docs / "empty.md").write_text("\n\n")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not really a pdf")
    (docs / "also-good.txt").write_text("Plain and fine.")
    os.mkfifo(docs / "pipe.txt")  # reading it would block forever
    other = tmp_path / "table.csv"
    other.write_text("a,b")
    report = await _ingest(
        conn, CountingEmbedder(), docs, other, tmp_path / "nope", max_file_bytes=10_000
    )
    assert sorted(Path(s).name for s in report.added) == ["also-good.txt", "good.md"]
    reasons = {Path(f.source).name: f.reason for f in report.failed}
    assert "not valid UTF-8" in reasons["latin1.txt"]
    assert "over docs.max_file_bytes" in reasons["huge.txt"]
    assert reasons["empty.md"] == "no text found"
    assert "unsupported file type .csv" in reasons["table.csv"]
    assert reasons["nope"] == "no such file or folder"
    assert reasons["pipe.txt"] == "not a regular file"
    try:
        import pypdf  # noqa: F401

        assert "not a readable PDF" in reasons["broken.pdf"]
    except ImportError:
        assert "pypdf" in reasons["broken.pdf"]


async def test_a_failing_file_keeps_its_stored_version(conn: Any, tmp_path: Path) -> None:
    doc = tmp_path / "notes.txt"
    doc.write_text("Original words about otters.")
    await _ingest(conn, CountingEmbedder(), tmp_path)
    doc.write_bytes(b"\xff\xfe broken now")
    report = await _ingest(conn, CountingEmbedder(), tmp_path)
    assert report.removed == [] and len(report.failed) == 1
    assert search(conn, "otters", mode="keyword")[0].source == str(doc)


async def test_pdf_ingest_cites_pages(conn: Any, tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    (tmp_path / "manual.pdf").write_bytes(
        make_pdf(
            ["Welcome to the manual.", "Reset the device by holding the red button."],
            title="Device manual",
        )
    )
    report = await _ingest(conn, CountingEmbedder(), tmp_path)
    assert report.added == [str(tmp_path / "manual.pdf")]
    hit = search(conn, "reset red button", mode="keyword")[0]
    assert (hit.title, hit.section) == ("Device manual", "Page 2")


async def test_a_model_change_reembeds_unchanged_documents(conn: Any, folder: Path) -> None:
    first = await _ingest(conn, CountingEmbedder(), folder)
    other = OtherModel()
    report = await _ingest(conn, other, folder)
    assert len(report.unchanged) == 4 and report.chunks_embedded == first.chunks_embedded
    hits = await search_documents(ConnRunner(conn), other, "Homebrew", mode="vector", k=1)
    assert hits and hits[0].section == "Install > macOS"
    assert (await _ingest(conn, other, folder)).chunks_embedded == 0


async def test_an_embedder_failure_stops_the_run_and_removes_nothing(
    conn: Any, folder: Path
) -> None:
    await _ingest(conn, CountingEmbedder(), folder)
    (folder / "notes.txt").write_text("Changed notes.")
    (folder / "page.html").unlink()
    report = await _ingest(conn, BrokenEmbedder(), folder)
    assert report.aborted and "HTTP 503" in report.aborted
    assert report.removed == [] and len(list_documents(conn)) == 4


async def test_cjk_documents_are_found_by_keyword(conn: Any, tmp_path: Path) -> None:
    (tmp_path / "jp.md").write_text("# 旅行\n\n## 東京\n\n東京で寿司を食べた。\n")
    await _ingest(conn, CountingEmbedder(), tmp_path)
    hits = search(conn, "寿司", mode="keyword")
    assert hits and hits[0].section == "東京"


HOSTILE = [
    "",
    "   ",
    '"',
    "'",
    "AND",
    "OR NOT",
    "*",
    "NEAR(",
    "a:b",
    "^x",
    "(((",
    "\x00",
    "'; DROP TABLE doc_chunks; --",
    "zebra" * 2000,
    "🦓 emoji",
    "東京",
    "-- -- --",
    "{}[]",
]


@pytest.mark.parametrize("query", HOSTILE)
async def test_hostile_queries_never_raise(conn: Any, folder: Path, query: str) -> None:
    embedder = CountingEmbedder()
    await _ingest(conn, embedder, folder)
    for mode in ("hybrid", "keyword", "vector"):
        hits = await search_documents(ConnRunner(conn), embedder, query, mode=mode)  # type: ignore[arg-type]
        assert isinstance(hits, list)
    assert conn.execute("SELECT count(*) FROM doc_chunks").fetchone()[0] > 0


def test_m004_applies_on_a_blank_and_on_an_m003_database(tmp_path: Path) -> None:
    from agentd.db.connect import open_sync
    from agentd.db.migrations import MIGRATIONS, apply_migrations

    names = [name for name, _ in MIGRATIONS]
    old = open_sync(tmp_path / "old.db")
    apply_migrations(old, MIGRATIONS[: names.index("m004_docs")])
    assert "m004_docs" in apply_migrations(old)
    assert apply_migrations(old) == []
    blank = open_store(tmp_path / "blank.db")
    for conn in (old, blank):
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert {"doc_documents", "doc_chunks", "doc_chunks_fts", "doc_vectors"} <= tables
        conn.close()
