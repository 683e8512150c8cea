"""The web chat as a channel (`chat.channel.Channel`): the owner's browser, through the
dashboard, with no network library and no secret of its own.

Block 2 of agentd's ids (webchat/ids.py): one chat, the owner's, whose account is linked to
the owner's agentd user. Intake is the page's POST, committed with its turn before it is
answered; output is rows the page reads by cursor (webchat/outbox.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentd.access import owners
from agentd.chat.channel import (
    ChannelContext,
    ChannelIdentity,
    ConfigProblem,
    Intake,
    WebPages,
)
from agentd.chat.kept import KeptTable
from agentd.config import Config
from agentd.webchat import ids
from agentd.webchat.config import SECTION, settings
from agentd.webchat.schema import MIGRATIONS

NAME = ids.NAME
PROGRESS_SECONDS = 5.0
FILES_DIR = "webchat-files"  # beside the database: the files the agent sent to the page
NEEDS_DASHBOARD = (
    "[webchat] enabled needs the dashboard it is a page of: set [dashboard] enabled = true "
    "(docs/dashboard.md)"
)


class OpenWebChat:  # built in `open`: aiohttp and jinja2 load only with [webchat] on
    """The page's outbox and handlers; intake starts when the daemon serves."""

    files = None  # the page sends text only

    def __init__(self, config: Config) -> None:
        from agentd.webchat.outbox import Hub, WebOutbox
        from agentd.webchat.pages import ChatSite

        self.config = config
        hub = Hub()
        files_dir = config.db_path.parent / FILES_DIR
        self.outbox = WebOutbox(hub, files_dir)
        owner = owners.resolve(config.access).owner_id
        self.site = ChatSite(hub=hub, owner_id=owner, files_dir=files_dir)
        self.web = WebPages(
            path="/chat", title="Chat", add=self.site.add, chats=frozenset({ids.CHAT_ID})
        )
        self._stop = asyncio.Event()

    def workflows(self, db: Any) -> list[Any]:
        self.outbox.bind(db)  # nothing is sent before the engine runs, which is after this
        return []

    async def identify(self, stop: asyncio.Event) -> ChannelIdentity:
        return ChannelIdentity(bot_id=ids.BASE)

    def serve(self, intake: Intake) -> asyncio.Task[None]:
        self.outbox.bind(intake.db)
        self.site.intake = intake

        async def run() -> None:
            # Requests are served by the dashboard's server; this task is the intake's life
            # and feeds the watchdog as a polling channel's loop does.
            while not self._stop.is_set():
                intake.on_progress()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), PROGRESS_SECONDS)

        return asyncio.create_task(run(), name="webchat")

    async def publish_menu(
        self, everyone: list[tuple[str, str]], owner: list[tuple[str, str]], owner_id: int | None
    ) -> None:
        """The page has no command menu: /help lists the commands."""

    def stop(self) -> None:
        self.site.intake = None
        self.site.hub.close()
        self._stop.set()

    async def close(self) -> None:
        self.stop()


class WebChatChannel:
    name = NAME
    block = ids.BLOCK
    section = SECTION
    migrations = MIGRATIONS

    def enabled(self, config: Config) -> bool:
        return settings(config).enabled

    def kept(self, config: Config) -> list[KeptTable]:
        """The page's transcript follows `[retention] message_days`, as the history does,
        with the files none of the rest names."""
        from agentd.webchat.kept import kept_transcript

        return [kept_transcript(config.db_path.parent / FILES_DIR)]

    def secret_names(self, config: Config) -> list[str]:
        return []  # signed in through the dashboard's login: nothing of its own

    def secret_values(self, config: Config) -> list[str]:
        return []

    def checks(self, config: Config, probe: Any) -> list[Any]:
        from agentd.tools.capability import Checks

        found = Checks()
        if not config.dashboard.enabled:
            found.add(NAME, False, NEEDS_DASHBOARD)
        elif owners.resolve(config.access).owner_id is None:
            found.add(NAME, False, "no owner: set access.owner_id for whom the page chats")
        else:
            found.add(NAME, True, f"the owner's chat at {config.dashboard.base_url()}/chat")
        return found

    async def open(self, ctx: ChannelContext) -> OpenWebChat:
        if not ctx.config.dashboard.enabled:
            raise ConfigProblem(NEEDS_DASHBOARD)
        return OpenWebChat(ctx.config)


def channel() -> WebChatChannel:
    return WebChatChannel()
