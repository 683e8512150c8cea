"""/dashboard through the command workflow: a link for the owner in private, made inside the
send (never journaled, and its token taught to the redactor); the ordinary refusal for anyone
else; nothing at all in a group. And the capability contributes nothing while `[dashboard]` is
off."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentd.chat.channel import WebPages
from agentd.commands.router import CommandInput, CommandRouter
from agentd.config import AccessConfig, Config, DashboardConfig
from agentd.dashboard import capability
from agentd.db import Database
from agentd.durable import Engine, FakeClock
from agentd.runtime.redact import Redactor

OWNER, OTHER, GROUP, PAGE = 42, 43, -1001, 2_000_001


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def split(self, markdown: str) -> list[str]:
        return [markdown]

    async def send_text(self, chat_id: int, markdown: str, **kw: Any) -> int:
        assert kw.get("preview_url") is None  # the link is never previewed (fetched)
        self.sent.append((chat_id, markdown))
        return len(self.sent)


def _config(enabled: bool) -> Config:
    return Config(
        access=AccessConfig(allowed_user_ids=[OWNER, OTHER]),
        dashboard=DashboardConfig(enabled=enabled, port=8799),
    )


def _ctx(db: Any, config: Config, redactor: Redactor | None = None) -> Any:
    # A channel's page behind the dashboard's login (the web chat) writes in chat PAGE.
    page = WebPages(path="/chat", title="Chat", add=lambda app, csrf: None, chats=frozenset({PAGE}))
    return SimpleNamespace(
        config=config,
        db=db,
        stack=contextlib.AsyncExitStack(),
        shared={"web_pages": [page]},
        redactor=redactor or Redactor(),
    )


async def test_off_contributes_nothing(db: Database) -> None:
    part = await capability.capability().contribute(_ctx(db, _config(False)))
    assert part.commands == [] and part.start == []


@pytest.mark.parametrize(
    ("user", "chat", "answer"),
    [
        (OWNER, OWNER, "link"),
        (OTHER, OTHER, capability.NOT_YOURS),
        (OWNER, GROUP, None),
        # Signed in already on that page, which keeps what it shows: the address, no link.
        (OWNER, PAGE, capability.HERE.format(url="http://127.0.0.1:8799")),
    ],
)
async def test_who_gets_a_link(tmp_path: Path, user: int, chat: int, answer: str | None) -> None:
    db = await Database.open(tmp_path / "c.db")
    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    router, outbox, redactor = CommandRouter(), Outbox(), Redactor()
    part = await capability.capability().contribute(_ctx(db, _config(True), redactor))
    [command] = part.commands  # returned, not registered: the daemon adds it
    assert command.owner_only and len(part.start) == 1
    router.add(command)
    engine.register(router.workflow(outbox, db))  # type: ignore[arg-type]
    await engine.run()
    try:
        kind = "group" if chat < 0 else "private"
        inp = CommandInput(
            name="dashboard", chat_id=chat, chat_kind=kind, user_id=user, message_id=7
        )
        await engine.start("command", inp, instance_id="cmd-1")
        done = await engine.wait_for("cmd-1")
        assert done.status == "complete", done.error
        steps = await db.read(
            lambda c: [r[0] or "" for r in c.execute("SELECT result FROM workflow_steps")]
        )
        links = await db.read(
            lambda c: c.execute("SELECT COUNT(*) FROM dashboard_logins").fetchone()[0]
        )
    finally:
        await engine.shutdown(2)
        await db.close()
    if answer is None:
        assert outbox.sent == [] and links == 0
    elif answer == "link":
        ((to, text),) = outbox.sent
        assert to == OWNER and "http://127.0.0.1:8799/login?t=" in text and links == 1
        token = text.split("login?t=", 1)[1].split()[0]
        assert not any(token in result for result in steps)
        # Should a log line or an error quote the message, the live link is not in it.
        assert redactor(f"send failed: {text!r}").count("[REDACTED]") == 1
    else:
        assert outbox.sent == [(chat, answer)] and links == 0


def test_doctor_says_where_it_listens_or_why_not() -> None:
    from agentd.config import SecretSource
    from agentd.tools.capability import Probe

    probe = Probe(secrets=SecretSource({}), read=lambda fn: None)
    cap = capability.capability()
    (ok,) = cap.checks(_config(True), probe)
    assert ok.ok and "http://127.0.0.1:8799" in ok.detail
    wide = Config(dashboard=DashboardConfig(enabled=True, host="0.0.0.0"))
    (refused,) = cap.checks(wide, probe)
    assert not refused.ok and "allow_remote" in refused.detail
    assert cap.checks(_config(False), probe) == []
