"""Shared fixtures. No test reaches the real network: every peer is a local fake."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.channels import migrations
from agentd.db import Database
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the programs the tests start. A suite started in the background of a
    non-interactive shell has SIGINT ignored, and every child would inherit that (Python then
    installs no KeyboardInterrupt): tests that stop `agentd dashboard` or `agentd init` with
    Ctrl-C would wait forever. A handled signal is reset to the default in each child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # `python -m agentd` in a child runs this checkout's code, not whichever one the venv
    # has installed in editable mode (a second worktree would test the first one's agentd).
    here = str(Path(__file__).resolve().parents[1])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *paths])


@pytest.fixture(autouse=True)
def _no_real_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Refuse connections to anything but loopback, so a test can never reach the internet."""
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and host not in ("127.0.0.1", "::1", "localhost"):
            raise ConnectionRefusedError(f"tests may not connect to {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await Database.open(tmp_path / "test.db", migrations=migrations())
    yield database
    await database.close()


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Any]:
    """A migrated database on a plain (synchronous) connection."""
    c = open_sync(tmp_path / "mem.db")
    apply_migrations(c, migrations())
    yield c
    c.close()
