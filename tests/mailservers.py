"""Real mail and calendar servers for the tests: Dovecot (IMAP + LMTP), aiosmtpd, Radicale.

Each is a test-owned process or thread on a loopback port with a generated configuration in a
temporary folder; nothing touches the system's own services. Dovecot refuses to run its mail
processes as root, so the mail folders belong to the `dovecot` user (see API-NOTES).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import shutil
import smtplib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
HAVE_DOVECOT = Path(DOVECOT).exists() and Path("/usr/lib/dovecot/lmtp").exists()
SKIP_NO_DOVECOT = "Dovecot is not installed (apt-get install dovecot-imapd dovecot-lmtpd; .ci/run)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


_CONF = """\
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
info_log_path = {root}/dovecot.log
protocols = imap lmtp
listen = 127.0.0.1
{ssl}
disable_plaintext_auth = no
auth_mechanisms = plain login
default_login_user = dovenull
default_internal_user = dovecot
mail_location = maildir:{root}/mail/%u/Maildir
mail_uid = dovecot
mail_gid = dovecot
first_valid_uid = 1
mail_plugins =
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/users
}}
userdb {{
  driver = static
  args = uid=dovecot gid=dovecot home={root}/mail/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {tls_port}
  }}
}}
service anvil {{
  chroot =
}}
service lmtp {{
  unix_listener lmtp {{
    mode = 0666
  }}
}}
service stats {{
  unix_listener stats-reader {{
    mode = 0666
  }}
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Sent {{
    special_use = \\Sent
    auto = create
  }}
  mailbox Drafts {{
    special_use = \\Drafts
    auto = create
  }}
  mailbox Archive {{
    auto = create
  }}
}}
protocol imap {{
  imap_idle_notify_interval = 1 secs
}}
"""


@dataclass
class Dovecot:
    """A Dovecot with IMAP on a loopback port and LMTP on a unix socket; users -> passwords."""

    root: Path
    users: dict[str, str]
    port: int = 0
    # With tls: IMAP over TLS (993-style) on tls_port too, with a self-signed certificate for
    # 127.0.0.1 in `cert` (what a client must be told to trust).
    tls: bool = False
    tls_port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def cert(self) -> Path:
        return self.root / "cert.pem"

    def _ssl(self) -> str:
        if not self.tls:
            return "ssl = no"
        key = self.root / "key.pem"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(self.cert),
                "-days",
                "2",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
        return f"ssl = yes\nssl_cert = <{self.cert}\nssl_key = <{key}"

    @property
    def lmtp_socket(self) -> str:
        return str(self.root / "run" / "lmtp")

    def start(self) -> Dovecot:
        self.port = free_port()
        dovecot = pwd.getpwnam("dovecot")
        for sub in ("run", "state", "mail"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chown(self.root / "mail", dovecot.pw_uid, dovecot.pw_gid)
        (self.root / "users").write_text(
            "".join(f"{user}:{{PLAIN}}{pw}::::::\n" for user, pw in self.users.items())
        )
        self.tls_port = free_port() if self.tls else 0
        self.conf.write_text(
            _CONF.format(root=self.root, port=self.port, tls_port=self.tls_port, ssl=self._ssl())
        )
        # -F: stay in the foreground, so the test owns the process and can end it.
        self.proc = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_port(self.port)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"dovecot did not start: {self.log()}") from None
        return self

    @property
    def conf(self) -> Path:
        return self.root / "dovecot.conf"

    def log(self) -> str:
        path = self.root / "dovecot.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def deliver(self, recipient: str, raw: bytes, sender: str = "sender@example.org") -> None:
        """Deliver one message into `recipient`'s INBOX through Dovecot's own LMTP."""
        with smtplib.LMTP(self.lmtp_socket) as lmtp:
            lmtp.sendmail(sender, [recipient], raw)

    def client(self, user: str) -> Any:
        """An IMAPClient logged in as `user` (the test's own view of a mailbox)."""
        from imapclient import IMAPClient

        imap = IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=10)
        imap.login(user, self.users[user])
        return imap

    def message_ids(self, user: str, folder: str) -> list[str]:
        """The Message-ID header of every message in one folder."""
        with self.client(user) as imap:
            imap.select_folder(folder, readonly=True)
            uids = imap.search("ALL")
            if not uids:
                return []
            fetched = imap.fetch(uids, ["BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)]"])
            out = []
            for data in fetched.values():
                header = data[b"BODY[HEADER.FIELDS (MESSAGE-ID)]"]
                out.append(str(message_from_bytes(header, policy=policy.default)["Message-ID"]))
            return out


