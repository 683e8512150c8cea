"""`agentd init --add-mail` / `--add-calendar`: add an account to an existing set-up, after
logging in to it. The password goes to agentd.env (mode 0600), never to agentd.toml."""

from __future__ import annotations

import json as jsonlib
import os
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from agentd.cli.common import err, fail, out
from agentd.cli.init import plain
from agentd.config import SECRETS_FILE, CalendarConfig, MailAccountConfig, read_secrets_file

if TYPE_CHECKING:
    from agentd.mail.errors import MailError


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
    if not env:  # an account without a user name (a public .ics feed) has no secret to keep
        return
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
        line = f"{'ok' if ok else 'FAIL'}  {check}: {detail}"
        (out if ok else err).print(line, highlight=False, markup=False)
    return all(ok for _, ok, _ in results)


RESTART = (
    "A running agentd reads it at its next start: `systemctl restart agentd` (the system "
    "service), `systemctl --user restart agentd` (the user unit), or Ctrl-C and `agentd run` "
    "again in a terminal."
)


def split_host(answer: str, port_key: str) -> tuple[str, int | None]:
    """`host`, `host:port` or `[v6]:port` as (host, port or None); a ValueError names the
    config key the port belongs in, so `imap.example.org:993` never reaches DNS whole."""
    answer = answer.strip()
    if "://" in answer:
        raise ValueError(f"give the server's name without {answer.split('://')[0]}://")
    if answer.startswith("[") and "]" in answer:
        host, _, rest = answer[1:].partition("]")
        port = rest.removeprefix(":")
    elif answer.count(":") == 1:
        host, _, port = answer.partition(":")
    else:
        return answer, None  # a name, or a bare IPv6 address
    if not port:
        return host, None
    if not port.isdecimal() or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"{port!r} is not a port: give the server's name alone (the port is asked next, "
            f"and saved as {port_key})"
        )
    return host, int(port)


def smtp_default(imap_host: str) -> str:
    """The SMTP server beside an IMAP one: imap.example.org -> smtp.example.org; a host that
    is not named for IMAP (mail.example.org, an address) usually serves both."""
    first, dot, rest = imap_host.partition(".")
    if (
        dot
        and first.lower() in ("imap", "imaps", "imap4")
        and not rest.replace(".", "").isdecimal()
    ):
        return f"smtp.{rest}"
    return imap_host


def _server(label: str, default: str, port_key: str) -> tuple[str, int | None]:
    while True:
        try:
            return split_host(_prompt(label, default), port_key)
        except ValueError as exc:
            err.print(f"{exc}.", highlight=False, markup=False)


def _port(label: str, given: int | None, default: str) -> int:
    if given is not None:
        out.print(f"{label}: {given} (from the server name)", highlight=False)
        return given
    while True:
        answer = _prompt(label, default)
        if answer.isdecimal() and 1 <= int(answer) <= 65535:
            return int(answer)
        err.print(f"{answer!r} is not a port (1-65535).", highlight=False)


def _password(label: str, kept: str) -> str:
    """A password that is not empty (Enter keeps the one typed before, when there is one)."""
    while True:
        hint = " (Enter keeps the one you typed)" if kept else ""
        answer = _prompt(label + hint, secret=True) or kept
        if answer:
            return answer
        err.print(
            "A password is needed: for Gmail, Outlook, iCloud and most others an app password "
            "made in the account's security settings (not the one you log in with).",
            highlight=False,
        )


def _mail_fields(name: str, before: dict[str, Any], kept: str) -> tuple[dict[str, Any], str]:
    """The account's keys as asked (host:port split), and its password; `before` holds the
    answers of a try that did not log in, offered as the defaults."""
    address = _prompt("E-mail address", before.get("address", ""))
    domain = address.rpartition("@")[2]
    imap_host, imap_port = _server(
        "IMAP server", before.get("imap_host", f"imap.{domain}"), "imap_port"
    )
    imap_security = _prompt(
        "IMAP security (tls / starttls / plain)", before.get("imap_security", "tls")
    )
    imap_default = str(before.get("imap_port", "993" if imap_security == "tls" else "143"))
    imap_port = _port("IMAP port", imap_port, imap_default)
    smtp_host, smtp_port = _server(
        "SMTP server", before.get("smtp_host", smtp_default(imap_host)), "smtp_port"
    )
    smtp_security = _prompt(
        "SMTP security (tls / starttls / plain)", before.get("smtp_security", "tls")
    )
    smtp_default_port = str(before.get("smtp_port", "465" if smtp_security == "tls" else "587"))
    smtp_port = _port("SMTP port", smtp_port, smtp_default_port)
    username = _prompt("User name", before.get("username", address))
    password = _password("App password", kept)
    fields = dict(
        name=name,
        address=address,
        username=username,
        password_env=_env_name("MAIL", name),
        imap_host=imap_host,
        imap_port=imap_port,
        imap_security=imap_security,
        smtp_host=smtp_host,
        smtp_port=smtp_port,
        smtp_security=smtp_security,
    )
    return fields, password


