"""Group commit: concurrent writes share a COMMIT, yet each succeeds or fails alone."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from agentd.db import Database


@pytest.fixture
async def db(tmp_path: Path) -> Any:
    opened = await Database.open(tmp_path / "group.db")
    await opened.write(lambda c: c.execute("CREATE TABLE t (x INTEGER)"))
    statements: list[str] = []
    await opened.read(lambda c: c.set_trace_callback(statements.append))
    opened.statements = statements  # type: ignore[attr-defined]
    yield opened
    await opened.close()


def insert(conn: Any, x: int) -> int:
    conn.execute("INSERT INTO t VALUES (?)", (x,))
    return x


def insert_then_fail(conn: Any, x: int) -> int:
    conn.execute("INSERT INTO t VALUES (?)", (x,))
    raise ValueError(f"refused {x}")


def rows(conn: Any) -> list[int]:
    return [r[0] for r in conn.execute("SELECT x FROM t ORDER BY x")]


async def test_concurrent_writes_share_one_commit(db: Any) -> None:
    db.statements.clear()
    results = await asyncio.gather(*(db.write(insert, i) for i in range(20)))
    assert results == list(range(20))
    assert await db.read(rows) == list(range(20))
    assert db.statements.count("COMMIT") == 1  # all twenty were queued in one loop turn


async def test_a_failing_write_is_undone_alone(db: Any) -> None:
    results = await asyncio.gather(
        db.write(insert, 1),
        db.write(insert_then_fail, 2),
        db.write_unsynced(insert, 3),
        return_exceptions=True,
    )
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], ValueError) and str(results[1]) == "refused 2"
    assert await db.read(rows) == [1, 3]


async def test_a_write_alone_commits_without_a_savepoint_and_fails_alone(db: Any) -> None:
    db.statements.clear()
    assert await db.write(insert, 1) == 1
    assert db.statements == ["BEGIN IMMEDIATE", "INSERT INTO t VALUES (1)", "COMMIT"]
    with pytest.raises(ValueError, match="refused 2"):
        await db.write(insert_then_fail, 2)
    assert await db.read(rows) == [1]  # its insert undone
    assert await db.write(insert, 3) == 3  # no transaction left open
    assert await db.read(rows) == [1, 3]


async def test_a_lone_write_sqlite_rolled_back_gets_the_real_error(db: Any) -> None:
    def lose_the_transaction(conn: Any) -> None:
        conn.execute("ROLLBACK")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await db.write(lose_the_transaction)
    assert await db.write(insert, 4) == 4


async def test_one_synced_write_makes_the_group_synced(db: Any) -> None:
    def level(conn: Any) -> int:
        return int(conn.execute("PRAGMA synchronous").fetchone()[0])

    assert await asyncio.gather(db.write_unsynced(level), db.write_unsynced(level)) == [1, 1]
    assert await asyncio.gather(db.write_unsynced(level), db.write(level)) == [2, 2]
    assert await db.read(level) == 2  # FULL again after the group


async def test_a_write_cancelled_before_its_group_starts_does_not_happen(db: Any) -> None:
    started, release = threading.Event(), threading.Event()

    def slow(conn: Any) -> None:
        started.set()
        release.wait(10)  # holds the writer thread, so the next writes queue behind it

    first = asyncio.create_task(db.write(slow))
    assert await asyncio.to_thread(started.wait, 10)
    cancelled = asyncio.create_task(db.write(insert, 7))
    kept = asyncio.create_task(db.write(insert, 8))
    await asyncio.sleep(0)  # one pass of the loop: both are queued behind `slow`
    cancelled.cancel()
    release.set()
    await first
    assert await kept == 8
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert await db.read(rows) == [8]


async def test_queued_writes_commit_before_close(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "close.db")
    await db.write(lambda c: c.execute("CREATE TABLE t (x INTEGER)"))
    pending = [asyncio.create_task(db.write(insert, i)) for i in range(5)]
    await asyncio.sleep(0)
    await db.close()
    assert [await p for p in pending] == list(range(5))
    reopened = await Database.open(tmp_path / "close.db")
    assert await reopened.read(rows) == list(range(5))
    await reopened.close()


async def test_a_group_sqlite_rolled_back_fails_every_write_in_it(db: Any) -> None:
    def lose_the_transaction(conn: Any) -> None:
        conn.execute("ROLLBACK")  # what SQLite itself does on a full disk or an I/O error
        raise OSError("disk full")

    results = await asyncio.gather(
        db.write(insert, 1), db.write(lose_the_transaction), return_exceptions=True
    )
    assert [type(r) for r in results] == [OSError, OSError]
    assert await db.read(rows) == []
    assert await db.write(insert, 2) == 2  # the connection is usable again


async def test_an_inline_read_sees_every_committed_write_and_cannot_write(db: Any) -> None:
    count = "SELECT COUNT(*) FROM t"
    assert await db.read_inline(lambda c: c.execute(count).fetchone()[0]) == 0
    await asyncio.gather(db.write(insert, 1), db.write_unsynced(insert, 2))
    assert await db.read_inline(lambda c: c.execute(count).fetchone()[0]) == 2
    with pytest.raises(Exception, match="readonly"):
        await db.read_inline(lambda c: c.execute("INSERT INTO t VALUES (3)"))
    assert await db.read(lambda c: c.execute(count).fetchone()[0]) == 2
