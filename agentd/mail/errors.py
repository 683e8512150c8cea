"""Connection failures said plainly: which step failed (DNS, TCP, TLS, login, folder) and why."""

from __future__ import annotations

import socket
import ssl

# The stage of a MailError whose password is missing or was refused: trying again will not help
# until someone changes it (the watcher waits long; the checks say which variable).
LOGIN_STAGE = "login"


class MailError(Exception):
    """A mail server could not be used; the message names the account, the step and the cause."""

    def __init__(self, account: str, stage: str, detail: str) -> None:
        self.account, self.stage, self.detail = account, stage, detail
        super().__init__(f"{account}: {stage} failed: {detail}")


class MailTooLarge(MailError):
    """A message past the size agentd fetches whole (the server said its size first)."""


def classify_mail_error(account: str, host: str, port: int, exc: BaseException) -> MailError:
    """Name the step a connection broke at; never includes the password (it is not passed)."""
    if isinstance(exc, MailError):
        return exc
    where = f"{host}:{port}"
    if isinstance(exc, socket.gaierror):
        return MailError(account, "DNS", f"cannot resolve {host!r} ({exc.strerror or exc})")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return MailError(
            account, "TLS", f"the certificate of {where} is not trusted ({exc.verify_message})"
        )
    if isinstance(exc, ssl.SSLError):
        return MailError(
            account,
            "TLS",
            f"no TLS handshake with {where} ({exc.reason or exc}); check the "
            "port and the security setting (tls for 993/465, starttls for 143/587)",
        )
    if isinstance(exc, ConnectionRefusedError):
        return MailError(account, "connection", f"{where} refused the connection")
    if isinstance(exc, TimeoutError | socket.timeout):
        return MailError(account, "connection", f"{where} did not answer in time")
    if isinstance(exc, OSError):
        return MailError(account, "connection", f"{where}: {exc.strerror or exc}")
    return MailError(account, "protocol", f"{where}: {type(exc).__name__}: {exc}")
