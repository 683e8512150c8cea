"""One runner per database (R-DUR-11): a lease row with pid and start time."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

STALE_AFTER = 90.0  # seconds without heartbeat before another host may take over


class LeaseHeld(Exception):
    """Another live `agentd run` holds this database."""


class Lease(BaseModel):
    pid: int
    hostname: str
    started_at: float
    heartbeat_at: float


def current(conn: Any) -> Lease | None:
    row = conn.execute(
        "SELECT pid, hostname, started_at, heartbeat_at FROM runner_lease WHERE id = 1"
    ).fetchone()
    return (
        Lease(pid=row[0], hostname=row[1], started_at=row[2], heartbeat_at=row[3]) if row else None
    )


class RunnerLock:
    """An exclusive flock on `<database>.lock`: the kernel drops it when its process dies, so a
    kill -9 or a power cut can never leave the database locked (a pid could be reused)."""

    def __init__(self, db_path: Path) -> None:
        self.path = Path(f"{db_path}.lock")
        self._fd: int | None = None

    def acquire(self, describe: Callable[[], str]) -> None:
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseHeld(describe()) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None


def holder_pid(db_path: Path, conn: Any) -> int | None:
    """The pid of the `agentd run` holding this database on this host, or None when none runs
    (the flock decides; 0 when one runs but has not recorded itself yet)."""
    probe = RunnerLock(db_path)
    try:
        probe.acquire(lambda: "")
    except LeaseHeld:
        try:
            held = current(conn)
        except Exception:  # an old database without the lease table
            return 0
        return held.pid if held is not None else 0
    probe.release()
    return None


def describe_holder(lease: Lease | None) -> str:
    if lease is None:
        return "another agentd is already running on this database; stop it first"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lease.started_at))
    return (
        f"another agentd is already running on this database (pid {lease.pid} on "
        f"{lease.hostname}, started {started}); stop it first (systemctl stop agentd)"
    )


def holder_alive(lease: Lease, now: float) -> bool:
    """Only for a holder on another host (the flock decides on this one): a fresh heartbeat."""
    if lease.hostname == socket.gethostname():
        return False
    return now - lease.heartbeat_at < STALE_AFTER


def acquire(conn: Any, pid: int | None = None) -> Lease:
    """Record this runner (call while holding the RunnerLock); refuse a live remote holder."""
    now = time.time()
    held = current(conn)
    if held is not None and holder_alive(held, now):
        raise LeaseHeld(describe_holder(held))
    lease = Lease(
        pid=pid or os.getpid(), hostname=socket.gethostname(), started_at=now, heartbeat_at=now
    )
    conn.execute(
        "INSERT INTO runner_lease (id, pid, hostname, started_at, heartbeat_at) "
        "VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, "
        "hostname = excluded.hostname, started_at = excluded.started_at, "
        "heartbeat_at = excluded.heartbeat_at",
        (lease.pid, lease.hostname, lease.started_at, lease.heartbeat_at),
    )
    return lease


def heartbeat(conn: Any, pid: int) -> None:
    conn.execute(
        "UPDATE runner_lease SET heartbeat_at = ? WHERE id = 1 AND pid = ?", (time.time(), pid)
    )


def release(conn: Any, pid: int) -> None:
    conn.execute("DELETE FROM runner_lease WHERE id = 1 AND pid = ?", (pid,))
