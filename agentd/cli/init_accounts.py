"""`agentd init --add-mail` / `--add-calendar`: add an account to an existing set-up, after
logging in to it. The password goes to agentd.env (mode 0600), never to agentd.toml."""

from __future__ import annotations

import json as jsonlib
import os
import re
from pathlib import Path
from typing import Any

import typer

from agentd.cli.common import err, fail, out
from agentd.config import SECRETS_FILE, CalendarConfig, MailAccountConfig, read_secrets_file


def _prompt(label: str, default: str = "", *, secret: bool = False) -> str:
    from rich.prompt import Prompt

    answer = Prompt.ask(label, default=default or None, password=secret, console=err)
    return (answer or "").strip()


def _files(directory: Path) -> tuple[Path, Path]:
    config, secrets = directory / "agentd.toml", directory / SECRETS_FILE
    if not config.exists():
        fail(f"{config} does not exist; run `agentd init` first")
    return config, secrets


def _append(
    config: Path, secrets: Path, table: str, fields: dict[str, Any], env: str, password: str
) -> None:
    block = f"\n[[{table}]]\n" + "".join(f"{k} = {jsonlib.dumps(v)}\n" for k, v in fields.items())
    with config.open("a") as f:
        f.write(block)
    stored = read_secrets_file(secrets)
    stored[env] = password
    fd = os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in stored.items()))
    os.chmod(secrets, 0o600)


def _env_name(kind: str, name: str) -> str:
    return f"AGENTD_{kind}_{re.sub(r'[^A-Z0-9]', '_', name.upper())}_PASSWORD"


def _checked(results: list[tuple[str, bool, str]]) -> bool:
    for check, ok, detail in results:
        (out if ok else err).print(f"{'ok' if ok else 'FAIL'}  {check}: {detail}", highlight=False)
    return all(ok for _, ok, _ in results)


def add_mail(directory: Path) -> None:
    """Ask for a mail account, log in to IMAP and SMTP, then save it."""
    from agentd.mail.check import check_account

    config, secrets = _files(directory)
    name = _prompt("Account name", "home")
    address = _prompt("E-mail address")
    imap_host = _prompt("IMAP server", "imap." + address.rpartition("@")[2])
    imap_security = _prompt("IMAP security (tls / starttls / plain)", "tls")
    imap_port = int(_prompt("IMAP port", "993" if imap_security == "tls" else "143"))
    smtp_host = _prompt("SMTP server", "smtp." + address.rpartition("@")[2])
    smtp_security = _prompt("SMTP security (tls / starttls / plain)", "tls")
    smtp_port = int(_prompt("SMTP port", "465" if smtp_security == "tls" else "587"))
    username = _prompt("User name", address)
    password = _prompt("App password", secret=True)
    env = _env_name("MAIL", name)
    fields = dict(
        name=name,
        address=address,
        username=username,
        password_env=env,
        imap_host=imap_host,
        imap_port=imap_port,
        imap_security=imap_security,
        smtp_host=smtp_host,
        smtp_port=smtp_port,
        smtp_security=smtp_security,
    )
    try:
        account = MailAccountConfig(**fields)  # type: ignore[arg-type]
    except ValueError as exc:
        fail(f"not added: {exc}")
    if not _checked(check_account(account, {env: password})) and not typer.confirm(
        "Save it anyway?", default=False, err=True
    ):
        out.print("Nothing changed.")
        raise typer.Exit(1)
    _append(config, secrets, "mail", fields, env, password)
    out.print(
        f"Added mail account {name!r} to {config}; its password is in {secrets} as {env}.",
        highlight=False,
    )


def add_calendar(directory: Path, timezone: str) -> None:
    """Ask for a CalDAV calendar (or an .ics feed), read today's events, then save it."""
    from agentd.calendar.check import check_calendar

    config, secrets = _files(directory)
    name = _prompt("Calendar name", "home")
    url = _prompt("CalDAV URL (or an .ics feed URL)")
    username = _prompt("User name (empty for a public feed)", "")
    password = _prompt("Password", secret=True) if username else ""
    env = _env_name("CALENDAR", name) if username else ""
    fields = {"name": name, "url": url, "username": username, "password_env": env}
    try:
        calendar = CalendarConfig(**fields)
    except ValueError as exc:
        fail(f"not added: {exc}")
    if not _checked([check_calendar(calendar, {env: password}, timezone)]) and not typer.confirm(
        "Save it anyway?", default=False, err=True
    ):
        out.print("Nothing changed.")
        raise typer.Exit(1)
    _append(config, secrets, "calendar", fields, env, password)
    out.print(f"Added calendar {name!r} to {config}.", highlight=False)
