"""Store: per-user isolation, forget removes everything, reindex after a model change."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentd.db import Database
from agentd.db.connect import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations
from agentd.db.runner import ConnRunner
from agentd.memory import (
    HashingEmbedder,
    NewMemory,
    add_memory,
    count_memories,
    forget,
    forget_user,
    list_memories,
    reindex,
    remember,
    search,
    search_memories,
    vector_status,
)
from agentd.memory.store import find_space


class OtherModel(HashingEmbedder):
    """Same algorithm, another name and size: a different vector space."""

    def __init__(self) -> None:
        super().__init__(dim=128)
        self.model_id = "other-model"


def _counts(conn: Any, memory_id: int) -> tuple[int, int, int, int]:
    space = conn.execute("SELECT id FROM memory_spaces").fetchone()[0]
    return (
        conn.execute("SELECT count(*) FROM memories WHERE id = ?", (memory_id,)).fetchone()[0],
        conn.execute(
            "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH 'zanzibar' AND rowid = ?",
            (memory_id,),
        ).fetchone()[0],
        conn.execute(
            "SELECT count(*) FROM memory_vectors WHERE memory_id = ?", (memory_id,)
        ).fetchone()[0],
        conn.execute(
            f"SELECT count(*) FROM memory_bq_{space} WHERE rowid = ?", (memory_id,)
        ).fetchone()[0],
    )


def test_migration_applies_on_blank_and_on_m001_database(tmp_path: Path) -> None:
    c = open_sync(tmp_path / "old.db")
    assert apply_migrations(c, MIGRATIONS[:1]) == ["m001_core"]
    assert "m002_memory" in apply_migrations(c)
    assert apply_migrations(c) == []
    c.close()


async def test_user_isolation_in_every_mode(conn: Any) -> None:
    emb = HashingEmbedder()
    db = ConnRunner(conn)
    await remember(db, emb, NewMemory(user_id=1, kind="note", content="Alice's secret is zanzibar"))
    for i in range(30):
        await remember(db, emb, NewMemory(user_id=2, kind="note", content=f"zanzibar note {i}"))
    for mode in ("hybrid", "keyword", "vector"):
        hits = await search_memories(db, emb, 2, "Alice's secret zanzibar", k=50, mode=mode)
        assert hits and all(h.memory.user_id == 2 for h in hits), mode
        assert "Alice" not in " ".join(h.memory.content for h in hits)
        hits = await search_memories(db, emb, 1, "zanzibar note", k=50, mode=mode)
        assert [h.memory.user_id for h in hits] == [1], mode
    assert await search_memories(db, emb, 3, "zanzibar", mode="hybrid") == []


async def test_forget_removes_row_fts_vector_and_bits(conn: Any) -> None:
    emb = HashingEmbedder()
    db = ConnRunner(conn)
    keep = await remember(db, emb, NewMemory(user_id=1, kind="note", content="zanzibar stays"))
    gone = await remember(db, emb, NewMemory(user_id=1, kind="note", content="zanzibar goes"))
    assert _counts(conn, gone) == (1, 1, 1, 1)
    assert not forget(conn, gone, user_id=2)  # not theirs
    assert forget(conn, gone, user_id=1)
    assert _counts(conn, gone) == (0, 0, 0, 0)
    assert _counts(conn, keep) == (1, 1, 1, 1)
    assert [h.memory.id for h in search(conn, 1, "zanzibar goes", None, None)] == [keep]
    assert not forget(conn, gone)


async def test_forget_user_removes_all_of_theirs_only(conn: Any) -> None:
    emb = HashingEmbedder()
    db = ConnRunner(conn)
    for user in (1, 1, 2):
        await remember(db, emb, NewMemory(user_id=user, kind="note", content="zanzibar"))
    assert forget_user(conn, 1) == 2
    assert count_memories(conn, 1) == 0 and count_memories(conn, 2) == 1
    space = find_space(conn, emb.model_id, emb.dim)
    assert conn.execute(f"SELECT count(*) FROM memory_bq_{space}").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM memory_fts").fetchone()[0] == 1


async def test_source_key_makes_storing_idempotent(conn: Any) -> None:
    emb = HashingEmbedder()
    db = ConnRunner(conn)
    memory = NewMemory(user_id=1, kind="summary", content="a summary", source_key="sum:1:1-40")
    first = await remember(db, emb, memory)
    assert await remember(db, emb, memory) == first
    assert count_memories(conn) == 1


async def test_reindex_after_model_change_never_mixes_spaces(db: Database) -> None:
    old, new = HashingEmbedder(), OtherModel()
    for i, text in enumerate(["the cat sat on the mat", "dogs chase cats", "tea with lemon"]):
        await remember(db, old, NewMemory(user_id=1, kind="note", content=f"{text} {i}"))
    # The model changes: a new memory gets a new-space vector, old ones keep old-space vectors.
    await remember(db, new, NewMemory(user_id=1, kind="note", content="cats purr"))
    status = await db.read(vector_status, new.model_id, new.dim)
    assert (status.current, status.other_model, status.missing) == (1, 3, 0)
    hits = await search_memories(db, new, 1, "cats", k=10, mode="vector")
    assert [h.memory.content for h in hits] == ["cats purr"]  # old space ignored
    hits = await search_memories(db, new, 1, "cats", k=10, mode="hybrid")
    assert len(hits) == 3  # the keyword arm still finds the two not-yet-reindexed ones

    report = await reindex(db, new, batch_size=2)
    assert report.embedded == 3 and report.dropped_spaces == [f"{old.model_id}/{old.dim}"]
    status = await db.read(vector_status, new.model_id, new.dim)
    assert (status.current, status.other_model, status.missing) == (4, 0, 0)
    hits = await search_memories(db, new, 1, "cats", k=10, mode="vector")
    assert len(hits) == 4 and all(h.memory.model_id == "other-model" for h in hits)
    rows = await db.fetchall("SELECT name FROM sqlite_master WHERE name LIKE 'memory_bq_%'")
    assert len({r[0] for r in rows if r[0].count("_") == 2}) == 1  # the old vec0 table is gone
    assert (await reindex(db, new)).embedded == 0  # nothing left to do
    assert (await reindex(db, new, force=True)).embedded == 4


async def test_list_memories_per_user_and_all(conn: Any) -> None:
    for user, kind in ((1, "note"), (2, "fact"), (1, "summary")):
        add_memory(conn, NewMemory(user_id=user, kind=kind, content=f"{kind} of {user}"))
    assert [m.content for m in list_memories(conn, 1)] == ["summary of 1", "note of 1"]
    assert len(list_memories(conn)) == 3
    assert [m.kind for m in list_memories(conn, kinds=["fact"])] == ["fact"]
    assert list_memories(conn, 1)[0].model_id is None  # stored without a vector


async def test_a_memory_with_a_zero_vector_is_skipped_not_fatal(conn: Any) -> None:
    # "I am" is all stopwords: the hashing embedder gives it no direction at all.
    emb = HashingEmbedder()
    db = ConnRunner(conn)
    await remember(db, emb, NewMemory(user_id=1, kind="fact", content="I am"))
    kept = await remember(db, emb, NewMemory(user_id=1, kind="note", content="Tea with oat milk"))
    hits = await search_memories(db, emb, 1, "oat milk tea", k=5, mode="vector")
    assert [h.memory.id for h in hits] == [kept]


class GatedEmbedder(HashingEmbedder):
    """Embeds a query only once the database has been read: a serial search would hang."""

    embeds_off_loop = True

    def __init__(self) -> None:
        super().__init__()
        self.read_started = asyncio.Event()

    async def embed_query(self, text: str) -> list[float]:
        await asyncio.wait_for(self.read_started.wait(), timeout=5)
        return await super().embed_query(text)


class RecordingRunner(ConnRunner):
    def __init__(self, conn: Any, embedder: GatedEmbedder, fail: bool = False) -> None:
        super().__init__(conn)
        self.embedder, self.fail = embedder, fail

    async def read(self, fn: Any, *args: Any) -> Any:
        self.embedder.read_started.set()
        if self.fail:
            raise RuntimeError("disk I/O error")
        return await super().read(fn, *args)


async def test_keyword_arm_runs_while_the_query_is_embedded(conn: Any) -> None:
    plain = HashingEmbedder()
    await remember(ConnRunner(conn), plain, NewMemory(user_id=1, kind="note", content="zanzibar"))
    gated = GatedEmbedder()
    hits = await search_memories(RecordingRunner(conn, gated), gated, 1, "zanzibar")
    serial = await search_memories(ConnRunner(conn), plain, 1, "zanzibar")
    assert [h.model_dump() for h in hits] == [h.model_dump() for h in serial]
    assert hits and hits[0].keyword_rank == 1 and hits[0].vector_rank == 1
    failing = RecordingRunner(conn, GatedEmbedder(), fail=True)
    with pytest.raises(RuntimeError, match="disk I/O"):  # the read's error, the embed cancelled
        await search_memories(failing, failing.embedder, 1, "zanzibar")


def test_neighbours_lend_score_within_one_chat_and_kind(conn: Any) -> None:
    from agentd.memory.search import spread_to_neighbours
    from agentd.memory.store import NewMemory, add_memory

    def put(chat: int, kind: str, text: str) -> int:
        return add_memory(conn, NewMemory(user_id=1, kind=kind, content=text, chat_id=chat))

    before = put(1, "turn", "we booked the flights")
    put(2, "turn", "another chat in between")
    put(1, "fact", "a fact in between")
    hit = put(1, "turn", "to Lisbon in May")
    after = put(1, "turn", "and a hotel by the river")
    spread = dict(spread_to_neighbours(conn, 1, 0.5, [(hit, 1.0)]))
    assert spread == {hit: 1.0, before: 0.5, after: 0.5}
    assert spread_to_neighbours(conn, 2, 0.5, [(hit, 1.0)]) == [(hit, 1.0)]  # not theirs


def test_recalled_lines_say_when_each_memory_is_from(conn: Any) -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from agentd.memory import MemoryHit, format_recall, get_memory

    summary = add_memory(
        conn,
        NewMemory(
            user_id=1,
            kind="summary",
            content="We planned Lisbon.",
            context="Conversation of 8 May 2023",
        ),
    )
    # 23:30 UTC on 31 December is already New Year's Day in Tokyo: the owner's day counts.
    late = datetime(2023, 12, 31, 23, 30, tzinfo=ZoneInfo("UTC")).timestamp()
    note = add_memory(conn, NewMemory(user_id=1, kind="note", content="Fireworks"), now=late)
    hits = [MemoryHit(memory=get_memory(conn, mid), score=1.0) for mid in (summary, note)]
    assert format_recall(hits, 1000, "Asia/Tokyo").splitlines() == [
        f"- [summary #{summary}] (Conversation of 8 May 2023) We planned Lisbon.",
        f"- [note #{note}] (1 January 2024) Fireworks",
    ]
    assert "(31 December 2023) Fireworks" in format_recall(hits, 1000)
