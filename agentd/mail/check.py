"""`agentd doctor` for mail: log in to IMAP and SMTP and look for the folders agentd uses."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from agentd.config import MailAccountConfig
from agentd.mail import imap
from agentd.mail.errors import MailError, classify_mail_error
from agentd.mail.imap import tls_context
from agentd.mail.mailbox import Mailbox

Check = tuple[str, bool, str]


def _imap_name(acc: MailAccountConfig) -> str:
    return f"mail {acc.name} (IMAP)"


def check_imap(box: Mailbox) -> Check:
    acc = box.account
    name = _imap_name(acc)
    try:
        box.require_password()
        with imap.session(acc, box.password) as client:
            folders = {f[2] for f in client.list_folders()}
            idle = client.has_capability("IDLE")
    except MailError as exc:
        return name, False, str(exc)
    wanted = ["INBOX", acc.sent_folder, acc.drafts_folder, *acc.watch]
    missing = [f for f in dict.fromkeys(wanted) if f not in folders]
    if missing:
        return (
            name,
            False,
            (
                f"{acc.name}: folder failed: no {', '.join(map(repr, missing))}; "
                f"the folders are: {', '.join(sorted(folders))}"
            ),
        )
    watch = f"; watching {', '.join(acc.watch)} by {'IDLE' if idle else 'polling'}"
    return (
        name,
        True,
        (
            f"{acc.login}@{acc.imap_host}:{acc.imap_port} ({acc.imap_security}), "
            f"{len(folders)} folders{watch if acc.watch else ''}"
        ),
    )


async def _smtp_login(box: Mailbox) -> None:
    import aiosmtplib

    acc = box.account
    client = aiosmtplib.SMTP(
        hostname=acc.smtp_server,
        port=acc.smtp_port,
        use_tls=acc.smtp_security == "tls",
        start_tls=acc.smtp_security == "starttls",
        tls_context=tls_context(acc),
        timeout=acc.timeout,
    )
    try:
        await client.connect()
    except aiosmtplib.SMTPConnectError as exc:
        raise classify_mail_error(
            acc.name, acc.smtp_server, acc.smtp_port, exc.__cause__ or exc
        ) from None
    except OSError as exc:
        raise classify_mail_error(acc.name, acc.smtp_server, acc.smtp_port, exc) from None
    try:
        await client.login(acc.login, box.password)
    except aiosmtplib.SMTPAuthenticationError:
        raise MailError(
            acc.name,
            "SMTP login",
            f"{acc.smtp_server} rejected the user "
            f"{acc.login!r} or its password ({acc.password_env})",
        ) from None
    except aiosmtplib.SMTPException as exc:
        raise MailError(acc.name, "SMTP login", str(exc)) from None
    finally:
        if client.is_connected:
            await client.quit()


def check_smtp(box: Mailbox) -> Check:
    acc = box.account
    name = f"mail {acc.name} (SMTP)"
    try:
        box.require_password()
        asyncio.run(_smtp_login(box))
    except MailError as exc:
        return name, False, str(exc)
    return name, True, f"{acc.login}@{acc.smtp_server}:{acc.smtp_port} ({acc.smtp_security})"


def check_account(
    account: MailAccountConfig, env: Mapping[str, str], *, imap_failed: MailError | None = None
) -> list[Check]:
    """IMAP and SMTP. `imap_failed`: the caller's own IMAP login just failed with it, so that is
    the IMAP result: servers count failed logins (fail2ban bans after a few), so never two."""
    box = Mailbox(account, env)
    if imap_failed is None:
        return [check_imap(box), check_smtp(box)]
    return [(_imap_name(account), False, str(imap_failed)), check_smtp(box)]
