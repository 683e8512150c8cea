"""`agentd dashboard` from the shell: it refuses a public bind unless told, and `--link`
prints a one-time link that signs in once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agentd.dashboard import auth
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from tests.daemon_process import REPO_ROOT

# `agentd dashboard` once the command is listed in agentd/cli/app.py; the same function.
DASHBOARD = [sys.executable, "-m", "agentd.cli.dashboard"]


def _agentd(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(
        AGENTD_CONFIG=str(tmp / "agentd.toml"),
        AGENTD_STORAGE__PATH=str(tmp / "agentd.db"),
        PYTHONPATH=str(REPO_ROOT),
        COLUMNS="200",
    )
    return subprocess.run(
        [*DASHBOARD, *args],
        env=env,
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
