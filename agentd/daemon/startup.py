"""What must be open before anything runs, and the errors that stop a start."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentd.access import owners
from agentd.chat.names import chat_key
from agentd.chat.notice import post_notice
from agentd.config import Config
from agentd.db import Database
from agentd.durable import store
from agentd.ledger import audit
from agentd.runtime import sdnotify
from agentd.runtime.gc_pause import pausing
from agentd.runtime.logs import Redactor, setup_logging
from agentd.telegram import aiogram_loader
from agentd.telegram.classify import Identity

if TYPE_CHECKING:
    from agentd.commands.router import CommandRouter
    from agentd.telegram.session import RetryPolicy

log = logging.getLogger("agentd")


def configured_secrets(config: Config, env: Mapping[str, str] | None = None) -> list[str]:
    """Every secret the configuration names, wherever it comes from (the environment,
    agentd.env or a systemd credential): the core two and each capability's."""
    from agentd.daemon.capabilities import secret_values

    return secret_values(config, config.secret_source(env))


def set_up_logging(config: Config) -> Redactor:
    """Logging with every configured secret redacted; the same redactor guards the journal."""
    secrets = configured_secrets(config)
    setup_logging(config.log.level, config.log.format, secrets)
    return Redactor(secrets)


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


class StoppedDuringStartUp(StartupError):
    """Asked to stop (SIGTERM, Ctrl-C) before start-up finished: a clean stop, not a failure."""


class ConfigProblem(StartupError):
    """A configuration problem (exit code 78): a missing or malformed secret, a bad token."""


class TokenRejected(ConfigProblem):
    """Telegram does not accept the token."""


async def get_me(bot, stop: asyncio.Event, policy: RetryPolicy) -> Identity:  # type: ignore[no-untyped-def]
    """Ask Telegram who we are, waiting for the network (systemd may start us before it).

    Only a rejected token ends the wait: Telegram answers 401 for a wrong token and 404 (as
    Bot API JSON) for one that is not a token at all. Anything else is retried, capped.
    """
    from aiogram.exceptions import TelegramNotFound

    from agentd.telegram.session import classify_fault

    failures = 0
    while True:
        try:
            me = await bot.get_me()
        except Exception as exc:
            fault = classify_fault(exc)
            if fault.kind == "unauthorized" or isinstance(exc, TelegramNotFound):
                raise TokenRejected(
                    "Telegram rejected the bot token; check TELEGRAM_BOT_TOKEN (from @BotFather) "
                    "and telegram.api_base"
                ) from None
            failures += 1
            wait = policy.wait(failures, fault.retry_after)
            sdnotify.notify(f"STATUS=waiting for Telegram: {fault.reason}")
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
        return me


async def every(seconds: float, fn, stop: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        if not stop.is_set():
            try:
                await fn()
            except Exception:
                log.exception("periodic task failed")


async def publish_menu_best_effort(bot, router: CommandRouter) -> None:  # type: ignore[no-untyped-def]
    """Everyone's menu, and the owner's with the owner's own commands (/run)."""
    from agentd.telegram.menu import publish_menu

    try:
        await publish_menu(bot, router.menu(owner=False), router.menu(), router.owner_id)
    except Exception:  # it already logs what Telegram refused; this is anything else
        log.exception("publishing the command menu failed")


async def open_database_and_bot(
    config: Config, on_uncertain: Callable[..., Any]
) -> tuple[Database, Any]:
    """The database opens (and migrates) while aiogram imports in a thread."""
    db_open = asyncio.create_task(
        Database.open(config.db_path, synchronous=config.storage.synchronous)
    )
    try:
        await asyncio.to_thread(pausing(aiogram_loader.load), lazy=config.startup.lazy_aiogram)
        from agentd.telegram.bot import TokenMissing, make_bot

        try:
            bot = make_bot(config, on_uncertain=on_uncertain)
        except TokenMissing as exc:
            raise ConfigProblem(str(exc)) from None
    except BaseException:
        with contextlib.suppress(Exception):
            await (await db_open).close()
        raise
    return await db_open, bot


def identity(config: Config, me_user: Any) -> Identity:
    """Who the bot is and whom it serves, from getMe and the configuration."""
    if not config.telegram.allowed_user_ids:
        log.warning("telegram.allowed_user_ids is empty: every message will be dropped")
    # Said once, so an owner found by the fallback rule (the first allowlisted id) is no surprise.
    log.info("approvals", extra={"trust": owners.resolve(config.telegram).describe()})
    return Identity(
        bot_id=me_user.id,
        bot_username=me_user.username or "",
        allowed_user_ids=owners.configured_ids(config.telegram),
        allow_groups=config.telegram.allow_groups,
    )


def audit_unfinished(conn: object, inst: store.InstanceRecord) -> None:
    """R-TURN-3: every instance that ends in error (or is cancelled) is in the audit log."""
    audit.record(
        conn,
        f"workflow_{inst.status}",
        instance_id=inst.id,
        detail={"workflow": inst.workflow, "key": inst.key, "error": (inst.error or "")[:500]},
        source_key=f"{inst.id}:finished:{inst.runs}",
    )


def audit_send_uncertain(conn: object, method: str, chat_id: int | str | None, reason: str) -> None:
    """A send whose answer was lost may have reached the user: a possible duplicate
    (docs/messages.md)."""
    chat = chat_id if isinstance(chat_id, int) else None
    audit.record(conn, "send_uncertain", chat_id=chat, detail={"method": method, "reason": reason})


def parked_notice(inst: store.InstanceRecord) -> str:
    """What the chat is told, once, when its workflow is parked after crash after crash."""
    return (
        f"⚠️ I stopped working on this ({inst.workflow} `{inst.id}`): agentd {inst.error}. "
        "Other chats are served as usual. To try it again: "
        f"`agentd workflows retry {inst.id}`"
    )


async def tell_parked(start: Callable[..., Awaitable[Any]], inst: store.InstanceRecord) -> None:
    """Tell the instance's chat, once per parking, as a notice of its own (chat/notice.py):
    outside any workflow here, it still leaves by the one send path."""
    prefix = chat_key(0).removesuffix("0")
    if not inst.key.startswith(prefix):
        return
    chat_id = int(inst.key.removeprefix(prefix))
    await post_notice(start, f"notice-parked-{inst.id}-{inst.runs}", chat_id, parked_notice(inst))
