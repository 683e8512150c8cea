"""Memory context: indexed and embedded with the memory, weighted below it, kept in step."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from agentd.db.connect import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations
from agentd.db.runner import ConnRunner
from agentd.memory import HashingEmbedder, NewMemory, add_memory, forget, remember
from agentd.memory.search import keyword_search, search
from agentd.memory.store import (
    embedding_text,
    get_memory,
    memories_to_embed,
    update_content,
)
from agentd.memory.summarise import BlockMessage, block_context


def _fts_hits(conn: Any, term: str) -> list[int]:
    rows = conn.execute("SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?", (term,))
    return sorted(int(r[0]) for r in rows)


def test_context_is_stored_returned_and_searchable(conn: Any) -> None:
    mid = add_memory(
        conn,
        NewMemory(
            user_id=1,
            kind="turn",
            content="Yes, last week, it was so powerful!",
            context="Did you go to the support group?",
        ),
    )
    memory = get_memory(conn, mid)
    assert memory is not None and memory.context == "Did you go to the support group?"
    assert memory.content == "Yes, last week, it was so powerful!"  # shown without its context
    assert [h.memory.id for h in search(conn, 1, "support group", mode="keyword")] == [mid]
    assert search(conn, 2, "support group", mode="keyword") == []  # still the user's only


def test_own_words_rank_above_a_neighbours(conn: Any) -> None:
    # Same length and term counts; only which column holds "marathon" differs.
    in_context = add_memory(
        conn, NewMemory(user_id=1, kind="turn", content="I did it.", context="Ran a marathon?")
    )
    in_content = add_memory(
        conn, NewMemory(user_id=1, kind="turn", content="Ran a marathon.", context="I did it?")
    )
    assert [mid for mid, _ in keyword_search(conn, 1, "marathon", 5)] == [in_content, in_context]


def test_update_and_delete_keep_the_index_in_step(conn: Any) -> None:
    mid = add_memory(
        conn, NewMemory(user_id=1, kind="note", content="Buy milk", context="zanzibar trip")
    )
    update_content(conn, mid, "Buy bread", None, None, context="lisbon trip")
    assert _fts_hits(conn, "zanzibar") == [] and _fts_hits(conn, "lisbon") == [mid]
    update_content(conn, mid, "Buy cheese", None, None)
    assert _fts_hits(conn, "lisbon") == [] and _fts_hits(conn, "cheese") == [mid]
    assert forget(conn, mid)
    assert _fts_hits(conn, "cheese") == []
    # An external-content FTS table fed a wrong 'delete' row reports corruption here.
    conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")


async def test_context_is_embedded_with_the_content_and_reindexed_so(conn: Any) -> None:
    embedder = HashingEmbedder()
    memory = NewMemory(user_id=1, kind="turn", content="Yes!", context="Is Biscuit a beagle?")
    mid = await remember(ConnRunner(conn), embedder, memory)
    text = embedding_text("Yes!", "Is Biscuit a beagle?")
    assert text == "Is Biscuit a beagle?\nYes!"
    assert memories_to_embed(conn, "another-model", 384) == [(mid, text)]
    hits = search(
        conn, 1, "beagle", embedder.embed_sync("beagle"), embedder.model_id, mode="vector"
    )
    assert [h.memory.id for h in hits] == [mid]  # "Yes!" alone would embed to nothing useful


def test_migration_rebuilds_the_index_of_existing_memories(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m017_recall")])
    conn.execute(
        "INSERT INTO memories (user_id, kind, content, created_at, updated_at)"
        " VALUES (1, 'summary', 'We planned the zanzibar trip', 0, 0)"
    )
    conn.commit()
    assert apply_migrations(conn)[0] == "m017_recall"  # and every one after it
    assert _fts_hits(conn, "zanzibar") == [1]
    assert [mid for mid, _ in keyword_search(conn, 1, "zanzibar", 5)] == [1]
    conn.close()


def test_block_context_names_the_days_in_the_owners_zone() -> None:
    zone = "America/New_York"

    def at(text: str) -> float:
        return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()

    def msg(i: int, when: str) -> BlockMessage:
        return BlockMessage(id=i, role="user", content="hi", created_at=at(when))

    one_day = [msg(1, "2023-05-08 09:00"), msg(2, "2023-05-08 23:30")]
    assert block_context(one_day, zone) == "Conversation of 8 May 2023"
    # 23:30 in New York is already the 9th in UTC: the owner's day is what counts.
    assert block_context(one_day, "UTC") == "Conversation of 8 May 2023 to 9 May 2023"
    two_days = [msg(1, "2023-12-31 22:00"), msg(2, "2024-01-01 01:00")]
    assert block_context(two_days, zone) == "Conversation of 31 December 2023 to 1 January 2024"


def test_dropping_the_nearby_column_keeps_every_memory_findable(tmp_path: Path) -> None:
    """A database whose memories carry the nearby column (which nothing fills any more) upgrades:
    the FTS index is rebuilt without it, every memory stays findable by its content and context,
    what was only nearby no longer finds it, and stores, edits and deletes keep the index right."""
    conn = open_sync(tmp_path / "old.db")
    apply_migrations(conn, [m for m in MIGRATIONS if m[0] != "m084_memory_drop_nearby"])
    conn.execute(
        "INSERT INTO memories (user_id, kind, content, context, nearby, created_at, updated_at)"
        " VALUES (1, 'turn', 'yes, the beagle', 'did you adopt the zanzibar puppy?',"
        " 'the lisbon race', 0, 0)"
    )
    conn.commit()
    assert apply_migrations(conn) == ["m084_memory_drop_nearby"]
    columns = {row[1] for row in conn.execute("PRAGMA table_info(memories)")}
    assert "nearby" not in columns and {"content", "context", "fts_cjk"} <= columns
    assert _fts_hits(conn, "beagle") == [1] and _fts_hits(conn, "zanzibar") == [1]
    assert _fts_hits(conn, "lisbon") == []
    new = add_memory(conn, NewMemory(user_id=1, kind="turn", content="biscuit", context="lisbon"))
    assert [mid for mid, _ in keyword_search(conn, 1, "lisbon", 5)] == [new]
    conn.execute("UPDATE memories SET content = 'a spaniel' WHERE id = 1")
    assert _fts_hits(conn, "beagle") == [] and _fts_hits(conn, "spaniel") == [1]
    forget(conn, new)
    assert _fts_hits(conn, "biscuit") == []
    conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")
    assert apply_migrations(conn) == []  # once
    conn.close()
