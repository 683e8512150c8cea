"""Long polling (R-IN-1) driven by hand, so an update is acknowledged only after it is stored."""

from __future__ import annotations

import asyncio
import logging
import random

from aiogram import Bot
from aiogram.exceptions import (
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)

from agentd.db import Database
from agentd.durable import Engine
from agentd.outbox import Outbox
from agentd.telegram.classify import Identity
from agentd.telegram.intake import CallbackHandler, load_offset, no_callbacks, persist_updates

log = logging.getLogger("agentd.telegram")
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]


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
    ) -> None:
        self._bot = bot
        self._db = db
        self._engine = engine
        self._outbox = outbox
        self._me = me
        self._timeout = poll_timeout
        self._on_callback = on_callback
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        offset = await self._db.read(load_offset)
        failures = 0
        while not self._stopping.is_set():
            try:
                updates = await self._bot.get_updates(
                    offset=offset,
                    timeout=self._timeout,
                    allowed_updates=ALLOWED_UPDATES,
                    request_timeout=self._timeout + 10,
                )
                failures = 0
            except TelegramRetryAfter as exc:
                await self._pause(float(exc.retry_after))
                continue
            except TelegramUnauthorizedError:
                log.error("Telegram rejected the bot token (401); check TELEGRAM_BOT_TOKEN")
                raise
            except (TelegramNetworkError, TelegramServerError, TimeoutError) as exc:
                failures += 1
                wait = min(2.0 ** min(failures, 5), 30.0) * (0.5 + random.random() / 2)
                log.warning(
                    "getUpdates failed, retrying",
                    extra={"error": type(exc).__name__, "wait_s": round(wait, 2)},
                )
                await self._pause(wait)
                continue
            if not updates:
                continue
            raw = [u.model_dump(mode="json", exclude_none=True, by_alias=True) for u in updates]
            result = await self._db.write(
                persist_updates, raw, self._me, self._engine, self._on_callback
            )
            offset = max(u.update_id for u in updates) + 1
            for key in result.keys:
                self._engine.kick(key)
            if result.callback_answers:
                await self._engine.poll_once()  # wake turns waiting for these decisions now
            for callback_id, text in result.callback_answers:
                await self._outbox.answer_callback(callback_id, text)
            log.info(
                "updates stored",
                extra={
                    "count": len(updates),
                    "turns": result.accepted,
                    "duplicates": result.duplicates,
                    "offset": offset,
                },
            )

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass
