"""Long polling (R-IN-1) driven by hand, so an update is acknowledged only after it is stored."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from aiogram import Bot
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)

from agentd.db import Database
from agentd.durable import Engine
from agentd.outbox import Outbox
from agentd.telegram.classify import Identity
from agentd.telegram.intake import (
    CallbackHandler,
    CommandHook,
    load_offset,
    no_callbacks,
    no_commands,
    persist_updates,
)

log = logging.getLogger("agentd.telegram")
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]


def _raw_updates(data: Any) -> list[dict[str, Any]] | None:
    """The update dicts of a getUpdates answer, keeping only those with an integer update_id."""
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return None
    return [
        u for u in data["result"] if isinstance(u, dict) and isinstance(u.get("update_id"), int)
    ]


class Poller:
    """getUpdates → commit (updates + the turns they start) → next getUpdates acknowledges."""

    def __init__(
        self,
        bot: Bot,
        db: Database,
        engine: Engine,
        outbox: Outbox,
        me: Identity,
        *,
        poll_timeout: int = 30,
        on_callback: CallbackHandler = no_callbacks,
        on_command: CommandHook = no_commands,
        on_progress: Callable[[], None] = lambda: None,
    ) -> None:
        self._bot = bot
        self._db = db
        self._engine = engine
        self._outbox = outbox
        self._me = me
        self._timeout = poll_timeout
        self._on_callback = on_callback
        self._on_command = on_command
        self._on_progress = on_progress  # the systemd watchdog: pinged only by a live loop
        self._stopping = asyncio.Event()
        self._failures = 0

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Poll until stopped; only a rejected token ends it (nothing else may stop intake)."""
        offset = await self._db.read(load_offset)
        self._failures = 0
        while not self._stopping.is_set():
            try:
                raw = await self._fetch(offset)
                if raw:
                    offset = await self._store(raw)
            except TelegramUnauthorizedError:
                log.error("Telegram rejected the bot token (401); check TELEGRAM_BOT_TOKEN")
                raise
            except Exception:
                log.exception("intake failed; retrying")
                await self._backoff()
            self._on_progress()

    async def _fetch(self, offset: int | None) -> list[dict[str, Any]] | None:
        """One long poll → raw update dicts (None after a transient failure, already waited)."""
        try:
            updates = await self._bot.get_updates(
                offset=offset,
                timeout=self._timeout,
                allowed_updates=ALLOWED_UPDATES,
                request_timeout=self._timeout + 10,
            )
        except ClientDecodeError as exc:
            # One update aiogram cannot parse fails the whole batch; the raw JSON is still
            # there, and classification copes with anything, so nothing is lost or stuck.
            raw = _raw_updates(exc.data)
            if raw is None:
                log.warning("getUpdates answer was not JSON; retrying")
                await self._backoff()
                return None
            log.warning("malformed update in batch; stored from raw JSON",
                        extra={"count": len(raw)})  # fmt: skip
            return raw
        except TelegramRetryAfter as exc:
            await self._pause(float(exc.retry_after))
            return None
        except (TelegramNetworkError, TelegramServerError, TimeoutError) as exc:
            log.warning("getUpdates failed, retrying", extra={"error": type(exc).__name__})
            await self._backoff()
            return None
        self._failures = 0
        return [u.model_dump(mode="json", exclude_none=True, by_alias=True) for u in updates]

    async def _store(self, raw: list[dict[str, Any]]) -> int:
        """Commit the batch with the work it starts; return the offset that acknowledges it."""
        result = await self._db.write(
            persist_updates, raw, self._me, self._engine, self._on_callback, self._on_command
        )
        offset = max(int(u["update_id"]) for u in raw) + 1
        for key in result.keys:
            self._engine.kick(key)
        if result.callback_answers:
            await self._engine.poll_once()  # wake turns waiting for these decisions now
        for callback_id, text in result.callback_answers:
            await self._outbox.answer_callback(callback_id, text)
        log.info(
            "updates stored",
            extra={"count": len(raw), "turns": result.accepted,
                   "duplicates": result.duplicates, "offset": offset},
        )  # fmt: skip
        return offset

    async def _backoff(self) -> None:
        self._failures += 1
        await self._pause(min(2.0 ** min(self._failures, 5), 30.0) * (0.5 + random.random() / 2))

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass
