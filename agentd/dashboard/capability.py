"""The dashboard capability: with `[dashboard] enabled`, `agentd run` serves the owner's pages
and `/dashboard` in the owner's private chat answers with a one-time login link.

The server is a listening socket and nothing else: no task, no timer, no connection while no
page is open. Pages read on connections of their own and change through the daemon's one
writer (`DaemonAccess`), so serving one never holds up a turn.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agentd.access import owners
from agentd.chat.command import ChatCommand, CommandInput, CommandReply
from agentd.config import Config
from agentd.tools.capability import (
    Check,
    Checks,
    Context,
    Contribution,
    Probe,
    ServiceError,
    Simple,
)

log = logging.getLogger("agentd")

NOT_YOURS = "The dashboard is the owner's; there is nothing to open here for you."
# Filled in by `finish` when the message is sent, so the link itself is never journaled.
LINK = "{link}"
SENT = (
    "Your dashboard — sign in once, within {minutes:g} min:\n{link}\n\n"
    "The link works once; ask /dashboard again for another."
)
# In a chat on a page behind the dashboard's login: the owner is signed in there already.
HERE = "You're signed in to your dashboard here: {url}"


@dataclass
class Dashboard:
    """The served dashboard of one daemon: where it listens once started."""

    ctx: Context
    port: int | None = None

    @property
    def owner(self) -> int | None:
        return owners.resolve(self.ctx.config.access).owner_id

    def _private_owner(self, inp: CommandInput) -> bool:
        return inp.private and inp.user_id == self.owner

    async def command(self, inp: CommandInput) -> CommandReply:
        """/dashboard: a login link for the owner, in their private chat only."""
        if not inp.private:
            return CommandReply(text="")  # a group learns nothing, not even that it exists
        if not self._private_owner(inp):
            return CommandReply(text=NOT_YOURS)
        if inp.chat_id in self._behind_login():
            # No sign-in link where it is not needed: a chat on the dashboard's own pages (the
            # web chat) keeps every message it shows in the database, where a live link
            # would sign in whoever reads a backup.
            url = self.ctx.config.dashboard.base_url(self.port)
            return CommandReply(text=HERE.format(url=url))
        return CommandReply(
            text=SENT.format(minutes=self.ctx.config.dashboard.link_minutes, link=LINK)
        )

    def _behind_login(self) -> frozenset[int]:
        pages = self.ctx.shared.get("web_pages", [])
        return frozenset(chat for page in pages for chat in page.chats)

    async def finish(self, inp: CommandInput, text: str) -> str:
        """Inside the send step: the link, made now (stored hashed) and never journaled."""
        if LINK not in text or not self._private_owner(inp):
            return text
        from agentd.dashboard.links import login_link

        settings = self.ctx.config.dashboard
        # Should the send fail, no error text that quotes the message keeps a live link.
        learn = self.ctx.redactor.learn
        link = await self.ctx.db.write(
            login_link, settings, f"chat:{inp.user_id}", self.port, learn=learn
        )
        return text.replace(LINK, link)

    async def start(self) -> Callable[[], Awaitable[None]]:
        from agentd.browser.capability import SIGNIN_DESK
        from agentd.dashboard.access import DaemonAccess
        from agentd.dashboard.config import BindRefused
        from agentd.dashboard.site import serve, site_for

        settings = self.ctx.config.dashboard
        # The daemon's embedder: memory edit and restore re-embed through the one writer.
        embedder = self.ctx.shared.get("embedder")
        # The browser's sign-in desk, lent by the browser capability when it is on.
        desk = self.ctx.shared.get(SIGNIN_DESK)
        access = DaemonAccess(self.ctx.db, self.ctx.engine)
        site = site_for(
            self.ctx.config, settings, access, embedder, desk, learn=self.ctx.redactor.learn
        )
        # Pages of channels served in the owner's browser (the web chat), behind this login.
        site.pages = list(self.ctx.shared.get("web_pages", []))
        site.schema = self.ctx.shared.get("schema")
        try:
            runner = await serve(site)
        except (OSError, BindRefused) as exc:
            where = f"host = {settings.host!r}, port = {settings.port}"
            raise ServiceError(f"[dashboard] {where}: {exc}") from None
        self.port = runner.addresses[0][1] if runner.addresses else settings.port
        log.info("dashboard listening", extra={"url": settings.base_url(self.port)})
        return runner.cleanup


async def _build(ctx: Context) -> Contribution:
    if not ctx.config.dashboard.enabled:
        return Contribution()
    dashboard = Dashboard(ctx)
    command = ChatCommand(
        "dashboard",
        dashboard.command,
        "A link to your web dashboard (the owner, in private)",
        finish=dashboard.finish,
        owner_only=True,
    )
    return Contribution(commands=[command], start=[dashboard.start])


def _checks(config: Config, probe: Probe) -> list[Check]:
    from agentd.dashboard.config import BindRefused, check_bind

    settings = config.dashboard
    if not settings.enabled:
        return []
    checks = Checks()
    try:
        check_bind(settings)
    except BindRefused as exc:
        checks.add("dashboard", False, str(exc))
    else:
        checks.add("dashboard", True, f"served by `agentd run` at {settings.base_url()}")
    return checks


def capability() -> Simple:
    return Simple("dashboard", build=_build, doctor=_checks)
