"""One runner per database (R-DUR-11): a lease row with pid and start time."""

from __future__ import annotations

import os
import socket
import time
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def current(conn: Any) -> Lease | None:
    row = conn.execute(
        "SELECT pid, hostname, started_at, heartbeat_at FROM runner_lease WHERE id = 1"
    ).fetchone()
    return (
        Lease(pid=row[0], hostname=row[1], started_at=row[2], heartbeat_at=row[3]) if row else None
    )


def holder_alive(lease: Lease, now: float) -> bool:
    if lease.hostname == socket.gethostname():
        return lease.pid != os.getpid() and _alive(lease.pid)
    return now - lease.heartbeat_at < STALE_AFTER


def acquire(conn: Any, pid: int | None = None) -> Lease:
    """Take the lease, or raise LeaseHeld naming the live holder."""
    now = time.time()
    held = current(conn)
    if held is not None and holder_alive(held, now):
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(held.started_at))
        raise LeaseHeld(
            f"another agentd is already running on this database (pid {held.pid} on "
            f"{held.hostname}, started {started}); stop it first (systemctl stop agentd)"
        )
    lease = Lease(pid=pid or os.getpid(), hostname=socket.gethostname(), started_at=now,
                  heartbeat_at=now)  # fmt: skip
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
