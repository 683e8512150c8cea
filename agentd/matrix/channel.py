"""Matrix as a channel (`chat.channel.Channel`): the client-server API through mautrix, synced.

Block 1 of agentd's ids (matrix/ids.py). Only `enabled`, the secrets and the doctor checks run
without `[matrix]`; everything that imports mautrix is imported in `open`, so an owner on
Telegram alone never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import Any

from agentd.access import owners
from agentd.chat.channel import (
    ChannelContext,
    ChannelIdentity,
    ConfigProblem,
    CredentialsRejected,
    Intake,
    Refusal,
    StoppedDuringStartUp,
    block_start,
)
from agentd.chat.kept import KeptTable, intake_records
from agentd.config import Config, read_secret
from agentd.matrix.config import SECTION, settings
from agentd.matrix.ids import BLOCK
from agentd.matrix.schema import MIGRATIONS
from agentd.runtime import sdnotify
from agentd.runtime.redact import Redactor

log = logging.getLogger("agentd.matrix")
NAME = "matrix"
MAX_WAIT = 30.0


def device_id(user_id: str) -> str:
    """The one device agentd logs in as, the same at every start: a homeserver deduplicates a
    re-sent transaction id per device (docs/messages.md, "On Matrix")."""
    return "AGENTD" + hashlib.sha256(user_id.encode()).hexdigest()[:10].upper()


def identity(config: Config) -> Any:
    """Who the bot is on Matrix and whom it serves (`classify.MatrixIdentity`)."""
    from agentd.matrix.classify import MatrixIdentity

    cfg = settings(config)
    assert cfg is not None
    owner_id = owners.resolve(config.access).owner_id if cfg.owner else None
    return MatrixIdentity(
        bot=cfg.user_id,
        owner=cfg.owner,
        owner_id=owner_id,
        allowed=frozenset(cfg.allowed_users),
        allow_groups=config.access.allow_groups,
        served_users=owners.configured_ids(config.access),
    )


class OpenMatrix:
    """The client (logged in by `identify`), the outbox, and the sync loop once serving."""

    def __init__(self, config: Config, token: str, password: str, redactor: Redactor) -> None:
        from agentd.matrix.client import MatrixClient
        from agentd.matrix.output import MatrixFiles, MatrixOutbox

        cfg = settings(config)
        assert cfg is not None
        self.config = config
        self.client = MatrixClient(cfg.homeserver, cfg.user_id, request_timeout=cfg.request_timeout)
        self.refusal = Refusal(
            lambda: CredentialsRejected(
                "the Matrix homeserver no longer accepts agentd's login: check "
                f"{cfg.access_token_env} / {cfg.password_env}"
            )
        )
        self.outbox = MatrixOutbox(
            self.client,
            max_message_chars=cfg.max_message_chars,
            max_file_bytes=cfg.max_file_bytes,
            refusal=self.refusal,
        )
        self.files = MatrixFiles(self.client)
        self._token, self._password = token, password
        self._redactor = redactor
        self._syncer: Any = None

    def workflows(self, db: Any) -> list[Any]:
        from agentd.matrix.rooms import make_room_workflow

        # The outbox keeps its id map in the database; nothing is sent before the engine runs,
        # which is after the daemon asked for these.
        self.outbox.bind(db)
        return [make_room_workflow(self.client, db, self.refusal)]

    async def identify(self, stop: asyncio.Event) -> ChannelIdentity:
        """Log in, waiting for the homeserver (capped back-off); a rejected login ends it."""
        from agentd.matrix.client import MatrixError

        cfg = settings(self.config)
        assert cfg is not None
        failures = 0
        while True:
            try:
                device = await self.client.log_in(
                    token=self._token, password=self._password, device_id=device_id(cfg.user_id)
                )
                break
            except MatrixError as exc:
                if exc.fault.kind != "transient":
                    refused = CredentialsRejected if exc.fault.kind == "auth" else ConfigProblem
                    raise refused(
                        f"the Matrix homeserver refused agentd's login ({exc}): check "
                        f"{cfg.access_token_env} / {cfg.password_env} and matrix.user_id"
                    ) from None
                failures += 1
                wait = min(0.5 * 2**failures, MAX_WAIT)
                # Outside the log, so past its redactor.
                sdnotify.notify(self._redactor(f"STATUS=waiting for the Matrix homeserver: {exc}"))
                log.warning("waiting for the Matrix homeserver", extra={"reason": str(exc)})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait)
                if stop.is_set():
                    raise StoppedDuringStartUp("stopped before Matrix answered") from None
        # A password login's token is known only now; it lasts as long as the process.
        self._redactor.learn([self.client.access_token], lasting=True)
        # Channels are identified one by one, so no other one is waiting now: the line a wait
        # left in `systemctl status` would otherwise stay there while agentd runs.
        sdnotify.notify("STATUS=running")
        log.info("matrix logged in", extra={"user": cfg.user_id, "device": device})
        return ChannelIdentity(bot_id=block_start(BLOCK))

    def serve(self, intake: Intake) -> asyncio.Task[None]:
        from agentd.matrix.sync import Syncer

        cfg = settings(self.config)
        assert cfg is not None
        self.outbox.bind(intake.db)
        self._syncer = Syncer(
            self.client,
            intake.db,
            intake.engine,
            identity(self.config),
            on_callback=intake.on_callback,
            on_command=intake.on_command,
            timeout=cfg.sync_timeout,
            on_progress=intake.on_progress,
            busy=intake.busy,
        )
        return asyncio.create_task(self._sync(self._syncer, cfg), name="matrix-sync")

    async def _sync(self, syncer: Any, cfg: Any) -> None:
        from agentd.matrix.client import MatrixError

        try:
            await self.refusal.serve(syncer.run())
        except MatrixError as exc:
            if exc.fault.kind != "auth":
                raise
            raise CredentialsRejected(
                f"the Matrix homeserver no longer accepts agentd's login ({exc}): check "
                f"{cfg.access_token_env} / {cfg.password_env}"
            ) from None

    async def publish_menu(
        self, everyone: list[tuple[str, str]], owner: list[tuple[str, str]], owner_id: int | None
    ) -> None:
        """No menu: the one proposal (MSC4332, a state event per room) is not shown by the
        common clients and needs power the bot lacks in a direct room; /help lists the same
        commands, from the same router (docs/matrix.md)."""

    def stop(self) -> None:
        if self._syncer is not None:
            self._syncer.stop()

    async def close(self) -> None:
        await self.outbox.close()
        await self.client.close()


class MatrixChannel:
    name = NAME
    block = BLOCK
    section = SECTION
    migrations = MIGRATIONS

    def enabled(self, config: Config) -> bool:
        return settings(config) is not None

    def kept(self, config: Config) -> list[KeptTable]:
        """The events intake took: a sync never gives one twice past its token, so a record
        is needed only while its turn may be replayed (an edit of an older message is then
        no edit). Events' integers follow the history, cards' choices what intake took
        (matrix/kept.py)."""
        from agentd.matrix.kept import kept_buttons, kept_drafts, kept_early, kept_events

        events = intake_records("matrix_events", "matrix_events")
        return [events, kept_events(), kept_buttons(), kept_early(), kept_drafts()]

    def secret_names(self, config: Config) -> list[str]:
        cfg = settings(config)
        return [] if cfg is None else [cfg.access_token_env, cfg.password_env]

    def secret_values(self, config: Config) -> list[str]:
        return []  # both are read through the one reader, by name

    def checks(self, config: Config, probe: Any) -> list[Any]:
        from agentd.matrix.doctor import checks

        return checks(config, probe.secrets, device_id)

    async def open(self, ctx: ChannelContext) -> OpenMatrix:
        cfg = settings(ctx.config)
        assert cfg is not None
        token = read_secret(cfg.access_token_env, ctx.secrets)
        password = read_secret(cfg.password_env, ctx.secrets)
        if not token and not password:
            raise ConfigProblem(
                f"[matrix] is configured but neither {cfg.access_token_env} nor "
                f"{cfg.password_env} is set: put the bot account's access token or password "
                "in agentd.env"
            )
        channel = OpenMatrix(ctx.config, token, password, ctx.redactor)
        log.debug("matrix channel open", extra={"device": device_id(cfg.user_id)})
        return channel


def channel() -> MatrixChannel:
    return MatrixChannel()
