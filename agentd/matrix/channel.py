"""Matrix as a chat channel: log in, then intake (/sync) and output (the outbox) over one device.

Imported only when `[matrix]` is configured (the daemon names this module lazily), so an owner
on Telegram alone never loads mautrix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentd.access import owners
from agentd.config import Config, MatrixConfig, SecretSource, read_secret
from agentd.db import Database
from agentd.durable import Engine, Workflow
from agentd.matrix import ids
from agentd.matrix.classify import MatrixIdentity
from agentd.matrix.client import MatrixClient, MatrixError
from agentd.matrix.intake import CallbackHandler, CommandHook, load_device, save_device
from agentd.matrix.output import MatrixFiles, MatrixOutbox
from agentd.matrix.rooms import make_room_workflow
from agentd.matrix.sync import Syncer

log = logging.getLogger("agentd.matrix")


class MatrixLoginMissing(Exception):
    """Neither an access token nor a password is configured."""


def secret_names(cfg: MatrixConfig) -> list[str]:
    return [cfg.access_token_env, cfg.password_env]


def identity(config: Config) -> MatrixIdentity:
    cfg = config.matrix
    assert cfg is not None
    owner_id = owners.resolve(config.telegram).owner_id if cfg.owner else None
    return MatrixIdentity(
        bot=cfg.user_id,
        owner=cfg.owner,
        owner_id=owner_id,
        allowed=frozenset(cfg.allowed_users),
        allow_groups=cfg.allow_groups,
    )


@dataclass
class MatrixChannel:
    config: Config
    client: MatrixClient
    db: Database
    outbox: MatrixOutbox
    files: MatrixFiles
    syncer: Syncer | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @staticmethod
    def owns(chat_id: int) -> bool:
        """Whether a chat id is one of Matrix's (its own numbering, matrix/ids.py)."""
        return chat_id >= ids.BASE

    def workflows(self) -> list[Workflow[Any, Any]]:
        return [make_room_workflow(self.client, self.db)]

    def start(
        self,
        engine: Engine,
        *,
        on_callback: CallbackHandler,
        on_command: CommandHook,
        on_progress: Callable[[], None] = lambda: None,
    ) -> asyncio.Task[None]:
        cfg = self.config.matrix
        assert cfg is not None
        self.syncer = Syncer(
            self.client,
            self.db,
            engine,
            identity(self.config),
            on_callback=on_callback,
            on_command=on_command,
            timeout=cfg.sync_timeout,
            on_progress=on_progress,
        )
        task = asyncio.create_task(self.syncer.run(), name="matrix-sync")
        self.tasks.append(task)
        return task

    async def close(self) -> None:
        if self.syncer is not None:
            self.syncer.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.client.close()


async def open_matrix(config: Config, db: Database, secrets: SecretSource) -> MatrixChannel:
    """Log in (the token, or the password on the device agentd keeps) and build the outbox."""
    cfg = config.matrix
    assert cfg is not None
    token = read_secret(cfg.access_token_env, secrets)
    password = read_secret(cfg.password_env, secrets)
    if not token and not password:
        raise MatrixLoginMissing(
            f"[matrix] is configured but neither {cfg.access_token_env} nor {cfg.password_env} "
            "is set: put the bot account's access token or password in agentd.env"
        )
    client = MatrixClient(cfg.homeserver, cfg.user_id, request_timeout=cfg.request_timeout)
    try:
        device = await db.read(load_device)
        device = await client.log_in(token=token, password=password, device_id=device)
        await db.write(save_device, device)
    except BaseException:
        await client.close()
        raise
    log.info("matrix logged in", extra={"user": cfg.user_id, "device": device})
    outbox = MatrixOutbox(
        client, db, max_message_chars=cfg.max_message_chars, max_file_bytes=cfg.max_file_bytes
    )
    return MatrixChannel(config, client, db, outbox, MatrixFiles(client))


__all__ = ["MatrixChannel", "MatrixError", "MatrixLoginMissing", "open_matrix", "secret_names"]