# (config key, agentd's default name, the IMAP special-use flag servers mark it with, purpose)
SPECIAL_FOLDERS = (
    ("sent_folder", "Sent", b"\\Sent", "sent mail"),
    ("drafts_folder", "Drafts", b"\\Drafts", "drafts"),
)


Folders = list[tuple[tuple[bytes, ...], str]]


def _server_folders(account: MailAccountConfig, password: str) -> Folders | MailError:
    """(flags, name) of each folder, or why the login failed."""
    from agentd.mail import imap
    from agentd.mail.errors import MailError

    try:
        with imap.session(account, password) as client:
            return [(tuple(flags), str(name)) for flags, _, name in client.list_folders()]
    except MailError as exc:
        return exc


def _pick_folders(fields: dict[str, Any], folders: Folders) -> None:
    """Where Sent or Drafts is missing, offer the server's folders (the one it marks for that
    use first) and set the key, so the account does not fail on its first sent mail."""
    names = [name for _, name in folders]
    for key, default, flag, purpose in SPECIAL_FOLDERS:
        if not folders or default in names:
            continue
        marked = next((n for flags, n in folders if flag in flags), None)
        err.print(
            f"The server has no folder {default!r} for {purpose} ({key}). Its folders:",
            highlight=False,
            markup=False,
        )
        for number, name in enumerate(names, 1):
            err.print(f"  {number}. {name}", highlight=False, markup=False)
        choices = [str(n) for n in range(1, len(names) + 1)]
        suggested = str(names.index(marked) + 1) if marked else None
        from rich.prompt import Prompt

        choice = Prompt.ask(
            f"Folder for {purpose} ({key})",
            choices=choices,
            default=suggested,
            show_choices=False,
            console=err,
        )
        fields[key] = names[int(choice) - 1]


def add_mail(directory: Path) -> None:
    """Ask for a mail account, log in to IMAP and SMTP, then save it."""
    from agentd.mail.check import check_account
    from agentd.mail.errors import MailError

    config, secrets = _files(directory)
    name = _prompt("Account name", "home")

    def check(fields: dict[str, Any], password: str) -> list[tuple[str, bool, str]]:
        account = MailAccountConfig(**fields)  # validates the keys before connecting
        env = {fields["password_env"]: password}
        folders = _server_folders(account, password)
        if isinstance(folders, MailError):
            return check_account(account, env, imap_failed=folders)
        _pick_folders(fields, folders)  # may set the Sent and Drafts keys
        return check_account(MailAccountConfig(**fields), env)

    fields, password = _until_checked(partial(_mail_fields, name), check)
    env = fields["password_env"]
    _append(config, secrets, "mail", fields, env, password)
    out.print(
        f"Added mail account {name!r} to {config}; its password is in {secrets} as {env}. "
        + RESTART,
        highlight=False,
        markup=False,
    )


def _calendar_fields(name: str, before: dict[str, Any], kept: str) -> tuple[dict[str, Any], str]:
    """The calendar's keys as asked, and its password; `before` holds the answers of a try
    that did not read the calendar, offered as the defaults."""
    url = _prompt("CalDAV URL (or an .ics feed URL)", before.get("url", ""))
    username = _prompt("User name (empty for a public feed)", before.get("username", ""))
    password = ""
    if username:
        hint = " (Enter keeps the one you typed)" if kept else ""
        password = _prompt("Password" + hint, secret=True) or kept
    env = _env_name("CALENDAR", name) if username else ""
    return {"name": name, "url": url, "username": username, "password_env": env}, password


Ask = Callable[[dict[str, Any], str], tuple[dict[str, Any], str]]
Check = Callable[[dict[str, Any], str], list[tuple[str, bool, str]]]


def _until_checked(ask: Ask, check: Check) -> tuple[dict[str, Any], str]:
    """Ask, then log in; after "Save it anyway? N", ask again with each answer as the default
    (the password typed is kept on Enter), or stop."""
    fields: dict[str, Any] = {}
    password = ""
    while True:
        fields, password = ask(fields, password)
        try:
            results = check(fields, password)
        except ValueError as exc:  # a key the config refuses: said, nothing is saved
            fail(plain(f"not added: {exc}"))
        if _checked(results) or typer.confirm("Save it anyway?", default=False, err=True):
            return fields, password
        if not typer.confirm(
            "Change an answer and try again (each one you gave is the default)?",
            default=True,
            err=True,
        ):
            out.print("Nothing changed.")
            raise typer.Exit(1)


def add_calendar(directory: Path, timezone: str) -> None:
    """Ask for a CalDAV calendar (or an .ics feed), read today's events, then save it."""
    from agentd.calendar.check import check_calendar

    config, secrets = _files(directory)
    name = _prompt("Calendar name", "home")

    def check(fields: dict[str, Any], password: str) -> list[tuple[str, bool, str]]:
        calendar = CalendarConfig(**fields)
        return [check_calendar(calendar, {fields["password_env"]: password}, timezone)]

    fields, password = _until_checked(partial(_calendar_fields, name), check)
    env = fields["password_env"]
    _append(config, secrets, "calendar", fields, env, password)
    out.print(f"Added calendar {name!r} to {config}. " + RESTART, highlight=False, markup=False)
