"""Journal rows held back until the instance's next commit carries them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
Write = Callable[[Callable[[Any], T]], Awaitable[T]]


class Pending:
    """Rows of idempotent steps: losing them in a crash only makes those steps run again, so
    they need no commit of their own and ride along with whatever this instance writes next."""

    def __init__(self) -> None:
        self._rows: list[Callable[[Any], Any]] = []  # each takes the connection

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Hold fn(conn, *args, **kwargs) for the next transaction."""
        self._rows.append(lambda conn: fn(conn, *args, **kwargs))

    async def write(self, write: Write[T], fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn(conn, *args) through `write`, in one transaction with every held row."""
        rows, self._rows = self._rows, []

        def transaction(conn: Any) -> T:
            for row in rows:
                row(conn)
            return fn(conn, *args, **kwargs)

        try:
            return await write(transaction)
        except BaseException:
            # Rolled back (or cancelled mid-flight, when the rows are upserts anyway): keep them.
            self._rows[:0] = rows
            raise
