"""`agentd doctor` logs in to each mail account and calendar and names the step that failed."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from tests.mailservers import (
    HAVE_DOVECOT,
    SKIP_NO_DOVECOT,
    Dovecot,
    LmtpRelay,
    Radicale,
    dovecot_server,
    free_port,
    smtp_server,
)

pytestmark = [
    pytest.mark.skipif(not HAVE_DOVECOT, reason=SKIP_NO_DOVECOT),
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
]
USERS = {"me": "right-password-1"}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Dovecot, int, Radicale]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        with dovecot_server(root / "dovecot", USERS) as dovecot:
            with smtp_server(LmtpRelay(dovecot), auth=dict(USERS)) as port:
                radicale = Radicale(root=root / "radicale", users=USERS).start()
                try:
                    import caldav

                    client = caldav.DAVClient(
                        radicale.url, username="me", password=USERS["me"], require_tls=False
                    )
                    client.principal().make_calendar(name="Home")
                    yield dovecot, port, radicale
                finally:
                    radicale.stop()


def mail(name: str, dovecot: Dovecot, smtp: int, env: str, **over: object) -> str:
    fields = {
        "name": name,
        "address": "me@example.org",
        "username": "me",
        "password_env": env,
        "imap_host": "127.0.0.1",
        "imap_port": dovecot.port,
        "imap_security": "plain",
        "smtp_host": "127.0.0.1",
        "smtp_port": smtp,
        "smtp_security": "plain",
        "timeout": 5,
        "watch": ["INBOX"],
    } | over
    return "[[mail]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


def test_doctor_names_what_failed(
    servers: tuple[Dovecot, int, Radicale], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dovecot, smtp, radicale = servers
    for name in list(os.environ):
        if name.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GOOD_PW", USERS["me"])
    monkeypatch.setenv("BAD_PW", "wrong-password-9")
    config = tmp_path / "agentd.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n'
        '[telegram]\napi_base = "http://127.0.0.1:9"\n'
        + mail("good", dovecot, smtp, "GOOD_PW")
        + mail("badpw", dovecot, smtp, "BAD_PW")
        + mail("tls", dovecot, smtp, "GOOD_PW", imap_security="tls", smtp_security="tls")
        + mail("folder", dovecot, smtp, "GOOD_PW", sent_folder="Sent Items")
        + mail("dns", dovecot, smtp, "GOOD_PW", imap_host="imap.invalid", smtp_port=free_port())
        + f'[[calendar]]\nname = "cal"\nurl = "{radicale.url}"\nusername = "me"\n'
        'password_env = "GOOD_PW"\n'
        f'[[calendar]]\nname = "calbad"\nurl = "{radicale.url}"\nusername = "me"\n'
        'password_env = "BAD_PW"\n'
    )
    result = CliRunner().invoke(app, ["doctor", "--json", "--config", str(config)])
    assert result.exit_code == 1  # some checks fail
    checks = {r["check"]: r for r in json.loads(result.stdout)}
    assert checks["mail good (IMAP)"]["ok"], checks["mail good (IMAP)"]
    assert "watching INBOX by IDLE" in checks["mail good (IMAP)"]["detail"]
    assert checks["mail good (SMTP)"]["ok"], checks["mail good (SMTP)"]
    assert checks["mail badpw (IMAP)"]["detail"].startswith(
        "badpw: login failed: 127.0.0.1 rejected the user 'me'"
    )
    assert checks["mail badpw (SMTP)"]["detail"] == (
        "badpw: SMTP login failed: 127.0.0.1 rejected the user 'me' or its password (BAD_PW)"
    )
    assert checks["mail tls (IMAP)"]["detail"].startswith("tls: TLS failed: no TLS handshake")
    assert checks["mail tls (SMTP)"]["detail"].startswith("tls: TLS failed")
    assert checks["mail folder (IMAP)"]["detail"].startswith(
        "folder: folder failed: no 'Sent Items'"
    )
    assert checks["mail dns (IMAP)"]["detail"].startswith("dns: DNS failed: cannot resolve")
    assert checks["mail dns (SMTP)"]["detail"].startswith("dns: connection failed")
    assert checks["calendar cal"]["ok"] and "CalDAV" in checks["calendar cal"]["detail"]
    assert checks["calendar calbad"]["detail"].startswith("calbad: login failed")
    assert "wrong-password-9" not in result.stdout and USERS["me"] not in result.stdout


def test_init_add_mail_and_calendar_log_in_then_save(
    servers: tuple[Dovecot, int, Radicale], tmp_path: Path
) -> None:
    import pexpect

    from agentd.channels import load_config

    dovecot, smtp, radicale = servers
    (tmp_path / "agentd.toml").write_text(f'[storage]\npath = "{tmp_path / "agentd.db"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "TELEGRAM_"))}
    env |= {"NO_COLOR": "1", "COLUMNS": "120"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "agentd", "init", "--dir", str(tmp_path), "--add-mail", "--add-calendar"],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    answers = [
        ("Account name", "work"),
        ("E-mail address", "me@example.org"),
        ("IMAP server", "127.0.0.1"),
        ("IMAP security", "plain"),
        ("IMAP port", str(dovecot.port)),
        ("SMTP server", "127.0.0.1"),
        ("SMTP security", "plain"),
        ("SMTP port", str(smtp)),
        ("User name", "me"),
        ("App password", USERS["me"]),
    ]
    for prompt, answer in answers:
        child.expect(prompt)
        child.sendline(answer)
    child.expect("Added mail account 'work'")
    for prompt, answer in [
        ("Calendar name", "cal"),
        ("CalDAV URL", radicale.url),
        ("User name", "me"),
        ("Password", USERS["me"]),
    ]:
        child.expect(prompt)
        child.sendline(answer)
    child.expect("Added calendar 'cal'")
    child.expect(pexpect.EOF)
    toml = (tmp_path / "agentd.toml").read_text()
    assert USERS["me"] not in toml and 'password_env = "AGENTD_MAIL_WORK_PASSWORD"' in toml
    assert (tmp_path / "agentd.env").stat().st_mode & 0o077 == 0
    config = load_config(tmp_path / "agentd.toml", env={})
    assert config.mail[0].imap_port == dovecot.port and config.calendar[0].username == "me"
    # The password is found through the secrets file, as the daemon and doctor look for it.
    assert config.secret_source({})["AGENTD_MAIL_WORK_PASSWORD"] == USERS["me"]


def test_a_calendar_that_fails_keeps_every_answer_for_the_next_try(
    servers: tuple[Dovecot, int, Radicale], tmp_path: Path
) -> None:
    """The wrong password, "Save it anyway? N": the URL and user come back as the defaults,
    so only the password is typed again, and the calendar is saved once it reads."""
    import pexpect

    from agentd.config import load_config

    _, _, radicale = servers
    (tmp_path / "agentd.toml").write_text(f'[storage]\npath = "{tmp_path / "agentd.db"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "TELEGRAM_"))}
    env |= {"NO_COLOR": "1", "COLUMNS": "200"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "agentd", "init", "--dir", str(tmp_path), "--add-calendar"],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    style = r"(?:\x1b\[[0-9;]*m)*"  # rich styles a prompt's default, even under NO_COLOR
    try:
        for prompt, answer in [
            ("Calendar name", "cal"),
            ("CalDAV URL", radicale.url),
            ("User name", "me"),
            ("Password", "wrong-password-9"),
        ]:
            child.expect(prompt)
            child.sendline(answer)
        child.expect("FAIL")
        child.expect(r"Save it anyway\?")
        child.sendline("n")
        child.expect("Change an answer and try again")
        child.sendline("")  # yes
        child.expect(rf"CalDAV URL.*{style}\({re.escape(radicale.url)}\)")
        child.sendline("")
        child.expect(rf"User name.*{style}\(me\)")
        child.sendline("")
        child.expect("Enter keeps the one you typed")
        child.sendline(USERS["me"])
        child.expect("Added calendar 'cal'")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, child.before
    [calendar] = load_config(tmp_path / "agentd.toml", env={}).calendar
    assert (calendar.url, calendar.username) == (radicale.url, "me")
    stored = (tmp_path / "agentd.env").read_text()
    assert USERS["me"] in stored and "wrong-password-9" not in stored
