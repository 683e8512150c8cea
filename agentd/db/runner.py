"""How code that reads and writes SQLite is handed a database: the daemon's `Database` (one
writer thread) or, for the CLI, benchmarks and tests, a plain connection behind `ConnRunner`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
Conn = Any  # sqlite3.Connection or sqlean's equivalent


class Runner(Protocol):
    """What `agentd.db.Database` offers; `ConnRunner` gives a plain connection the same face."""

    async def read(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def write(self, fn: Callable[..., T], *args: Any) -> T: ...


class ConnRunner:
    """Run store functions on a synchronous connection (CLI, benchmarks, tests)."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(self.conn, *args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(self.conn, *args)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return result
