"""Long polling (R-IN-1) driven by hand, so an update is acknowledged only after it is stored."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiogram import Bot
from aiogram.exceptions import ClientDecodeError, TelegramUnauthorizedError
from aiogram.methods import GetUpdates

from agentd.chat.busy import BusyMode
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import Engine
from agentd.telegram.classify import Identity
from agentd.telegram.intake import (
    CallbackHandler,
    CommandHook,
    load_offset,
    no_callbacks,
    no_commands,
    persist_updates,
)
from agentd.telegram.session import RetryPolicy, classify_fault

log = logging.getLogger("agentd.telegram")
# my_chat_member: the bot added to a group, which it leaves unless a served user added it.
ALLOWED_UPDATES = ["message", "edited_message", "callback_query", "my_chat_member"]


def _raw_updates(data: Any) -> list[dict[str, Any]] | None:
    """The update dicts of a getUpdates answer, keeping only those with an integer update_id."""
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return None
    return [
        u for u in data["result"] if isinstance(u, dict) and isinstance(u.get("update_id"), int)
    ]


class GetRawUpdates(GetUpdates):
    """getUpdates with each update left as the JSON Telegram sent.

    Every update is stored as JSON and classified from it; parsing it into aiogram's models
    first (and dumping it back) cost CPU per update, and one update aiogram could not parse
    failed its whole batch. The session's retries and error handling still apply."""

    __returning__ = list[dict[str, Any]]


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
        policy: RetryPolicy | None = None,
        request_timeout: float = 10.0,
        on_command: CommandHook = no_commands,
        on_progress: Callable[[], None] = lambda: None,
        busy: BusyMode = "queue",
        token_env: str,
    ) -> None:
        self._bot = bot
        self._db = db
        self._engine = engine
        self._outbox = outbox
        self._me = me
        self._timeout = poll_timeout
        self._on_callback = on_callback
        self._on_command = on_command
        self._busy = busy
        self._on_progress = on_progress  # the systemd watchdog: pinged only by a live loop
        self._stopping = asyncio.Event()
        self._failures = 0
        self._policy = policy or RetryPolicy()
        self._request_timeout = request_timeout
        self._token_env = token_env  # the variable the token came from, for the owner to check

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
                log.error(
                    "Telegram rejected the bot token (401); check %s (from @BotFather)",
                    self._token_env,
                )
                raise
            except Exception:
                log.exception("storing updates failed; retrying")
                await self._backoff("storing updates failed")
            self._on_progress()

    async def _fetch(self, offset: int | None) -> list[dict[str, Any]] | None:
        """One long poll → raw update dicts (None after a transient failure, already waited)."""
        poll = GetRawUpdates(offset=offset, timeout=self._timeout, allowed_updates=ALLOWED_UPDATES)
        try:
            updates = await self._bot(
                poll, request_timeout=int(self._timeout + self._request_timeout)
            )
        except ClientDecodeError as exc:
            # A batch with an element that is not an object fails as a whole; the raw JSON is
            # still there, and classification copes with anything, so nothing is lost or stuck.
            raw = _raw_updates(exc.data)
            if raw is None:
                await self._backoff(classify_fault(exc).reason)
                return None
            log.warning(
                "malformed update in batch; stored from raw JSON", extra={"count": len(raw)}
            )
            self._failures = 0
            return raw
        except TelegramUnauthorizedError:
            raise
        except Exception as exc:
            fault = classify_fault(exc)
            await self._backoff(fault.reason, fault.retry_after)
            return None
        self._failures = 0
        return _raw_updates({"result": updates}) or []

    async def _store(self, raw: list[dict[str, Any]]) -> int:
        """Commit the batch with the work it starts; return the offset that acknowledges it."""
        result = await self._db.write(
            persist_updates,
            raw,
            self._me,
            self._engine,
            self._on_callback,
            self._on_command,
            self._busy,
        )
        offset = max(int(u["update_id"]) for u in raw) + 1
        for chat_id, user_id, reason in result.ignored:
            log.info(
                "message ignored", extra={"chat_id": chat_id, "user_id": user_id, "reason": reason}
            )
        for instance_id in result.cancels:  # replaced by an edit: already flagged, stop it now
            self._engine.stop_flagged(instance_id)
        for key in result.keys:
            self._engine.kick(key)
        if result.keys:
            # Let the turns take their first step (a database read) before this task logs and
            # sends the next long poll: the turn is what the user is waiting for.
            await asyncio.sleep(0)
        if result.callback_answers:
            await self._engine.poll_once()  # wake turns waiting for these decisions now
        for callback_id, text in result.callback_answers:
            await self._outbox.answer_callback(callback_id, text)
        log.info(
            "updates stored",
            extra={
                "count": len(raw),
                "turns": result.accepted,
                "duplicates": result.duplicates,
                "offset": offset,
            },
        )
        return offset

    async def _backoff(self, reason: str, retry_after: float | None = None) -> None:
        """Wait after a failed poll: capped (policy.max_backoff), so recovery is quick."""
        self._failures += 1
        wait = self._policy.wait(self._failures, retry_after)
        log.warning(
            "getUpdates failed, retrying",
            extra={"reason": reason, "attempt": self._failures, "wait_s": round(wait, 2)},
        )
        await self._pause(wait)

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass
