"""A newcomer's first hour: the traps a new owner can fall into, each closed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.channels import load_config
from agentd.config import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_")):
            monkeypatch.delenv(name)


def test_the_database_is_found_beside_the_config_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "x"
    home.mkdir()
    (home / "agentd.toml").write_text('[media]\noutgoing_dir = "out"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(home / "agentd.toml", env={})
    assert config.db_path == home / "agentd.db"  # not ./agentd.db in the working directory
    assert config.outgoing_dir == home / "out"
    # A path given in the environment is the caller's, relative to where they are.
    config = load_config(home / "agentd.toml", env={"AGENTD_STORAGE__PATH": "mine.db"})
    assert config.db_path.absolute() == elsewhere / "mine.db"


def test_a_database_where_older_versions_looked_is_not_silently_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "x"
    home.mkdir()
    (home / "agentd.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agentd.db").write_bytes(b"")  # the database an older agentd made here
    with pytest.raises(ConfigError) as exc:
        load_config(home / "agentd.toml", env={})
    assert str(home / "agentd.db") in str(exc.value) and "move it" in str(exc.value)


def test_a_single_underscore_variable_is_an_error_not_ignored(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(None, env={"AGENTD_ACCESS_ALLOWED_USER_IDS": "[42]"})
    assert "AGENTD_ACCESS__ALLOWED_USER_IDS" in str(exc.value)
    load_config(None, env={"AGENTD_TEST_EFFECTS": "/tmp/x"})  # not a config key: left alone


def test_plain_flags_show_no_type_in_help() -> None:
    from typer.testing import CliRunner

    from agentd.cli.app import app

    result = CliRunner().invoke(app, ["audit", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "--json" in result.output
    assert "<bool>" not in result.output


def test_a_stop_during_start_up_is_a_clean_exit(tmp_path: Path) -> None:
    """systemd shows "failed" for exit 1; a stop while waiting for Telegram is not a failure."""
    import signal
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "TELEGRAM_"))}
    env.update(
        TELEGRAM_BOT_TOKEN="123456:TEST-token-abcdef",
        ANTHROPIC_API_KEY="sk-ant-x",
        AGENTD_TELEGRAM__API_BASE="http://127.0.0.1:9",  # nothing listens: it waits
        AGENTD_ACCESS__ALLOWED_USER_IDS="[42]",
        AGENTD_STORAGE__PATH=str(tmp_path / "agentd.db"),
        PYTHONUNBUFFERED="1",
    )
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentd", "run"], env=env, cwd=tmp_path, stdout=out, stderr=out
        )
        try:
            deadline = time.monotonic() + 120
            while "waiting for Telegram" not in log.read_text(errors="replace"):
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_ingest_keeps_pdf_library_noise_out_and_fails_when_a_file_failed(tmp_path: Path) -> None:
    import io
    import sys

    import pypdf

    writer = pypdf.PdfWriter()
    writer.add_blank_page(100, 100)
    buffer = io.BytesIO()
    writer.write(buffer)
    data = buffer.getvalue()
    cut = data.rindex(b"startxref")
    docs = tmp_path / "docs"
    docs.mkdir()
    # A wrong xref pointer: pypdf recovers, logging "incorrect startxref pointer" as it goes.
    (docs / "scan.pdf").write_bytes(data[:cut] + b"startxref\n12\n%%EOF\n")
    (docs / "notes.txt").write_text("The boiler was serviced in May.")
    (docs / "broken.txt").write_bytes(b"\xff\xfe\xfa")
    config = tmp_path / "agentd.toml"
    config.write_text('[memory]\nembedder = "hashing"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "ANTHROPIC_"))}
    result = subprocess.run(
        [sys.executable, "-m", "agentd", "ingest", str(docs), "--config", str(config)],
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # broken.txt did not go in
    assert "startxref" not in output and "Not ingested" in output and "broken.txt" in output


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the guard is about root's commands")
def test_root_does_not_open_the_services_database(tmp_path: Path) -> None:
    """A root-run command would leave root-owned -wal/-shm files that lock the service out."""
    from typer.testing import CliRunner

    from agentd.cli.app import app
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations

    db = tmp_path / "agentd.db"
    conn = open_sync(db)
    apply_migrations(conn)
    conn.close()
    os.chown(db, 65534, 65534)  # the service's user (nobody, here)
    config = tmp_path / "agentd.toml"
    config.write_text("")
    result = CliRunner().invoke(app, ["history", "--config", str(config)])
    assert result.exit_code == 1 and "sudo -u" in result.output, result.output
    assert not (tmp_path / "agentd.db-wal").exists() and not (tmp_path / "agentd.db-shm").exists()
    # Every command that opens it refuses alike, the shell rules' commands included.
    for command in (["rules", "ls"], ["rules", "rm", "1"]):
        result = CliRunner().invoke(app, [*command, "--config", str(config)])
        assert result.exit_code == 1 and "sudo -u" in result.output, (command, result.output)
    assert not (tmp_path / "agentd.db-wal").exists() and not (tmp_path / "agentd.db-shm").exists()
    result = CliRunner().invoke(app, ["doctor", "--config", str(config)])
    assert "not opened as root" in " ".join(result.output.split())


@pytest.mark.skipif(Path("/etc/agentd/agentd.toml").exists(), reason="a system config exists")
def test_run_from_another_folder_says_no_config_was_found(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "XDG_"))}
    env["HOME"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "agentd", "run"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 78
    assert "no config file found" in result.stderr and "--config" in result.stderr
