"""Sending to Telegram: HTML with plain-text fallback, best-effort extras, typing (R-TG-*).

Retries are not done here: every call goes through the session's one retry policy
(agentd/telegram/session.py). This module decides what a final failure means.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiogram import Bot
from aiogram.enums import ChatAction, ParseMode
from aiogram.exceptions import TelegramBadRequest
from aiogram.methods import SendMessage
from aiogram.types import (
    FSInputFile,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    MessageId,
    ReplyParameters,
)

from agentd.chat.channel import Refusal
from agentd.chat.delivery import settle_send
from agentd.chat.format import to_html
from agentd.chat.outbox import Button, SendDelayed, SendFailed
from agentd.chat.typing import typing_while
from agentd.telegram.format import TELEGRAM, TELEGRAM_LIMIT, split_markdown
from agentd.telegram.session import classify_fault

T = TypeVar("T")
log = logging.getLogger("agentd.telegram")
TYPING_RENEW_SECONDS = 4.5  # Telegram shows "typing…" for about 5 s per chat action


class SendMessageForId(SendMessage):
    """sendMessage whose answer is read for its message id only: building the whole Message
    (sender, chat, entities…) for each reply was a fifth of a send's CPU, for one integer."""

    __returning__ = MessageId


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


def _refused(what: str, exc: Exception, refusal: Refusal | None) -> Exception:
    """A permanent failure becomes SendFailed; a transient one (retries spent) SendDelayed when
    the message surely did not land, else it propagates as it is; a rejected token is the
    channel's refusal (the send waits for a restart, agentd stops)."""
    fault = classify_fault(exc)
    if fault.kind == "transient" and fault.maybe_done:
        # It may have landed (counted as send_uncertain): not re-sent again and again for hours.
        return exc
    if fault.kind == "transient":
        return SendDelayed(f"Telegram could not take the {what}: {fault.reason}")
    if fault.kind == "unauthorized" and refusal is not None:
        return refusal.refuse()
    return SendFailed(f"Telegram refused the {what}: {fault.reason}")


async def _best_effort(what: str, call: Callable[[], Awaitable[Any]]) -> bool:
    """Run a call whose failure must never fail a turn; log it once, at info."""
    try:
        await call()
    except Exception as exc:  # cancellation is BaseException and still propagates
        log.info(
            "telegram call skipped (best effort)",
            extra={"method": what, "reason": classify_fault(exc).reason},
        )
        return False
    return True


class TelegramOutbox:
    """Everything agentd says to Telegram goes through here."""

    def __init__(
        self,
        bot: Bot,
        *,
        max_message_chars: int = TELEGRAM_LIMIT,
        progress_delay: float = 0.0,
        refusal: Refusal | None = None,
    ) -> None:
        self._bot = bot
        self._refusal = refusal
        self._limit = max_message_chars
        self._progress_delay = progress_delay

    def split(self, markdown: str) -> list[str]:
        return split_markdown(markdown, self._limit)

    async def send_text(
        self,
        chat_id: int,
        markdown: str,
        *,
        reply_to: int | None = None,
        buttons: list[list[Button]] | None = None,
        preview_url: str | None = None,
        draft: int | None = None,  # a draft is a preview (sendMessageDraft), no message
    ) -> int:
        """Send one chunk (already split to fit); return Telegram's message id.

        Link previews are off unless `preview_url` is given (a URL that came from the user):
        Telegram's servers fetch a previewed URL with no click, so a URL a page led the model
        to write would leak whatever it carries.
        """
        await settle_send(idempotent=False)  # a re-send after a crash may show it twice
        markup = _keyboard(buttons)
        reply = _reply(reply_to)
        preview = (
            LinkPreviewOptions(url=preview_url)
            if preview_url
            else LinkPreviewOptions(is_disabled=True)
        )

        async def send(text: str, parse_mode: str | None) -> Any:
            return await self._bot(
                SendMessageForId(
                    chat_id=chat_id,
                    text=text,
                    parse_mode=parse_mode,
                    reply_parameters=reply,
                    reply_markup=markup,
                    link_preview_options=preview,
                )
            )

        try:
            message = await send(to_html(markdown, TELEGRAM), ParseMode.HTML)
        except TelegramBadRequest as exc:
            if "parse" not in exc.message.lower() and "entit" not in exc.message.lower():
                raise _refused("message", exc, self._refusal) from None
            log.info("telegram rejected the formatting; sending plain text")
            try:
                message = await send(markdown, None)
            except Exception as plain_exc:
                raise _refused("message", plain_exc, self._refusal) from None
        except Exception as exc:
            raise _refused("message", exc, self._refusal) from None
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
        await settle_send(idempotent=False)
        try:
            message = await self._bot.send_document(
                chat_id,
                FSInputFile(path, filename=filename),
                caption=caption or None,
                reply_parameters=_reply(reply_to),
            )
        except Exception as exc:
            raise _refused("file", exc, self._refusal) from None
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
            await self._bot.edit_message_text(
                text=to_html(markdown, TELEGRAM),
                chat_id=chat_id,
                message_id=message_id,
                parse_mode=ParseMode.HTML,
                reply_markup=_keyboard(buttons),
                link_preview_options=LinkPreviewOptions(is_disabled=True),  # as send_text
            )
        except TelegramBadRequest as exc:
            if "not modified" in exc.message:
                return
            raise _refused("edit", exc, self._refusal) from None
        except Exception as exc:
            raise _refused("edit", exc, self._refusal) from None

    async def answer_callback(self, callback_id: str, text: str, *, alert: bool = False) -> None:
        """Best effort: a stale callback id must not fail anything."""
        await _best_effort(
            "answerCallbackQuery",
            lambda: self._bot.answer_callback_query(callback_id, text=text[:200], show_alert=alert),
        )

    async def send_draft(
        self, chat_id: int, draft_id: int, text: str, *, reply_to: int | None = None
    ) -> bool:
        """Show a partial answer (R-TG-3); False when it failed (no more drafts this answer).
        A draft is a preview, not a message: the answer itself replies (`send_text`)."""
        return await _best_effort(
            "sendMessageDraft",
            lambda: self._bot.send_message_draft(chat_id=chat_id, draft_id=draft_id, text=text),
        )

    async def end_draft(
        self, chat_id: int, draft_id: int, note: str, *, earlier: bool = False
    ) -> None:
        """A draft is a preview that goes when its answer does not come: nothing to end."""

    async def open_drafts(self) -> list[tuple[int, int]]:
        """Previews go on their own: none outlives its process."""
        return []

    async def chat_action(self, chat_id: int) -> None:
        """Best effort: a server that does not know sendChatAction must not break a turn."""
        await _best_effort(
            "sendChatAction", lambda: self._bot.send_chat_action(chat_id, ChatAction.TYPING)
        )

    def typing(self, chat_id: int) -> contextlib.AbstractAsyncContextManager[None]:
        """Show "typing…" until the body finishes (R-TURN-1), once it has run progress_delay."""
        return typing_while(
            lambda: self.chat_action(chat_id),
            every=TYPING_RENEW_SECONDS,
            delay=self._progress_delay,
        )
