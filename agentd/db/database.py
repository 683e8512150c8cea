"""The daemon's one SQLite connection: every read and write goes through it, one at a time."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from agentd.db import group_commit
from agentd.db.connect import DatabaseError, open_sync
from agentd.db.migrations import Migrations, apply_migrations

T = TypeVar("T")
log = logging.getLogger("agentd.db")
Params = Sequence[Any] | dict[str, Any]
Conn = Any  # a sqlite3.Connection or sqlean's equivalent; both have the same API


SYNCHRONOUS_LEVELS = ("FULL", "NORMAL")


@dataclass(frozen=True)
class _Queued:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    synced: bool
    future: asyncio.Future[Any]


def _log_lost(future: asyncio.Future[Any]) -> None:
    """A write nobody awaits (Database.write_behind) that did not commit: said in the log."""
    if future.cancelled():
        log.warning("a queued write was dropped: the database closed before its commit")
    elif (error := future.exception()) is not None:
        log.warning("a queued write failed", extra={"error": f"{type(error).__name__}: {error}"})


def _settle(future: asyncio.Future[Any], outcome: group_commit.Outcome) -> None:
    if future.done():  # its caller was cancelled while the group ran
        return
    if outcome.error is not None:
        future.set_exception(outcome.error)
    else:
        future.set_result(outcome.value)


class Database:
    """One aiosqlite connection; each read or write is one function run on its thread.

    Like datasette's execute_write_fn: a whole transaction is a plain function, so it costs one
    thread hop and can never interleave with another coroutine's statements. Writes queued while
    a commit runs go together in the next one (agentd/db/group_commit.py): one fsync for all.
    """

    def __init__(self, conn: aiosqlite.Connection, path: Path, synchronous: str = "FULL") -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self.path = path
        self.synchronous = synchronous
        self._queue: list[_Queued] = []
        self._drainer: asyncio.Task[None] | None = None
        self._reader: Conn | None = None  # the event loop's own, for read_inline

    @classmethod
    async def open(
        cls, path: str | Path, *, synchronous: str = "FULL", migrations: Migrations | None = None
    ) -> Database:
        """Open (creating it 0600 if needed), load sqlite-vec and apply pending migrations
        (the core's, or `migrations`: the daemon's are `agentd.channels.migrations()`).

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
        await db._call(apply_migrations, migrations)
        return db

    async def close(self) -> None:
        if self._drainer is not None:
            await self._drainer  # queued writes still commit
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        async with self._lock:
            await self._conn.close()

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # aiosqlite's worker queue is FIFO, so even a cancelled caller's queued work keeps order.
        async with self._lock:
            raw = self._conn._conn
            return await self._conn._execute(fn, raw, *args, **kwargs)

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(conn, *args) inside BEGIN IMMEDIATE … COMMIT (its effects undone if it raises).

        It returns once the COMMIT is done, at the database's `synchronous` level; writes queued
        meanwhile may share that transaction, each in its own savepoint.
        """
        return await self._enqueue(partial(fn, **kwargs) if kwargs else fn, args, synced=True)

    async def write_unsynced(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Like `write`, but COMMIT does not wait for fsync (synchronous=NORMAL for this one).

        In WAL mode such a commit survives a crash of this process at once (it is in the OS
        page cache); only a power loss or kernel crash before the next synced commit of this
        database can undo it, and then it is undone together with every commit after it (the
        WAL is replayed up to its first torn frame). So it suits writes that are safe to redo:
        journal rows whose loss makes the engine run the step again.
        """
        target = partial(fn, **kwargs) if kwargs else fn
        return await self._enqueue(target, args, synced=False)

    def write_behind(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        """Queue an unsynced write now; its commit's future, which no cancel of the caller drops.

        For a row that must outlive its caller's cancellation, written from the cancel's own
        path: a cancelled caller's awaited write is dropped when its group has not started yet.
        Queued here, at once, it commits in queue order with the others (so before any write
        queued after it), `close()` waits for it, and a failure is logged, as the caller may
        be gone; `await asyncio.shield(future)` waits for the commit, and a second cancel ends
        that wait, not the write.
        """
        target = partial(fn, **kwargs) if kwargs else fn
        future = self._submit(target, args, synced=False)
        future.add_done_callback(_log_lost)
        return future

    def _submit(
        self, fn: Callable[..., T], args: tuple[Any, ...], synced: bool
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append(_Queued(fn, args, synced, future))
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain(), name="db-writes")
        return future

    async def _enqueue(self, fn: Callable[..., T], args: tuple[Any, ...], synced: bool) -> T:
        return await self._submit(fn, args, synced)

    async def _drain(self) -> None:
        """Commit the queue group by group until it is empty."""
        group: list[_Queued] = []
        try:
            while self._queue:
                # A caller cancelled before its group starts does not write (as before, when it
                # was cancelled waiting for the lock).
                group = [q for q in self._queue if not q.future.done()]
                self._queue.clear()
                if not group:
                    continue
                # One synced write makes the whole group's COMMIT synced.
                synced = any(q.synced for q in group) or self.synchronous == "NORMAL"
                writes = [(q.fn, q.args) for q in group]
                try:
                    outcomes = await self._call(
                        group_commit.run_group, writes, None if synced else self.synchronous
                    )
                except Exception as exc:
                    outcomes = [group_commit.Outcome(error=exc)] * len(group)
                for queued, outcome in zip(group, outcomes, strict=True):
                    _settle(queued.future, outcome)
                group = []
        except asyncio.CancelledError:
            for queued in [*group, *self._queue]:
                queued.future.cancel()
            self._queue.clear()
            raise
        finally:
            self._drainer = None

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(conn, *args) outside a write transaction."""
        return await self._call(fn, *args, **kwargs)

    async def read_inline(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(conn, *args) right here, on the event loop's own read-only connection.

        For a few rows found through an index, nothing more: a hop to the writer's thread and
        back costs more than such a read, and with the loop busy it waits for the GIL on each
        side. It sees every committed write (WAL), as `read` does. Anything that may scan,
        search or take long must use `read`, or it stalls every chat meanwhile.
        """
        if self._reader is None:
            self._reader = open_sync(self.path, readonly=True)
            # Never wait on the loop: a reader is only kept out during WAL recovery.
            self._reader.execute("PRAGMA busy_timeout = 0")
        try:
            return fn(self._reader, *args, **kwargs)
        except Exception as exc:  # the stdlib's or sqlean's OperationalError: same API
            if "database is locked" not in str(exc) and "busy" not in str(exc):
                raise
            return await self.read(fn, *args, **kwargs)

    async def execute(self, sql: str, params: Params = ()) -> int:
        """One statement in its own transaction; returns the number of rows changed."""
        return await self.write(lambda c: c.execute(sql, params).rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Any]:
        return await self.read(lambda c: c.execute(sql, params).fetchall())

    async def fetchone(self, sql: str, params: Params = ()) -> Any:
        return await self.read(lambda c: c.execute(sql, params).fetchone())
