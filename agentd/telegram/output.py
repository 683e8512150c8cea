"""Sending to Telegram: HTML with plain-text fallback, flood control, retries, typing (R-TG-*)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from aiogram import Bot
from aiogram.enums import ChatAction, ParseMode
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.types import (
    FSInputFile,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    ReplyParameters,
)

from agentd.outbox import Button
from agentd.telegram.format import to_html

T = TypeVar("T")
log = logging.getLogger("agentd.telegram")
Sleep = Callable[[float], Awaitable[None]]
TYPING_RENEW_SECONDS = 4.5  # Telegram shows "typing…" for about 5 s per chat action


class SendFailed(Exception):
    """Telegram refused the message for good (blocked bot, bad chat): retrying will not help."""


def _reply(reply_to: int | None) -> ReplyParameters | None:
    # A reply to a message deleted meanwhile is still delivered, just without the quote.
    if not reply_to:
        return None
    return ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)


def _keyboard(buttons: list[list[Button]] | None) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    return InlineKeyboardMarkup(
        inline_keyboard=[
            [InlineKeyboardButton(text=b.text, callback_data=b.data) for b in row]
            for row in buttons
        ]
    )


class TelegramOutbox:
    """Everything agentd says to Telegram goes through here."""

    def __init__(
        self,
        bot: Bot,
        *,
        retries: int = 5,
        max_retry_after: float = 60.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._bot = bot
        self._retries = retries
        self._max_retry_after = max_retry_after
        self._sleep = sleep

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Retry flood control (honouring retry_after) and transient network/server errors."""
        for attempt in range(self._retries + 1):
            try:
                return await fn()
            except TelegramRetryAfter as exc:
                if attempt == self._retries:
                    raise
                wait = min(float(exc.retry_after), self._max_retry_after)
                log.warning("telegram flood control", extra={"method": what, "wait_s": wait})
                await self._sleep(wait)
            except (TelegramNetworkError, TelegramServerError) as exc:
                if attempt == self._retries:
                    raise
                wait = min(2.0**attempt, 30.0) * (0.5 + random.random() / 2)
                log.warning(
                    "telegram call failed, retrying",
                    extra={"method": what, "error": type(exc).__name__, "wait_s": round(wait, 2)},
                )
                await self._sleep(wait)
        raise AssertionError("unreachable")

    async def send_text(
        self,
        chat_id: int,
        markdown: str,
        *,
        reply_to: int | None = None,
        buttons: list[list[Button]] | None = None,
    ) -> int:
        """Send one chunk (already split to fit); return Telegram's message id."""
        markup = _keyboard(buttons)
        reply = _reply(reply_to)

        async def send(text: str, parse_mode: str | None) -> Any:
            return await self._bot.send_message(
                chat_id,
                text,
                parse_mode=parse_mode,
                reply_parameters=reply,
                reply_markup=markup,
                link_preview_options=None,
            )

        try:
            message = await self._call(
                "sendMessage", lambda: send(to_html(markdown), ParseMode.HTML)
            )
        except TelegramBadRequest as exc:
            if "parse" not in exc.message.lower() and "entit" not in exc.message.lower():
                raise SendFailed(f"Telegram refused the message: {exc.message}") from None
            log.info("telegram rejected the formatting; sending plain text")
            message = await self._call("sendMessage", lambda: send(markdown, None))
        except TelegramAPIError as exc:
            if isinstance(exc, TelegramNetworkError | TelegramServerError | TelegramRetryAfter):
                raise
            raise SendFailed(f"Telegram refused the message: {exc.message}") from None
        return message.message_id

    async def send_document(
        self,
        chat_id: int,
        path: str,
        filename: str,
        *,
        caption: str = "",
        reply_to: int | None = None,
    ) -> int:
        """Upload a file (multipart sendDocument); return Telegram's message id."""
        try:
            message = await self._call(
                "sendDocument",
                lambda: self._bot.send_document(
                    chat_id, FSInputFile(path, filename=filename), caption=caption or None,
                    reply_parameters=_reply(reply_to),
                ),
            )  # fmt: skip
        except TelegramAPIError as exc:
            if isinstance(exc, TelegramNetworkError | TelegramServerError | TelegramRetryAfter):
                raise
            raise SendFailed(f"Telegram refused the file: {exc.message}") from None
        return message.message_id

    async def edit_text(
        self,
        chat_id: int,
        message_id: int,
        markdown: str,
        *,
        buttons: list[list[Button]] | None = None,
    ) -> None:
        """Edit a message; 'not modified' counts as success so the edit is idempotent."""
        try:
            await self._call(
                "editMessageText",
                lambda: self._bot.edit_message_text(
                    text=to_html(markdown),
                    chat_id=chat_id,
                    message_id=message_id,
                    parse_mode=ParseMode.HTML,
                    reply_markup=_keyboard(buttons),
                ),
            )
        except TelegramBadRequest as exc:
            if "not modified" in exc.message:
                return
            raise SendFailed(f"Telegram refused the edit: {exc.message}") from None

    async def answer_callback(self, callback_id: str, text: str, *, alert: bool = False) -> None:
        """Best effort: a stale callback id must not fail anything."""
        try:
            await self._bot.answer_callback_query(callback_id, text=text[:200], show_alert=alert)
        except TelegramAPIError as exc:
            log.info("answerCallbackQuery failed", extra={"error": type(exc).__name__})

    async def send_draft(self, chat_id: int, draft_id: int, text: str) -> bool:
        """Show a partial answer (R-TG-3); False when this server or chat cannot show drafts."""
        try:
            await self._bot.send_message_draft(chat_id=chat_id, draft_id=draft_id, text=text)
        except TelegramAPIError as exc:
            log.info("sendMessageDraft failed; no more drafts this answer",
                     extra={"error": type(exc).__name__})  # fmt: skip
            return False
        return True

    async def chat_action(self, chat_id: int) -> None:
        """Best effort: a server that does not know sendChatAction must not break a turn."""
        try:
            await self._bot.send_chat_action(chat_id, ChatAction.TYPING)
        except Exception as exc:
            log.debug("sendChatAction failed", extra={"error": type(exc).__name__})

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: int) -> AsyncIterator[None]:
        """Show "typing…" until the body finishes (R-TURN-1)."""

        async def renew() -> None:
            while True:
                await self.chat_action(chat_id)
                await asyncio.sleep(TYPING_RENEW_SECONDS)

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
