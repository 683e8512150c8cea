"""Telegram as a channel (`chat.channel.Channel`): the Bot API through aiogram, long-polled.

Block 0 of agentd's ids: Telegram's own chat and user ids, so everything stored before
channels existed still names the right chat. aiogram is imported only here and below, in a
thread while the database opens (`aiogram_loader`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from agentd.access import owners
from agentd.chat import reach
from agentd.chat.channel import (
    ChannelContext,
    ChannelIdentity,
    ConfigProblem,
    CredentialsRejected,
    Intake,
    Refusal,
    StoppedDuringStartUp,
    id_block,
)
from agentd.chat.kept import KeptTable, intake_records
from agentd.config import Config
from agentd.runtime import sdnotify
from agentd.runtime.gc_pause import pausing
from agentd.telegram import aiogram_loader
from agentd.telegram.classify import Identity
from agentd.telegram.config import SECTION, bot_token, settings
from agentd.telegram.intake import CHANNEL
from agentd.telegram.schema import MIGRATIONS

log = logging.getLogger("agentd.telegram")
NAME = CHANNEL


class TokenRejected(CredentialsRejected):
    """Telegram does not accept the token."""


def identity(config: Config, bot_id: int, username: str) -> Identity:
    """Who the bot is and whom it serves, from getMe and the configuration."""
    if not config.access.allowed_user_ids:
        log.warning("access.allowed_user_ids is empty: every message will be dropped")
    return Identity(
        bot_id=bot_id,
        bot_username=username,
        allowed_user_ids=owners.configured_ids(config.access),
        allow_groups=config.access.allow_groups,
    )


def know_private_chats(conn: Any, users: frozenset[int]) -> None:
    """A Telegram user's private chat with the bot has the user's id: known for every served
    Telegram user before they write, so a notice or a card for them has somewhere to go."""
    for user in users:
        if id_block(user) == 0 and user > 0:
            reach.know_private_chat(conn, user, NAME, user)


class OpenTelegram:
    """The bot, its outbox and its poller once serving."""

    def __init__(self, config: Config, bot: Any, redact: Callable[[str], str]) -> None:
        from agentd.telegram.files import TelegramFiles
        from agentd.telegram.groups import make_leave_workflow
        from agentd.telegram.output import TelegramOutbox

        self.config = config
        self.bot = bot
        self.redact = redact
        token_env = settings(config).token_env
        self.refusal = Refusal(
            lambda: TokenRejected(
                f"Telegram rejected the bot token; check {token_env} (from @BotFather)"
            )
        )
        self.outbox = TelegramOutbox(
            bot,
            max_message_chars=settings(config).max_message_chars,
            progress_delay=config.chat.progress_delay,
            refusal=self.refusal,
        )
        self.files = TelegramFiles(bot)
        self._leave = make_leave_workflow
        self.me: Identity | None = None
        self._poller: Any = None

    def workflows(self, db: Any) -> list[Any]:
        return [self._leave(self.bot, db, self.refusal)]

    async def identify(self, stop: asyncio.Event) -> ChannelIdentity:
        """Ask Telegram who we are, waiting for the network (systemd may start us before it).

        Only a rejected token ends the wait: Telegram answers 401 for a wrong token and 404 (as
        Bot API JSON) for one that is not a token at all. Anything else is retried, capped.
        """
        from aiogram.exceptions import TelegramNotFound

        from agentd.telegram.bot import retry_policy
        from agentd.telegram.session import classify_fault

        policy, failures = retry_policy(self.config), 0
        while True:
            try:
                user = await self.bot.get_me()
            except Exception as exc:
                fault = classify_fault(exc)
                if fault.kind == "unauthorized" or isinstance(exc, TelegramNotFound):
                    raise TokenRejected(
                        "Telegram rejected the bot token; check "
                        f"{settings(self.config).token_env} (from @BotFather) and telegram.api_base"
                    ) from None
                failures += 1
                wait = policy.wait(failures, fault.retry_after)
                # Outside the log, so past its redactor: a server's error text is quoted here.
                sdnotify.notify(self.redact(f"STATUS=waiting for Telegram: {fault.reason}"))
                log.warning(
                    "waiting for Telegram",
                    extra={"reason": fault.reason, "attempt": failures, "wait_s": round(wait, 2)},
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait)
                if stop.is_set():
                    raise StoppedDuringStartUp("stopped before Telegram answered getMe") from None
                continue
            sdnotify.notify("STATUS=running")
            self.me = identity(self.config, user.id, user.username or "")
            return ChannelIdentity(bot_id=user.id, username=user.username or "")

    def serve(self, intake: Intake) -> asyncio.Task[None]:
        from agentd.telegram.bot import retry_policy
        from agentd.telegram.poller import Poller

        assert self.me is not None, "identify() first"
        tg = settings(self.config)
        poller = self._poller = Poller(
            self.bot,
            intake.db,
            intake.engine,
            self.outbox,
            self.me,
            poll_timeout=tg.poll_timeout,
            on_callback=intake.on_callback,
            on_command=intake.on_command,
            policy=retry_policy(self.config),
            request_timeout=tg.request_timeout,
            on_progress=intake.on_progress,
            busy=intake.busy,
            token_env=tg.token_env,
        )
        served = self.me.allowed_user_ids

        async def run() -> None:
            from aiogram.exceptions import TelegramUnauthorizedError

            await intake.db.write(know_private_chats, served)
            try:
                await self.refusal.serve(poller.run())
            except TelegramUnauthorizedError:
                raise self.refusal.refuse() from None

        return asyncio.create_task(run(), name="telegram-poller")

    async def publish_menu(
        self, everyone: list[tuple[str, str]], owner: list[tuple[str, str]], owner_id: int | None
    ) -> None:
        from agentd.telegram.menu import publish_menu

        await publish_menu(self.bot, everyone, owner, owner_id)

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.stop()

    async def close(self) -> None:
        await self.bot.session.close()


class TelegramChannel:
    name = NAME
    block = 0
    section = SECTION
    migrations = MIGRATIONS

    def enabled(self, config: Config) -> bool:
        """On when its token is set (with no channel on at all, it is opened anyway, to say
        which key is missing)."""
        return bot_token(config) is not None

    def kept(self, config: Config) -> list[KeptTable]:
        """Its update records (the core's `updates` table, older than the channel door)."""
        return [intake_records("updates", "updates")]

    def secret_names(self, config: Config) -> list[str]:
        return [settings(config).token_env]

    def secret_values(self, config: Config) -> list[str]:
        return []  # read through the one reader, by name

    def checks(self, config: Config, probe: Any) -> list[Any]:
        from agentd.tools.capability import Checks

        found = Checks()
        found.add(NAME, *_get_me_check(config))
        return found

    async def open(self, ctx: ChannelContext) -> OpenTelegram:
        """aiogram imports in a thread (while the database opens); the bot is built, no call."""
        await asyncio.to_thread(pausing(aiogram_loader.load), lazy=ctx.config.startup.lazy_aiogram)
        from agentd.telegram.bot import TokenMissing, make_bot

        try:
            bot = make_bot(ctx.config, on_uncertain=ctx.on_uncertain)
        except TokenMissing as exc:
            raise ConfigProblem(str(exc)) from None
        return OpenTelegram(ctx.config, bot, ctx.redactor)


def _get_me_check(config: Config) -> tuple[bool, str]:
    """`agentd doctor`: does the bot answer getMe with this token (plain HTTP, no aiogram)."""
    token = bot_token(config)
    if token is None:
        return False, f"{settings(config).token_env} is not set (get one from @BotFather)"
    base = settings(config).api_base.rstrip("/")
    request = urllib.request.Request(f"{base}/bot{token.get_secret_value()}/getMe")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, body = response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        status, body = exc.code, None
    except (OSError, ValueError) as exc:
        return False, f"{base} unreachable: {type(exc).__name__}"
    if status == 200 and isinstance(body, dict) and body.get("ok"):
        return True, f"bot @{body['result'].get('username')} answers"
    return False, f"getMe answered HTTP {status}: check the token"


def channel() -> TelegramChannel:
    return TelegramChannel()
