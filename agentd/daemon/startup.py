"""What must be open before anything runs, and the errors that stop a start."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentd.access import owners
from agentd.channels import configured, migrations
from agentd.chat.channel import (
    ChannelContext,
    ConfigProblem,
    Opened,
    StartupError,
    StoppedDuringStartUp,
)
from agentd.chat.markup import block, literal
from agentd.chat.names import chat_key
from agentd.chat.notice import post_notice
from agentd.config import Config
from agentd.db import Database
from agentd.durable import store
from agentd.ledger import audit
from agentd.runtime.logs import setup_logging
from agentd.runtime.redact import Redactor

if TYPE_CHECKING:
    from agentd.commands.router import CommandRouter

log = logging.getLogger("agentd")
# Raised by start-up and the channels; `agentd run` turns each into its exit code.
__all__ = ["ConfigProblem", "StartupError", "StoppedDuringStartUp"]


def configured_secrets(config: Config, env: Mapping[str, str] | None = None) -> list[str]:
    """Every secret the configuration names, wherever it comes from (the environment,
    agentd.env or a systemd credential): the core two and each capability's."""
    from agentd.daemon.capabilities import secret_values

    return secret_values(config, config.secret_source(env))


def set_up_logging(config: Config, *, level: str | None = None) -> Redactor:
    """Logging with every configured secret redacted. The one redactor of the process: the
    same instance guards the journal and learns the secrets met later (a Matrix login's
    token, a browser profile's cookies), so a value learned is hidden everywhere at once.
    Every process that meets a secret sets it up, the daemon and a command alike (`level`:
    a command's own, quieter than the daemon's)."""
    redactor = process_redactor(config)
    setup_logging(level or config.log.level, config.log.format, redactor)
    return redactor


def process_redactor(config: Config) -> Redactor:
    """The process's one redactor, knowing every configured secret; what the process meets
    later is taught to it (`Redactor.learn`)."""
    return Redactor(configured_secrets(config))


async def every(seconds: float, fn, stop: asyncio.Event) -> None:  # type: ignore[no-untyped-def]
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        if not stop.is_set():
            try:
                await fn()
            except Exception:
                log.exception("periodic task failed")


async def publish_menus(opened: list[Opened], router: CommandRouter) -> None:
    """Each channel's menu: everyone's, and the owner's with the owner's own commands (/run).
    Best effort: a menu a network refuses must not keep the agent from answering."""
    for one in opened:
        try:
            await one.open.publish_menu(router.menu(owner=False), router.menu(), router.owner_id)
        except Exception:  # the channel logs what its network refused; this is anything else
            log.exception("publishing the command menu failed", extra={"channel": one.channel.name})


async def open_database_and_channels(
    config: Config,
    on_uncertain: Callable[..., Any],
    stack: contextlib.AsyncExitStack,
    redactor: Redactor,
) -> tuple[Database, list[Opened]]:
    """The database opens (and migrates) while each configured channel builds its client
    (one may import its network's library in a thread meanwhile)."""
    db_open = asyncio.create_task(
        Database.open(
            config.db_path, synchronous=config.storage.synchronous, migrations=migrations()
        )
    )
    ctx = ChannelContext(
        config=config,
        secrets=config.secret_source(),
        stack=stack,
        on_uncertain=on_uncertain,
        redactor=redactor,
    )
    opened: list[Opened] = []
    try:
        for channel in configured(config):
            opened.append(Opened(channel=channel, open=await channel.open(ctx)))
    except BaseException:
        for one in opened:
            with contextlib.suppress(Exception):
                await one.open.close()
        with contextlib.suppress(Exception):
            await (await db_open).close()
        raise
    return await db_open, opened


def log_trust(config: Config) -> None:
    # Said once, so an owner found by the fallback rule (the first allowlisted id) is no surprise.
    log.info("approvals", extra={"trust": owners.resolve(config.access).describe()})


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
        f"⚠️ I stopped working on this ({literal(inst.workflow)} `{inst.id}`):\n"
        f"{block('agentd ' + (inst.error or ''))}\n"
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
