"""Start `agentd run` as a real subprocess against the fakes; kill it, restart it, read its DB."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from agentd.db import open_sync
from agentd.durable.store import OPEN_STATUSES

if TYPE_CHECKING:
    from tests.fakes import FakeTelegram

T = TypeVar("T")

AGENTD = [sys.executable, "-m", "agentd"]
REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = "123456:TEST-token-abcdef"
API_KEY = "sk-ant-test-key-0123456789"
OWNER = 42
# Start-up imports aiogram and anthropic: ~3 s alone, 35-45 s measured on the shared 2-core box
# at load 11-15 (benchmarks/schedule_scale.py), so a 30 s wait failed healthy daemons.
START_TIMEOUT = 120.0


def daemon_env(tmp: Path, tg_url: str, llm_url: str, **overrides: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_"))
    }
    env.update(
        TELEGRAM_BOT_TOKEN=TOKEN,
        ANTHROPIC_API_KEY=API_KEY,
        AGENTD_TELEGRAM__API_BASE=tg_url,
        AGENTD_ACCESS__ALLOWED_USER_IDS=f"[{OWNER}, 43]",
        AGENTD_TELEGRAM__POLL_TIMEOUT="1",
        AGENTD_LLM__BASE_URL=llm_url,
        AGENTD_LLM__RETRIES="3",
        AGENTD_LLM__RETRY_BASE_DELAY="0.05",
        AGENTD_LLM__RETRY_MAX_WAIT="0.5",
        AGENTD_LLM__TIMEOUT="20",
        AGENTD_STORAGE__PATH=str(tmp / "agentd.db"),
        AGENTD_ENGINE__EVENT_POLL_INTERVAL="0.1",
        AGENTD_ENGINE__SHUTDOWN_GRACE="2",
        # The daily prune starts a `retention` instance at every start; the e2e tests count
        # and read turn instances. It is tested on its own (tests/test_retention.py).
        AGENTD_RETENTION__ENABLED="false",
        AGENTD_LOG__LEVEL="INFO",
        # e2e tests check delivery, not recall quality: the instant built-in embedder will do
        # (the default e5-small is exercised in tests/test_memory_embedders.py).
        AGENTD_MEMORY__EMBEDDER="hashing",
        PYTHONUNBUFFERED="1",
        # The e2e plugin tools live in tests/plugins and record their runs here.
        PYTHONPATH=str(REPO_ROOT),
        AGENTD_TEST_EFFECTS=str(tmp / "effects.log"),
    )
    env.update(overrides)
    return env


def poll(predicate: Callable[[], T], timeout: float = 30.0, what: str = "") -> T:
    """Call predicate until it returns something truthy; return that. For state that has no
    notification to block on (a database row, a file); AssertionError naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.05)
    return value


def send_marker(
    tg: FakeTelegram, chat_id: int, text: str = "marker", timeout: float = 30.0
) -> list[dict[str, Any]]:
    """Send `text` to the daemon from chat_id's user after everything under test and wait for
    its reply (the fake model's default echo, "echo: <text>"); return what the chat was sent
    before that reply.

    The positive marker for a negative assert ("no second reply", "nothing else was sent"):
    updates are taken in order and a chat's turns run one at a time in the order they
    started, so by the time the marker is answered every earlier update of this chat has been
    handled and every turn it started has finished."""
    tg.add_message(chat_id, chat_id, text)
    sent = tg.wait_until(
        lambda: (
            (s := [m for m in tg.sent if m["chat_id"] == chat_id])
            and any(m["plain_text"] == f"echo: {text}" for m in s)
            and s
        ),
        timeout,
        f"the reply to the marker {text!r} in chat {chat_id}",
    )
    at = next(i for i, m in enumerate(sent) if m["plain_text"] == f"echo: {text}")
    assert at == len(sent) - 1, f"sent after the marker's reply: {sent[at + 1 :]}"
    return sent[:at]


