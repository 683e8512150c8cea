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


class Database:
    """One aiosqlite connection; each read or write is one function run on its thread.

    Like datasette's execute_write_fn: a whole transaction is a plain function, so it costs one
    thread hop and can never interleave with another coroutine's statements.
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self.path = path

    @classmethod
    async def open(cls, path: str | Path) -> Database:
        """Open (creating it 0600 if needed), load sqlite-vec and apply pending migrations."""
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
        conn = aiosqlite.Connection(lambda: open_sync(path), 64)
        await conn
        db = cls(conn, path)
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
