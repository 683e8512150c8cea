"""`agentd init --add-mail` against a real Dovecot whose folders are not named Sent and
Drafts: host:port is split, the folders found are offered with the keys they set, the SMTP
server defaults from the IMAP one, and the owner is told to restart a running agentd."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from agentd.channels import load_config
from agentd.cli.init_accounts import SPECIAL_FOLDERS, _append, smtp_default, split_host
from tests import mailservers
from tests.mailservers import HAVE_DOVECOT, SKIP_NO_DOVECOT, Dovecot, LmtpRelay, smtp_server

# The test SMTP server asks for AUTH on a plain loopback port; aiosmtpd warns when the module's
# servers start, whichever test is first to need them.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
USERS = {"me": "right-password-1"}
STYLE = r"(?:\x1b\[[0-9;]*m)*"  # rich styles a prompt's default, even under NO_COLOR


def test_host_and_port_are_split_and_a_wrong_port_names_its_key() -> None:
    assert split_host("imap.example.org:993", "imap_port") == ("imap.example.org", 993)
    assert split_host("[::1]:143", "imap_port") == ("::1", 143)
    assert split_host("::1", "imap_port") == ("::1", None)
    assert split_host("imap.example.org", "imap_port") == ("imap.example.org", None)
    with pytest.raises(ValueError, match="smtp_port"):
        split_host("smtp.example.org:submission", "smtp_port")
    with pytest.raises(ValueError, match="without imaps://"):
        split_host("imaps://imap.example.org", "imap_port")


def test_the_smtp_server_defaults_from_the_imap_server() -> None:
    assert smtp_default("imap.example.org") == "smtp.example.org"
    assert smtp_default("imap.mail.example.net") == "smtp.mail.example.net"
    assert smtp_default("mail.example.org") == "mail.example.org"  # one host for both
    assert smtp_default("127.0.0.1") == "127.0.0.1"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Dovecot, int]]:
    """A Dovecot that names its folders as some providers do: "Sent Messages" (marked \\Sent)
    and "[Mail] Brouillons" (marked \\Drafts), no Sent or Drafts."""
    if not HAVE_DOVECOT:
        pytest.skip(SKIP_NO_DOVECOT)
    conf = mailservers._CONF.replace("mailbox Sent {", 'mailbox "Sent Messages" {')
    conf = conf.replace("mailbox Drafts {", 'mailbox "[Mail] Brouillons" {')
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as tmp:
        patch.setattr(mailservers, "_CONF", conf)
        root = Path(tmp)
        root.chmod(0o755)
        with mailservers.dovecot_server(root / "dovecot", USERS) as dovecot:
            with smtp_server(LmtpRelay(dovecot, save_sent=False), auth=dict(USERS)) as port:
                yield dovecot, port


def test_an_account_without_a_user_name_writes_no_empty_secret(tmp_path: Path) -> None:
    """A public .ics feed has no user and no password: agentd.env gets no `=` line for it,
    and the secrets already there stay as they were."""
    config, secrets = tmp_path / "agentd.toml", tmp_path / "agentd.env"
    config.write_text("")
    secrets.write_text("AGENTD_MAIL_HOME_PASSWORD=kept\n")
    fields = {"name": "holidays", "url": "https://example.org/h.ics", "password_env": ""}
    _append(config, secrets, "calendar", fields, "", "")
    assert secrets.read_text() == "AGENTD_MAIL_HOME_PASSWORD=kept\n"
    assert '[[calendar]]\nname = "holidays"' in config.read_text()


def test_add_mail_splits_host_port_and_offers_the_folders_found(
    servers: tuple[Dovecot, int], tmp_path: Path
) -> None:
    dovecot, smtp = servers
    (tmp_path / "agentd.toml").write_text(f'[storage]\npath = "{tmp_path / "agentd.db"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "TELEGRAM_"))}
    env |= {"NO_COLOR": "1", "COLUMNS": "120"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "agentd", "init", "--dir", str(tmp_path), "--add-mail"],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    try:
        child.expect("Account name")
        child.sendline("work")
        child.expect("E-mail address")
        child.sendline("me@example.org")
        child.expect(rf"IMAP server {STYLE}\(imap\.example\.org\)")
        child.sendline("127.0.0.1:imaps")
        child.expect("saved as imap_port")
        child.expect("IMAP server")
        child.sendline(f"127.0.0.1:{dovecot.port}")  # the port is taken, not sent to DNS
        child.expect("IMAP security")
        child.sendline("plain")
        child.expect(rf"IMAP port: {dovecot.port} \(from the server name\)")
        child.expect(rf"SMTP server {STYLE}\(127\.0\.0\.1\)")  # beside the IMAP server
        child.sendline("")
        child.expect("SMTP security")
        child.sendline("plain")
        child.expect("SMTP port")
        child.sendline(str(smtp))
        child.expect("User name")
        child.sendline("me")
        child.expect("App password")
        child.sendline(USERS["me"])
        child.expect(r"no folder 'Sent' for sent mail \(sent_folder\)")
        child.expect(rf"Folder for sent mail \(sent_folder\) {STYLE}\((\d+)\)")  # the \Sent one
        child.sendline("")
        child.expect(r"no folder 'Drafts' for drafts \(drafts_folder\)")
        child.expect(r"(\d+)\. \[Mail\] Brouillons")  # brackets shown, not taken for markup
        drafts = child.match.group(1)
        child.expect(r"Folder for drafts")
        child.sendline(drafts)
        child.expect("Added mail account 'work'")
        child.expect("systemctl restart agentd")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, child.before
    account = load_config(tmp_path / "agentd.toml", env={}).mail[0]
    assert (account.imap_host, account.imap_port) == ("127.0.0.1", dovecot.port)
    assert account.smtp_server == "127.0.0.1" and account.smtp_port == smtp
    assert (account.sent_folder, account.drafts_folder) == ("Sent Messages", "[Mail] Brouillons")
    toml = (tmp_path / "agentd.toml").read_text()
    assert re.search(r'sent_folder = "Sent Messages"', toml) and USERS["me"] not in toml


def test_a_failed_login_keeps_every_answer_and_an_empty_password_is_refused(
    servers: tuple[Dovecot, int], tmp_path: Path
) -> None:
    """The wrong password, "Save it anyway? N": the answers come back as the defaults, so
    only the password is typed again; an empty one is asked for again with what to make."""
    dovecot, smtp = servers
    log = dovecot.root / "dovecot.log"
    logged_before = len(log.read_text(errors="replace"))
    (tmp_path / "agentd.toml").write_text(f'[storage]\npath = "{tmp_path / "agentd.db"}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "TELEGRAM_"))}
    env |= {"NO_COLOR": "1", "COLUMNS": "120"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "agentd", "init", "--dir", str(tmp_path), "--add-mail"],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    answers = [
        ("Account name", "work"),
        ("E-mail address", "me@example.org"),
        ("IMAP server", f"127.0.0.1:{dovecot.port}"),
        ("IMAP security", "plain"),
        ("SMTP server", ""),
        ("SMTP security", "plain"),
        ("SMTP port", str(smtp)),
        ("User name", "me"),
    ]
    try:
        for prompt, answer in answers:
            child.expect(prompt)
            child.sendline(answer)
        child.expect("App password")
        child.sendline("")
        child.expect("A password is needed")
        child.expect("App password")
        child.sendline("wrong-password")
        child.expect("FAIL")
        child.expect(r"SMTP login failed: 127\.0\.0\.1 rejected the user 'me'")
        child.expect(r"Save it anyway\?")
        child.sendline("n")
        child.expect("Change an answer and try again")
        child.sendline("")  # yes
        child.expect(rf"E-mail address {STYLE}\(me@example\.org\)")
        child.sendline("")
        child.expect(rf"IMAP server {STYLE}\(127\.0\.0\.1\)")
        child.sendline("")
        child.expect(rf"IMAP security.*{STYLE}\(plain\)")
        child.sendline("")
        child.expect(rf"IMAP port {STYLE}\({dovecot.port}\)")
        child.sendline("")
        child.expect("SMTP server")
        child.sendline("")
        child.expect(rf"SMTP security.*{STYLE}\(plain\)")
        child.sendline("")
        child.expect(rf"SMTP port {STYLE}\({smtp}\)")
        child.sendline("")
        child.expect(rf"User name {STYLE}\(me\)")
        child.sendline("")
        child.expect("Enter keeps the one you typed")
        child.sendline(USERS["me"])
        for _ in SPECIAL_FOLDERS:
            child.expect(r"Folder for")
            child.sendline("")
        child.expect("Added mail account 'work'")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, child.before
    account = load_config(tmp_path / "agentd.toml", env={}).mail[0]
    assert (account.imap_port, account.smtp_port) == (dovecot.port, smtp)
    stored = (tmp_path / "agentd.env").read_text()
    assert USERS["me"] in stored and "wrong-password" not in stored
    # One failed IMAP login for the wrong password, not one per step that reads the server:
    # servers count them, and fail2ban bans after a few. Dovecot logs in order, so once the
    # good password's logins are there, so is every failure before them.
    deadline = time.monotonic() + 30
    while "Login: user=<me>" not in log.read_text(errors="replace")[logged_before:]:
        assert time.monotonic() < deadline, log.read_text(errors="replace")[logged_before:]
        time.sleep(0.05)
    assert log.read_text(errors="replace")[logged_before:].count("auth failed") == 1