class Daemon:
    """One `agentd run` process; its stderr goes to a log file the test can read."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.env = env
        self.db_path = Path(env["AGENTD_STORAGE__PATH"])
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.tmp / f"agentd-{self.starts}.log"

    def start(self, wait_ready: bool = True, timeout: float = START_TIMEOUT) -> Daemon:
        self.starts += 1
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [*AGENTD, "run"], env=self.env, cwd=self.tmp, stderr=log, stdout=log
        )
        if wait_ready:
            try:
                self.wait_for_log("agentd running", timeout)
            except BaseException:
                # A daemon that never got ready is not left behind retrying a fake that is gone
                # (under load such leftovers pile up and slow every later test).
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait(10)
                raise
        return self

    def log(self) -> str:
        return "\n".join(
            (self.tmp / f"agentd-{n}.log").read_text(errors="replace")
            for n in range(1, self.starts + 1)
            if (self.tmp / f"agentd-{n}.log").exists()
        )

    def wait_for_log(self, needle: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.log_path.read_text(errors="replace"):
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"agentd exited ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {needle!r} in the log after {timeout}s:\n{self.log()}")
            time.sleep(0.05)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*AGENTD, *args],
            env=self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def cli_json(self, *args: str) -> Any:
        result = self.cli(*args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def effects(self) -> list[str]:
        path = Path(self.env["AGENTD_TEST_EFFECTS"])
        return path.read_text().splitlines() if path.exists() else []

    def age_messages(self, seconds: float) -> None:
        """Let `seconds` pass for the stored conversation (its timestamps move back)."""
        conn = open_sync(self.db_path)
        try:
            with conn:
                conn.execute("UPDATE messages SET created_at = created_at - ?", (seconds,))
        finally:
            conn.close()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        conn = open_sync(self.db_path)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def cells_holding(self, needle: str) -> list[str]:
        """`table.column` of every cell in the database holding `needle` (any case): where a
        secret would be kept."""
        from tests.db_scan import rows_holding

        return sorted({where for where, _ in rows_holding(self.db_path, needle, any_case=True)})

    def wait_for_instances(self, n: int, timeout: float = 30.0, status: str = "complete") -> None:
        deadline = time.monotonic() + timeout
        while True:
            done = self.query(
                "SELECT COUNT(*) FROM workflow_instances WHERE status = ?", (status,)
            )[0][0]
            if done >= n:
                return
            if time.monotonic() > deadline:
                rows = self.query("SELECT id, status, error FROM workflow_instances")
                raise AssertionError(f"{done}/{n} {status}: {[tuple(r) for r in rows]}")
            time.sleep(0.05)

    def open_instances(self, key: str | None = None) -> list[tuple[str, str]]:
        """(id, status) of the workflow instances not yet finished (of one key, if given)."""
        marks = ", ".join("?" * len(OPEN_STATUSES))
        sql = f"SELECT id, status FROM workflow_instances WHERE status IN ({marks})"
        params: tuple[Any, ...] = OPEN_STATUSES
        if key is not None:
            sql, params = f"{sql} AND key = ?", (*OPEN_STATUSES, key)
        return [(r[0], r[1]) for r in self.query(sql, params)]

    def wait_idle(self, key: str | None = None, timeout: float = 30.0) -> None:
        """Block until no workflow instance (of `key`, if given) is queued, running, waiting or
        sleeping: whatever they were going to send, call or write has been sent, called and
        written (a step is journaled only after its effect), and nothing is left to do more."""
        deadline = time.monotonic() + timeout
        while found := self.open_instances(key):
            if time.monotonic() > deadline:
                raise AssertionError(f"still open after {timeout}s: {found}\n{self.log()}")
            time.sleep(0.05)


@contextmanager
def running_daemon(
    tmp: Path, env: dict[str, str], timeout: float = START_TIMEOUT
) -> Iterator[Daemon]:
    daemon = Daemon(tmp, env).start(timeout=timeout)
    try:
        yield daemon
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait(10)
