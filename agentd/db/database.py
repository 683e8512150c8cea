"""The daemon's one SQLite connection: every read and write goes through it, one at a time."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from agentd.db.connect import DatabaseError, open_sync
from agentd.db.migrations import apply_migrations

T = TypeVar("T")
Params = Sequence[Any] | dict[str, Any]
Conn = Any  # a sqlite3.Connection or sqlean's equivalent; both have the same API


SYNCHRONOUS_LEVELS = ("FULL", "NORMAL")


def _in_transaction(conn: Conn, fn: Callable[..., T], *args: Any) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn, *args)
        conn.execute("COMMIT")
    except BaseException:
        # A failed COMMIT (disk full, I/O error) must not leave the transaction open, or every
        # later BEGIN on this one connection would fail too.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _unsynced(conn: Conn, restore: str, fn: Callable[..., T], *args: Any) -> T:
    # synchronous can only change outside a transaction; it applies to the next COMMIT.
    conn.execute("PRAGMA synchronous = NORMAL")
    try:
        return _in_transaction(conn, fn, *args)
    finally:
        conn.execute(f"PRAGMA synchronous = {restore}")


class Database:
    """One aiosqlite connection; each read or write is one function run on its thread.

    Like datasette's execute_write_fn: a whole transaction is a plain function, so it costs one
    thread hop and can never interleave with another coroutine's statements.
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path, synchronous: str = "FULL") -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self.path = path
        self.synchronous = synchronous

    @classmethod
    async def open(cls, path: str | Path, *, synchronous: str = "FULL") -> Database:
        """Open (creating it 0600 if needed), load sqlite-vec and apply pending migrations.

        `synchronous` is the level of every `write` (FULL: each commit is on disk before it
        returns); `write_unsynced` commits at NORMAL whatever it is.
        """
        if synchronous not in SYNCHRONOUS_LEVELS:
            raise DatabaseError(
                f"synchronous must be one of {SYNCHRONOUS_LEVELS}, not {synchronous!r}"
            )
        path = Path(path)
        try:
            # Open once in a plain thread first: a failure inside aiosqlite's own worker thread
            # would outlive the event loop and print a traceback on the way out.
            await asyncio.to_thread(lambda: open_sync(path).close())
        except (OSError, sqlite3.Error) as exc:
            raise DatabaseError(
                f"cannot open the database {path}: {exc}; check storage.path and that this "
                "user may write to its folder"
            ) from None
        conn = aiosqlite.Connection(lambda: open_sync(path, synchronous=synchronous), 64)
        await conn
        db = cls(conn, path, synchronous)
        await db._call(apply_migrations)
        return db

    async def close(self) -> None:
        async with self._lock:
            await self._conn.close()

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # aiosqlite's worker queue is FIFO, so even a cancelled caller's queued work keeps order.
        async with self._lock:
            raw = self._conn._conn
            return await self._conn._execute(fn, raw, *args, **kwargs)

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(conn, *args) inside BEGIN IMMEDIATE … COMMIT (ROLLBACK if it raises)."""
        return await self._call(_in_transaction, partial(fn, **kwargs) if kwargs else fn, *args)

    async def write_unsynced(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Like `write`, but COMMIT does not wait for fsync (synchronous=NORMAL for this one).

        In WAL mode such a commit survives a crash of this process at once (it is in the OS
        page cache); only a power loss or kernel crash before the next synced commit of this
        database can undo it, and then it is undone together with every commit after it (the
        WAL is replayed up to its first torn frame). So it suits writes that are safe to redo:
        journal rows whose loss makes the engine run the step again.
        """
        target = partial(fn, **kwargs) if kwargs else fn
        if self.synchronous == "NORMAL":
            return await self._call(_in_transaction, target, *args)
        return await self._call(_unsynced, self.synchronous, target, *args)

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(conn, *args) outside a write transaction."""
        return await self._call(fn, *args, **kwargs)

    async def execute(self, sql: str, params: Params = ()) -> int:
        """One statement in its own transaction; returns the number of rows changed."""
        return await self.write(lambda c: c.execute(sql, params).rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Any]:
        return await self.read(lambda c: c.execute(sql, params).fetchall())

    async def fetchone(self, sql: str, params: Params = ()) -> Any:
        return await self.read(lambda c: c.execute(sql, params).fetchone())