@contextlib.contextmanager
def dovecot_server(root: Path, users: dict[str, str], tls: bool = False) -> Iterator[Dovecot]:
    server = Dovecot(root=root, users=users, tls=tls).start()
    try:
        yield server
    finally:
        server.stop()


class LmtpRelay:
    """aiosmtpd handler: what the SMTP server accepts is delivered through Dovecot's LMTP to
    local recipients, and a copy saved in the sender's Sent folder (as Gmail and most hosted
    servers do), so a test can see both boxes. `hold` makes DATA wait (a crash mid-send)."""

    def __init__(self, dovecot: Dovecot, *, save_sent: bool = True) -> None:
        self.dovecot = dovecot
        self.save_sent = save_sent
        self.received: list[bytes] = []
        self.hold: asyncio.Event | None = None
        self.holding = False
        self.drop = False  # hang up after taking the mail, before the "250": the client can't know

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content
        self.received.append(raw)
        local = [r for r in envelope.rcpt_tos if r.split("@")[0] in self.dovecot.users]
        for rcpt in local:
            await asyncio.to_thread(self.dovecot.deliver, rcpt.split("@")[0], raw)
        sender = envelope.mail_from.split("@")[0]
        if self.save_sent and sender in self.dovecot.users:
            await asyncio.to_thread(self._save_sent, sender, raw)
        if self.drop:
            server.transport.close()
        if self.hold is not None:
            self._loop = asyncio.get_running_loop()
            self.holding = True
            await self.hold.wait()  # the client is killed meanwhile: no "250" reaches it
        return "250 OK"

    def release(self) -> None:
        """End a hold from the test's thread (the server runs its own event loop)."""
        if self.hold is not None and self.holding:
            self._loop.call_soon_threadsafe(self.hold.set)

    def _save_sent(self, user: str, raw: bytes) -> None:
        with self.dovecot.client(user) as imap:
            imap.append("Sent", raw, flags=[b"\\Seen"])


@contextlib.contextmanager
def smtp_server(handler: Any, auth: dict[str, str] | None = None) -> Iterator[int]:
    """aiosmtpd on a loopback port; with `auth`, AUTH PLAIN/LOGIN is required (no TLS)."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    port = free_port()
    kwargs: dict[str, Any] = {}
    if auth is not None:

        def check(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
            login = data.login.decode() if isinstance(data.login, bytes) else data.login
            password = data.password.decode() if isinstance(data.password, bytes) else data.password
            # handled=False: aiosmtpd then answers a wrong password with 535, as a real server
            # does (by default it leaves the reply to the authenticator and the client waits).
            return AuthResult(success=auth.get(login) == password, handled=False)

        kwargs = dict(auth_require_tls=False, auth_required=True, authenticator=check)
    # Its thread logs each connection's end at INFO, sometimes after pytest has closed the
    # stream the record would go to ("--- Logging error ---" in the output): only warnings.
    logging.getLogger("mail.log").setLevel(logging.WARNING)
    controller = Controller(handler, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield port
    finally:
        controller.stop()


@dataclass
class Radicale:
    root: Path
    users: dict[str, str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> Radicale:
        self.port = free_port()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "htpasswd").write_text("".join(f"{u}:{p}\n" for u, p in self.users.items()))
        conf = self.root / "radicale.conf"
        conf.write_text(
            f"[server]\nhosts = 127.0.0.1:{self.port}\n"
            f"[auth]\ntype = htpasswd\nhtpasswd_filename = {self.root}/htpasswd\n"
            "htpasswd_encryption = plain\n"
            f"[storage]\nfilesystem_folder = {self.root}/collections\n"
            "[logging]\nlevel = warning\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "radicale", "--config", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "radicale.log", "wb"),
        )
        wait_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
