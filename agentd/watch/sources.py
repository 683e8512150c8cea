"""Reading a watch's source: a page (the safe fetch), a mail folder, a calendar, a command in
the sandbox, a workspace file, an automation's runs. Each read returns a Reading; a failure
is a Reading with the reason (counted, and told when it repeats), never an exception.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentd.config import Config
from agentd.db import Database
from agentd.net.safe_fetch import FetchError, FetchPolicy, fetch
from agentd.watch.model import Reading, Source

MAX_ITEMS = 50


@dataclass(frozen=True)
class SourceDeps:
    config: Config
    db: Database
    policy: FetchPolicy
    env: Mapping[str, str]


async def read(source: Source, user_id: int, deps: SourceDeps, now: float) -> Reading:
    readers = {
        "page": _page,
        "file": _file,
        "command": _command,
        "mail": _mail,
        "calendar": _calendar,
        "automation": _automation,
    }
    try:
        return await readers[source.kind](source, user_id, deps, now)
    except Exception as exc:  # each reader says what failed; anything else is still a failure
        return Reading(ok=False, error=_reason(exc))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"


def _cap(text: str, deps: SourceDeps) -> str:
    return text[: deps.config.watch.max_source_bytes]


async def _page(source: Source, user_id: int, deps: SourceDeps, now: float) -> Reading:
    try:
        page = await fetch(source.url, deps.policy)
    except FetchError as exc:
        return Reading(ok=False, error=_reason(exc))
    if page.status >= 400:
        return Reading(
            ok=False, error=f"the page answered HTTP {page.status} {page.reason}".strip()
        )
    head = f"{page.title}\n" if page.title else ""
    return Reading(ok=True, text=_cap(head + page.text, deps))


async def _file(source: Source, user_id: int, deps: SourceDeps, now: float) -> Reading:
    from agentd.hands.files import Workspaces

    spaces = Workspaces.from_config(deps.config)
    data = await asyncio.to_thread(spaces.for_user(user_id).read, source.path)
    if data.text is None:
        return Reading(ok=False, error=f"{source.path} is not a text file ({data.mime})")
    return Reading(ok=True, text=_cap(data.text, deps))


async def _command(source: Source, user_id: int, deps: SourceDeps, now: float) -> Reading:
    """In the hands' sandbox with the network off, as the owner's shell tool runs it."""
    from agentd.hands.files import Workspaces
    from agentd.hands.sandbox import run_sandboxed
    from agentd.hands.shell import limits_of, sandbox_of

    config = deps.config
    if not config.tools.shell.enabled:
        return Reading(ok=False, error="the shell is off ([tools.shell] enabled = false)")
    workspace = await asyncio.to_thread(Workspaces.from_config(config).ensure, user_id)
    result = await run_sandboxed(
        source.command,
        workspace,
        sandbox=sandbox_of(config),
        limits=limits_of(config.tools.shell),
    )
    if result.exit_code != 0 or result.stopped:
        why = result.stopped or f"exit code {result.exit_code}"
        tail = " ".join(result.output.split())[-200:]
        return Reading(ok=False, error=f"the command failed ({why}): {tail}".rstrip(": "))
    return Reading(ok=True, text=_cap(result.output, deps))


# Where each kind of account is added, for the message that finds none.
_ADD_ONE = {
    "mail account": "add one with `agentd init --add-mail` or a [[mail]] section in the "
    "config (docs/mail.md)",
    "calendar": "add one with `agentd init --add-calendar` or a [[calendar]] section in the "
    "config (docs/calendar.md)",
}


def find_account(items: list[Any], name: str, what: str) -> Any:
    """The configured account a watch names ("": the first); LookupError saying which exist.
    Both a check and `create` (refusing a watch at the door) ask this."""
    if not items:
        raise LookupError(f"no {what} is configured; {_ADD_ONE[what]}")
    if not name:
        return items[0]
    for item in items:
        if item.name == name:
            return item
    names = ", ".join(i.name for i in items)
    raise LookupError(f"no {what} named {name!r}; the configured ones: {names}")


async def _mail(source: Source, user_id: int, deps: SourceDeps, now: float) -> Reading:
    from agentd.mail import imap
    from agentd.mail.mailbox import Mailbox

    account = find_account(deps.config.mail, source.account, "mail account")
    box = Mailbox(account, deps.env)

    def newest(client: Any) -> dict[str, str]:
        info = client.select_folder(source.folder, readonly=True)
        validity = int(info[b"UIDVALIDITY"])
        uids = sorted(imap.search(client, ["ALL"]))[-MAX_ITEMS:]
        return {
            f"{validity}:{s.uid}": f"from {s.sender} — {s.subject} ({s.date})"
            for s in imap.summaries(client, source.folder, uids)
        }

    return Reading(ok=True, items=await box.run(newest))


async def _calendar(source: Source, user_id: int, deps: SourceDeps, now: float) -> Reading:
    from agentd.calendar.events import describe
    from agentd.calendar.source import Source as CalendarSource
    from agentd.calendar.tools import occurrences_ahead

    cal = find_account(deps.config.calendar, source.account, "calendar")
    found = await occurrences_ahead(deps.config, CalendarSource(cal, deps.env), source.days, now)
    # An event moved is a new item: its id carries its start.
    return Reading(
        ok=True,
        items={f"{o.uid}@{o.start.isoformat()}": describe(o) for o in found[: MAX_ITEMS * 4]},
    )


async def _automation(source: Source, user_id: int, deps: SourceDeps, now: float) -> Reading:
    def runs(conn: Any) -> list[tuple[str, str, str | None, str | None]]:
        return conn.execute(
            "SELECT i.id, i.status, i.output, i.error FROM automation_runs r "
            "JOIN workflow_instances i ON i.id = r.instance_id WHERE r.automation = ? "
            "AND i.status IN ('complete', 'errored', 'cancelled') ORDER BY i.seq DESC LIMIT ?",
            (source.automation, MAX_ITEMS),
        ).fetchall()

    found = await deps.db.read(runs)
    items = {}
    for instance_id, status, output, error in reversed(found):
        said = error if status != "complete" else _output(output)
        items[instance_id] = f"run {instance_id}: {status} — {said}"[:500]
    return Reading(ok=True, items=items)


def _output(raw: str | None) -> str:
    if not raw:
        return "(no result)"
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
