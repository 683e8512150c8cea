"""How the dashboard reaches the database: `read(fn, *args)` and `write(fn, *args)`.

The daemon's `Database` already has exactly these two methods (one writer, reads beside it),
so serving from the daemon passes it in; `agentd dashboard` alone uses `FileAccess`, which
opens a short-lived connection per call on a worker thread, like a CLI command.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from agentd.db import open_sync

T = TypeVar("T")


class Access(Protocol):
    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def stop_flagged(self, instance_id: str) -> None:
        """A workflow this page just flagged for cancel (its write returned): stop it now."""
        ...


class FileAccess:
    """Connections opened per call: nothing is held while no page is being served."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(self, write: bool, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = open_sync(self.path, readonly=not write)
        try:
            if not write:
                return fn(conn, *args)
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn, *args)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result
        finally:
            conn.close()

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(self._run, False, partial(fn, **kwargs), args)

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(self._run, True, partial(fn, **kwargs), args)

    def stop_flagged(self, instance_id: str) -> None:
        """Nothing to do here: the daemon, another process, sees the flag at its next poll."""


class DaemonAccess:
    """Inside `agentd run`: changes through the daemon's one writer (`Database.write`), reads
    on connections of their own, so a page that scans a year of rows never holds the writer
    a turn is waiting for."""

    def __init__(self, db: Any, engine: Any = None) -> None:
        self._db = db
        self._engine = engine
        self._reads = FileAccess(db.path)

    async def read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self._reads.read(fn, *args, **kwargs)

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self._db.write(fn, *args, **kwargs)  # type: ignore[no-any-return]

    def stop_flagged(self, instance_id: str) -> None:
        """At once, as the chat's intake does: the next step must not begin meanwhile."""
        if self._engine is not None:
            self._engine.stop_flagged(instance_id)
