"""[[mail]] and [[calendar]] configuration: secrets only by name, unique names, redaction."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentd.channels import load_config
from agentd.config import ConfigError
from agentd.daemon.startup import set_up_logging

MAIL = """[[mail]]
name = "home"
address = "me@example.org"
password_env = "HOME_PW"
imap_host = "imap.example.org"
"""


def test_a_password_in_the_file_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "agentd.toml"
    path.write_text(MAIL + 'password = "hunter22"\n')
    with pytest.raises(
        ConfigError, match=r"mail\.0\.password: secrets are not read from the config"
    ):
        load_config(path, env={})


def test_account_names_are_unique(tmp_path: Path) -> None:
    path = tmp_path / "agentd.toml"
    path.write_text(MAIL + MAIL)
    with pytest.raises(ConfigError, match="account names must be unique; repeated: home"):
        load_config(path, env={})


def test_passwords_from_env_credential_or_secrets_file_are_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agentd.toml"
    path.write_text(
        MAIL + '[[calendar]]\nname = "cal"\nurl = "https://dav.example.org/"\n'
        'username = "me"\npassword_env = "CAL_PW"\n'
        '[[calendar]]\nname = "feed"\nurl = "https://example.org/x.ics"\n'
    )
    (tmp_path / "agentd.env").write_text("HOME_PW=mail-secret-from-file\n")
    (tmp_path / "agentd.env").chmod(0o600)
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "CAL_PW").write_text("cal-secret-from-credential\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    monkeypatch.delenv("HOME_PW", raising=False)
    config = load_config(path, env={"CREDENTIALS_DIRECTORY": str(creds)})
    assert config.calendar[1].is_feed and not config.calendar[0].is_feed
    assert "mail-secret-from-file" not in config.model_dump_json()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        redact = set_up_logging(config)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    text = redact("login mail-secret-from-file and cal-secret-from-credential failed")
    assert text == "login [REDACTED] and [REDACTED] failed"
