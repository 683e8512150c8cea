"""`agentd dashboard` from the shell: it refuses a public bind unless told, and `--link`
prints a one-time link that signs in once. Served on its own, it hides its link's token from
its own log."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.config import Config
from agentd.dashboard import auth
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from tests.daemon_process import REPO_ROOT

# `agentd dashboard` once the command is listed in agentd/cli/app.py; the same function.
DASHBOARD = [sys.executable, "-m", "agentd.cli.dashboard"]


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(
        AGENTD_CONFIG=str(tmp / "agentd.toml"),
        AGENTD_STORAGE__PATH=str(tmp / "agentd.db"),
        PYTHONPATH=str(REPO_ROOT),
        COLUMNS="200",
    )
    return env


def _agentd(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DASHBOARD, *args],
        env=_env(tmp),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _database(tmp: Path) -> Path:
    (tmp / "agentd.toml").write_text("")
    conn = open_sync(tmp / "agentd.db")
    apply_migrations(conn)
    conn.close()
    return tmp / "agentd.db"


def test_a_public_bind_is_refused_unless_allowed(tmp_path: Path) -> None:
    _database(tmp_path)
    refused = _agentd(tmp_path, "--host", "0.0.0.0", "--link")
    assert refused.returncode == 1
    assert "refusing to listen on 0.0.0.0" in refused.stderr and "allow_remote" in refused.stderr
    allowed = _agentd(tmp_path, "--host", "0.0.0.0", "--allow-remote", "--link")
    assert allowed.returncode == 0, allowed.stderr


def test_link_signs_in_once(tmp_path: Path) -> None:
    path = _database(tmp_path)
    printed = _agentd(tmp_path, "--link", "--public-url", "https://agent.example.org")
    assert printed.returncode == 0, printed.stderr
    link = printed.stdout.strip()
    assert link.startswith("https://agent.example.org/login?t=")
    token = link.split("?t=", 1)[1]
    conn = open_sync(path)
    try:
        assert auth.redeem(conn, token, 1.0) is not None
        assert auth.redeem(conn, token, 1.0) is None
        kinds = [r[0] for r in conn.execute("SELECT kind FROM audit ORDER BY id")]
    finally:
        conn.close()
    assert kinds == ["dashboard_link", "dashboard_login"]


def test_an_invalid_public_url_says_what_to_write(tmp_path: Path) -> None:
    _database(tmp_path)
    result = _agentd(tmp_path, "--link", "--public-url", "agent.example.org")
    assert result.returncode == 1 and "http:// or https://" in result.stderr


def test_link_says_when_the_config_leaves_the_dashboard_off(tmp_path: Path) -> None:
    _database(tmp_path)
    off = _agentd(tmp_path, "--link")
    assert off.returncode == 0 and "/login?t=" in off.stdout  # `agentd dashboard` may serve it
    said = " ".join(off.stderr.split())
    assert "[dashboard] enabled = false" in said and "set enabled = true" in said, off.stderr
    (tmp_path / "agentd.toml").write_text("[dashboard]\nenabled = true\n")
    on = _agentd(tmp_path, "--link")
    assert on.returncode == 0 and "/login?t=" in on.stdout and on.stderr == ""


class _Printed(io.StringIO):
    """Standard output that says when the sign-in link has been printed."""

    def __init__(self) -> None:
        super().__init__()
        self.link = asyncio.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if "/login?t=" in self.getvalue():
            self.link.set()
        return written


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


async def test_the_served_dashboard_hides_its_links_token_from_its_log(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> None:
    """`agentd dashboard` serving on its own teaches its redactor the token it prints, as the
    daemon does for /dashboard: a log line or an error that quotes the live link (a request
    that failed) would sign in whoever reads the log."""
    from agentd.cli import dashboard as command

    cfg = Config.model_validate(
        {"storage": {"path": str(_database(tmp_path))}, "log": {"format": "json"}}
    )
    printed = _Printed()
    monkeypatch.setattr(sys, "stdout", printed)
    serving = asyncio.create_task(command._serve(cfg, command._settings(cfg, port=0)))
    try:
        await asyncio.wait_for(printed.link.wait(), 30)
        link = printed.getvalue().split("Sign in", 1)[1].split(": ", 1)[1].split()[0]
        token = link.split("?t=", 1)[1]
        log = logging.getLogger("agentd.dashboard")
        log.warning("sign-in page failed", extra={"url": link})
        try:
            raise ConnectionResetError(f"while answering GET {link!r}")
        except ConnectionResetError:
            log.exception("request failed")
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    logged = capsys.readouterr().err
    assert "sign-in page failed" in logged and "request failed" in logged, logged
    assert token not in logged and "[REDACTED]" in logged, logged


def test_a_request_it_cannot_parse_is_logged_without_the_link_it_quotes(tmp_path: Path) -> None:
    """`agentd dashboard --link` makes a link for a dashboard another process serves (the
    daemon's), which cannot teach its redactor that token. aiohttp logs a request it cannot
    parse with its raw request line: a mangled link (a space, a stray byte) put the live
    token in the serving process's log."""
    _database(tmp_path)
    server = subprocess.Popen(
        [*DASHBOARD, "--port", "0"],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        own = next(line for line in server.stdout if line.startswith("Sign in"))
        port = int(own.split("127.0.0.1:", 1)[1].split("/", 1)[0])
        made = _agentd(tmp_path, "--link", "--port", str(port))
        token = made.stdout.strip().split("?t=", 1)[1]
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(f"GET /login?t={token} HTTP/9.1\r\nHost: x\r\n\r\n".encode())
            answer = conn.recv(200)  # the server logs the error before it answers
        assert answer.startswith(b"HTTP/1.0 400"), answer
    finally:
        server.send_signal(signal.SIGINT)
        logged = server.communicate(timeout=30)[1]
    assert "Error handling request" in logged and "BadStatusLine" in logged, logged
    assert token not in logged, logged
