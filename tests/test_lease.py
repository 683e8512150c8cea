"""One runner per database (R-DUR-11), and no stale lock after a crash or a reboot."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.runtime import lease


def test_the_lock_is_exclusive_and_released_on_close(tmp_path: Path) -> None:
    first, second = lease.RunnerLock(tmp_path / "a.db"), lease.RunnerLock(tmp_path / "a.db")
    first.acquire(lambda: "held")
    with pytest.raises(lease.LeaseHeld, match="held"):
        second.acquire(lambda: "held")
    first.release()
    second.acquire(lambda: "held")  # the kernel let go: a dead holder never blocks a restart
    second.release()


def test_a_stale_row_from_before_a_reboot_does_not_block(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "a.db")
    apply_migrations(conn)
    # pid 1 is alive after every reboot: a pid check alone would refuse forever.
    conn.execute(
        "INSERT INTO runner_lease VALUES (1, 1, ?, ?, ?)",
        (socket.gethostname(), time.time() - 86400, time.time() - 86400),
    )
    taken = lease.acquire(conn, pid=4242)
    assert taken.pid == 4242 and lease.current(conn).pid == 4242


def test_a_live_holder_on_another_host_is_refused(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "a.db")
    apply_migrations(conn)
    conn.execute(
        "INSERT INTO runner_lease VALUES (1, 77, 'otherhost', ?, ?)", (time.time(), time.time())
    )
    with pytest.raises(lease.LeaseHeld, match="pid 77 on otherhost"):
        lease.acquire(conn, pid=4242)
