"""`agentd init` end to end against the fakes: in a pseudo-terminal (pexpect) and scripted."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from agentd.channels import load_config
from agentd.telegram.config import bot_token
from tests.daemon_process import API_KEY, OWNER, TOKEN
from tests.fakes import FakeAnthropic, FakeTelegram

AGENTD = [sys.executable, "-m", "agentd"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_"))
    }
    return {**env, "TZ": "Europe/Lisbon", "COLUMNS": "100", "NO_COLOR": "1", **extra}


@pytest.fixture
def fakes() -> tuple[FakeTelegram, FakeAnthropic]:
    with FakeTelegram.running(token=TOKEN) as tg, FakeAnthropic.running(api_key=API_KEY) as llm:
        yield tg, llm


def test_init_in_a_terminal_pairs_the_owner_and_writes_the_files(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    args = [
        "init",
        "--dir",
        str(tmp_path),
        "--api-base",
        tg.base_url,
        "--llm-base-url",
        llm.base_url,
    ]
    child = pexpect.spawn(
        AGENTD[0],
        [*AGENTD[1:], *args],
        env=clean_env(),
        encoding="utf-8",
        timeout=90,
        dimensions=(40, 100),
    )
    try:
        child.expect("Bot token")
        child.sendline("999:not-the-token")
        child.expect("rejected that token")
        child.expect("Bot token")
        child.sendline(TOKEN)
        child.expect(r"@fake_bot")
        child.expect(r"/start ([A-Z0-9]{4}-[A-Z0-9]{4})")
        code = child.match.group(1)
        tg.add_message(777, 777, "hello?")  # someone else, or a wrong code: ignored
        tg.add_message(OWNER, OWNER, f"/start {code}")
        child.expect(rf"user id {OWNER}")
        child.expect("Anthropic API key")
        child.sendline("sk-ant-wrong")
        child.expect("rejected the key")
        child.expect("Anthropic API key")
        child.sendline(API_KEY)
        child.expect("Anthropic key ok")
        child.expect("agentd run")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    config_text = (tmp_path / "agentd.toml").read_text()
    assert f"allowed_user_ids = [{OWNER}]" in config_text and "config.example.toml" in config_text
    assert 'timezone = "Europe/Lisbon"' in config_text and TOKEN not in config_text
    secrets_file = tmp_path / "agentd.env"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    config = load_config(tmp_path / "agentd.toml", env={})  # what `agentd run` will read
    assert config.access.allowed_user_ids == [OWNER]
    assert config.access.owner_id == OWNER  # named, not inferred: it decides who approves
    token = bot_token(config, env={})
    assert token is not None and token.get_secret_value() == TOKEN

    # Re-running on a configured machine changes nothing without asking.
    before = config_text
    child = pexpect.spawn(
        AGENTD[0], [*AGENTD[1:], *args], env=clean_env(), encoding="utf-8", timeout=60
    )
    child.expect("Replace them?")
    child.sendline("n")
    child.expect("Nothing changed")
    child.expect(pexpect.EOF)
    child.close()
    assert (tmp_path / "agentd.toml").read_text() == before


def _spawn_init(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic) -> pexpect.spawn:
    args = ["init", "--dir", str(tmp_path), "--api-base", tg.base_url]
    return pexpect.spawn(
        AGENTD[0],
        [*AGENTD[1:], *args, "--llm-base-url", llm.base_url],
        env=clean_env(),
        encoding="utf-8",
        timeout=90,
        dimensions=(40, 100),
    )


def test_init_says_what_it_waits_for_and_keys_typed_ahead_are_not_shown(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    """While it waits for the pairing message, the terminal says so and does not echo: a key
    typed ahead is not shown in clear (the key prompt then discards it)."""
    tg, llm = fakes
    child = _spawn_init(tmp_path, tg, llm)
    child.logfile_read = io.StringIO()
    typed_ahead = "sk-ant-typed-ahead-1234"
    try:
        child.expect("Bot token")
        child.sendline(TOKEN)
        child.expect(r"/start ([A-Z0-9]{4}-[A-Z0-9]{4})")
        code = child.match.group(1)
        child.expect("Waiting for that message")
        child.send(typed_ahead + "\r")
        tg.add_message(OWNER, OWNER, f"/start {code}")
        child.expect(rf"user id {OWNER}")
        child.expect("Anthropic API key")
        child.sendline(API_KEY)
        child.expect("Anthropic key ok")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert typed_ahead not in child.logfile_read.getvalue()  # never echoed in the session


def test_ctrl_c_before_pairing_says_nothing_was_written(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    child = _spawn_init(tmp_path, tg, llm)
    try:
        child.expect("Bot token")
        child.sendline(TOKEN)
        child.expect(r"/start [A-Z0-9]{4}-[A-Z0-9]{4}")
        child.expect("Waiting for that message")
        child.sendintr()
        child.expect("Stopped before pairing: nothing was written")
        child.expect("agentd init")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 130
    assert not (tmp_path / "agentd.toml").exists() and not (tmp_path / "agentd.env").exists()


def test_init_non_interactive_then_doctor_is_green(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    args = [
        *AGENTD,
        "init",
        "--non-interactive",
        "--dir",
        str(tmp_path),
        "--api-base",
        tg.base_url,
        "--llm-base-url",
        llm.base_url,
        "--owner-id",
        str(OWNER),
    ]
    env = clean_env(
        TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY=API_KEY, XDG_CONFIG_HOME=str(tmp_path / "xdg")
    )
    done = subprocess.run([*args, "--systemd"], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert "systemctl --user enable --now agentd" in done.stdout
    unit = (tmp_path / "xdg" / "systemd" / "user" / "agentd.service").read_text()
    # agentd reads agentd.env beside the config itself: the secrets stay out of the daemon's
    # environment, which every command and plugin it starts would inherit.
    assert "EnvironmentFile=" not in unit.replace("no EnvironmentFile=", "")
    assert f"agentd run --config {tmp_path / 'agentd.toml'}" in unit and "Type=notify" in unit
    # The installed entry point, not `python -m agentd`, under the system unit's hardening.
    assert " -m agentd" not in unit and "NoNewPrivileges=yes" in unit
    assert "RestrictNamespaces=user mnt pid" in unit and "MemoryMax=" in unit
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=90)
    assert again.returncode == 1 and "nothing changed" in again.stderr

    doctor = subprocess.run(
        [*AGENTD, "doctor", "--json"],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )
    checks = {c["check"]: c["ok"] for c in json.loads(doctor.stdout)}
    assert checks["telegram"] and checks["anthropic"] and checks["model"] and checks["allowlist"]

    bad = subprocess.run(
        [*args, "--force"],
        env={**env, "TELEGRAM_BOT_TOKEN": "1:bad"},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert bad.returncode == 78 and "rejected the bot token" in bad.stderr
    assert "1:bad" not in bad.stderr


def test_a_secrets_file_others_can_read_is_refused(tmp_path: Path) -> None:
    from agentd.config import ConfigError

    (tmp_path / "agentd.toml").write_text("[access]\nallowed_user_ids = [1]\n")
    secrets_file = tmp_path / "agentd.env"
    secrets_file.write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    secrets_file.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_config(tmp_path / "agentd.toml", env={})
    secrets_file.chmod(0o600)
    env = {"TELEGRAM_BOT_TOKEN": "1:env"}
    env_wins = bot_token(load_config(tmp_path / "agentd.toml", env=env), env)
    assert env_wins is not None and env_wins.get_secret_value() == "1:env"
