"""Group commit: the writes queued while a commit runs share the next transaction and its fsync.

Each write runs in its own savepoint, so one that raises is undone alone and its caller gets the
exception; the others' callers get their results only after the shared COMMIT, so nobody acts
on a write that is not yet durable. A failed COMMIT fails every write in the group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Conn = Any


@dataclass(frozen=True)
class Outcome:
    """What one write of a group returned, or raised."""

    value: Any = None
    error: BaseException | None = None


def run_group(
    conn: Conn, writes: list[tuple[Callable[..., Any], tuple[Any, ...]]], unsynced_from: str | None
) -> list[Outcome]:
    """Run each fn(conn, *args) in one BEGIN IMMEDIATE … COMMIT; `unsynced_from`: the level to
    restore after committing at NORMAL (None: commit at the connection's level)."""
    if unsynced_from is not None:
        # synchronous can only change outside a transaction; it applies to the next COMMIT.
        conn.execute("PRAGMA synchronous = NORMAL")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if len(writes) == 1:
                return [_alone(conn, *writes[0])]
            outcomes = [_one(conn, fn, args) for fn, args in writes]
            conn.execute("COMMIT")
        except BaseException:
            # A failed COMMIT (disk full, I/O error) must not leave the transaction open, or
            # every later BEGIN on this one connection would fail too.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return outcomes
    finally:
        if unsynced_from is not None:
            conn.execute(f"PRAGMA synchronous = {unsynced_from}")


def _alone(conn: Conn, fn: Callable[..., Any], args: tuple[Any, ...]) -> Outcome:
    """A group of one write, committed: no savepoint, as undoing it alone is undoing the
    transaction (two statements fewer on the path nearly every journaled step takes)."""
    try:
        value = fn(conn, *args)
    except Exception as exc:
        if not conn.in_transaction:
            raise  # SQLite rolled it back itself: the caller gets the error all the same
        conn.execute("ROLLBACK")
        return Outcome(error=exc)
    conn.execute("COMMIT")
    return Outcome(value=value)


def _one(conn: Conn, fn: Callable[..., Any], args: tuple[Any, ...]) -> Outcome:
    conn.execute("SAVEPOINT agentd_write")
    try:
        value = fn(conn, *args)
    except Exception as exc:
        if not conn.in_transaction:
            # SQLite rolled the whole transaction back (disk full, I/O error): nothing of the
            # group will be committed, so every caller gets this error.
            raise
        conn.execute("ROLLBACK TO agentd_write")
        conn.execute("RELEASE agentd_write")
        return Outcome(error=exc)
    conn.execute("RELEASE agentd_write")
    return Outcome(value=value)
